import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import { runMigrations, type SqlSession } from '../../lib/db/migrate.ts';
import { openPglite } from '../../lib/db/pglite.ts';
import { clientSession, openPostgres } from '../../lib/db/postgres.ts';
import { applyDeclaredSchema, declaredSchemaFiles } from '../../scripts/support/declared-schema.ts';
import { createDatabase } from '../../scripts/support/postgres-server.ts';
import { compareCatalogs, readCatalog } from '../../scripts/support/schema-catalog.ts';
import { REALTIME_SQL, SUPABASE_DEFAULT_PRIVILEGES_SQL } from '../../scripts/support/supabase-realtime.ts';
import { DATABASE_KINDS, type DatabaseKind } from '../support/databases.ts';

/**
 * supabase/schemas declares the schema as it is now; supabase/migrations is how deployed databases
 * get there. Both are applied to fresh databases shaped like Supabase's (its roles, `auth`,
 * `realtime`, and its default privileges, which grant every API role everything new unless a
 * revoke takes it away) and compared object by object: tables, columns, constraints, indexes,
 * functions with their bodies, views, triggers, policies and grants.
 */
async function emptySupabaseDatabase(kind: DatabaseKind): Promise<{ session: SqlSession; close(): Promise<void> }> {
  if (kind === 'pglite') {
    const dir = path.join(mkdtempSync(path.join(tmpdir(), 'schemas-test-')), 'db');
    const db = await openPglite(dir, { migrate: false });
    await db.session.exec(REALTIME_SQL);
    await db.session.exec(SUPABASE_DEFAULT_PRIVILEGES_SQL);
    return {
      session: db.session,
      close: async () => {
        await db.close();
        rmSync(path.dirname(dir), { recursive: true, force: true });
      },
    };
  }
  const name = `schemas_${randomBytes(6).toString('hex')}`;
  const serverUrl = inject('postgresServerUrl');
  await createDatabase(serverUrl, name);
  const db = await openPostgres({ connectionString: serverUrl.replace(/\/postgres$/, `/${name}`), max: 1, migrate: false });
  const client = await db.pool.connect();
  const session = clientSession(client);
  await session.exec(REALTIME_SQL);
  await session.exec(SUPABASE_DEFAULT_PRIVILEGES_SQL);
  return {
    session,
    close: async () => {
      client.release();
      await db.close();
    },
  };
}

