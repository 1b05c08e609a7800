import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toEntitlementViews, type EntitlementRow, type EntitlementView } from '../../lib/billing/entitlement-view.ts';
import { fixture } from '../billing/fixtures.ts';
import { v1Entitlement, v1Subscription } from '../../scripts/support/fake-revenuecat.ts';
import { newTally, runWorkers, send } from './client.ts';
import { scanLogs, startStack, type ReliabilityStack } from './stack.ts';
import { recordLogScan, recordScenario } from './summary.ts';

/**
 * Convergence on RevenueCat's record while RevenueCat fails: the production server syncs after
 * every webhook (BILLING_SYNC_AFTER=all) from a RevenueCat stand-in that answers 20% of calls with
 * a 500. The webhooks alone say the wrong thing on purpose (a renewal that was never delivered, a
 * refund only RevenueCat saw, a TRANSFER that names no products), and one group of subscribers gets
 * no webhook at all while RevenueCat renews them (their RENEWAL is lost half a day after their last
 * sync): only the sweep can find those. Every webhook must still answer 200 at once; a sync that
 * fails leaves its subscriber marked; the sweep (GET /api/cron/billing-sync, run until nothing is
 * due) must then bring every subscriber to exactly what RevenueCat says. Time is the one thing the
 * test moves by hand: the marks' backoff between rounds, and the half day since the last sync.
 */
const SUBSCRIBERS_PER_CASE = Number(process.env.RELIABILITY_SYNC_SUBSCRIBERS ?? 30);
const FAIL_RATE = 0.2;
const SEED = Number(process.env.RELIABILITY_SEED ?? Date.now() % 2 ** 31);
const MAX_SWEEPS = 15;
const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const MONTHLY = 'com.example.pro.monthly';

type Case = 'lost-renewal' | 'refund-only-at-revenuecat' | 'transfer' | 'renewal-lost-later';
interface Subscriber {
  id: string;
  case: Case;
  /** What RevenueCat's record means for GET /api/me now. */
  expected: Partial<EntitlementView> | null;
  deliveries: unknown[];
}

