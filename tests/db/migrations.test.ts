import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { runMigrations } from '../../lib/db/migrate.ts';
import type { EmbeddedDatabase } from '../../lib/db/pglite.ts';
import { clientSession, openPostgres } from '../../lib/db/postgres.ts';
import { DATABASE_KINDS, openTestDatabase, type TestDatabase } from '../support/databases.ts';
import type pg from 'pg';

const migrationFiles = readdirSync('supabase/migrations').filter((name) => name.endsWith('.sql')).sort();

type Sql = <T = Record<string, unknown>>(text: string, values?: unknown[]) => Promise<T[]>;

/**
 * Every right anon or authenticated holds on a table, view or sequence of the public schema, and
 * every public function they may execute (or service_role may not): none is expected. The
 * service reaches its data only through its functions, as service_role.
 */
async function apiRoleGrants(sql: Sql): Promise<string[]> {
  const relations = await sql<{ grant: string }>(`
    select format('%s on %s %s', r.role, case c.relkind when 'S' then 'sequence' else 'table' end, c.relname) || ': ' || p.privilege as grant
    from pg_class c
    join pg_namespace n on n.oid = c.relnamespace
    cross join (values ('anon'), ('authenticated')) r(role)
    cross join lateral unnest(case when c.relkind = 'S' then array['USAGE', 'SELECT', 'UPDATE']
                                   else array['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER'] end) p(privilege)
    where n.nspname = 'public' and c.relkind in ('r', 'p', 'v', 'm', 'f', 'S')
      and case when c.relkind = 'S' then has_sequence_privilege(r.role, c.oid, p.privilege)
               else has_table_privilege(r.role, c.oid, p.privilege) end
    order by 1`);
  const functions = await sql<{ grant: string }>(`
    select p.proname || ': ' || concat_ws(', ',
             case when has_function_privilege('anon', p.oid, 'execute') then 'anon may execute' end,
             case when has_function_privilege('authenticated', p.oid, 'execute') then 'authenticated may execute' end,
             case when not has_function_privilege('service_role', p.oid, 'execute') then 'service_role may not execute' end) as grant
    from pg_proc p join pg_namespace n on n.oid = p.pronamespace
    where n.nspname = 'public' and p.prokind = 'f'
      and (has_function_privilege('anon', p.oid, 'execute') or has_function_privilege('authenticated', p.oid, 'execute')
           or not has_function_privilege('service_role', p.oid, 'execute'))
    order by 1`);
  return [...relations, ...functions].map((row) => row.grant);
}

