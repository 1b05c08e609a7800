import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import * as leaguesRoute from '../../app/api/webhooks/leagues-sync/route.ts';
import { DEV_WEBHOOK_SECRETS } from '../../lib/config.ts';
import { closeDatabase, getDatabase } from '../../lib/db/index.ts';
import { DATABASE_WAITS, type openPostgres } from '../../lib/db/postgres.ts';
import { billingEvent, day, deliver, isoDay } from '../billing/support.ts';
import { delivery, freshSource, league } from '../leagues/fixtures.ts';
import { describeOn, openTestDatabase, type TestDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { callRoute, type RouteResponse } from '../support/http.ts';

/**
 * The webhooks when the database is saturated, on the real Postgres server, configured as a
 * deployment would be (DATABASE_URL, DATABASE_POOL_MAX): a request that cannot get a connection or
 * a lock in time answers 503 with Retry-After well inside RevenueCat's 60 s, stores nothing, and
 * the sender's retry later applies the delivery exactly once.
 */

/** How late an answer may come after the bound it waits for (a busy two-core machine). */
const SLACK_MS = 3_000;

async function timed(request: () => Promise<RouteResponse>): Promise<RouteResponse & { ms: number }> {
  const started = performance.now();
  const response = await request();
  return { ...response, ms: performance.now() - started };
}

function expectRetryLater(response: RouteResponse & { ms: number }, boundMs: number) {
  expect({ status: response.status, code: response.body?.code }).toEqual({ status: 503, code: 'database_unavailable' });
  expect(response.headers.get('retry-after')).toMatch(/^[1-9]\d*$/);
  expect(response.ms).toBeGreaterThanOrEqual(boundMs - 100);
  expect(response.ms).toBeLessThan(boundMs + SLACK_MS);
}

describeOn('postgres')('webhooks on a saturated database (DATABASE_POOL_MAX=1, real Postgres server)', () => {
  let db: TestDatabase;
  let restoreEnv: () => void;
  let adapter: Awaited<ReturnType<typeof openPostgres>>;
  /** Another session, as another instance or an operator's transaction would be. */
  let other: pg.Client;

  beforeAll(async () => {
    db = await openTestDatabase('postgres');
    await closeDatabase();
    restoreEnv = setEnv({ LOCAL_DEV: '1', DATABASE_URL: db.url, DATABASE_POOL_MAX: '1' });
    adapter = (await getDatabase()) as typeof adapter;
    other = new pg.Client({ connectionString: db.url });
    await other.connect();
  });
  afterAll(async () => {
    await other?.end();
    await closeDatabase();
    restoreEnv?.();
    await db?.close();
  });

  const billingRows = (eventId: string) => db.sql('select outcome from public.billing_events where event_id = $1', [eventId]);

  it('billing: with the only connection taken, answers 503 + Retry-After after the connection wait, stores nothing; the redelivery applies once', async () => {
    expect(adapter.pool.options.max).toBe(1);
    const user = `pool-${randomUUID()}`;
    const purchase = billingEvent('initial-purchase', user, { at: 0.001, purchased: 0, expires: 30 });

    const held = await adapter.pool.connect();
    let refused;
    try {
      refused = await timed(() => deliver(purchase));
    } finally {
      held.release();
    }
    expectRetryLater(refused, DATABASE_WAITS.connectionMs);
    expect(await billingRows(purchase.event.id)).toEqual([]);

    // RevenueCat retries later (5, 10, 20, 40, 80 minutes): once applied, every further copy is a duplicate.
    for (let i = 0; i < 2; i++) expect(await deliver(purchase)).toMatchObject({ status: 200, body: { received: true } });
    expect(await billingRows(purchase.event.id)).toEqual([{ outcome: 'applied' }]);
    expect(await adapter.call('account_entitlements', { p_user_id: user, p_now: new Date(day(1)) })).toMatchObject([{ entitlement_id: 'pro', status: 'active' }]);
  });

  it("billing: with the subscriber's entitlement row locked by another session, answers 503 + Retry-After after lock_timeout, stores nothing; the redelivery applies once", async () => {
    const user = `locked-${randomUUID()}`;
    expect((await deliver(billingEvent('initial-purchase', user, { at: 0.001, purchased: 0, expires: 30 }))).status).toBe(200);
    const renewal = billingEvent('renewal', user, { at: 30.001, purchased: 30, expires: 60 });

    await other.query('begin');
    let refused;
    try {
      const locked = await other.query('select 1 from public.entitlements where app_user_id = $1 for update', [user]);
      expect(locked.rowCount).toBeGreaterThan(0);
      refused = await timed(() => deliver(renewal));
    } finally {
      await other.query('rollback');
    }
    expectRetryLater(refused, DATABASE_WAITS.lockMs);
    expect(await billingRows(renewal.event.id)).toEqual([]);

    for (let i = 0; i < 2; i++) expect((await deliver(renewal)).status).toBe(200);
    expect(await billingRows(renewal.event.id)).toEqual([{ outcome: 'applied' }]);
    const [row] = (await adapter.call('account_entitlements', { p_user_id: user, p_now: new Date(day(31)) })) as { expires_at: string }[];
    expect(new Date(row!.expires_at).toISOString()).toBe(isoDay(60));
  });

  it("leagues: with the league's row locked by another session, answers 503 + Retry-After after lock_timeout, applies nothing; the redelivery applies once, then is a duplicate", async () => {
    const source = freshSource();
    const post = (body: unknown) => callRoute(leaguesRoute, { method: 'POST', headers: { 'x-webhook-secret': DEV_WEBHOOK_SECRETS.leagues }, body });
    expect((await post(delivery(source, { id: 'first', leagues: [league('L1', '2025-06-01T12:00:00Z')] }))).status).toBe(200);
    const update = delivery(source, { id: 'second', leagues: [league('L1', '2025-06-01T13:00:00Z', { name: 'Renamed' })] });

    await other.query('begin');
    let refused;
    try {
      await other.query('select 1 from public.leagues where source = $1 and external_id = $2 for update', [source, 'L1']);
      refused = await timed(() => post(update));
    } finally {
      await other.query('rollback');
    }
    expectRetryLater(refused, DATABASE_WAITS.lockMs);
    expect(await db.sql('select 1 from public.league_sync_deliveries where source = $1 and delivery_id = $2', [source, 'second'])).toEqual([]);
    expect(await db.sql('select name from public.leagues where source = $1', [source])).toEqual([{ name: 'League L1' }]);

    expect(await post(update)).toMatchObject({ status: 200, body: { received: true, upserted: 1 } });
    expect(await post(update)).toMatchObject({ status: 200, body: { duplicate: true, upserted: 1 } });
    expect(await db.sql('select name from public.leagues where source = $1', [source])).toEqual([{ name: 'Renamed' }]);
  });
});
