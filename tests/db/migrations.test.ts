import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { BOOTSTRAP_SQL } from '../../lib/db/bootstrap.ts';
import { LEDGER_SQL, runMigrations, splitStatements } from '../../lib/db/migrate.ts';
import { openPglite } from '../../lib/db/pglite.ts';
import { createDatabase } from '../support/postgres-server.ts';
import { inject } from 'vitest';
import { randomBytes } from 'node:crypto';
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

/** A database with nothing in it (not even the migrations), to run SQL on. */
async function openEmptyDatabase(kind: 'pglite' | 'postgres'): Promise<{ exec(sql: string): Promise<void>; sql: Sql; close(): Promise<void> }> {
  if (kind === 'pglite') {
    const dir = mkdtempSync(path.join(tmpdir(), 'replay-'));
    const db = await openPglite(path.join(dir, 'db'), { migrate: false });
    return {
      exec: (sql) => db.session.exec(sql),
      sql: async (text, values) => (await db.session.query(text, values)).rows as never,
      close: async () => {
        await db.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  }
  const name = `replay_${randomBytes(4).toString('hex')}`;
  await createDatabase(inject('postgresServerUrl'), name);
  const db = await openPostgres({ connectionString: inject('postgresServerUrl').replace(/\/postgres$/, `/${name}`), max: 1, migrate: false });
  return {
    exec: async (sql) => {
      await db.pool.query(sql);
    },
    sql: async (text, values) => (await db.pool.query(text, values)).rows,
    close: () => db.close(),
  };
}

/** What a schema holds, as text to compare: tables and columns, indexes, functions with their bodies, policies. */
async function schemaFingerprint(sql: Sql): Promise<string[]> {
  const rows = await sql<{ item: string }>(`
    select 'column ' || table_name || '.' || column_name || ' ' || data_type || ' ' || coalesce(column_default, '') as item
    from information_schema.columns where table_schema = 'public'
    union all select 'index ' || indexdef from pg_indexes where schemaname = 'public'
    union all select 'function ' || pg_get_functiondef(p.oid) from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = 'public' and p.prokind = 'f'
    union all select 'policy ' || tablename || ' ' || policyname || ' ' || coalesce(qual, '') from pg_policies where schemaname = 'public'
    order by 1`);
  return rows.map((row) => row.item);
}

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

  it('records statements that rebuild the same schema when run one by one (what `supabase migration fetch` writes back)', async () => {
    const rows = await db.sql<{ statements: string[] }>('select statements from supabase_migrations.schema_migrations order by version');
    const replay = await openEmptyDatabase(kind);
    try {
      // As the CLI does before it applies anything: the roles Supabase has, and its ledger.
      await replay.exec(BOOTSTRAP_SQL);
      await replay.exec(LEDGER_SQL);
      for (const { statements } of rows) for (const statement of statements) await replay.exec(statement);
      expect(await schemaFingerprint(replay.sql)).toEqual(await schemaFingerprint(db.sql));
    } finally {
      await replay.close();
    }
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
