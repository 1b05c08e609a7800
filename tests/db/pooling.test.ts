import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { databasePoolFor } from '../../lib/config.ts';
import { DbError } from '../../lib/db/errors.ts';
import { DATABASE_WAITS, openPostgres } from '../../lib/db/postgres.ts';
import { describeOn, migrateCounting, openTestDatabase, type TestDatabase } from '../support/databases.ts';

/**
 * The Postgres adapter as Supabase's transaction-mode pooler needs it (no state left on a server
 * connection between transactions) and as a saturated database needs it (every wait bounded), on
 * the real Postgres server.
 */

type Adapter = Awaited<ReturnType<typeof openPostgres>>;

async function failure(promise: Promise<unknown>): Promise<{ error: unknown; ms: number }> {
  const started = performance.now();
  const error = await promise.then(() => undefined, (e: unknown) => e);
  return { error, ms: performance.now() - started };
}

describeOn('postgres')('the Postgres adapter through a transaction-mode pooler and under saturation', () => {
  let db: TestDatabase;
  const opened: Adapter[] = [];
  const open = async (options: Partial<Parameters<typeof openPostgres>[0]> = {}) => {
    const adapter = await openPostgres({ connectionString: db.url!, migrate: false, ...options });
    opened.push(adapter);
    return adapter;
  };

  beforeAll(async () => {
    db = await openTestDatabase('postgres');
    // Test-only helpers in this throwaway database: what a call sees, and a call that takes long.
    await db.sql(`create function public.test_call_settings() returns jsonb language sql as
      $$ select jsonb_build_object('lockTimeout', current_setting('lock_timeout')) $$`);
    await db.sql(`create function public.test_sleep(p_seconds double precision) returns integer language plpgsql as
      $$ begin perform pg_sleep(p_seconds); return 1; end $$`);
  });
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((adapter) => adapter.close()));
  });
  afterAll(() => db?.close());

  it('sets lock_timeout for the call only: nothing is left on the connection, and no statement is prepared', async () => {
    const adapter = await open({ max: 1 });
    expect(await adapter.call('test_call_settings', {})).toEqual({ lockTimeout: `${DATABASE_WAITS.lockMs / 1000}s` });
    // The same (only) server connection, next transaction: what the next client of a pooler would get.
    const { rows } = await adapter.pool.query(`select current_setting('lock_timeout') as lock_timeout,
      (select count(*)::int from pg_prepared_statements) as prepared`);
    expect(rows[0]).toMatchObject({ lock_timeout: '0', prepared: 0 });
  });

  it('gives up waiting for an advisory lock held by another session after lock_timeout: unavailable (503), nothing written, and the retry succeeds', async () => {
    const adapter = await open();
    const user = randomUUID();
    const challenge = {
      p_user_id: user, p_challenge_id: randomUUID(), p_chain: 'evm', p_address: '0x00000000000000000000000000000000000000aa',
      p_address_key: '0x00000000000000000000000000000000000000aa', p_chain_id: 1, p_cluster: null, p_nonce: 'n'.repeat(32),
      p_message: 'a message', p_issued_at: new Date(), p_expires_at: new Date(Date.now() + 600_000),
    };
    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    try {
      // The lock wallet_issue_challenge takes for this user (supabase/schemas/05_wallets.sql).
      await holder.query('begin');
      await holder.query('select pg_advisory_xact_lock(4361, hashtext($1))', [user]);
      const { error, ms } = await failure(adapter.call('wallet_issue_challenge', challenge));
      expect(error).toBeInstanceOf(DbError);
      expect(error).toMatchObject({ kind: 'unavailable', sqlState: '55P03' });
      expect(ms).toBeGreaterThanOrEqual(DATABASE_WAITS.lockMs - 100);
      expect(ms).toBeLessThan(DATABASE_WAITS.lockMs + 3_000);
      expect(await db.sql('select id from public.wallet_challenges where user_id = $1', [user])).toEqual([]);
    } finally {
      await holder.query('rollback').catch(() => undefined);
      await holder.end();
    }
    expect(await adapter.call('wallet_issue_challenge', challenge)).toMatchObject({ issued: true });
    expect(await db.sql('select id from public.wallet_challenges where user_id = $1', [user])).toHaveLength(1);
  });

  it('gives up waiting for a pooled connection after the connection wait: unavailable, then works once one is free', async () => {
    const adapter = await open({ max: 1 });
    const held = await adapter.pool.connect();
    let released = false;
    try {
      const { error, ms } = await failure(adapter.call('health_check', {}));
      expect(error).toBeInstanceOf(DbError);
      expect(error).toMatchObject({ kind: 'unavailable' });
      expect(ms).toBeGreaterThanOrEqual(DATABASE_WAITS.connectionMs - 100);
      expect(ms).toBeLessThan(DATABASE_WAITS.connectionMs + 3_000);
      held.release();
      released = true;
      expect(await adapter.call('health_check', {})).toMatchObject({ ok: true });
    } finally {
      if (!released) held.release();
    }
  });

  it('answers by the call deadline whatever the server does, drops that connection, and the next call works', async () => {
    const adapter = await open({ max: 2, waits: { callMs: 300 } });
    const { error, ms } = await failure(adapter.call('test_sleep', { p_seconds: 3 }));
    expect(error).toBeInstanceOf(DbError);
    expect(error).toMatchObject({ kind: 'unavailable' });
    expect(ms).toBeLessThan(2_000);
    // The connection still busy on the server is not handed to the next call.
    expect(adapter.pool.totalCount).toBe(0);
    expect(await adapter.call('health_check', {})).toMatchObject({ ok: true });
  });

  describe('on Vercel (attachDatabasePool)', () => {
    const CONTEXT = Symbol.for('@vercel/request-context');
    const globals = globalThis as Record<symbol, unknown>;
    let restore: () => void = () => undefined;
    afterEach(() => restore());

    /** A Vercel request context whose waitUntil records what the instance is kept alive for. */
    function onVercel(): Promise<unknown>[] {
      const kept: Promise<unknown>[] = [];
      const saved = { url: process.env.VERCEL_URL, region: process.env.VERCEL_REGION, context: globals[CONTEXT] };
      process.env.VERCEL_URL = 'account-link.vercel.app';
      process.env.VERCEL_REGION = 'iad1';
      globals[CONTEXT] = { get: () => ({ waitUntil: (promise: Promise<unknown>) => kept.push(promise) }) };
      restore = () => {
        for (const [key, value] of [['VERCEL_URL', saved.url], ['VERCEL_REGION', saved.region]] as const) {
          if (value === undefined) delete process.env[key];
          else process.env[key] = value;
        }
        globals[CONTEXT] = saved.context;
      };
      return kept;
    }

    it('keeps the instance alive after a call until the idle connection is closed, so a suspended instance holds none', async () => {
      const kept = onVercel();
      const adapter = await open({ idleTimeoutMillis: 200 });
      await adapter.call('health_check', {});
      expect(kept).toHaveLength(1);
      expect(adapter.pool.idleCount).toBe(1);
      await kept[0];
      expect(adapter.pool.totalCount).toBe(0);
    });

    it('does nothing off Vercel', async () => {
      const kept = onVercel();
      delete process.env.VERCEL_URL;
      const adapter = await open({ idleTimeoutMillis: 200 });
      await adapter.call('health_check', {});
      expect(kept).toEqual([]);
    });
  });

  // (The same after `supabase db push` applied them: tests/db/supabase-cli.test.ts.)
  it('answers from two reads when every migration is applied: no transaction, no lock, no write', async () => {
    const { applied, statements } = await migrateCounting(db.url!);
    expect(applied).toEqual([]);
    expect(statements).toHaveLength(2);
    expect(statements.join('\n')).not.toMatch(/\b(begin|insert|create|lock)\b/i);
  });
});

describe('the pool by environment', () => {
  it('is small with a short idle time on Vercel, 4 with a longer one elsewhere, and DATABASE_POOL_MAX overrides the size', () => {
    expect(databasePoolFor(true, undefined)).toEqual({ max: 3, idleTimeoutMillis: 5_000 });
    expect(databasePoolFor(false, undefined)).toEqual({ max: 4, idleTimeoutMillis: 30_000 });
    expect(databasePoolFor(true, 4)).toEqual({ max: 4, idleTimeoutMillis: 5_000 });
    expect(databasePoolFor(false, 1)).toEqual({ max: 1, idleTimeoutMillis: 30_000 });
  });

  it('keeps 65 instances of the Vercel default under the smallest Supabase pooler client limit (200)', () => {
    expect(65 * databasePoolFor(true, undefined).max).toBeLessThan(200);
  });
});