describe('billing sync converges while RevenueCat fails 20% of calls (production server, Postgres)', () => {
  let stack: ReliabilityStack;
  beforeAll(async () => {
    stack = await startStack({ revenuecat: true, env: { BILLING_SYNC_AFTER: 'all' } });
  });
  afterAll(async () => {
    await stack?.close();
  });

  it(`${4 * SUBSCRIBERS_PER_CASE} subscribers whose webhooks tell less than RevenueCat knows: webhooks stay 200, the state converges after the sweep`, async () => {
    const revenuecat = stack.revenuecat!;
    const now = Date.now();
    const purchase = (user: string, purchased: number, expires: number) => fixture('initial-purchase', {
      id: `conv-${randomUUID()}`, app_user_id: user, original_app_user_id: user, aliases: [user],
      event_timestamp_ms: purchased + 1000, purchased_at_ms: purchased, expiration_at_ms: expires,
      transaction_id: `tx-${randomUUID()}`, original_transaction_id: `otx-${user}`,
    });
    const record = (user: string, fields: Parameters<typeof v1Subscription>[0]) => revenuecat.setCustomer(user, {
      entitlements: { pro: v1Entitlement(MONTHLY, { purchased: fields.purchased, expires: fields.expires }) },
      subscriptions: { [MONTHLY]: v1Subscription({ ...fields, transactionId: `tx-${randomUUID()}` }) },
    });

    // Before RevenueCat fails: purchases whose period ends within the hour, confirmed by a sync.
    const subscribers: Subscriber[] = [];
    const renewingLater: Subscriber[] = [];
    const periodEnd = now + HOUR;
    for (let i = 0; i < SUBSCRIBERS_PER_CASE; i++) {
      const user = randomUUID();
      record(user, { purchased: periodEnd - 30 * DAY, expires: periodEnd });
      renewingLater.push({
        id: user, case: 'renewal-lost-later', deliveries: [purchase(user, periodEnd - 30 * DAY, periodEnd)],
        expected: { active: true, status: 'active', willRenew: true, productId: MONTHLY, expiresAt: iso(periodEnd + 30 * DAY) },
      });
    }
    const beforeFailures = newTally();
    for (const subscriber of renewingLater) {
      expect((await send(beforeFailures, `${stack.server.url}/api/webhooks/subscription-billing`, {
        method: 'POST', headers: { authorization: stack.billingAuthorization }, body: subscriber.deliveries[0],
      })).status).toBe(200);
    }
    await waitForQuietRevenueCat(() => revenuecat.requests.length);
    // At most two syncs run after webhooks at once per instance; the sweep confirms the rest.
    await stack.sql('update public.billing_sync_queue set next_attempt_at = now()');
    expect((await send(newTally(), `${stack.server.url}/api/cron/billing-sync`, { headers: { authorization: `Bearer ${stack.secrets.cron}` } })).status).toBe(200);
    const ids = renewingLater.map((subscriber) => subscriber.id);
    const [{ confirmed }] = await stack.sql<{ confirmed: number }>('select count(*)::int as confirmed from public.entitlements where app_user_id = any($1) and synced_at is not null', [ids]);
    expect(confirmed).toBe(renewingLater.length);
    // Half a day later RevenueCat renews them, and every RENEWAL webhook is lost.
    await stack.sql(`update public.entitlements set synced_at = synced_at - interval '13 hours' where app_user_id = any($1)`, [ids]);
    for (const subscriber of renewingLater) record(subscriber.id, { purchased: periodEnd, expires: periodEnd + 30 * DAY });
    subscribers.push(...renewingLater);

    for (let i = 0; i < SUBSCRIBERS_PER_CASE; i++) {
      // The first month was delivered; its RENEWAL never was (RevenueCat gave up). RevenueCat knows it renewed.
      const renewed = randomUUID();
      const renewedAt = now - DAY;
      record(renewed, { purchased: renewedAt, expires: renewedAt + 30 * DAY });
      subscribers.push({
        id: renewed, case: 'lost-renewal', deliveries: [purchase(renewed, renewedAt - 30 * DAY, renewedAt)],
        expected: { active: true, status: 'active', willRenew: true, productId: MONTHLY, expiresAt: iso(renewedAt + 30 * DAY) },
      });

      // A purchase delivered; the refund only RevenueCat saw: access ended when it was refunded.
      const refunded = randomUUID();
      const boughtAt = now - 5 * DAY;
      record(refunded, { purchased: boughtAt, expires: boughtAt + 30 * DAY, refunded: now - HOUR });
      subscribers.push({
        id: refunded, case: 'refund-only-at-revenuecat', deliveries: [purchase(refunded, boughtAt, boughtAt + 30 * DAY)],
        expected: { active: false, status: 'refunded', willRenew: false },
      });

      // A TRANSFER from an anonymous id to a user: it names ids, never products. RevenueCat shows what moved.
      const receiver = randomUUID();
      const anonymous = `$RCAnonymousID:${randomUUID().replace(/-/g, '')}`;
      record(receiver, { purchased: now - 3 * DAY, expires: now + 27 * DAY });
      revenuecat.setCustomer(anonymous, {});
      const transfer = fixture('transfer', {
        id: `conv-${randomUUID()}`, event_timestamp_ms: now - 60_000, transferred_from: [anonymous], transferred_to: [receiver],
      });
      subscribers.push({
        id: receiver, case: 'transfer', deliveries: [transfer],
        expected: { active: true, status: 'active', willRenew: true, productId: MONTHLY, expiresAt: iso(now + 27 * DAY) },
      });
    }

    revenuecat.failRate(FAIL_RATE, SEED);
    const firstCall = revenuecat.requests.length;
    const webhooks = newTally();
    const notOk: string[] = [];
    const queue = subscribers.filter((subscriber) => subscriber.case !== 'renewal-lost-later').flatMap((subscriber) => subscriber.deliveries);
    await runWorkers(8, () => queue.length > 0, async () => {
      const body = queue.shift();
      if (body === undefined) return;
      const answer = await send(webhooks, `${stack.server.url}/api/webhooks/subscription-billing`, {
        method: 'POST', headers: { authorization: stack.billingAuthorization }, body,
      });
      if (answer.status !== 200 && notOk.length < 20) notOk.push(`${answer.status} ${answer.error ?? answer.text.slice(0, 200)}`);
    });

    // The sweep, round after round (as Vercel Cron would run it), until nothing is marked.
    const sweeps = newTally();
    const sweepAnswers: { status: number; body: { claimed: number; synced: number; failed: number; due: number } }[] = [];
    let rounds = 0;
    for (; rounds < MAX_SWEEPS; rounds++) {
      // Let the syncs running after the webhooks' responses finish, then skip the backoff.
      await waitForQuietRevenueCat(() => revenuecat.requests.length);
      await stack.sql('update public.billing_sync_queue set next_attempt_at = now()');
      const answer = await send(sweeps, `${stack.server.url}/api/cron/billing-sync`, { headers: { authorization: `Bearer ${stack.secrets.cron}` } });
      sweepAnswers.push({ status: answer.status, body: answer.body });
      if (answer.status !== 200 || answer.body.claimed === 0) break;
    }
    const sweptSynced = sweepAnswers.reduce((total, answer) => total + (answer.body?.synced ?? 0), 0);
    const sweptFailed = sweepAnswers.reduce((total, answer) => total + (answer.body?.failed ?? 0), 0);

    const diverged: string[] = [];
    for (const subscriber of subscribers) {
      const [{ rows }] = await stack.sql<{ rows: EntitlementRow[] }>('select public.account_entitlements($1, now()) as rows', [subscriber.id]);
      const pro = toEntitlementViews(rows).find((view) => view.id === 'pro') ?? null;
      const matches = subscriber.expected === null ? pro === null : pro !== null && Object.entries(subscriber.expected).every(([key, value]) => pro[key as keyof EntitlementView] === value);
      if (!matches) diverged.push(`${subscriber.case} ${subscriber.id}: expected ${JSON.stringify(subscriber.expected)}, got ${JSON.stringify(pro)}`);
    }
    const calls = revenuecat.requests.slice(firstCall);
    const failedCalls = calls.filter((call) => call.status >= 500).length;
    revenuecat.failRate(0);

    recordScenario({
      order: 8,
      scenario: `Sync: RevenueCat failing ${FAIL_RATE * 100}% of calls, ${subscribers.length} subscribers`,
      requests: beforeFailures.requests + webhooks.requests + sweeps.requests,
      fiveXx: beforeFailures.fiveXx + webhooks.fiveXx + sweeps.fiveXx,
      eventsLost: diverged.length,
      duplicatesApplied: null,
      notes: `${webhooks.requests} webhooks (all 200 at once: ${notOk.length === 0}), ${calls.length} calls to RevenueCat of which ${failedCalls} answered 500; ` +
        `${rounds} sweep rounds synced ${sweptSynced} (${sweptFailed} failed and retried); subscribers not at RevenueCat's record afterwards: ${diverged.length} (counted as lost); seed ${SEED}`,
    });

    expect(notOk).toEqual([]);
    expect({ webhook5xx: webhooks.fiveXx, sweep5xx: sweeps.fiveXx }).toEqual({ webhook5xx: 0, sweep5xx: 0 });
    expect(sweepAnswers.every((answer) => answer.status === 200)).toBe(true);
    // The failures happened (the scenario is real); the sweep found the renewals no webhook told of, and finished.
    expect(failedCalls).toBeGreaterThan(0);
    expect(sweptSynced).toBeGreaterThanOrEqual(renewingLater.length);
    expect(sweepAnswers.at(-1)!.body.claimed).toBe(0);
    expect(await stack.sql('select app_user_id from public.billing_sync_queue')).toEqual([]);
    expect(diverged).toEqual([]);
  });

  it('no configured secret, RevenueCat key or issued token appears in the server logs', () => {
    const { leaks, requestLines, scan } = scanLogs(stack);
    recordLogScan(scan);
    expect(requestLines).toBeGreaterThan(10);
    expect(leaks).toEqual([]);
  });
});

const iso = (ms: number) => new Date(Math.floor(ms / 1000) * 1000).toISOString();

/** Wait until RevenueCat has seen no new call for half a second (the after-response syncs are done). */
async function waitForQuietRevenueCat(count: () => number): Promise<void> {
  let last = -1;
  while (count() !== last) {
    last = count();
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}
