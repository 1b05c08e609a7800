import { attachDatabasePool } from '@vercel/functions/db-connections';
import pg from 'pg';
import { databasePoolFor } from '../config.ts';
import type { DatabaseAdapter } from './adapter.ts';
import { toDbError } from './errors.ts';
import { runMigrations, type SqlSession } from './migrate.ts';
import { buildFunctionCall, buildProcedureCall, type SqlCall } from './sql-call.ts';

/**
 * How long a call may wait, and where each bound lives. All three hold through Supabase's
 * transaction-mode pooler (Supavisor, port 6543), which shares one server connection among many
 * clients transaction by transaction, so a session setting (a plain SET, or a startup parameter
 * such as pg's `statement_timeout` option, which Supavisor does not pass on and PgBouncer refuses)
 * cannot carry them. Together they answer a webhook well inside RevenueCat's 60 s (and inside the
 * function's 30 s, vercel.json) when the database is saturated: a 503 with Retry-After, nothing
 * stored, and RevenueCat's retry schedule takes over.
 */
export const DATABASE_WAITS = {
  /** For a pooled connection (all in use, or the server slow to accept one); pg-pool's connectionTimeoutMillis. */
  connectionMs: 5_000,
  /** For a row or advisory lock inside a call; lock_timeout, set for the call's transaction only (sql-call.ts). */
  lockMs: 5_000,
  /**
   * For the answer to a call, measured by this process (pg's query_timeout): whatever the server
   * is doing, the request gets its answer. The connection is then dropped, not reused. Postgres has
   * no per-statement bound that survives a transaction pooler in one round trip (a function's own
   * `set statement_timeout` does not bound the statement that calls it), so the server side is
   * bounded by lock_timeout and by the role's statement_timeout (Supabase's default for the
   * `postgres` role is 2 minutes).
   */
  callMs: 20_000,
  /**
   * For a lock, by one event inside a gathered call of several (lib/db/gathered-calls.ts): a held
   * lock sends that event alone, to wait lockMs on a connection of its own, and never holds up the
   * other events of the call more than this.
   */
  gatheredLockMs: 10,
} as const;

export interface PostgresOptions {
  connectionString: string;
  /** Connections this process may open (see lib/config.ts for the defaults by environment). */
  max?: number;
  /** Close a connection idle this long. */
  idleTimeoutMillis?: number;
  /** Other bounds than DATABASE_WAITS (tests that must not wait 20 s to see the deadline). */
  waits?: Partial<Record<keyof typeof DATABASE_WAITS, number>>;
  migrate?: boolean;
}

/**
 * A pooled connection to Postgres: self-hosted, or Supabase's pooler in transaction mode. Nothing
 * here keeps state on a server connection between transactions: statements are unnamed (no
 * prepared statement outlives its call), locks are transaction-level, settings are per transaction.
 *
 * On Vercel the pool is attached with `attachDatabasePool` (@vercel/functions): after a client is
 * released, the instance is kept alive until the idle timeout has closed idle connections, so a
 * suspended instance does not hold pooler connections it cannot use. Outside Vercel it does nothing.
 */
export async function openPostgres(options: PostgresOptions): Promise<DatabaseAdapter & { pool: pg.Pool }> {
  const waits = { ...DATABASE_WAITS, ...options.waits };
  // Unless told otherwise, a long-running server's pool (the service passes its own: lib/config.ts).
  const defaults = databasePoolFor(false, undefined);
  const max = options.max ?? defaults.max;
  const pool = new pg.Pool({
    connectionString: withLibpqSslModes(options.connectionString),
    max,
    connectionTimeoutMillis: waits.connectionMs,
    idleTimeoutMillis: options.idleTimeoutMillis ?? defaults.idleTimeoutMillis,
    application_name: 'account-link-service',
  });
  // An idle client losing its server (a restart, a failover) must not crash the process.
  pool.on('error', () => undefined);
  attachDatabasePool(pool);

  if (options.migrate !== false) {
    const client = await pool.connect().catch((error) => {
      void pool.end();
      throw toDbError(error);
    });
    try {
      await runMigrations(clientSession(client));
    } finally {
      client.release();
    }
  }

  const query = async ({ text, values }: SqlCall) => {
    try {
      return (await pool.query({ text, values, query_timeout: waits.callMs } as pg.QueryConfig)).rows[0] as Record<string, unknown> | undefined;
    } catch (error) {
      throw toDbError(error);
    }
  };
  return {
    mode: 'postgres',
    pool,
    async call(fn, args) {
      return (await query(buildFunctionCall(fn, args, { lockTimeoutMs: waits.lockMs })))?.result ?? null;
    },
    // Idle connections and room for new ones, less the calls already waiting for one (pg-pool
    // queues a call that finds a connection idle until the next tick, then hands it that one).
    hasFreeConnection: () => pool.idleCount + (max - pool.totalCount) - pool.waitingCount > 0,
    async callProcedureWhenConnected(procedure, take) {
      const client = await pool.connect().catch((error) => {
        throw toDbError(error);
      });
      let failed: Error | undefined;
      try {
        const args = take();
        if (!args) return undefined;
        // Half the call's time for starting events (the procedure answers the rest as skipped), so
        // the events it did run are answered well before this process stops waiting.
        const bounds = { p_lock_timeout_ms: waits.gatheredLockMs, p_time_budget_ms: Math.floor(waits.callMs / 2) };
        const { text, values } = buildProcedureCall(procedure, { ...args, ...bounds });
        return (await client.query({ text, values, query_timeout: waits.callMs } as pg.QueryConfig)).rows[0] ?? {};
      } catch (error) {
        failed = error as Error;
        throw toDbError(error);
      } finally {
        // As pool.query does: a connection whose call failed is closed, not reused.
        client.release(failed);
      }
    },
    close: async () => {
      if (!pool.ended) await pool.end();
    },
  };
}

/**
 * `sslmode` as libpq (psql, and every Postgres document) means it. node-postgres reads `require`,
 * `prefer` and `verify-ca` as `verify-full` unless told otherwise, which refuses Supabase's
 * connection strings (the Vercel integration's POSTGRES_URL ends in `sslmode=require`: encrypted,
 * against a certificate of Supabase's own authority). With `uselibpqcompat=true` they keep libpq's
 * meaning; `verify-full`, or `sslrootcert` with Supabase's CA certificate, still verifies.
 */
export function withLibpqSslModes(connectionString: string): string {
  const query = connectionString.indexOf('?');
  const params = new URLSearchParams(query === -1 ? '' : connectionString.slice(query + 1));
  if (!params.has('sslmode') || params.has('uselibpqcompat')) return connectionString;
  return `${connectionString}&uselibpqcompat=true`;
}

export function clientSession(client: pg.PoolClient | pg.Client): SqlSession {
  return {
    query: async (text, values) => ({ rows: (await client.query(text, values)).rows }),
    exec: async (sql) => {
      await client.query(sql);
    },
  };
}
