/**
 * The test tiers, by what a file needs. Its name says it (CONTRIBUTING.md, "Test tiers"):
 *
 *   x.unit.test.ts    unit      nothing: no database, no server, no build, no browser (npm run test:unit)
 *   x.test.ts         db        PGlite and a real Postgres server, migrated (npm run test:db; TEST_ENGINES=pglite for one engine)
 *   x.server.test.ts  server    the production build and `next start`, plus the databases (npm run test:server)
 *   x.slow.test.ts    slow      Chromium or a local chain (anvil), plus the build and the databases (npm run test:slow)
 *   tests/reliability/        the reliability suite: the production server under load and faults, one file at a time
 *
 * A plain `.test.ts` is the database tier: most of the service's behaviour lives in the database,
 * and a file there is given what it needs. tests/tiers.unit.test.ts holds each file to its name.
 */
export type Tier = 'unit' | 'db' | 'server' | 'slow' | 'reliability';

export const TIER_FILES = {
  unit: 'tests/**/*.unit.test.ts',
  server: 'tests/**/*.server.test.ts',
  slow: 'tests/**/*.slow.test.ts',
  reliability: 'tests/reliability/**/*.test.ts',
} as const;

/** The tier of a test file (a path from the project's root, with / separators). */
export function tierOf(file: string): Tier {
  if (file.startsWith('tests/reliability/')) return 'reliability';
  const suffix = /\.(unit|server|slow)\.test\.ts$/.exec(file)?.[1];
  return (suffix as Tier | undefined) ?? 'db';
}
