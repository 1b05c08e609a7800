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
 * pointing DATABASE_URL at a Supabase database never re-runs them. An advisory lock keeps two
 * processes from migrating the same database at once. Returns the names it applied.
 */
export async function runMigrations(session: SqlSession, dir = migrationsDir()): Promise<string[]> {
  const files = (await readdir(dir)).filter((name) => name.endsWith('.sql')).sort();
  await session.query('select pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
  try {
    await session.exec(BOOTSTRAP_SQL);
    await session.exec(`
      create table if not exists public.schema_migrations (
        name text primary key,
        applied_at timestamptz not null default now()
      );
      alter table public.schema_migrations enable row level security;
    `);
    const applied = new Set((await session.query('select name from public.schema_migrations')).rows.map((row) => String(row.name)));
    const pushedBySupabase = await supabaseVersions(session);
    const done: string[] = [];
    for (const name of files) {
      if (applied.has(name) || pushedBySupabase.has(name.split('_')[0]!)) continue;
      const sql = await readFile(path.join(dir, name), 'utf8');
      await session.exec('begin');
      try {
        await session.exec(sql);
        await session.query('insert into public.schema_migrations (name) values ($1)', [name]);
        await session.exec('commit');
      } catch (error) {
        await session.exec('rollback');
        throw new Error(`Migration ${name} failed: ${(error as Error).message}`, { cause: error });
      }
      done.push(name);
    }
    return done;
  } finally {
    await session.query('select pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY]);
  }
}

async function supabaseVersions(session: SqlSession): Promise<Set<string>> {
  const { rows } = await session.query(`select to_regclass('supabase_migrations.schema_migrations') is not null as present`);
  if (!rows[0]?.present) return new Set();
  const versions = await session.query('select version from supabase_migrations.schema_migrations');
  return new Set(versions.rows.map((row) => String(row.version)));
}
