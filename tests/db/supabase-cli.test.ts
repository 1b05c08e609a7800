import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterEach, expect, it } from 'vitest';
import * as healthRoute from '../../app/api/health/route.ts';
import { closeDatabase } from '../../lib/db/index.ts';
import { pendingMigrations, readMigrationFiles, splitStatements } from '../../lib/db/migrate.ts';
import { clientSession } from '../../lib/db/postgres.ts';
import { describeOn, migrateCounting } from '../support/databases.ts';
import { DEPLOYMENT_SETTINGS, setEnv } from '../support/env.ts';
import { callRoute } from '../support/http.ts';
import { dbPush, migrationList, supabaseCli } from '../support/supabase-cli.ts';
import { supabaseShapedDatabase } from '../support/supabase-database.ts';

/**
 * The Supabase CLI (the pinned npm package, the real binary) and `npm run migrate` on the same
 * database keep one ledger, `supabase_migrations.schema_migrations`: whichever applied the
 * migrations, the other finds nothing to do, `supabase migration list` shows the folder and the
 * database equal, and a deployed instance serves. Real Postgres only (the CLI cannot reach PGlite).
 * The migrations are read from the folder: a new file is covered without touching this test.
 */

const files = readMigrationFiles();
const run = promisify(execFile);

/** `npm run migrate` as an operator runs it: the documented command, with the database in DATABASE_URL. */
async function npmRunMigrate(url: string): Promise<{ stdout: string; stderr: string }> {
  return run('npm', ['run', '--silent', 'migrate'], {
    encoding: 'utf8', timeout: 120_000,
    env: { ...process.env, DATABASE_URL: url, POSTGRES_URL_NON_POOLING: undefined, POSTGRES_URL: undefined, VERCEL: undefined },
  });
}

