import { readFileSync } from 'node:fs';
import type { TestProject } from 'vitest/node';
import { ensureProductionBuild } from '../../scripts/support/next-server.ts';

declare module 'vitest' {
  interface ProvidedContext {
    /** The BUILD_ID of the production build (.next) this run's global setup made or found current. */
    productionBuildId: string;
  }
}

/**
 * Global setup of the tiers that start the production server (server, slow, reliability): `next
 * build` once a run, before any file starts, and only when a source changed since the last one
 * (scripts/support/next-server.ts; a lock file makes a bench or another run building at the same
 * time wait). Every file then starts `next start` on that build (tests/support/production-build.ts).
 */
export default function setup(project: TestProject) {
  const started = performance.now();
  const built = ensureProductionBuild();
  if (built) process.stdout.write(`production build made in ${((performance.now() - started) / 1000).toFixed(0)} s\n`);
  project.provide('productionBuildId', readFileSync('.next/BUILD_ID', 'utf8').trim());
}
