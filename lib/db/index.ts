import { AsyncLocalStorage } from 'node:async_hooks';
import { getConfig, type Config } from '../config.ts';
import { log } from '../log.ts';
import type { DatabaseAdapter } from './adapter.ts';
import { DbError, toDbError } from './errors.ts';
import { pendingMigrations, readMigrationFiles, type MigrationFile } from './migrate.ts';
import { announceServedPort } from './served-port.ts';
import { processWide } from '../process-wide.ts';

export { DbError } from './errors.ts';
export type { DbErrorKind } from './errors.ts';
export type { DatabaseAdapter } from './adapter.ts';

/**
 * The database port. The rest of the service knows one operation: call a named SQL function (from
 * supabase/migrations) with named arguments and get its JSON result. Which database answers
 * (embedded PGlite, Postgres, or Supabase) is decided here from the configuration, once per process.
 */
export async function callDb<T = unknown>(fn: string, args: Record<string, unknown> = {}): Promise<T> {
  return callDbOn<T>(await getDatabase(), fn, args);
}

/**
 * callDb on an adapter already in hand. It reaches the adapter's call in the same turn (no await
 * before it), so a pool counts the call's connection as taken before anything else runs
 * (lib/db/gathered-calls.ts decides by that count).
 */
export async function callDbOn<T = unknown>(db: DatabaseAdapter, fn: string, args: Record<string, unknown>): Promise<T> {
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
export const RETRYABLE_SQL_STATES: ReadonlySet<string> = new Set(['40P01', '40001']);
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
      await pauseBeforeConflictRetry(attempt);
    }
  }
}

/**
 * A short random pause before a call that lost a conflict runs again, longer after each attempt:
 * the two sides of a deadlock, retried at once, could cross again.
 */
export function pauseBeforeConflictRetry(attempt: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 5 + Math.random() * 20 * (attempt + 1)));
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

/** The counts of the request this code runs for, if any (a gathered call counts once for each of its requests). */
export function currentDbRequestStats(): DbRequestStats | undefined {
  return requestStats.getStore();
}

/** Count a call made outside callDb (a gathered call: once, whatever it carries). */
export function countDbCall(): void {
  state.calls++;
}

interface PortState {
  opening?: Promise<DatabaseAdapter>;
  calls: number;
  /** The service's server (instrumentation.ts), not an operator's command: it registers its event endpoints. */
  serves?: boolean;
  /** The configuration whose event endpoints were registered last, and those settings as one string. */
  registered?: { config: Config; settings: string };
}

// On globalThis so every route bundle in the process shares one connection (Next can load a module
// once per route), and so dev-mode reloads do not open a second PGlite on the same folder.
const state = processWide<PortState>('db', () => ({ calls: 0 }));

export function getDatabase(): Promise<DatabaseAdapter> {
  if (state.opening) {
    registerChangedEndpoints();
  } else {
    const config = getConfig();
    state.registered = registeredWith(config);
    const opening = openConfigured(config).then(async (db) => {
      await registerEventEndpoints(config, db);
      // The server that holds the embedded folder is where the `npm run` commands ask (served-port.ts).
      if (state.serves && config.databaseMode === 'embedded') announceServedPort(config.embeddedDbDir, { holdsFolder: true });
      return db;
    }).catch((error: unknown) => {
      const mapped = toDbError(error);
      const failure = mapped instanceof DbError ? mapped : new DbError('unavailable', (error as Error).message, { cause: error });
      // Do not keep a failed open: the next request tries again (the database may be back). A
      // schema behind the code is asked again a few seconds later, not by every request meanwhile.
      const forget = () => {
        if (state.opening === opening) state.opening = undefined;
      };
      if (failure.reason === SCHEMA_BEHIND) setTimeout(forget, SCHEMA_RECHECK_MS).unref();
      else forget();
      throw failure;
    });
    state.opening = opening;
  }
  return state.opening;
}

/**
 * Under `next dev` the settings change while the server runs (.env.local edited; getConfig reads
 * them again): a receiver added there is registered before the next call, which may write the first
 * event it should get (an event gets deliveries for the endpoints registered when it is written).
 * Elsewhere the configuration is the same object on every request, and this compares it only.
 */
function registerChangedEndpoints(): void {
  if (!state.serves || !state.opening || !state.registered) return;
  let config: Config;
  try {
    config = getConfig();
  } catch {
    return; // settings refused: every request answers so (route.ts), and nothing is registered
  }
  if (config === state.registered.config) return;
  const previous = state.registered;
  state.registered = registeredWith(config);
  if (state.registered.settings === previous.settings) return;
  const registering = state.opening.then(async (db) => {
    await registerEventEndpoints(config, db);
    return db;
  });
  // An open that fails fails this too: then neither is kept, and the next request opens again.
  registering.catch(() => {
    if (state.opening === registering) state.opening = undefined;
  });
  state.opening = registering;
}

function registeredWith(config: Config): NonNullable<PortState['registered']> {
  return { config, settings: JSON.stringify(config.eventEndpointSettings) };
}

