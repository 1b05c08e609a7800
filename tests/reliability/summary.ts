import { appendFileSync, existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { inject } from 'vitest';

declare module 'vitest' {
  interface ProvidedContext {
    /** Folder where each reliability file appends its scenario rows (the global setup prints them). */
    reliabilityResultsDir: string;
  }
}

/** One line of the summary table printed at the end of `npm run test:reliability`. */
export interface ScenarioRow {
  /** Sort key: files run in any order, the table is always in the order. */
  order: number;
  scenario: string;
  requests: number;
  fiveXx: number;
  /** Of those, 5xx the scenario provokes on purpose (503 + Retry-After while the database is down). */
  expectedFiveXx?: number;
  /** Events acknowledged (or finally acknowledged after redelivery) but not stored with their effect; null when not applicable. */
  eventsLost: number | null;
  /** Effects applied more than once (second writes for one event, or a second link/league write); null when not applicable. */
  duplicatesApplied: number | null;
  notes: string;
}

/** What one file's log search covered (summed into the line under the table). */
export interface LogScan {
  servers: number;
  bytes: number;
  secrets: number;
  tokens: number;
  leaks: number;
}

const file = (name: string) => path.join(inject('reliabilityResultsDir'), name);

export function recordScenario(row: ScenarioRow): void {
  appendFileSync(file('rows.jsonl'), `${JSON.stringify(row)}\n`);
}

export function recordLogScan(scan: LogScan): void {
  appendFileSync(file('logs.jsonl'), `${JSON.stringify(scan)}\n`);
}

export function readJsonLines<T>(filePath: string): T[] {
  if (!existsSync(filePath)) return [];
  return readFileSync(filePath, 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line) as T);
}

const cell = (value: number | null) => (value === null ? 'n/a' : String(value));
const fiveXxCell = (all: number, expected: number) => (expected > 0 ? `${all - expected} (+ ${expected} expected 503)` : String(all));

/** The summary as a Markdown table (what the terminal shows and the README copies). */
export function formatSummary(rows: ScenarioRow[], scans: LogScan[]): string {
  const sorted = [...rows].sort((a, b) => a.order - b.order);
  const lines = [
    '| scenario | requests sent | 5xx seen | events lost | duplicates applied | notes |',
    '|---|---:|---:|---:|---:|---|',
    ...sorted.map((row) => `| ${row.scenario} | ${row.requests} | ${fiveXxCell(row.fiveXx, row.expectedFiveXx ?? 0)} | ${cell(row.eventsLost)} | ${cell(row.duplicatesApplied)} | ${row.notes} |`),
    `| **total** | ${sum(sorted, 'requests')} | ${fiveXxCell(sum(sorted, 'fiveXx'), sum(sorted, 'expectedFiveXx'))} | ${sum(sorted, 'eventsLost')} | ${sum(sorted, 'duplicatesApplied')} | |`,
  ];
  if (scans.length > 0) {
    const total = scans.reduce((acc, scan) => ({
      servers: acc.servers + scan.servers, bytes: acc.bytes + scan.bytes, secrets: acc.secrets + scan.secrets,
      tokens: acc.tokens + scan.tokens, leaks: acc.leaks + scan.leaks,
    }));
    lines.push('', `Logs: ${(total.bytes / 1024 / 1024).toFixed(1)} MiB from ${total.servers} server processes searched for ` +
      `${total.secrets} configured secrets and key material and ${total.tokens} issued session tokens: ${total.leaks} found.`);
  }
  return lines.join('\n');
}

function sum(rows: ScenarioRow[], key: 'requests' | 'fiveXx' | 'expectedFiveXx' | 'eventsLost' | 'duplicatesApplied'): number {
  return rows.reduce((total, row) => total + (row[key] ?? 0), 0);
}
