/**
 * The database engines a run tests on: TEST_ENGINES=pglite, =postgres, or both (the default,
 * "pglite,postgres"). On another Postgres major (POSTGRES_PACKAGE_DIR, `npm run test:postgres-majors`)
 * the default is the server's alone: the embedded engine is the same whatever server the tests start.
 * Read by the global setup (what to prepare) and by the suites (what to run on), from the same
 * environment.
 */
export type DatabaseKind = 'pglite' | 'postgres';

const ALL: DatabaseKind[] = ['pglite', 'postgres'];

export function selectedEngines(env: NodeJS.ProcessEnv = process.env): DatabaseKind[] {
  const raw = env.TEST_ENGINES?.trim() || (env.POSTGRES_PACKAGE_DIR ? 'postgres' : ALL.join(','));
  const named = raw.split(',').map((name) => name.trim().toLowerCase()).filter(Boolean);
  const unknown = named.filter((name) => !(ALL as string[]).includes(name));
  if (unknown.length > 0 || named.length === 0) {
    throw new Error(`TEST_ENGINES=${raw}: name pglite, postgres, or both ("pglite,postgres")`);
  }
  return ALL.filter((kind) => named.includes(kind));
}
