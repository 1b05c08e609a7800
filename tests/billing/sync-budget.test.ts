import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as cronSyncRoute from '../../app/api/cron/billing-sync/route.ts';
import * as userSyncRoute from '../../app/api/me/billing/sync/route.ts';
import { sweepBillingSync } from '../../lib/billing/sync.ts';
import { callDb } from '../../lib/db/index.ts';
import { DATABASE_KINDS, suiteDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { startFakeRevenueCat, v1Entitlement, v1Subscription, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { callRoute } from '../support/http.ts';
import { testUser } from '../support/tokens.ts';
import { billingEvent, day, deliver } from './support.ts';

/**
 * RevenueCat's rate budget, shared by every instance through the database (billing_sync_rate):
 * calls are spaced 1/REVENUECAT_REQUESTS_PER_SECOND apart, a user's refresh waits at most ~3 s for
 * a slot, users' refreshes together take at most half of the budget and each user at most
 * BILLING_USER_REFRESHES_PER_DAY a day, and when the budget is spent nothing calls RevenueCat: the
 * user gets 503 + Retry-After (and is not queued for the sweep), and a webhook's sync is left to
 * the sweep without another database write.
 * (Its own file: the instance remembers a spent budget for a while, which must not leak into others.)
 */
const CRON_SECRET = 'cron-secret-for-budget-tests-0123456789';
const REFRESHES_PER_DAY = 2;
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
    BILLING_USER_REFRESHES_PER_DAY: String(REFRESHES_PER_DAY),
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

  it('a user refresh while the budget is spent: 503 upstream_unavailable with Retry-After, RevenueCat not called, and not queued for the sweep', async () => {
    const user = await testUser();
    await spendBudget(60);
    const seen = revenuecat.requests.length;
    const response = await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } });
    expect({ status: response.status, code: response.body?.code }).toEqual({ status: 503, code: 'upstream_unavailable' });
    expect(Number(response.headers.get('retry-after'))).toBeGreaterThanOrEqual(59);
    expect(revenuecat.requests.length).toBe(seen);
    // The budget says nothing about this user: nothing to sync later (they are told when to retry).
    expect(await db.sql('select app_user_id from public.billing_sync_queue where app_user_id = $1', [user.userId])).toEqual([]);
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

/**
 * The finding this answers: refreshes were limited per user only (one per 5 s), so five accounts
 * refreshing every 5 s took the whole budget at one call a second: every other user's refresh got
 * 503, and each 503 queued its user for the sweep, whose slots then went to them too.
 */
describe.each(DATABASE_KINDS)('a few accounts refreshing as fast as they may, on %s', (kind) => {
  const db = suiteDatabase(kind);
  // Ten calls a second: the users' lane comes round every 0.2 s, so the rounds below wait on the
  // real clock a fifth as long as at two (what they test is the share, not the spacing).
  let restoreRate: () => void;
  beforeAll(() => {
    restoreRate = setEnv({ REVENUECAT_REQUESTS_PER_SECOND: '10' });
  });
  afterAll(() => restoreRate());
  const refresh = (user: { authorization: string }) => callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } });
  /** Their 5 s pass: the per-user interval is over (their day's count and the budget stay as they are). */
  const fiveSecondsPass = (userIds: string[]) =>
    db.sql(`update public.billing_sync_requests set requested_at = requested_at - interval '5 seconds' where app_user_id = any($1)`, [userIds]);
  /** Wait until the users' lane has no slot booked ahead (the last attackers' calls are over). */
  const usersLaneFree = async () => {
    for (let i = 0; i < 200; i++) {
      const [row] = await db.sql<{ free: boolean }>('select user_next_slot_at <= now() as free from public.billing_sync_rate');
      if (row!.free) return;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    throw new Error('the users\' lane stayed booked');
  };

  it('neither starves another user\'s refresh nor the sweep: each gets its daily cap (429 for the rest of the day), none is queued, then the others go through', async () => {
    const attackers = await Promise.all(Array.from({ length: 5 }, () => testUser()));
    const ids = attackers.map((user) => user.userId);
    for (const id of ids) revenuecat.setCustomer(id, {});
    const seen = revenuecat.requests.length;
    const capped = new Map<string, { status: number; code?: string; retryAfter: number }>();
    // Rounds of all five at once, 5 s apart for them (and each round once the users' lane has come
    // round, so that each gets somewhere), until each is refused for the day (bounded).
    for (let round = 0; round < 30 && capped.size < ids.length; round++) {
      await usersLaneFree();
      const answers = await Promise.all(attackers.map(refresh));
      answers.forEach((answer, i) => {
        expect([200, 429, 503]).toContain(answer.status);
        const retryAfter = Number(answer.headers.get('retry-after'));
        // A 429 that lasts past the 5 s interval is the day's cap.
        if (answer.status === 429 && retryAfter > 5) capped.set(ids[i]!, { status: answer.status, code: answer.body?.code, retryAfter });
      });
      // Not one of them was queued for the sweep, whatever they were answered.
      expect(await db.sql('select app_user_id from public.billing_sync_queue where app_user_id = any($1)', [ids])).toEqual([]);
      await fiveSecondsPass(ids);
    }
    expect([...capped.keys()].sort()).toEqual([...ids].sort());
    for (const answer of capped.values()) {
      expect(answer).toMatchObject({ status: 429, code: 'rate_limited' });
      // Until the day's window (from their first refresh) ends: about a day.
      expect(answer.retryAfter).toBeGreaterThan(86_400 - 600);
      expect(answer.retryAfter).toBeLessThanOrEqual(86_400);
    }
    // Each reached RevenueCat exactly as often as a day allows.
    const fetched = revenuecat.requests.slice(seen).map((request) => request.appUserId);
    for (const id of ids) expect(fetched.filter((fetchedId) => fetchedId === id)).toHaveLength(REFRESHES_PER_DAY);

    // They keep going; another user's refresh and the sweep go through beside them.
    await usersLaneFree();
    const other = await testUser();
    revenuecat.setCustomer(other.userId, {});
    const marked = [`budget-mark-${randomUUID()}`, `budget-mark-${randomUUID()}`];
    for (const id of marked) revenuecat.setCustomer(id, {});
    await db.sql(`insert into public.billing_sync_queue (app_user_id, reason) select unnest($1::text[]), 'test'`, [marked]);
    await fiveSecondsPass(ids);
    const duringSweep = revenuecat.requests.length;
    const [attackerAnswers, otherAnswer, sweep] = await Promise.all([
      Promise.all(attackers.map(refresh)),
      refresh(other),
      sweepBillingSync(8000),
    ]);
    expect(attackerAnswers.map((answer) => answer.status)).toEqual(ids.map(() => 429));
    expect({ status: otherAnswer.status, userId: otherAnswer.body?.userId }).toEqual({ status: 200, userId: other.userId });
    expect(sweep.synced).toBeGreaterThanOrEqual(marked.length);
    const sweptIds = revenuecat.requests.slice(duringSweep).map((request) => request.appUserId);
    expect(sweptIds).toEqual(expect.arrayContaining(marked));
    expect(sweptIds.filter((id) => ids.includes(id))).toEqual([]);
    expect(await db.sql('select app_user_id from public.billing_sync_queue where app_user_id = any($1)', [marked])).toEqual([]);
  });
});