describe.each(DATABASE_KINDS)('migrations on %s', (kind) => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await openTestDatabase(kind);
  });
  afterAll(() => db.close());

  it('applied every migration once, in file-name order', async () => {
    const rows = await db.sql<{ name: string }>('select name from public.schema_migrations order by applied_at, name');
    expect(rows.map((row) => row.name)).toEqual(migrationFiles);
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

  it('bootstraps what Supabase has: the API roles and auth.uid()', async () => {
    const roles = await db.sql<{ rolname: string }>(`select rolname from pg_roles where rolname in ('anon', 'authenticated', 'service_role') order by rolname`);
    expect(roles.map((row) => row.rolname)).toEqual(['anon', 'authenticated', 'service_role']);
    const [uid] = await db.sql<{ uid: string | null }>('select auth.uid() as uid');
    expect(uid!.uid).toBeNull();
  });

  it('gives anon and authenticated nothing in public (tables, sequences, functions); only service_role executes the functions', async () => {
    const [{ n }] = await db.sql<{ n: number }>(`select count(*)::int as n from pg_proc p join pg_namespace ns on ns.oid = p.pronamespace where ns.nspname = 'public'`) as [{ n: number }];
    expect(n).toBeGreaterThan(0);
    expect(await apiRoleGrants(db.sql)).toEqual([]);
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

/**
 * A database shaped like a Supabase project, on the real Postgres server: the API roles, an auth
 * schema owned by someone else, a migrating role like Supabase's `postgres` (no CREATE on auth; USAGE
 * and TRIGGER on auth.users), and Supabase's default privileges, which hand every new table,
 * function and sequence of that role in public to anon and authenticated. Grant tests on the
 * project's own bootstrap alone would pass a new table or function that forgets its revoke.
 */
describe('migrating a database that is shaped like Supabase (real Postgres server)', () => {
  let migratorUrl: string;
  beforeAll(async () => {
    const { inject } = await import('vitest');
    const { createDatabase } = await import('../support/postgres-server.ts');
    const { default: pgModule } = await import('pg');
    const { randomBytes } = await import('node:crypto');
    const serverUrl = inject('postgresServerUrl');
    const name = `supabase_like_${randomBytes(4).toString('hex')}`;
    await createDatabase(serverUrl, name);
    const adminUrl = serverUrl.replace(/\/postgres$/, `/${name}`);
    const role = `migrator_${randomBytes(4).toString('hex')}`;

    const admin = new pgModule.Client({ connectionString: adminUrl });
    await admin.connect();
    try {
      await admin.query(`
        do $$ begin
          if not exists (select 1 from pg_roles where rolname = 'anon') then create role anon nologin; end if;
          if not exists (select 1 from pg_roles where rolname = 'authenticated') then create role authenticated nologin; end if;
          if not exists (select 1 from pg_roles where rolname = 'service_role') then create role service_role nologin bypassrls; end if;
        end $$;
        create schema auth;
        create table auth.users (id uuid primary key, email text);
        create function auth.uid() returns uuid language sql stable as 'select null::uuid';
        create role ${role} login password 'pw' createrole;
        grant anon, authenticated, service_role to ${role};
        grant create, usage on schema public to ${role};
        grant usage on schema public to anon, authenticated, service_role;
        grant usage on schema auth to ${role};
        grant select, trigger, references on auth.users to ${role};
        alter default privileges for role ${role} in schema public grant all on tables to anon, authenticated, service_role;
        alter default privileges for role ${role} in schema public grant all on functions to anon, authenticated, service_role;
        alter default privileges for role ${role} in schema public grant all on sequences to anon, authenticated, service_role;
        alter database ${name} owner to ${role};
      `);
    } finally {
      await admin.end();
    }
    migratorUrl = adminUrl.replace(/\/\/[^@]+@/, `//${role}:pw@`);
  });

  it('only reads what Supabase already has (no CREATE right on the auth schema), and two processes migrate once', async () => {
    // Two processes starting at once: each migration still runs once.
    const [first, second] = await Promise.all([
      openPostgres({ connectionString: migratorUrl, max: 2 }),
      openPostgres({ connectionString: migratorUrl, max: 2 }),
    ]);
    try {
      const { rows } = await first.pool.query('select name from public.schema_migrations order by name');
      expect(rows.map((row: { name: string }) => row.name)).toEqual(migrationFiles);
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

  it('with every lint on, finds only the two the configuration explains (deny-all RLS; index use on a fresh database)', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'dblint-all-'));
    try {
      writeFileSync(path.join(dir, 'postgres-language-server.jsonc'), JSON.stringify({ splinter: { enabled: true, rules: { all: true } } }));
      const findings = dblint(dir);
      expect(findings.filter(({ category }) => category === 'splinter/security/rlsEnabledNoPolicy').length).toBeGreaterThan(5);
      expect(findings.filter(({ category }) => !['splinter/security/rlsEnabledNoPolicy', 'splinter/performance/unusedIndex'].includes(category))).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('gives anon and authenticated nothing in public despite Supabase\'s default privileges', async () => {
    const db = await openPostgres({ connectionString: migratorUrl, max: 1 });
    try {
      expect(await apiRoleGrants(async (text, values) => (await db.pool.query(text, values)).rows)).toEqual([]);
    } finally {
      await db.close();
    }
  });
});
