import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { BOOTSTRAP_SQL } from './bootstrap.ts';

/** The least a migration runner needs: one session (not a pool) that can run SQL. */
export interface SqlSession {
  query(text: string, values?: unknown[]): Promise<{ rows: Record<string, unknown>[] }>;
  exec(sql: string): Promise<void>;
}

export function migrationsDir(): string {
  // Traced into the deployment by outputFileTracingIncludes in next.config.mjs.
  return path.join(/*turbopackIgnore: true*/ process.cwd(), 'supabase', 'migrations');
}

// Any constant works; it only has to be the same for every process that migrates this database.
const MIGRATION_LOCK_KEY = 7_310_054_311;

/**
 * Apply supabase/migrations/*.sql in file-name order, each once, each in its own transaction,
 * recorded in public.schema_migrations. A migration that `supabase db push` already applied
 * (listed in supabase_migrations.schema_migrations by its version prefix) counts as applied, so
 * pointing DATABASE_URL at a Supabase database never re-runs them. Every transaction takes a
 * transaction-level advisory lock first, so two processes never migrate at once, and no lock can
 * outlive its transaction on a pooled connection (Supabase's transaction-mode pooler).
 * Returns the names it applied.
 */
export async function runMigrations(session: SqlSession, dir = migrationsDir()): Promise<string[]> {
  const files = (await readdir(dir)).filter((name) => name.endsWith('.sql')).sort();
  // Every new serverless instance opens the database and comes here: when everything is applied,
  // two reads answer it, without a transaction, a lock or a write (instead of a few round trips
  // per migration file through the pooler).
  if (await upToDate(session, files)) return [];
  await inTransaction(session, async () => {
    await session.exec(BOOTSTRAP_SQL);
    await session.exec(`
      create table if not exists public.schema_migrations (
        name text primary key,
        applied_at timestamptz not null default now()
      );
      alter table public.schema_migrations enable row level security;
      -- Supabase's default privileges would hand it to the API roles (see the hardening migration).
      revoke all on table public.schema_migrations from public, anon, authenticated;
    `);
  });
  const pushedBySupabase = await supabaseVersions(session);
  const done: string[] = [];
  for (const name of files) {
    if (pushedBySupabase.has(name.split('_')[0]!)) continue;
    const applied = await inTransaction(session, async () => {
      // Checked under the lock: another process may have applied it a moment ago.
      const { rows } = await session.query('select 1 from public.schema_migrations where name = $1', [name]);
      if (rows.length > 0) return false;
      const sql = await readFile(path.join(dir, name), 'utf8');
      try {
        await session.exec(sql);
      } catch (error) {
        throw new Error(`Migration ${name} failed: ${(error as Error).message}`, { cause: error });
      }
      await session.query('insert into public.schema_migrations (name) values ($1)', [name]);
      return true;
    });
    if (applied) done.push(name);
  }
  return done;
}

async function inTransaction<T>(session: SqlSession, work: () => Promise<T>): Promise<T> {
  await session.exec('begin');
  try {
    await session.query('select pg_advisory_xact_lock($1)', [MIGRATION_LOCK_KEY]);
    const result = await work();
    await session.exec('commit');
    return result;
  } catch (error) {
    await session.exec('rollback').catch(() => undefined);
    throw error;
  }
}

/** Whether every file is recorded, by this runner or by `supabase db push`. Reads only. */
async function upToDate(session: SqlSession, files: string[]): Promise<boolean> {
  const { rows } = await session.query(`select to_regclass('public.schema_migrations') is not null as ours,
    to_regclass('supabase_migrations.schema_migrations') is not null as pushed`);
  const { ours, pushed } = rows[0] as { ours: boolean; pushed: boolean };
  if (!ours && !pushed) return false;
  const sources = [
    ...(ours ? ['select name as applied from public.schema_migrations'] : []),
    ...(pushed ? ['select version::text as applied from supabase_migrations.schema_migrations'] : []),
  ];
  const applied = new Set((await session.query(sources.join(' union all '))).rows.map((row) => String(row.applied)));
  return files.every((name) => applied.has(name) || applied.has(name.split('_')[0]!));
}

async function supabaseVersions(session: SqlSession): Promise<Set<string>> {
  const { rows } = await session.query(`select to_regclass('supabase_migrations.schema_migrations') is not null as present`);
  if (!rows[0]?.present) return new Set();
  const versions = await session.query('select version from supabase_migrations.schema_migrations');
  return new Set(versions.rows.map((row) => String(row.version)));
}