/** The functions and procedures supabase/schemas declares, by name, with the files they are in. */
function declaredFunctions(): Map<string, string[]> {
  const found = new Map<string, string[]>();
  for (const file of declaredSchemaFiles()) {
    for (const [, name] of readFileSync(file, 'utf8').matchAll(/^create (?:or replace )?(?:function|procedure) (public\.\w+)\(/gim)) {
      found.set(name!, [...(found.get(name!) ?? []), path.basename(file)]);
    }
  }
  return found;
}

// On one engine: what is compared is the SQL, the same on both, and what deploys is Postgres, where it
// takes a tenth of PGlite's time (3 s against 40 in a full run); PGlite when the run leaves Postgres out.
const SCHEMA_ENGINES: DatabaseKind[] = DATABASE_KINDS.includes('postgres') ? ['postgres'] : DATABASE_KINDS;

describe.each(SCHEMA_ENGINES)('supabase/schemas and supabase/migrations, on %s', { timeout: 180_000 }, (kind) => {
  it('build the same schema, object by object (else: npm run db:diff -- <name> writes the migration)', async () => {
    const migrated = await emptySupabaseDatabase(kind);
    const declared = await emptySupabaseDatabase(kind);
    try {
      await runMigrations(migrated.session);
      await applyDeclaredSchema(declared.session);
      const expected = await readCatalog(migrated.session);
      const differences = compareCatalogs(expected, await readCatalog(declared.session), { expected: 'supabase/migrations', actual: 'supabase/schemas' });
      expect(differences.join('\n\n')).toBe('');

      // The comparison covers what it claims to: every declared function, the policies and grants.
      const functions = expected.filter((entry) => entry.key.startsWith('function ')).map((entry) => entry.key.slice('function '.length).split('(')[0]);
      expect(new Set(functions)).toEqual(new Set(declaredFunctions().keys()));
      expect(expected.some((entry) => entry.key === 'policy account_changed_own_topic on realtime.messages')).toBe(true);
      expect(expected.some((entry) => entry.key.startsWith('grant columns of public.entitlements to authenticated'))).toBe(true);
      expect(expected.some((entry) => entry.key.startsWith('trigger wallets_delete_user_rows on auth.users'))).toBe(true);
    } finally {
      await migrated.close();
      await declared.close();
    }
  });

  it('tells one changed statement of a function, a missing revoke and a changed column apart', async () => {
    const migrated = await emptySupabaseDatabase(kind);
    try {
      await runMigrations(migrated.session);
      const before = await readCatalog(migrated.session);
      const definition = before.find((entry) => entry.key === 'function public.billing_sort_key(timestamp with time zone,smallint,text)')!.sql;
      await migrated.session.exec(definition.replace("coalesce(p_rank, 1)::text", "coalesce(p_rank, 2)::text"));
      await migrated.session.exec('grant select on table public.billing_sync_runs to anon');
      await migrated.session.exec('alter table public.operator_runs alter column finished_at drop not null');
      const differences = compareCatalogs(before, await readCatalog(migrated.session)).map((line) => line.split(':')[0]);
      expect(differences).toEqual([
        'table public.operator_runs',
        'function public.billing_sort_key(timestamp with time zone,smallint,text)',
        'grant table public.billing_sync_runs to anon',
      ]);
    } finally {
      await migrated.close();
    }
  });
});

describe('supabase/schemas', () => {
  it('defines each function exactly once', () => {
    const twice = [...declaredFunctions()].filter(([, files]) => files.length > 1);
    expect(twice).toEqual([]);
    expect(declaredFunctions().size).toBeGreaterThan(50);
  });

  it('points to no migration file for reasoning (the reasoning lives beside the code)', () => {
    for (const file of declaredSchemaFiles()) {
      expect(readFileSync(file, 'utf8'), file).not.toMatch(/\d{14}_\w+\.sql|top of this file|\(issues? \d+/);
    }
  });
});

describe('supabase/ as a Supabase CLI project', () => {
  const config = readFileSync('supabase/config.toml', 'utf8');

  it('names the Postgres major version Supabase runs, a project id, and the declared schema files', () => {
    expect(config).toMatch(/^\[db\][^[]*\nmajor_version = 17\n/m);
    expect(config).toMatch(/^project_id = "[a-z0-9-]+"$/m);
    expect(config).toMatch(/^\[db\.migrations\][^[]*\nschema_paths = \["\.\/schemas\/\*\.sql"\]$/m);
  });

  it('has migration files the CLI accepts: <digits>_<name>.sql, each version once', () => {
    const files = readdirSync('supabase/migrations');
    for (const file of files) expect(file).toMatch(/^\d{14}_[a-z0-9_]+\.sql$/);
    const versions = files.map((file) => file.split('_')[0]);
    expect(new Set(versions).size).toBe(versions.length);
  });

  it('turns on the access token hook with the function the schema declares', () => {
    expect(config).toMatch(/^\[auth\.hook\.custom_access_token\]\nenabled = true\nuri = "pg-functions:\/\/postgres\/public\/custom_access_token_hook"$/m);
    expect(declaredFunctions().get('public.custom_access_token_hook')).toEqual(['07_account.sql']);
  });

  it('seeds only from files that exist (db reset would fail on a missing one)', () => {
    const seeds = /^\[db\.seed\][^[]*?sql_paths = \[(.*)\]/m.exec(config)?.[1] ?? '';
    for (const [, seed] of seeds.matchAll(/"([^"]+)"/g)) expect(readdirSync(path.join('supabase', path.dirname(seed!)))).toContain(path.basename(seed!));
  });
});
