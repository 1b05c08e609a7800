import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { runMigrations, splitStatements } from '../../lib/db/migrate.ts';
import { randomUUID } from 'node:crypto';
import type { EmbeddedDatabase } from '../../lib/db/pglite.ts';
import { clientSession, openPostgres } from '../../lib/db/postgres.ts';
import { DATABASE_KINDS, describeOn, openTestDatabase, type TestDatabase } from '../support/databases.ts';
import { supabaseShapedDatabase } from '../support/supabase-database.ts';
import type pg from 'pg';

const migrationFiles = readdirSync('supabase/migrations').filter((name) => name.endsWith('.sql')).sort();

type Sql = <T = Record<string, unknown>>(text: string, values?: unknown[]) => Promise<T[]>;

/**
 * Every right anon, authenticated or supabase_auth_admin holds on a table, view, column or sequence of
 * the public schema, and every public function they may execute (or service_role may not). The
 * service reaches its data only through its functions, as service_role; what the others get is
 * deliberate and listed exactly in API_ROLE_GRANTS.
 */
async function apiRoleGrants(sql: Sql): Promise<string[]> {
  const roles = `(values ('anon'), ('authenticated'), ('supabase_auth_admin')) r(role)`;
  const relations = await sql<{ grant: string }>(`
    select format('%s on %s %s', r.role, case c.relkind when 'S' then 'sequence' else 'table' end, c.relname) || ': ' || p.privilege as grant
    from pg_class c
    join pg_namespace n on n.oid = c.relnamespace
    cross join ${roles}
    cross join lateral unnest(case when c.relkind = 'S' then array['USAGE', 'SELECT', 'UPDATE']
                                   else array['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER'] end) p(privilege)
    where n.nspname = 'public' and c.relkind in ('r', 'p', 'v', 'm', 'f', 'S')
      and case when c.relkind = 'S' then has_sequence_privilege(r.role, c.oid, p.privilege)
               else has_table_privilege(r.role, c.oid, p.privilege) end
    order by 1`);
  // Rights on some columns of a table the role has no right on as a whole.
  const columns = await sql<{ grant: string }>(`
    select format('%s on columns of %s: %s (%s)', r.role, c.relname, p.privilege, string_agg(a.attname, ', ' order by a.attnum)) as grant
    from pg_class c
    join pg_namespace n on n.oid = c.relnamespace
    join pg_attribute a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
    cross join ${roles}
    cross join unnest(array['SELECT', 'INSERT', 'UPDATE', 'REFERENCES']) p(privilege)
    where n.nspname = 'public' and c.relkind in ('r', 'p', 'v', 'm', 'f')
      and not has_table_privilege(r.role, c.oid, p.privilege) and has_column_privilege(r.role, c.oid, a.attnum, p.privilege)
    group by r.role, c.relname, p.privilege
    order by 1`);
  const functions = await sql<{ grant: string }>(`
    select p.proname || ': ' || concat_ws(', ',
             case when has_function_privilege('anon', p.oid, 'execute') then 'anon may execute' end,
             case when has_function_privilege('authenticated', p.oid, 'execute') then 'authenticated may execute' end,
             case when has_function_privilege('supabase_auth_admin', p.oid, 'execute') then 'supabase_auth_admin may execute' end,
             case when not has_function_privilege('service_role', p.oid, 'execute') then 'service_role may not execute' end) as grant
    from pg_proc p join pg_namespace n on n.oid = p.pronamespace
    where n.nspname = 'public' and p.prokind in ('f', 'p')
      and (has_function_privilege('anon', p.oid, 'execute') or has_function_privilege('authenticated', p.oid, 'execute')
           or has_function_privilege('supabase_auth_admin', p.oid, 'execute') or not has_function_privilege('service_role', p.oid, 'execute'))
    order by 1`);
  return [...relations, ...columns, ...functions].map((row) => row.grant);
}

/**
 * The deliberate grants (docs/app-reads.md): a signed-in user reads their own rows through the three
 * views and the columns those read (row-level security keeps them to their own rows), and calls
 * has_entitlement(); Supabase Auth calls the access token hook, which reads two tables. anon gets
 * nothing; nobody but the service writes anything.
 */