/**
 * The budget's two lanes, simulated on the database's own rules: the stored times are moved back to
 * let time pass (the same as the clock moving on), at ten times the real spacing so the real time
 * the calls take changes no decision. One call a slot of 10 s; users' refreshes at most half of
 * the slots, each user at most once per 50 s and 5 times a day; a user waits at most 30 s for a
 * slot, the sweep 150 s. Every 10 s each of five users asks (the first finding's five accounts),
 * and the sweep asks whenever its last slot has come.
 */
describe.each(DATABASE_KINDS)('the users\' share of the budget, simulated, on %s', (kind) => {
  const db = suiteDatabase(kind);
  const SLOT_MS = 10_000;
  const begin = (userId: string | null, maxWaitMs: number) => callDb<{ waitMs?: number; retryAfterSeconds?: number; limitedBy?: string }>('billing_sync_begin', {
    p_user_id: userId, p_user_interval_seconds: 50, p_slot_ms: SLOT_MS, p_max_wait_ms: maxWaitMs, p_user_share: 0.5, p_user_daily_limit: 5,
  });
  const pass = (ms: number) => Promise.all([
    db.sql(`update public.billing_sync_rate set next_slot_at = next_slot_at - $1 * interval '1 millisecond', user_next_slot_at = user_next_slot_at - $1 * interval '1 millisecond'`, [ms]),
    db.sql(`update public.billing_sync_requests set requested_at = requested_at - $1 * interval '1 millisecond', day_started_at = day_started_at - $1 * interval '1 millisecond'`, [ms]),
  ]);

  it('keeps at least half of the slots for the sweep while five users ask as often as they may, and lets a sixth user in once they reach their day\'s cap', async () => {
    await db.sql(`update public.billing_sync_rate set next_slot_at = '-infinity', user_next_slot_at = '-infinity'`);
    const attackers = Array.from({ length: 5 }, () => `attacker-${randomUUID()}`);
    const other = `other-${randomUUID()}`;
    const granted = new Map<string, number>();
    const otherAnswers: { at: number; limitedBy?: string }[] = [];
    const sweepSlotsAt: number[] = [];
    let sweepBusyUntil = 0;
    for (let at = 0; at < 1200_000; at += SLOT_MS) {
      // As often as they may: the function itself holds each to once per 50 s.
      for (const attacker of attackers) {
        const answer = await begin(attacker, 30_000);
        if (answer.waitMs !== undefined) granted.set(attacker, (granted.get(attacker) ?? 0) + 1);
      }
      if (at % 300_000 === 50_000) {
        const answer = await begin(other, 30_000);
        otherAnswers.push({ at, limitedBy: answer.limitedBy });
      }
      // The sweep asks again as soon as its last slot came (it always has work).
      if (at >= sweepBusyUntil) {
        const answer = await begin(null, 150_000);
        expect(answer.waitMs).toBeDefined();
        sweepBusyUntil = at + answer.waitMs!;
        sweepSlotsAt.push(sweepBusyUntil);
      }
      await pass(SLOT_MS);
    }
    // Each attacker reached RevenueCat 5 times (its day's cap), no more: 25 slots of the users'
    // lane, one per 20 s, so they contend for the first 500 s.
    expect(attackers.map((attacker) => granted.get(attacker) ?? 0)).toEqual([5, 5, 5, 5, 5]);
    // While they contend, the sweep still gets at least half of the slots (before: about a quarter,
    // queued behind three users' slots each time it asked).
    const contended = 500_000 / SLOT_MS;
    expect(sweepSlotsAt.filter((slotAt) => slotAt < 500_000).length).toBeGreaterThanOrEqual(contended / 2 - 2);
    // Afterwards every refresh of the other user goes through, and the sweep gets every slot it asks for.
    const late = otherAnswers.filter((answer) => answer.at >= 600_000);
    expect(late.length).toBe(2);
    expect(late).toEqual(late.map(({ at }) => ({ at })));
    expect(sweepSlotsAt.filter((slotAt) => slotAt >= 600_000 && slotAt < 1200_000).length).toBeGreaterThanOrEqual(600_000 / SLOT_MS - 2 - late.length);
  });

  it('refuses a user past the day\'s cap until the window ends, and never counts a refresh the budget refused', async () => {
    await db.sql(`update public.billing_sync_rate set next_slot_at = '-infinity', user_next_slot_at = '-infinity'`);
    const user = `capped-${randomUUID()}`;
    for (let i = 0; i < 5; i++) {
      expect(await begin(user, 30_000)).toEqual({ waitMs: expect.any(Number) });
      await pass(60_000);
    }
    const refused = await begin(user, 30_000);
    expect(refused).toEqual({ limitedBy: 'day', retryAfterSeconds: expect.any(Number) });
    expect(refused.retryAfterSeconds!).toBeGreaterThan(86_400 - 5 * 60 - 60);
    // The budget spent: refused, and neither the interval nor the day's count is used up.
    await pass(86_400_000);
    await db.sql(`update public.billing_sync_rate set next_slot_at = now() + interval '1 hour'`);
    expect(await begin(user, 30_000)).toMatchObject({ limitedBy: 'budget' });
    const [row] = await db.sql<{ day_count: number }>('select day_count from public.billing_sync_requests where app_user_id = $1', [user]);
    expect(row!.day_count).toBe(5); // the old window's count, not yet replaced: nothing was counted
    await db.sql(`update public.billing_sync_rate set next_slot_at = '-infinity'`);
    expect(await begin(user, 30_000)).toEqual({ waitMs: expect.any(Number) });
    const [after] = await db.sql<{ day_count: number }>('select day_count from public.billing_sync_requests where app_user_id = $1', [user]);
    expect(after!.day_count).toBe(1);
  });
});
