import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { operatorDatabaseUrl } from '../config.ts';
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

/** One file of supabase/migrations, named as the Supabase CLI names them: `<version>_<name>.sql`. */
export interface MigrationFile {
  /** The digits before the first underscore: the ledger's key. */
  version: string;
  name: string;
  fileName: string;
}

const MIGRATION_FILE = /^(\d+)_(.*)\.sql$/;

/** The migration files in version order (what this code expects the database to have). */
export function readMigrationFiles(dir = migrationsDir()): MigrationFile[] {
  return readdirSync(/*turbopackIgnore: true*/ dir)
    .map((fileName) => MIGRATION_FILE.exec(fileName))
    .filter((match): match is RegExpExecArray => match !== null)
    .map(([fileName, version, name]) => ({ version: version!, name: name!, fileName: fileName! }))
    .sort((a, b) => (a.version < b.version ? -1 : a.version > b.version ? 1 : 0));
}

/**
 * The one ledger of applied migrations is the Supabase CLI's own, in its format: a row per version
 * with the file's name and its statements. `supabase db push`, `supabase migration list` and this
 * runner read and write the same rows, on Supabase or on any Postgres, so neither applies what the
 * other already did. Created the way the CLI creates it (each part only where it is missing).
 */
const LEDGER_SQL = /* sql */ `
  create schema if not exists supabase_migrations;
  create table if not exists supabase_migrations.schema_migrations (version text not null primary key);
  alter table supabase_migrations.schema_migrations add column if not exists statements text[];
  alter table supabase_migrations.schema_migrations add column if not exists name text;
  -- Nothing the API roles should read (Supabase does not expose the schema; a plain Postgres might).
  revoke all on schema supabase_migrations from public;
  revoke all on table supabase_migrations.schema_migrations from public;
`;

/**
 * Before there was one ledger, this runner kept its own (public.schema_migrations, by file name).
 * Its rows move into the CLI's ledger, and the table goes: afterwards `supabase migration list`
 * shows what was applied, and `supabase db push` applies only what is new.
 */
const ADOPT_LEGACY_LEDGER_SQL = /* sql */ `
  insert into supabase_migrations.schema_migrations (version, name)
  select split_part(name, '_', 1), regexp_replace(substr(name, strpos(name, '_') + 1), '\\.sql$', '')
  from public.schema_migrations
  where name ~ '^[0-9]+_'
  on conflict (version) do nothing;
  drop table public.schema_migrations;
`;

// Any constant works; it only has to be the same for every process that migrates this database.
const MIGRATION_LOCK_KEY = 7_310_054_311;

export interface MigrateOptions {
  dir?: string;
  /** Called before each file is applied (the scripts print it as progress). */
  onApply?: (file: MigrationFile, index: number, total: number) => void;
}

/**
 * Apply the migrations the ledger does not list, in version order, each in its own transaction
 * with its ledger row (as `supabase db push` does), and return the file names applied. Every
 * transaction takes a transaction-level advisory lock first, so two processes never migrate at
 * once and no lock outlives its transaction on a pooled connection (Supabase's transaction-mode
 * pooler). Used by `npm run migrate` and, in local and embedded mode only, on first use; a deployed
 * instance only checks (pendingMigrations).
 */
export async function runMigrations(session: SqlSession, options: MigrateOptions = {}): Promise<string[]> {
  const files = readMigrationFiles(options.dir);
  // Every new process that migrates comes here: when everything is applied, two reads answer it,
  // without a transaction, a lock or a write.
  const ledger = await readLedger(session);
  if (!ledger.legacy && files.every((file) => ledger.applied.has(file.version))) return [];
  await inTransaction(session, async () => {
    await session.exec(BOOTSTRAP_SQL);
    await session.exec(LEDGER_SQL);
    const { rows } = await session.query(`select to_regclass('public.schema_migrations') is not null as legacy`);
    if (rows[0]?.legacy) await session.exec(ADOPT_LEGACY_LEDGER_SQL);
  });
  const done: string[] = [];
  const pending = await pendingMigrations(session, files);
  for (const [index, file] of pending.entries()) {
    options.onApply?.(file, index, pending.length);
    const applied = await inTransaction(session, async () => {
      // Checked under the lock: another process may have applied it a moment ago.
      const { rows } = await session.query('select 1 from supabase_migrations.schema_migrations where version = $1', [file.version]);
      if (rows.length > 0) return false;
      const sql = readFileSync(path.join(/*turbopackIgnore: true*/ options.dir ?? migrationsDir(), file.fileName), 'utf8');
      try {
        await session.exec(sql);
      } catch (error) {
        throw new Error(`Migration ${file.fileName} failed: ${(error as Error).message}`, { cause: error });
      }
      await session.query('insert into supabase_migrations.schema_migrations (version, name, statements) values ($1, $2, $3)', [
        file.version, file.name, splitStatements(sql),
      ]);
      return true;
    });
    if (applied) done.push(file.fileName);
  }
  return done;
}

