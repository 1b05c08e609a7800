import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['tests/**/*.test.ts'],
    exclude: ['tests/reliability/**', 'node_modules/**'],
    // NTARH must be loaded before any route module is imported.
    setupFiles: ['tests/setup/ntarh.ts'],
    // Starts one real Postgres server and builds the migrated templates that every test database copies;
    // compiles the Solidity test contracts (cached).
    globalSetup: ['tests/setup/databases.ts', 'tests/setup/contracts.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
    env: { LOG_LEVEL: 'silent' },
  },
});
