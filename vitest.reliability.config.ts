import { defineConfig } from 'vitest/config';

// `npm run test:reliability`: the production server over real HTTP against a real Postgres server,
// under load, races, faults and fuzzing (tests/reliability). Run by CI after `npm test`.
export default defineConfig({
  test: {
    include: ['tests/reliability/**/*.test.ts'],
    // No NTARH setup: nothing here imports a route module; every request goes to `next start`.
    // Builds the production server once and prints the summary table at the end.
    globalSetup: ['tests/reliability/setup.ts'],
    testTimeout: 120_000,
    hookTimeout: 180_000,
    pool: 'forks',
    // One file at a time: each drives a server and a database, and the machine has 2 cores.
    fileParallelism: false,
  },
});
