import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readdirSync } from 'node:fs';
import { runMigrations } from '../../lib/db/migrate.ts';
import { pgliteSession } from '../../lib/db/pglite.ts';
import { clientSession, openPostgres } from '../../lib/db/postgres.ts';
import { DATABASE_KINDS, openTestDatabase, type TestDatabase } from '../support/databases.ts';
import type { PGlite } from '@electric-sql/pglite';
import type pg from 'pg';

const migrationFiles = readdirSync('supabase/migrations').filter((name) => name.endsWith('.sql')).sort();

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
      expect(await runMigrations(pgliteSession((db.adapter as unknown as { pg: PGlite }).pg))).toEqual([]);
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

  it('lets only service_role execute the service functions', async () => {
    const rows = await db.sql<{ proname: string; anon: boolean; authenticated: boolean; service: boolean }>(`
      select p.proname,
             has_function_privilege('anon', p.oid, 'execute') as anon,
             has_function_privilege('authenticated', p.oid, 'execute') as authenticated,
             has_function_privilege('service_role', p.oid, 'execute') as service
      from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where n.nspname = 'public' and p.prokind = 'f'`);
    expect(rows.length).toBeGreaterThan(0);
    for (const row of rows) expect({ fn: row.proname, anon: row.anon, authenticated: row.authenticated, service: row.service }).toEqual({ fn: row.proname, anon: false, authenticated: false, service: true });
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

describe('migrating a database that is shaped like Supabase (real Postgres server)', () => {
  it('only reads what Supabase already has: no CREATE right on the auth schema is needed', async () => {
    const { inject } = await import('vitest');
    const { createDatabase } = await import('../support/postgres-server.ts');
    const { default: pgModule } = await import('pg');
    const { randomBytes } = await import('node:crypto');
    const serverUrl = inject('postgresServerUrl');
    const name = `supabase_like_${randomBytes(4).toString('hex')}`;
    await createDatabase(serverUrl, name);
    const adminUrl = serverUrl.replace(/\/postgres$/, `/${name}`);
    const role = `migrator_${randomBytes(4).toString('hex')}`;

    // As the superuser: what Supabase provides, owned by someone else, plus a role like Supabase's
    // `postgres` (no CREATE on auth, but USAGE and TRIGGER on auth.users).
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
        grant usage on schema auth to ${role};
        grant select, trigger, references on auth.users to ${role};
        alter database ${name} owner to ${role};
      `);
    } finally {
      await admin.end();
    }

    const migratorUrl = adminUrl.replace(/\/\/[^@]+@/, `//${role}:pw@`);
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
});
