import pg from 'pg';
import type { DatabaseAdapter } from './adapter.ts';
import { toDbError } from './errors.ts';
import { runMigrations, type SqlSession } from './migrate.ts';
import { buildFunctionCall } from './sql-call.ts';

export interface PostgresOptions {
  connectionString: string;
  max?: number;
  migrate?: boolean;
}

/**
 * A pooled connection to Postgres (self-hosted, or Supabase's pooler: only unnamed statements are
 * used, so transaction-mode pooling works). Statements time out well before RevenueCat's 60 s.
 */
export async function openPostgres(options: PostgresOptions): Promise<DatabaseAdapter & { pool: pg.Pool }> {
  const pool = new pg.Pool({
    connectionString: options.connectionString,
    max: options.max ?? 10,
    connectionTimeoutMillis: 5_000,
    idleTimeoutMillis: 30_000,
    statement_timeout: 20_000,
    application_name: 'account-link-service',
  });
  // An idle client losing its server (a restart, a failover) must not crash the process.
  pool.on('error', () => undefined);

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

  return {
    mode: 'postgres',
    pool,
    async call(fn, args) {
      const { text, values } = buildFunctionCall(fn, args);
      try {
        const result = await pool.query<{ result: unknown }>(text, values);
        return result.rows[0]?.result ?? null;
      } catch (error) {
        throw toDbError(error);
      }
    },
    close: async () => {
      if (!pool.ended) await pool.end();
    },
  };
}

export function clientSession(client: pg.PoolClient | pg.Client): SqlSession {
  return {
    query: async (text, values) => ({ rows: (await client.query(text, values)).rows }),
    exec: async (sql) => {
      await client.query(sql);
    },
  };
}