/**
 * Called once by the service's server as it starts (instrumentation.ts): from then on, the database
 * it opens knows the server's event endpoints before its first call (below). `false`: as an
 * operator's command again (tests).
 */
export function registerEventEndpointsAsTheDatabaseOpens(registers = true): void {
  state.serves = registers;
}

/**
 * An outbound event gets a delivery for each endpoint registered when it is written: the server,
 * with endpoints in its settings, registers them before its first call can make a change
 * (lib/events/registration.ts; loaded only where events are configured). An operator's command
 * opens the same database with its shell's settings, and registers nothing.
 */
async function registerEventEndpoints(config: Config, db: DatabaseAdapter): Promise<void> {
  const settings = config.eventEndpointSettings;
  if (!state.serves || (!settings.EVENTS_WEBHOOK_URL && !settings.EVENTS_WEBHOOK_ENDPOINTS)) return;
  try {
    const { registerEndpointsAsDatabaseOpens } = await import('../events/registration.ts');
    await registerEndpointsAsDatabaseOpens(db, config);
  } catch (error) {
    // Never fails the open (a database opened and then dropped would leak its connections): the
    // first outbox run registers them.
    log.warn({ err: { message: (error as Error).message } }, 'registering the event endpoints as the database opened failed; the first outbox run registers them');
  }
}

/** The reason of the DbError a deployed instance gives while its database lacks migrations. */
export const SCHEMA_BEHIND = 'schema_behind';
const SCHEMA_RECHECK_MS = 5_000;

/**
 * Local and embedded mode migrate on first use. A deployment never migrates inside a request (an
 * index build over a year of events would outlast the function's time limit, on every new
 * instance): it checks that the ledger lists every migration of its code, and until it does,
 * every call fails as unavailable (503 with a generic body), and the log says what to run.
 */
async function openConfigured(config: Config): Promise<DatabaseAdapter> {
  const migrate = config.local;
  switch (config.databaseMode) {
    case 'embedded': {
      const { openPglite } = await import('./pglite.ts');
      return openPglite(config.embeddedDbDir);
    }
    case 'postgres': {
      const { openPostgres, clientSession } = await import('./postgres.ts');
      const db = await openPostgres({ connectionString: config.databaseUrl!, ...config.databasePool, migrate });
      if (!migrate) {
        try {
          const client = await db.pool.connect();
          try {
            refuseIfBehind(await pendingMigrations(clientSession(client)));
          } finally {
            client.release();
          }
        } catch (error) {
          await db.close();
          throw error;
        }
      }
      return db;
    }
    case 'supabase': {
      const { openSupabase } = await import('./supabase.ts');
      const db = openSupabase(config.supabase!);
      if (!migrate) {
        // A database from before the function existed lacks the migration that made it: behind.
        const versions = await db.call('schema_versions', {}).catch((error: unknown) => {
          if (error instanceof DbError && error.kind === 'unavailable') throw error;
          return [];
        });
        const applied = new Set(Array.isArray(versions) ? versions.map(String) : []);
        refuseIfBehind(readMigrationFiles().filter((file) => !applied.has(file.version)));
      }
      return db;
    }
  }
}

const PENDING_PREFIX = 'pending migrations: ';

/**
 * Refuse to serve: the reason and the files travel in the error, and whoever turns it into an
 * answer says it (the request's log line, the health check's, the status), so the words are the
 * same everywhere and an operator command that reports it prints no log line besides.
 */
function refuseIfBehind(files: MigrationFile[]): void {
  const pending = files.map((file) => file.fileName);
  if (pending.length === 0) return;
  throw new DbError('unavailable', SCHEMA_BEHIND, { detail: `${PENDING_PREFIX}${pending.join(', ')}` });
}

/** What an operator reads when the database lacks migrations of this code: what is missing and what to run. */
export function schemaBehindMessage(pending: readonly string[]): string {
  return `the database schema is behind this code (${pending.length} migration(s) pending: ${pending.join(', ')}): run \`npm run migrate\` (or \`supabase db push\` on Supabase) from a shell or CI; until then every request that needs the database answers 503`;
}

/** The migration files a database lacks, when that is why the port refused (else null). */
export function pendingMigrationsIn(error: unknown): string[] | null {
  if (!(error instanceof DbError) || error.reason !== SCHEMA_BEHIND || !error.detail?.startsWith(PENDING_PREFIX)) return null;
  return error.detail.slice(PENDING_PREFIX.length).split(', ').filter(Boolean);
}

/** Use this adapter instead of the configured one (tests, scripts). */
export function replaceDatabase(adapter: DatabaseAdapter): void {
  state.opening = Promise.resolve(adapter);
  state.registered = undefined; // its endpoints are whoever replaced it's business
}

/** Close the open database, if any; the next call opens it again from the configuration. */
export async function closeDatabase(): Promise<void> {
  const opening = state.opening;
  state.opening = undefined;
  state.registered = undefined;
  if (opening) await opening.then((db) => db.close()).catch(() => undefined);
}

/** How many SQL function calls this process has made (for the one-call-per-request tests and the bench). */
export function dbCallCount(): number {
  return state.calls;
}