async function withClient<T>(url: string, work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

interface LedgerRow {
  version: string;
  name: string;
  statements: string[];
}

const readLedger = (url: string) => withClient(url, async (client) =>
  (await client.query<LedgerRow>('select version, name, statements from supabase_migrations.schema_migrations order by version')).rows);

/**
 * What a schema holds, as text to compare across databases: tables and columns, indexes, functions
 * with their bodies, policies, and what each API role may do with each table and function (by
 * role, not by ACL text, which names each database's own migrating role).
 */
const schemaFingerprint = (url: string) => withClient(url, async (client) => (await client.query<{ item: string }>(`
  with api_roles(role) as (values ('anon'), ('authenticated'), ('service_role'), ('supabase_auth_admin'))
  select 'column ' || table_name || '.' || column_name || ' ' || data_type || ' ' || coalesce(column_default, '') as item
  from information_schema.columns where table_schema = 'public'
  union all select 'index ' || indexdef from pg_indexes where schemaname = 'public'
  union all select 'function ' || pg_get_functiondef(p.oid) || ' executable by '
      || (select coalesce(string_agg(role, ', ' order by role), 'none') from api_roles where has_function_privilege(role, p.oid, 'execute'))
    from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = 'public' and p.prokind in ('f', 'p')
  union all select 'relation ' || c.relname || ': ' || coalesce((select string_agg(role || ' ' || privilege, ', ' order by role, privilege)
      from api_roles cross join unnest(array['SELECT', 'INSERT', 'UPDATE', 'DELETE']) privilege
      where has_table_privilege(role, c.oid, privilege)), 'none')
    from pg_class c join pg_namespace n on n.oid = c.relnamespace where n.nspname = 'public' and c.relkind in ('r', 'p', 'v', 'm')
  union all select 'policy ' || schemaname || '.' || tablename || ' ' || policyname || ' ' || coalesce(qual, '') || ' ' || coalesce(with_check, '') from pg_policies
  order by 1`)).rows.map((row) => row.item));

/** `supabase migration list` with the folder and the ledger equal: every file's version on both sides, nothing else. */
const listedEqual = files.map((file) => ({ local: file.version, remote: file.version }));
const listed = async (url: string) => (await migrationList(url)).map(({ local, remote }) => ({ local, remote }));

/** The ledger rows both write for the folder: a file's version, its name, its statements. */
const expectedLedger: LedgerRow[] = files.map(({ version, name, fileName }) => ({
  version, name, statements: splitStatements(readFileSync(path.join('supabase/migrations', fileName), 'utf8')),
}));

// Each test runs the CLI and `npm run migrate` as processes of their own, over the whole folder.
describeOn('postgres')('the Supabase CLI and `npm run migrate` share one ledger (supabase 2.117.0, a Supabase-shaped database)', { timeout: 300_000 }, () => {
  let restore: (() => void) | undefined;
  afterEach(async () => {
    restore?.();
    restore = undefined;
    await closeDatabase();
  });

  /** GET /api/health through the real route, deployed (not local mode) on this database: it checks the ledger before it serves. */
  async function health(url: string) {
    restore?.();
    restore = setEnv({ ...DEPLOYMENT_SETTINGS, DATABASE_URL: url });
    await closeDatabase();
    const response = await callRoute(healthRoute);
    await closeDatabase();
    return { status: response.status, body: response.body };
  }

  it('`supabase db push` applies every migration; `migration list` shows them on both sides; `npm run migrate` is up to date and changes nothing; the service serves', async () => {
    const url = await supabaseShapedDatabase({ realtime: true });
    // Before: a deployed instance refuses the database (it lacks the migrations of its code).
    expect(await health(url)).toMatchObject({ status: 503, body: { status: 'degraded', database: 'schema_behind' } });

    expect(await dbPush(url)).toMatchObject({ upToDate: false, migrations: files.map((file) => file.fileName) });
    expect(await listed(url)).toEqual(listedEqual);

    // The CLI's ledger rows are exactly the ones the runner writes (the test below): the same
    // version and name, the statements split the same way (what `supabase migration fetch` writes back).
    const ledger = await readLedger(url);
    expect(ledger).toEqual(expectedLedger);

    // What a deployed instance asks before it serves, on Postgres and through the Data API: nothing pending.
    await withClient(url, async (client) => {
      expect(await pendingMigrations(clientSession(client))).toEqual([]);
      await client.query('begin; set local role service_role');
      const { rows } = await client.query<{ versions: string[] }>('select public.schema_versions() as versions');
      await client.query('rollback');
      expect(rows[0]!.versions).toEqual(files.map((file) => file.version));
    });

    // The runner finds nothing to apply from two reads: no transaction, no lock, no write.
    const counted = await migrateCounting(url);
    expect(counted.applied).toEqual([]);
    expect(counted.statements).toHaveLength(2);
    expect(counted.statements.join('\n')).not.toMatch(/\b(begin|insert|create|lock)\b/i);

    const before = { ledger, schema: await schemaFingerprint(url) };
    const migrate = await npmRunMigrate(url);
    expect(migrate.stdout.trim()).toBe('up to date');
    expect(migrate.stderr).not.toMatch(/applying/);
    expect({ ledger: await readLedger(url), schema: await schemaFingerprint(url) }).toEqual(before);

    expect(await health(url)).toEqual({ status: 200, body: { status: 'ok', database: 'ok', mode: 'postgres' } });
  });

  it('after `npm run migrate`, `supabase db push` has nothing to push and `migration list` shows them on both sides; the service serves; `supabase migration fetch` writes back what `supabase db push` turns into the same schema', async () => {
    const url = await supabaseShapedDatabase({ realtime: true });
    const migrate = await npmRunMigrate(url);
    expect(migrate.stdout.trim()).toBe(`applied ${files.length}: ${files.map((file) => file.fileName).join(', ')}`);
    expect(await readLedger(url)).toEqual(expectedLedger);

    expect(await dbPush(url, { dryRun: true })).toMatchObject({ upToDate: true, migrations: [] });
    const before = await readLedger(url);
    expect(await dbPush(url)).toMatchObject({ upToDate: true, migrations: [] });
    expect(await readLedger(url)).toEqual(before);
    expect(await listed(url)).toEqual(listedEqual);

    expect(await health(url)).toEqual({ status: 200, body: { status: 'ok', database: 'ok', mode: 'postgres' } });

    // What `supabase migration fetch` writes back from the runner's ledger, `supabase db push` turns
    // into the same schema. (A project folder of its own: the fetched files replace the folder's,
    // not this repository's.)
    const workdir = mkdtempSync(path.join(tmpdir(), 'supabase-fetch-'));
    try {
      mkdirSync(path.join(workdir, 'supabase'));
      copyFileSync('supabase/config.toml', path.join(workdir, 'supabase', 'config.toml'));
      await supabaseCli(['migration', 'fetch'], url, { workdir });
      expect(readdirSync(path.join(workdir, 'supabase', 'migrations')).sort()).toEqual(files.map((file) => file.fileName));

      const target = await supabaseShapedDatabase({ realtime: true });
      expect(await dbPush(target, { workdir })).toMatchObject({ migrations: files.map((file) => file.fileName) });
      expect(await schemaFingerprint(target)).toEqual(await schemaFingerprint(url));
    } finally {
      rmSync(workdir, { recursive: true, force: true });
    }
  });
});
