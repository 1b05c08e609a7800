import { AsyncLocalStorage } from 'node:async_hooks';
import { getConfig, type Config } from '../config.ts';
import type { DatabaseAdapter } from './adapter.ts';
import { DbError, toDbError } from './errors.ts';

export { DbError } from './errors.ts';
export type { DbErrorKind } from './errors.ts';
export type { DatabaseAdapter } from './adapter.ts';

/**
 * The database port. The rest of the service knows one operation: call a named SQL function (from
 * supabase/migrations) with named arguments and get its JSON result. Which database answers
 * (embedded PGlite, Postgres, or Supabase) is decided here from the configuration, once per process.
 */
export async function callDb<T = unknown>(fn: string, args: Record<string, unknown> = {}): Promise<T> {
  const db = await getDatabase();
  state.calls++;
  const stats = requestStats.getStore();
  if (!stats) return (await callRetryingConflicts(db, fn, args)) as T;
  stats.calls++;
  const started = performance.now();
  try {
    return (await callRetryingConflicts(db, fn, args)) as T;
  } finally {
    stats.ms += performance.now() - started;
  }
}

/** Deadlock detected, serialization failure: Postgres rolled the call back whole and says to try again. */
const RETRYABLE_SQL_STATES = new Set(['40P01', '40001']);
const CONFLICT_RETRIES = 2;

/**
 * One SQL function call is one transaction, so a call that lost a deadlock (two customers' events
 * crossing each other's locks) changed nothing and can simply run again: twice at most, after a
 * short random pause, before the caller sees it (a webhook then answers 503 and is redelivered).
 */
async function callRetryingConflicts(db: DatabaseAdapter, fn: string, args: Record<string, unknown>): Promise<unknown> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await db.call(fn, args);
    } catch (error) {
      const retryable = error instanceof DbError && error.sqlState !== undefined && RETRYABLE_SQL_STATES.has(error.sqlState);
      if (!retryable || attempt >= CONFLICT_RETRIES) throw error;
      await new Promise((resolve) => setTimeout(resolve, 5 + Math.random() * 20 * (attempt + 1)));
    }
  }
}

/** Database calls made while handling one request (the route wrapper reports them in Server-Timing). */
export interface DbRequestStats {
  calls: number;
  ms: number;
}

const requestStats = new AsyncLocalStorage<DbRequestStats>();

/** Run `work`, counting the database calls it makes into `stats`. */
export function countDbCalls<T>(stats: DbRequestStats, work: () => Promise<T>): Promise<T> {
  return requestStats.run(stats, work);
}

interface PortState {
  opening?: Promise<DatabaseAdapter>;
  calls: number;
}

// On globalThis so every route bundle in the process shares one connection (Next can load a module
// once per route), and so dev-mode reloads do not open a second PGlite on the same folder.
const STATE_KEY = Symbol.for('account-link-service.db');
const state: PortState = ((globalThis as Record<symbol, PortState>)[STATE_KEY] ??= { calls: 0 });

export function getDatabase(): Promise<DatabaseAdapter> {
  if (!state.opening) {
    const opening = openConfigured(getConfig()).catch((error: unknown) => {
      // Do not keep a failed open: the next request tries again (the database may be back).
      if (state.opening === opening) state.opening = undefined;
      const mapped = toDbError(error);
      throw mapped instanceof DbError ? mapped : new DbError('unavailable', (error as Error).message, { cause: error });
    });
    state.opening = opening;
  }
  return state.opening;
}

async function openConfigured(config: Config): Promise<DatabaseAdapter> {
  switch (config.databaseMode) {
    case 'embedded': {
      const { openPglite } = await import('./pglite.ts');
      return openPglite(config.embeddedDbDir);
    }
    case 'postgres': {
      const { openPostgres } = await import('./postgres.ts');
      return openPostgres({ connectionString: config.databaseUrl!, ...config.databasePool });
    }
    case 'supabase': {
      const { openSupabase } = await import('./supabase.ts');
      return openSupabase(config.supabase!);
    }
  }
}

/** Use this adapter instead of the configured one (tests, scripts). */
export function replaceDatabase(adapter: DatabaseAdapter): void {
  state.opening = Promise.resolve(adapter);
}

/** Close the open database, if any; the next call opens it again from the configuration. */
export async function closeDatabase(): Promise<void> {
  const opening = state.opening;
  state.opening = undefined;
  if (opening) await opening.then((db) => db.close()).catch(() => undefined);
}

/** How many SQL function calls this process has made (for the one-call-per-request tests and the bench). */
export function dbCallCount(): number {
  return state.calls;
}