/**
 * The files the database has not applied (empty: the schema is current). Two reads, no writes:
 * what a deployed instance asks before it serves.
 */
export async function pendingMigrations(session: SqlSession, files = readMigrationFiles()): Promise<MigrationFile[]> {
  const { applied } = await readLedger(session);
  return files.filter((file) => !applied.has(file.version));
}

/** The versions applied, by the ledger (and by the legacy one, until `npm run migrate` moves it). */
async function readLedger(session: SqlSession): Promise<{ applied: Set<string>; legacy: boolean }> {
  const { rows } = await session.query(`select to_regclass('supabase_migrations.schema_migrations') is not null as ledger,
    to_regclass('public.schema_migrations') is not null as legacy`);
  const { ledger, legacy } = rows[0] as { ledger: boolean; legacy: boolean };
  if (!ledger && !legacy) return { applied: new Set(), legacy };
  const sources = [
    ...(ledger ? ['select version from supabase_migrations.schema_migrations'] : []),
    ...(legacy ? [`select split_part(name, '_', 1) from public.schema_migrations`] : []),
  ];
  const applied = new Set((await session.query(sources.join(' union all '))).rows.map((row) => String(Object.values(row)[0])));
  return { applied, legacy };
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

/**
 * A migration file as the statements the Supabase CLI records for it (its `statements` column,
 * which `supabase migration fetch` writes back as a file): split at top-level semicolons, outside
 * quotes, dollar-quoted bodies and comments; each trimmed, without its semicolon.
 */
export function splitStatements(sql: string): string[] {
  const statements: string[] = [];
  let start = 0;
  let i = 0;
  const push = (end: number) => {
    const statement = sql.slice(start, end).trim();
    if (statement !== '') statements.push(statement);
    start = end + 1;
  };
  while (i < sql.length) {
    const rest = sql.slice(i, i + 2);
    if (rest === '--') {
      const end = sql.indexOf('\n', i);
      i = end === -1 ? sql.length : end + 1;
    } else if (rest === '/*') {
      const end = sql.indexOf('*/', i + 2);
      i = end === -1 ? sql.length : end + 2;
    } else if (sql[i] === "'" || sql[i] === '"') {
      const quote = sql[i]!;
      // E'...' strings escape with a backslash; the others by doubling the quote.
      const backslashes = quote === "'" && /[eE]/.test(sql[i - 1] ?? '') && !/[\w$]/.test(sql[i - 2] ?? '');
      i++;
      while (i < sql.length) {
        if (backslashes && sql[i] === '\\') i += 2;
        else if (sql[i] === quote && sql[i + 1] === quote) i += 2;
        else if (sql[i] === quote) break;
        else i++;
      }
      i++;
    } else if (sql[i] === '$' && !/[\w$]/.test(sql[i - 1] ?? '')) {
      const tag = /^\$([A-Za-z_][A-Za-z0-9_]*)?\$/.exec(sql.slice(i));
      if (!tag) {
        i++;
        continue;
      }
      const end = sql.indexOf(tag[0], i + tag[0].length);
      i = end === -1 ? sql.length : end + tag[0].length;
    } else if (sql[i] === ';') {
      push(i);
      i++;
    } else {
      i++;
    }
  }
  push(sql.length);
  return statements;
}

export type MigrationTarget =
  | { kind: 'postgres'; url: string; from: string }
  | { kind: 'embedded'; dir: string }
  | { kind: 'data-api-only' };

/**
 * Where `npm run migrate` applies the migrations: the operator's database (operatorDatabaseUrl in
 * lib/config.ts, which every operator command uses: POSTGRES_URL_NON_POOLING, else DATABASE_URL,
 * else POSTGRES_URL); with none of them but a Supabase project, only `supabase db push` can
 * (the Data API runs no DDL); with nothing at all, the embedded folder. Empty values count as unset.
 */
export function migrationTarget(env: Record<string, string | undefined>, embeddedDir: string): MigrationTarget {
  const database = operatorDatabaseUrl(env);
  if (database) return { kind: 'postgres', ...database };
  if (env.SUPABASE_URL?.trim() || env.NEXT_PUBLIC_SUPABASE_URL?.trim()) return { kind: 'data-api-only' };
  return { kind: 'embedded', dir: embeddedDir };
}