const API_ROLE_GRANTS = [
  'authenticated on table my_entitlements: SELECT',
  'authenticated on table my_leagues: SELECT',
  'authenticated on table my_wallet_links: SELECT',
  'authenticated on table wallet_links: SELECT',
  'authenticated on columns of billing_subscribers: SELECT (app_user_id, customer_id)',
  'authenticated on columns of entitlements: SELECT (app_user_id, entitlement_id, product_id, source_key, status, will_renew, expires_at, grace_expires_at, '
    + 'pending_product_id, store, environment, period_type, last_event_at, synced_at, grants_until)',
  'authenticated on columns of league_members: SELECT (league_id, role, app_user_id)',
  'authenticated on columns of leagues: SELECT (id, source, external_id, name, sport, season, status, updated_at, deleted_at)',
  'supabase_auth_admin on columns of billing_subscribers: SELECT (app_user_id, customer_id)',
  'supabase_auth_admin on columns of entitlements: SELECT (app_user_id, entitlement_id, grants_until)',
  'api_timestamp: authenticated may execute',
  'custom_access_token_hook: supabase_auth_admin may execute, service_role may not execute',
  'entitlement_owner_ids: authenticated may execute, supabase_auth_admin may execute',
  'entitlement_sources: authenticated may execute',
  'has_entitlement: authenticated may execute',
  'member_leagues: authenticated may execute',
  'wallet_link_api_json: authenticated may execute',
  'wallet_link_json: authenticated may execute',
];

describe('splitStatements', () => {
  it('splits at top-level semicolons only: not inside quotes, identifiers, dollar-quoted bodies or comments', () => {
    const sql = [
      "create table t (a text default 'x;y', \"b;c\" int); -- a comment; with a semicolon",
      'create function f() returns int language plpgsql as $$ begin return 1; end; $$;',
      "/* block; comment */ select E'it\\'s; fine', $tag$ $$; $tag$;",
      '  ',
    ].join('\n');
    expect(splitStatements(sql)).toEqual([
      "create table t (a text default 'x;y', \"b;c\" int)",
      '-- a comment; with a semicolon\ncreate function f() returns int language plpgsql as $$ begin return 1; end; $$',
      "/* block; comment */ select E'it\\'s; fine', $tag$ $$; $tag$",
    ]);
  });
});

describe.each(DATABASE_KINDS)('migrations on %s', (kind) => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await openTestDatabase(kind);
  });
  afterAll(() => db.close());

  it('applied every migration once, recorded in the Supabase CLI\'s ledger in its format (version, name, statements)', async () => {
    const rows = await db.sql<{ version: string; name: string; statements: string[] }>('select version, name, statements from supabase_migrations.schema_migrations order by version');
    expect(rows.map((row) => `${row.version}_${row.name}.sql`)).toEqual(migrationFiles);
    for (const row of rows) expect(row.statements.length).toBeGreaterThan(0);
    // No second ledger: the runner's own table of earlier versions is gone.
    expect(await db.sql(`select to_regclass('public.schema_migrations') as legacy`)).toEqual([{ legacy: null }]);
  });

  it('is a no-op when run again', async () => {
    if (kind === 'pglite') {
      expect(await runMigrations((db.adapter as EmbeddedDatabase).session)).toEqual([]);
      return;
    }
    const client = await (db.adapter as unknown as { pool: pg.Pool }).pool.connect();
    try {
      expect(await runMigrations(clientSession(client))).toEqual([]);
    } finally {
      client.release();
    }
  });

  it('bootstraps what Supabase has: the API roles, Supabase Auth\'s role and auth.uid() reading either form of the claims', async () => {
    const roles = await db.sql<{ rolname: string }>(`select rolname from pg_roles where rolname in ('anon', 'authenticated', 'service_role', 'supabase_auth_admin') order by rolname`);
    expect(roles.map((row) => row.rolname)).toEqual(['anon', 'authenticated', 'service_role', 'supabase_auth_admin']);
    const [uid] = await db.sql<{ uid: string | null }>('select auth.uid() as uid');
    expect(uid!.uid).toBeNull();
    const id = randomUUID();
    // As PostgREST sets them (request.jwt.claims), and as older versions did (request.jwt.claim.sub), for a signed-in role.
    const read = await db.connection(async (sql) => {
      await sql('begin');
      try {
        await sql(`select set_config('role', 'authenticated', true), set_config('request.jwt.claims', $1, true)`, [JSON.stringify({ sub: id, role: 'authenticated' })]);
        const [fromClaims] = await sql<{ uid: string }>('select auth.uid() as uid');
        await sql(`select set_config('request.jwt.claims', '', true), set_config('request.jwt.claim.sub', $1, true)`, [id]);
        const [fromSub] = await sql<{ uid: string }>('select auth.uid() as uid');
        return [fromClaims!.uid, fromSub!.uid];
      } finally {
        await sql('rollback');
      }
    });
    expect(read).toEqual([id, id]);
  });

  it('gives anon nothing in public, and authenticated and supabase_auth_admin only the reads listed; service_role executes every function but the token hook', async () => {
    const [{ n }] = await db.sql<{ n: number }>(`select count(*)::int as n from pg_proc p join pg_namespace ns on ns.oid = p.pronamespace where ns.nspname = 'public'`) as [{ n: number }];
    expect(n).toBeGreaterThan(0);
    expect(await apiRoleGrants(db.sql)).toEqual(API_ROLE_GRANTS);
  });

  it('enables row level security on every public table', async () => {
    const rows = await db.sql<{ relname: string; relrowsecurity: boolean }>(`
      select c.relname, c.relrowsecurity from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = 'public' and c.relkind = 'r'`);
    for (const row of rows) expect({ table: row.relname, rls: row.relrowsecurity }).toEqual({ table: row.relname, rls: true });
  });

  it('keeps no GIN pending list (every lookup scans it: recording an event got slower with each event)', async () => {
    const rows = await db.sql<{ indexname: string; indexdef: string }>(`select indexname, indexdef from pg_indexes where schemaname = 'public' and indexdef ilike '%using gin%'`);
    for (const row of rows) expect({ index: row.indexname, fastupdateOff: /fastupdate\s*=\s*'?off'?/i.test(row.indexdef) }).toEqual({ index: row.indexname, fastupdateOff: true });
  });

  it('answers health_check through the port', async () => {
    expect(await db.adapter.call('health_check', {})).toMatchObject({ ok: true });
  });
});

