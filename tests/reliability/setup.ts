import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { formatSummary, readJsonLines, type LogScan, type ScenarioRow } from './summary.ts';

/**
 * Global setup of the reliability suite (`npm run test:reliability`), after the production build's
 * (tests/setup/production-build.ts): hand the files a folder for their results, and print the
 * summary table at the end (also written to test-results/reliability-summary.md).
 */
export default async function setup(project: TestProject) {
  const started = performance.now();
  const dir = mkdtempSync(path.join(tmpdir(), 'account-link-reliability-results-'));
  project.provide('reliabilityResultsDir', dir);
  return () => {
    const table = formatSummary(readJsonLines<ScenarioRow>(path.join(dir, 'rows.jsonl')), readJsonLines<LogScan>(path.join(dir, 'logs.jsonl')));
    const seconds = ((performance.now() - started) / 1000).toFixed(0);
    process.stdout.write(`\nReliability summary (${seconds} s, production server, Postgres mode):\n\n${table}\n\n`);
    mkdirSync('test-results', { recursive: true });
    writeFileSync(path.join('test-results', 'reliability-summary.md'), `${table}\n`);
    rmSync(dir, { recursive: true, force: true });
  };
}
