import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as cronSyncRoute from '../../app/api/cron/billing-sync/route.ts';
import * as userSyncRoute from '../../app/api/me/billing/sync/route.ts';
import { callDb } from '../../lib/db/index.ts';
import { DATABASE_KINDS, suiteDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { startFakeRevenueCat, v1Entitlement, v1Subscription, type FakeRevenueCat } from '../support/fake-revenuecat.ts';
import { callRoute } from '../support/http.ts';
import { testUser } from '../support/tokens.ts';
import { billingEvent, day, deliver } from './support.ts';

/**
 * RevenueCat's rate budget, shared by every instance through the database (billing_sync_rate):
 * calls are spaced 1/REVENUECAT_REQUESTS_PER_SECOND apart, a user's refresh waits at most ~3 s for
 * a slot, and when the budget is spent nothing calls RevenueCat: the user gets 503 + Retry-After
 * (and stays marked), and a webhook's sync is left to the sweep without another database write.
 * (Its own file: the instance remembers a spent budget for a while, which must not leak into others.)
 */
const CRON_SECRET = 'cron-secret-for-budget-tests-0123456789';
const MONTHLY = 'com.example.pro.monthly';

let revenuecat: FakeRevenueCat;
let restoreEnv: () => void;
beforeAll(async () => {
  revenuecat = await startFakeRevenueCat();
  restoreEnv = setEnv({
    LOCAL_DEV: '1',
    REVENUECAT_SECRET_API_KEY: revenuecat.apiKey,
    REVENUECAT_API_URL: revenuecat.url,
    REVENUECAT_REQUESTS_PER_SECOND: '2',
    CRON_SECRET,
    BILLING_SYNC_AFTER: 'all',
  });
});
afterAll(async () => {
  restoreEnv();
  await revenuecat.close();
});

describe.each(DATABASE_KINDS)('the RevenueCat budget on %s', (kind) => {
  const db = suiteDatabase(kind);
  const spendBudget = (seconds: number) => db.sql(`update public.billing_sync_rate set next_slot_at = now() + make_interval(secs => $1)`, [seconds]);
  const freeBudget = () => db.sql(`update public.billing_sync_rate set next_slot_at = '-infinity'`);

  it('hands out slots 1/REVENUECAT_REQUESTS_PER_SECOND apart across callers', async () => {
    await spendBudget(2);
    const nextSlot = async () => (await db.sql<{ at: Date }>('select next_slot_at as at from public.billing_sync_rate'))[0]!.at.getTime();
    const begin = (maxWaitMs: number) => callDb<{ waitMs?: number; retryAfterSeconds?: number; limitedBy?: string }>('billing_sync_begin', {
      p_user_id: null, p_user_interval_seconds: 5, p_slot_ms: 500, p_max_wait_ms: maxWaitMs,
    });
    const slots: number[] = [await nextSlot()];
    for (let i = 0; i < 3; i++) {
      const answer = await begin(10_000);
      expect(answer.waitMs).toBeGreaterThan(0);
      slots.push(await nextSlot());
    }
    expect(slots.slice(1).map((slot, i) => slot - slots[i]!)).toEqual([500, 500, 500]);
    // Beyond the longest wait: nothing is reserved, and the caller learns how long to wait.
    expect(await begin(100)).toEqual({ retryAfterSeconds: expect.any(Number), limitedBy: 'budget' });
    expect(await nextSlot()).toBe(slots.at(-1));
  });

  it('a user refresh while the budget is spent: 503 upstream_unavailable with Retry-After, marked for the sweep, RevenueCat not called', async () => {
    const user = await testUser();
    await spendBudget(60);
    const seen = revenuecat.requests.length;
    const response = await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } });
    expect({ status: response.status, code: response.body?.code }).toEqual({ status: 503, code: 'upstream_unavailable' });
    expect(Number(response.headers.get('retry-after'))).toBeGreaterThanOrEqual(59);
    expect(revenuecat.requests.length).toBe(seen);
    expect(await db.sql('select app_user_id from public.billing_sync_queue where app_user_id = $1', [user.userId])).toEqual([{ app_user_id: user.userId }]);
    // It was the budget, not the user's own limit: once a slot is free, the same user may refresh at once.
    await freeBudget();
    revenuecat.setCustomer(user.userId, {});
    expect((await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } })).status).toBe(200);
  });

  it('webhooks while the budget is spent answer 200, call nobody, and leave their subscribers due for the sweep, which syncs them', async () => {
    await spendBudget(60);
    const users = [`budget-${randomUUID()}`, `budget-${randomUUID()}`];
    const seen = revenuecat.requests.length;
    for (const user of users) expect((await deliver(billingEvent('initial-purchase', user, { at: 0, purchased: 0, expires: 30 }))).status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 300)); // the syncs after the responses
    expect(revenuecat.requests.length).toBe(seen);
    const marks = await db.sql<{ app_user_id: string; attempts: number; due: boolean }>(
      'select app_user_id, attempts, next_attempt_at <= now() as due from public.billing_sync_queue where app_user_id = any($1) order by app_user_id', [users]);
    expect(marks).toEqual([...users].sort().map((user) => ({ app_user_id: user, attempts: 0, due: true })));

    await freeBudget();
    for (const user of users) {
      revenuecat.setCustomer(user, {
        entitlements: { pro: v1Entitlement(MONTHLY, { purchased: day(30), expires: day(60) }) },
        subscriptions: { [MONTHLY]: v1Subscription({ purchased: day(30), expires: day(60) }) },
      });
    }
    revenuecat.setClock(day(40));
    const sweep = await callRoute(cronSyncRoute, { headers: { authorization: `Bearer ${CRON_SECRET}` } });
    expect(sweep.status).toBe(200);
    expect(sweep.body.synced).toBeGreaterThanOrEqual(users.length);
    expect(revenuecat.requests.slice(seen).map((request) => request.appUserId)).toEqual(expect.arrayContaining(users));
    expect(await db.sql('select app_user_id from public.billing_sync_queue where app_user_id = any($1)', [users])).toEqual([]);
  });
});