describeOn('postgres')('migrating a database that is shaped like Supabase (real Postgres server)', () => {
  let migratorUrl: string;
  beforeAll(async () => {
    migratorUrl = await supabaseShapedDatabase();
  });

  it('only reads what Supabase already has (no CREATE right on the auth schema), and two processes migrate once', async () => {
    // Two processes starting at once: each migration still runs once.
    const [first, second] = await Promise.all([
      openPostgres({ connectionString: migratorUrl, max: 2 }),
      openPostgres({ connectionString: migratorUrl, max: 2 }),
    ]);
    try {
      const { rows } = await first.pool.query(`select version || '_' || name || '.sql' as file from supabase_migrations.schema_migrations order by version`);
      expect(rows.map((row: { file: string }) => row.file)).toEqual(migrationFiles);
      expect(await second.call('health_check', {})).toMatchObject({ ok: true });
    } finally {
      await first.close();
      await second.close();
    }
  });

  /** Supabase's splinter lints (postgres-language-server dblint) on the migrated database. */
  function dblint(configPath?: string): { category: string; message: string }[] {
    const result = spawnSync('node_modules/.bin/postgres-language-server', [
      'dblint', `--connection-string=${migratorUrl}`, '--reporter=json', '--max-diagnostics=none', '--colors=off', ...(configPath ? [`--config-path=${configPath}`] : []),
    ], { encoding: 'utf8', timeout: 60_000 });
    if (result.status !== 0) throw new Error(`dblint failed (${result.status}): ${result.stderr}${result.stdout}`);
    return (JSON.parse(result.stdout) as { diagnostics: { category: string; message: string }[] }).diagnostics.map(({ category, message }) => ({ category, message }));
  }

  it('passes Supabase\'s database lints as configured in postgres-language-server.jsonc', () => {
    expect(dblint()).toEqual([]);
  });

  it('with every lint on, finds only what the configuration explains (deny-all RLS; index use on a fresh database; the one procedure that commits): every other function has its search_path', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'dblint-all-'));
    try {
      writeFileSync(path.join(dir, 'postgres-language-server.jsonc'), JSON.stringify({ splinter: { enabled: true, rules: { all: true } } }));
      const findings = dblint(dir);
      expect(findings.filter(({ category }) => category === 'splinter/security/rlsEnabledNoPolicy').length).toBeGreaterThan(5);
      const mutableSearchPath = findings.filter(({ category }) => category === 'splinter/security/functionSearchPathMutable');
      expect(mutableSearchPath.map(({ message }) => message)).toEqual([expect.stringContaining('record_billing_events')]);
      expect(findings.filter(({ category }) => !['splinter/security/rlsEnabledNoPolicy', 'splinter/performance/unusedIndex', 'splinter/security/functionSearchPathMutable'].includes(category))).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('applies every migration where it may not add the live-updates policy to Realtime\'s table (owned by another role), leaving the policy out', async () => {
    const url = await supabaseShapedDatabase({ realtime: true });
    const db = await openPostgres({ connectionString: url, max: 1 });
    try {
      const { rows } = await db.pool.query(`select version || '_' || name || '.sql' as file from supabase_migrations.schema_migrations order by version`);
      expect(rows.map((row: { file: string }) => row.file)).toEqual(migrationFiles);
      expect((await db.pool.query(`select policyname from pg_policies where schemaname = 'realtime'`)).rows).toEqual([]);
      expect((await db.pool.query('select public.can_broadcast() as can')).rows).toEqual([{ can: true }]);
    } finally {
      await db.close();
    }
  });

  it('gives anon nothing in public, and authenticated and supabase_auth_admin only the reads listed, despite Supabase\'s default privileges', async () => {
    const db = await openPostgres({ connectionString: migratorUrl, max: 1 });
    try {
      expect(await apiRoleGrants(async (text, values) => (await db.pool.query(text, values)).rows)).toEqual(API_ROLE_GRANTS);
    } finally {
      await db.close();
    }
  });
});
