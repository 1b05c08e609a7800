import { defineConfig } from 'vitest/config';
import { TIER_FILES } from './tests/setup/tiers.ts';

// The test tiers (tests/setup/tiers.ts, CONTRIBUTING.md): `vitest run` runs them all (npm test),
// `--project <name>` one of them. Each project's global setup starts only what its files need.
const DATABASES = 'tests/setup/databases.ts'; // PGlite templates and a Postgres server (TEST_ENGINES)
const BUILD = 'tests/setup/production-build.ts'; // `next build` once a run, when sources changed
const CONTRACTS = 'tests/setup/contracts.ts'; // the Solidity test contracts, compiled once (cached)

export default defineConfig({
  test: {
    // NTARH must be loaded before any route module is imported; then each file starts with a fresh
    // instance's in-memory state (tests/setup/fresh-instance.ts).
    setupFiles: ['tests/setup/ntarh.ts', 'tests/setup/fresh-instance.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // Two files at a time (Vitest's default is one fewer than the cores: one, on a 2-core machine).
    // Most of a database or server test's time is spent waiting on another process (Postgres, a
    // `next start`, Chromium, anvil), so a second file runs in that time; the reliability tier,
    // whose load figures want the machine, still runs one file at a time, after the others.
    maxWorkers: 2,
    env: { LOG_LEVEL: 'silent' },
    projects: [
      { extends: true, test: { name: 'unit', include: [TIER_FILES.unit], isolate: false } },
      {
        extends: true,
        test: {
          name: 'db',
          include: ['tests/**/*.test.ts'],
          exclude: [TIER_FILES.unit, TIER_FILES.server, TIER_FILES.slow, TIER_FILES.reliability],
          globalSetup: [DATABASES],
          // Files run one after another in the same two workers, not a fresh process each: a fresh
          // one imports the routes, Next's request handling and zod again (the Postgres half of the
          // tier took 222 s this way against 271 s, and a fifth less CPU). What a file sets it
          // undoes (setEnv's restore, suiteDatabase's close, vi.useRealTimers); what a server
          // instance keeps in memory is reset for each file by tests/setup/fresh-instance.ts (a
          // module that keeps something new per instance adds its reset there).
          isolate: false,
        },
      },
      { extends: true, test: { name: 'server', include: [TIER_FILES.server], globalSetup: [DATABASES, BUILD] } },
      { extends: true, test: { name: 'slow', include: [TIER_FILES.slow], globalSetup: [DATABASES, BUILD, CONTRACTS] } },
      {
        // The production server over real HTTP against its own Postgres server, under load, races,
        // faults and fuzzing. No NTARH: nothing here imports a route module. One file at a time, after
        // the other tiers (each drives a server and a database, and its load figures want the
        // machine to themselves); prints the summary table at the end.
        extends: false,
        test: {
          name: 'reliability',
          include: [TIER_FILES.reliability],
          globalSetup: [BUILD, 'tests/reliability/setup.ts'],
          testTimeout: 120_000,
          hookTimeout: 180_000,
          pool: 'forks',
          fileParallelism: false,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
