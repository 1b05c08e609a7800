import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import * as adminSyncRoute from '../../app/api/admin/billing/sync/route.ts';
import * as cronSyncRoute from '../../app/api/cron/billing-sync/route.ts';
import * as userSyncRoute from '../../app/api/me/billing/sync/route.ts';
import { DATABASE_KINDS, describeOn, suiteDatabase, type TestDatabase } from '../support/databases.ts';
import { DEPLOYMENT_SETTINGS, setEnv } from '../support/env.ts';
import { startFakeRevenueCat, v1Entitlement, v1Subscription, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { MAX_SYNCS_AFTER_WEBHOOKS, requireRevenueCat, SWEEP_WITHOUT_REVENUECAT, sweepBillingSync } from '../../lib/billing/sync.ts';
import { MAX_SUBSCRIBER_BYTES } from '../../lib/revenuecat/client.ts';
import { callRoute } from '../support/http.ts';
import { testUser } from '../support/tokens.ts';
import { describeEventEffects } from '../../lib/billing/event-effects.ts';
import type { BillingWebhookBody } from '../../lib/billing/webhook-body.ts';
import { apple, billingEvent, cancellation, day, deliver, entitlementsOf, event, isoDay, purchase } from './support.ts';

/**
 * Entitlements converge on RevenueCat's own record: a local stand-in of its REST API v1 (real HTTP)
 * holds what RevenueCat knows; each path that syncs (the user's refresh, after a webhook, the
 * sweep, an operator) heals what the webhooks alone got wrong, and every failure of RevenueCat
 * leaves the stored state as it was.
 */
const CRON_SECRET = 'cron-secret-for-tests-0123456789abcdef';
const ADMIN_SECRET = 'admin-secret-for-tests-0123456789abcdef';
const MONTHLY = 'com.example.pro.monthly';

let revenuecat: FakeRevenueCat;
let restoreEnv: () => void;
beforeAll(async () => {
  revenuecat = await startFakeRevenueCat();
  restoreEnv = setEnv({
    // Real secrets beside dev tokens: local mode, asked for.
    LOCAL_DEV: '1',
    REVENUECAT_SECRET_API_KEY: revenuecat.apiKey,
    REVENUECAT_API_URL: revenuecat.url,
    REVENUECAT_TIMEOUT_MS: '400',
    REVENUECAT_REQUESTS_PER_SECOND: '100',
    CRON_SECRET,
    ADMIN_API_SECRET: ADMIN_SECRET,
    // Each test says when a webhook syncs (the after-response tests turn it on).
    BILLING_SYNC_AFTER: 'none',
  });
});
afterAll(async () => {
  restoreEnv();
  await revenuecat.close();
});

/** RevenueCat's record of a monthly subscription renewed for a second period (days 30 to 60). */
function renewedRecord(user: string, fields: Parameters<typeof v1Subscription>[0] = { purchased: day(30), expires: day(60) }) {
  revenuecat.setCustomer(user, {
    entitlements: { pro: v1Entitlement(MONTHLY, { purchased: fields.purchased, expires: fields.expires }) },
    subscriptions: { [MONTHLY]: v1Subscription(fields) },
    subscriber_attributes: { $email: { value: 'private@example.test', updated_at_ms: day(0) } },
  });
}

/** The purchase arrived; the renewal was lost (RevenueCat gave up): the webhooks alone say it lapsed at day 30. */
async function lostRenewal(db: TestDatabase, user: string) {
  expect((await deliver(billingEvent('initial-purchase', user, { at: 0, purchased: 0, expires: 30 }))).status).toBe(200);
  expect((await entitlementsOf(db, user, new Date(day(40))))[0]).toMatchObject({ active: false, status: 'expired' });
  renewedRecord(user);
  revenuecat.setClock(day(40));
}

const healed = { active: true, status: 'active', willRenew: true, expiresAt: isoDay(60), productId: MONTHLY, syncedAt: isoDay(40) };

async function until<T>(probe: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 10_000): Promise<T> {
  const started = Date.now();
  for (;;) {
    const value = await probe();
    if (done(value) || Date.now() - started > timeoutMs) return value;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe.each(DATABASE_KINDS)('billing sync with RevenueCat on %s', (kind) => {
  const db = suiteDatabase(kind);

  it('heals a lost renewal when the user refreshes their purchases', async () => {
    const user = await testUser();
    await lostRenewal(db, user.userId);
    const response = await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } });
    expect(response.status).toBe(200);
    // (The answer is computed at the real clock, long after day 60: the row, not its access.)
    expect(response.body).toMatchObject({ userId: user.userId, entitlements: [{ id: 'pro', productId: MONTHLY, expiresAt: isoDay(60), syncedAt: isoDay(40) }] });
    expect((await entitlementsOf(db, user.userId, new Date(day(41))))[0]).toMatchObject(healed);
    // The snapshot is kept beside the events, without the customer's attributes.
    const [stored] = await db.sql<{ type: string; body: { subscriber: Record<string, unknown> } }>(
      `select type, body from public.billing_events where event_id like 'sync:%' and app_user_id = $1`, [user.userId]);
    expect(stored!.type).toBe('SYNC');
    expect(stored!.body.subscriber).toHaveProperty('subscriptions');
    expect(stored!.body.subscriber).not.toHaveProperty('subscriber_attributes');
  });

  it('heals it after a webhook that cannot say everything, after the response (BILLING_SYNC_AFTER=all)', async () => {
    const user = `after-${randomUUID()}`;
    await lostRenewal(db, user);
    const restore = setEnv({ BILLING_SYNC_AFTER: 'all' });
    try {
      const seen = revenuecat.requests.length;
      expect((await deliver(billingEvent('cancellation-unsubscribe', user, { at: 20, purchased: 0, expires: 30 }))).status).toBe(200);
      const state = await until(() => entitlementsOf(db, user, new Date(day(41))), (views) => views[0]?.syncedAt === isoDay(40));
      expect(state[0]).toMatchObject({ ...healed, status: 'active' });
      expect(revenuecat.requests.slice(seen).map((request) => request.appUserId)).toEqual([user]);
      expect(await db.sql('select app_user_id from public.billing_sync_queue where app_user_id = $1', [user])).toEqual([]);
    } finally {
      restore();
    }
  });

  it(`runs at most ${MAX_SYNCS_AFTER_WEBHOOKS} syncs after webhooks at once; the other subscribers stay marked for the sweep`, async () => {
    const slow = await startFakeRevenueCat({ latencyMs: 300 });
    // A timeout well past the stand-in's latency: a retry on a busy machine would count one
    // subscriber's fetch twice and leave the arithmetic below wrong.
    const restore = setEnv({ BILLING_SYNC_AFTER: 'all', REVENUECAT_SECRET_API_KEY: slow.apiKey, REVENUECAT_API_URL: slow.url, REVENUECAT_TIMEOUT_MS: '5000' });
    try {
      const users = Array.from({ length: 8 }, () => `burst-${randomUUID()}`);
      const answers = await Promise.all(users.map((user) => deliver(billingEvent('initial-purchase', user, { at: 0, purchased: 0, expires: 30 }))));
      expect(answers.map((answer) => answer.status)).toEqual(users.map(() => 200));
      const marked = () => db.sql<{ app_user_id: string }>('select app_user_id from public.billing_sync_queue where app_user_id = any($1)', [users]);
      // Until every sync that started has ended: the marks left are the ones nobody synced.
      await until(async () => ({ synced: users.length - (await marked()).length, asked: slow.requests.length }), ({ synced, asked }) => asked > 0 && synced === asked);
      expect(slow.peakConcurrency()).toBeLessThanOrEqual(MAX_SYNCS_AFTER_WEBHOOKS);
      expect(slow.requests.length).toBeGreaterThanOrEqual(1);
      expect((await marked()).length).toBe(users.length - slow.requests.length);
      expect((await marked()).length).toBeGreaterThan(0);
    } finally {
      restore();
      await slow.close();
    }
  });

  it('heals it in the sweep, which works through what is marked (and only with the cron secret)', async () => {
    const user = `sweep-${randomUUID()}`;
    await lostRenewal(db, user);
    await db.sql(`insert into public.billing_sync_queue (app_user_id, reason) values ($1, 'test')`, [user]);
    const response = await callRoute(cronSyncRoute, { headers: { authorization: `Bearer ${CRON_SECRET}` } });
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({ claimed: expect.any(Number), synced: expect.any(Number), failed: 0 });
    expect(response.body.synced).toBeGreaterThanOrEqual(1);
    expect((await entitlementsOf(db, user, new Date(day(41))))[0]).toMatchObject(healed);
    expect(await db.sql('select app_user_id from public.billing_sync_queue where app_user_id = $1', [user])).toEqual([]);
  });

  it('heals it when an operator syncs the subscriber; an id RevenueCat never named is refused, not created', async () => {
    const user = `admin-${randomUUID()}`;
    await lostRenewal(db, user);
    const response = await callRoute(adminSyncRoute, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_SECRET}` }, body: { app_user_id: user } });
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({ appUserId: user, entitlements: [{ id: 'pro', expiresAt: isoDay(60) }] });
    expect((await entitlementsOf(db, user, new Date(day(41))))[0]).toMatchObject(healed);

    const seen = revenuecat.requests.length;
    const unknown = await callRoute(adminSyncRoute, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_SECRET}` }, body: { app_user_id: `never-${randomUUID()}` } });
    expect(unknown).toMatchObject({ status: 404, body: { code: 'subscriber_unknown' } });
    expect(revenuecat.requests.length).toBe(seen);
  });

  it('ends access RevenueCat refunded though no webhook said so', async () => {
    const user = await testUser();
    expect((await deliver(billingEvent('initial-purchase', user.userId, { at: 0, purchased: 0, expires: 30 }))).status).toBe(200);
    renewedRecord(user.userId, { purchased: day(0), expires: day(30), refunded: day(5) });
    revenuecat.setClock(day(6));
    expect((await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } })).status).toBe(200);
    expect((await entitlementsOf(db, user.userId, new Date(day(7))))[0]).toMatchObject({ active: false, status: 'refunded', expiresAt: isoDay(5), willRenew: false });
  });

  it('fetches both sides of a TRANSFER after it (BILLING_SYNC_AFTER=gaps, the default)', async () => {
    const [from, to] = [`from-${randomUUID()}`, `to-${randomUUID()}`];
    expect((await deliver(billingEvent('initial-purchase', from, { at: 0, purchased: 0, expires: 30 }))).status).toBe(200);
    onTestFinished(setEnv({ BILLING_SYNC_AFTER: undefined }));
    revenuecat.setCustomer(from, {});
    renewedRecord(to);
    revenuecat.setClock(day(40));
    const seen = revenuecat.requests.length;
    const transfer = billingEvent('transfer', to, { at: 35 }, { app_user_id: undefined, aliases: undefined, original_app_user_id: undefined, transferred_from: [from], transferred_to: [to] });
    expect((await deliver(transfer)).status).toBe(200);
    await until(async () => revenuecat.requests.length - seen, (count) => count >= 2);
    expect(revenuecat.requests.slice(seen).map((request) => request.appUserId).sort()).toEqual([from, to].sort());
    const views = await until(() => entitlementsOf(db, to, new Date(day(41))), (v) => v[0]?.syncedAt === isoDay(40));
    expect(views[0]).toMatchObject(healed);
    expect((await entitlementsOf(db, from, new Date(day(41))))[0]).toMatchObject({ active: false });
  });

  it('ends the old product of a Play immediate upgrade, which no event ties to the new one, by the sync after the new product (gaps)', async () => {
    const user = `play-${randomUUID()}`;
    onTestFinished(setEnv({ BILLING_SYNC_AFTER: undefined }));
    const play = (order: string, product: string, entitlement: string) => ({ store: 'PLAY_STORE', product_id: product, transaction_id: order, original_transaction_id: order, entitlement_ids: [entitlement] });
    expect((await deliver(billingEvent('initial-purchase', user, { at: 0, purchased: 0, expires: 30 }, play('GPA.1000-0000-0000-00001', 'basic:monthly', 'basic')))).status).toBe(200);
    await until(() => db.sql('select 1 from public.billing_sync_queue where app_user_id = $1', [user]), (rows) => rows.length === 0);
    // RevenueCat's record after the upgrade: the old subscription ended when it was replaced.
    revenuecat.setCustomer(user, {
      entitlements: {
        basic: v1Entitlement('basic', { purchased: day(0), expires: day(10) }),
        premium: v1Entitlement('premium', { purchased: day(10), expires: day(45) }),
      },
      subscriptions: {
        basic: { ...v1Subscription({ purchased: day(0), expires: day(10), store: 'play_store', transactionId: 'GPA.1000-0000-0000-00001' }), product_plan_identifier: 'monthly' },
        premium: { ...v1Subscription({ purchased: day(10), expires: day(45), store: 'play_store', transactionId: 'GPA.2000-0000-0000-00002' }), product_plan_identifier: 'monthly' },
      },
    });
    revenuecat.setClock(day(10.01));
    expect((await deliver(billingEvent('product-change', user, { at: 10, purchased: 0, expires: 30 }, { ...play('GPA.1000-0000-0000-00001', 'basic:monthly', 'basic'), new_product_id: undefined }))).status).toBe(200);
    expect((await deliver(billingEvent('initial-purchase', user, { at: 10.001, purchased: 10, expires: 45 }, play('GPA.2000-0000-0000-00002', 'premium:monthly', 'premium')))).status).toBe(200);
    const views = await until(() => entitlementsOf(db, user, new Date(day(11))), (v) => v.some((view) => view.syncedAt === isoDay(10.01)));
    expect(views.find((view) => view.id === 'premium')).toMatchObject({ active: true, willRenew: true, expiresAt: isoDay(45) });
    expect(views.find((view) => view.id === 'basic')).toMatchObject({ active: false, willRenew: false });
  });

  it('ends an entitlement detached from the product, which no webhook says, by the sync after an event that names only the others (gaps)', async () => {
    const user = `detach-${randomUUID()}`;
    onTestFinished(setEnv({ BILLING_SYNC_AFTER: undefined }));
    const granted = { purchased: day(0), expires: day(30) };
    revenuecat.setCustomer(user, {
      entitlements: { pro: v1Entitlement(MONTHLY, granted), extra: v1Entitlement(MONTHLY, granted) },
      subscriptions: { [MONTHLY]: v1Subscription(granted) },
    });
    revenuecat.setClock(day(0.01));
    expect((await deliver(purchase(user, 0, 0, 30, { entitlement_ids: ['pro', 'extra'] }))).status).toBe(200);
    await until(() => db.sql('select 1 from public.billing_sync_queue where app_user_id = $1', [user]), (rows) => rows.length === 0);
    // The dashboard detaches `extra` from the product: RevenueCat's record stops granting it. Then the user unsubscribes.
    revenuecat.setCustomer(user, { entitlements: { pro: v1Entitlement(MONTHLY, granted) }, subscriptions: { [MONTHLY]: v1Subscription({ ...granted, unsubscribed: day(10) }) } });
    revenuecat.setClock(day(10.01));
    expect((await deliver(cancellation(user, 'UNSUBSCRIBE', 10, 0, 30, { entitlement_ids: ['pro'] }))).status).toBe(200);
    const views = await until(() => entitlementsOf(db, user, new Date(day(11))), (v) => v.some((view) => view.syncedAt === isoDay(10.01)));
    expect(views.find((view) => view.id === 'extra')).toMatchObject({ active: false });
    expect(views.find((view) => view.id === 'pro')).toMatchObject({ active: true, willRenew: false, expiresAt: isoDay(30) });
  });

  it('marks a sync (reason mapping) after an event whose entitlements differ from what its purchase grants here: a detach, a product moved, a product mapped to none; not when they agree, not for a product change, not for a late event naming entitlements', async () => {
    const record = async (body: BillingWebhookBody) =>
      ((await db.adapter.call('record_billing_event', { p_body: body, p_plan: describeEventEffects(body.event, new Date()), p_sync_after: 'gaps' })) as { syncIds: string[] }).syncIds;
    const reasonFor = async (user: string) => (await db.sql<{ reason: string }>('select reason from public.billing_sync_queue where app_user_id = $1', [user]))[0]?.reason;
    const bought = async (user: string, entitlements: string[]) => {
      expect(await record(purchase(user, 0, 0, 30, { entitlement_ids: entitlements }))).toEqual([user]); // a product not seen before
      await db.sql('delete from public.billing_sync_queue where app_user_id = $1', [user]);
    };
    const [detached, moved, unmapped] = ['detached', 'moved', 'unmapped'].map((name) => `${name}-${randomUUID()}`) as [string, string, string];
    await bought(detached, ['pro', 'extra']);
    expect(await record(cancellation(detached, 'BILLING_ERROR', 5, 0, 30, { entitlement_ids: ['extra', 'pro'] }))).toEqual([]);
    expect(await record(cancellation(detached, 'UNSUBSCRIBE', 10, 0, 30, { entitlement_ids: ['pro'] }))).toEqual([detached]);
    expect(await reasonFor(detached)).toBe('mapping');
    await bought(moved, ['pro']);
    expect(await record(cancellation(moved, 'UNSUBSCRIBE', 10, 0, 30, { entitlement_ids: ['premium'] }))).toEqual([moved]);
    expect(await reasonFor(moved)).toBe('mapping');
    await bought(unmapped, ['pro']);
    expect(await record(cancellation(unmapped, 'UNSUBSCRIBE', 10, 0, 30, { entitlement_ids: null }))).toEqual([unmapped]);
    expect(await reasonFor(unmapped)).toBe('mapping');
    // A grant naming none (recorded only, it changes nothing) while the purchase still grants: the same.
    await db.sql('delete from public.billing_sync_queue where app_user_id = $1', [unmapped]);
    expect(await record(event('uncancellation', unmapped, 12, 0, 30, { ...apple('1000'), entitlement_ids: null }))).toEqual([unmapped]);
    expect(await reasonFor(unmapped)).toBe('mapping');
    // The same grant naming the user's anonymous id too (as a signed-in user's aliases do): it merges
    // the ids, and still asks.
    await db.sql('delete from public.billing_sync_queue where app_user_id = $1', [unmapped]);
    const anonymous = `$RCAnonymousID:${randomUUID().replaceAll('-', '')}`;
    expect(await record(event('renewal', unmapped, 13, 0, 30, { ...apple('1000'), entitlement_ids: null, aliases: [unmapped, anonymous] }))).toEqual([unmapped]);
    expect(await reasonFor(unmapped)).toBe('mapping');
    // ... and delivered late (folded into the past), still.
    await db.sql('delete from public.billing_sync_queue where app_user_id = $1', [unmapped]);
    expect(await record(event('renewal', unmapped, 11, 0, 30, { ...apple('1001'), entitlement_ids: null, aliases: [unmapped, anonymous] }))).toEqual([unmapped]);
    // Not a PRODUCT_CHANGE naming the product it changes to, nor an event older than what the rows
    // say now (a late delivery: later events made them).
    const [changed, late] = ['changed', 'late'].map((name) => `${name}-${randomUUID()}`) as [string, string];
    await bought(changed, ['premium']);
    expect(await record(event('product-change', changed, 10, 0, 30, { ...apple('1000'), entitlement_ids: ['basic'], new_product_id: 'com.example.basic.monthly' }))).toEqual([]);
    await bought(late, ['pro']);
    expect(await record(cancellation(late, 'UNSUBSCRIBE', 20, 0, 30, { entitlement_ids: ['premium'] }))).toEqual([late]);
    await db.sql('delete from public.billing_sync_queue where app_user_id = $1', [late]);
    expect(await record(cancellation(late, 'BILLING_ERROR', 3, 0, 30, { entitlement_ids: ['pro'] }))).toEqual([]);
  });

  it('leaves a production purchase alone when the snapshot shows only a sandbox purchase of the same product (v1 keys subscriptions by product)', async () => {
    const user = await testUser();
    expect((await deliver(billingEvent('initial-purchase', user.userId, { at: 0, purchased: 0, expires: 30 }))).status).toBe(200);
    revenuecat.setCustomer(user.userId, {
      entitlements: { pro: v1Entitlement(MONTHLY, { purchased: day(9), expires: day(9.1) }) },
      subscriptions: { [MONTHLY]: v1Subscription({ purchased: day(9), expires: day(9.1), sandbox: true, transactionId: 'sandbox-1' }) },
    });
    revenuecat.setClock(day(10));
    expect((await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } })).status).toBe(200);
    const [view] = await entitlementsOf(db, user.userId, new Date(day(11)));
    expect(view).toMatchObject({ active: true, environment: 'PRODUCTION', expiresAt: isoDay(30) });
    expect(view!.sources.map((source) => source.environment).sort()).toEqual(['PRODUCTION', 'SANDBOX']);
  });

  it('keeps a refunded lifetime purchase refunded when RevenueCat still lists the purchase but no entitlement points to it', async () => {
    const user = await testUser();
    const lifetime = { product_id: 'com.example.pro.lifetime', transaction_id: 'life-1', original_transaction_id: 'life-1' };
    expect((await deliver(billingEvent('non-renewing-purchase', user.userId, { at: 0, purchased: 0, expires: null }, lifetime))).status).toBe(200);
    expect((await deliver(billingEvent('cancellation-customer-support', user.userId, { at: 5, purchased: 0, expires: 5 }, lifetime))).status).toBe(200);
    revenuecat.setCustomer(user.userId, {
      entitlements: {},
      non_subscriptions: { 'com.example.pro.lifetime': [{ id: 'life-1', is_sandbox: false, purchase_date: new Date(day(0)).toISOString(), store: 'app_store' }] },
    });
    revenuecat.setClock(day(10));
    expect((await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } })).status).toBe(200);
    expect((await entitlementsOf(db, user.userId, new Date(day(11))))[0]).toMatchObject({ active: false });
  });

  it('stores a snapshot once while RevenueCat\'s record says the same: later refreshes confirm it (syncedAt), folds keep that, and a webhook in between makes the next one count', async () => {
    const user = `confirm-${randomUUID()}`;
    await lostRenewal(db, user);
    const sync = async (at: number) => {
      revenuecat.setClock(day(at));
      const response = await callRoute(adminSyncRoute, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_SECRET}` }, body: { app_user_id: user } });
      expect(response.status).toBe(200);
      return response;
    };
    const snapshots = () => db.sql<{ event_id: string; confirmed_at: string | null }>(
      `select event_id, confirmed_at from public.billing_events where app_user_id = $1 and type = 'SYNC' order by event_at`, [user]);
    await sync(40);
    for (const at of [41, 42, 43]) await sync(at);
    // One row, confirmed at the last refresh; GET /api/me says when RevenueCat last confirmed it.
    expect((await snapshots()).map((row) => new Date(row.confirmed_at!).toISOString())).toEqual([isoDay(43)]);
    expect((await entitlementsOf(db, user, new Date(day(44))))[0]).toMatchObject({ ...healed, syncedAt: isoDay(43) });

    // A lost event delivered now, from before the snapshot: the history is folded again, the confirmation with it.
    expect((await deliver(billingEvent('cancellation-unsubscribe', user, { at: 20, purchased: 0, expires: 30 }))).status).toBe(200);
    expect((await entitlementsOf(db, user, new Date(day(44))))[0]).toMatchObject({ ...healed, syncedAt: isoDay(43) });

    // A webhook after it: the next snapshot that says the same is stored (it must override what came between).
    expect((await deliver(billingEvent('cancellation-unsubscribe', user, { at: 44, purchased: 30, expires: 60 }))).status).toBe(200);
    expect((await entitlementsOf(db, user, new Date(day(44.5))))[0]).toMatchObject({ status: 'cancelled_active', willRenew: false });
    await sync(45);
    expect(await snapshots()).toHaveLength(2);
    expect((await entitlementsOf(db, user, new Date(day(46))))[0]).toMatchObject({ ...healed, syncedAt: isoDay(45) });
  });

  it('syncs a subscriber again when an event generated between a snapshot and its confirmation arrives late (RevenueCat had already moved past it)', async () => {
    const user = `between-${randomUUID()}`;
    await lostRenewal(db, user);
    const restore = setEnv({ BILLING_SYNC_AFTER: 'gaps' });
    try {
      for (const at of [40, 42]) {
        revenuecat.setClock(day(at));
        expect((await callRoute(adminSyncRoute, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_SECRET}` }, body: { app_user_id: user } })).status).toBe(200);
      }
      // A cancellation RevenueCat generated at day 41 and reverted (its record at day 42 renews), delivered only now.
      const seen = revenuecat.requests.length;
      expect((await deliver(billingEvent('cancellation-unsubscribe', user, { at: 41, purchased: 30, expires: 60 }))).status).toBe(200);
      // The sync after the webhook (it marked the subscriber) brings RevenueCat's record back.
      const state = await until(() => entitlementsOf(db, user, new Date(day(43))), (views) => views[0]?.willRenew === true);
      expect(state[0]).toMatchObject({ ...healed, syncedAt: isoDay(42) });
      expect(revenuecat.requests.slice(seen).map((request) => request.appUserId)).toEqual([user]);
    } finally {
      restore();
    }
  });

  it('keeps an event newer than a snapshot: the snapshot is folded at its own time', async () => {
    const user = await testUser();
    renewedRecord(user.userId, { purchased: day(0), expires: day(30) });
    revenuecat.setClock(day(10));
    expect((await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } })).status).toBe(200);
    expect((await entitlementsOf(db, user.userId, new Date(day(11))))[0]).toMatchObject({ active: true, willRenew: true });
    // A cancellation at day 12 (after the snapshot), then a snapshot taken at day 11 that arrives late.
    expect((await deliver(billingEvent('cancellation-unsubscribe', user.userId, { at: 12, purchased: 0, expires: 30 }))).status).toBe(200);
    revenuecat.setClock(day(11));
    // The user's refresh limit (one per 5 s) passed: their last refresh moved back, not waited for.
    await db.sql(`update public.billing_sync_requests set requested_at = requested_at - interval '5 seconds' where app_user_id = $1`, [user.userId]);
    expect((await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } })).status).toBe(200);
    expect((await entitlementsOf(db, user.userId, new Date(day(13))))[0]).toMatchObject({ status: 'cancelled_active', willRenew: false, active: true });
  });

  it('a sync racing a webhook of the same subscriber, 20 times: the state of event order', async () => {
    const restore = setEnv({ BILLING_SYNC_AFTER: 'gaps' });
    try {
      for (let round = 0; round < 20; round++) {
        const user = `race-${round}-${randomUUID()}`;
        expect((await deliver(billingEvent('initial-purchase', user, { at: 0, purchased: 0, expires: 30 }))).status).toBe(200);
        // RevenueCat's record at day 40: renewed to day 60. The webhook: a cancellation at day 41.
        renewedRecord(user);
        revenuecat.setClock(day(40));
        const [synced, cancelled] = await Promise.all([
          callRoute(adminSyncRoute, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_SECRET}` }, body: { app_user_id: user } }),
          deliver(billingEvent('cancellation-unsubscribe', user, { at: 41, purchased: 30, expires: 60 })),
        ]);
        expect([synced.status, cancelled.status]).toEqual([200, 200]);
        expect({ round, view: (await entitlementsOf(db, user, new Date(day(42))))[0] })
          .toMatchObject({ round, view: { status: 'cancelled_active', willRenew: false, active: true, expiresAt: isoDay(60) } });
      }
    } finally {
      restore();
    }
  });

  it('limits a user to one refresh per 5 s (429 with Retry-After), counted in the database', async () => {
    const user = await testUser();
    revenuecat.setCustomer(user.userId, {});
    expect((await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } })).status).toBe(200);
    const again = await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } });
    expect(again).toMatchObject({ status: 429, body: { code: 'rate_limited' } });
    expect(Number(again.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
  });
});

/** A v1 subscriber's JSON with `extra` merged into `subscriber` (how a hostile or broken upstream hides something in it). */
function subscriberJson(extra: Record<string, unknown>): string {
  return JSON.stringify({ request_date_ms: day(40), request_date: isoDay(40), subscriber: { entitlements: {}, subscriptions: {}, non_subscriptions: {}, ...extra } });
}
const OVER_THE_CAP = subscriberJson({ padding: 'x'.repeat(MAX_SUBSCRIBER_BYTES) });

describe.each(DATABASE_KINDS)('when RevenueCat fails, nothing changes, on %s', (kind) => {
  const db = suiteDatabase(kind);

  const cases = [
    { name: 'a 429 with a short Retry-After is waited out', answers: [{ status: 429, headers: { 'retry-after': '1' } }], status: 200 },
    { name: 'a 429 with a long Retry-After: 503 with it', answers: [{ status: 429, headers: { 'retry-after': '120' } }], status: 503, code: 'upstream_unavailable', retryAfter: '120' },
    { name: 'a 429 without any header: 503', answers: [{ status: 429 }], status: 503, code: 'upstream_unavailable' },
    { name: 'two 500s are retried', answers: [{ status: 500 }, { status: 502 }], status: 200 },
    { name: 'three 500s: 503', answers: [{ status: 500 }, { status: 500 }, { status: 503 }], status: 503, code: 'upstream_unavailable' },
    { name: 'a timeout, three times: 503', answers: ['hang', 'hang', 'hang'] as const, status: 503, code: 'upstream_unavailable' },
    { name: 'a 401 (a bad key): 502', answers: [{ status: 401, body: '{"code":7225,"message":"Invalid API key."}' }], status: 502, code: 'upstream_rejected' },
    { name: 'an HTML 200: 502', answers: [{ status: 200, headers: { 'content-type': 'text/html' }, body: '<html>maintenance</html>' }], status: 502, code: 'upstream_invalid' },
    { name: 'a JSON 200 that is not a subscriber: 502', answers: [{ status: 200, body: '{"subscriber":"nope"}' }], status: 502, code: 'upstream_invalid' },
    // RevenueCat's answer is not trusted more than a client's body: over the cap it is not read on,
    // and what Postgres cannot store is RevenueCat's failure (502), never the caller's (400).
    { name: 'an answer over 1 MiB, by its Content-Length: 502', answers: [{ status: 200, body: OVER_THE_CAP }], status: 502, code: 'upstream_invalid' },
    { name: 'an answer over 1 MiB, chunked: 502', answers: [{ status: 200, headers: { 'transfer-encoding': 'chunked' }, body: OVER_THE_CAP }], status: 502, code: 'upstream_invalid' },
    { name: 'a NUL character in a field the sync does not read: 502, not 400', answers: [{ status: 200, body: subscriberJson({ management_url: 'https://apps.example/\u0000' }) }], status: 502, code: 'upstream_invalid' },
    { name: 'a NUL character in a key: 502', answers: [{ status: 200, body: subscriberJson({ other_purchases: { 'a\u0000b': {} } }) }], status: 502, code: 'upstream_invalid' },
    { name: 'an unpaired surrogate: 502', answers: [{ status: 200, body: subscriberJson({ original_app_user_id: '\ud800' }) }], status: 502, code: 'upstream_invalid' },
    { name: 'a request time no clock holds: 502', answers: [{ status: 200, body: JSON.stringify({ request_date_ms: 9e15, subscriber: {} }) }], status: 502, code: 'upstream_invalid' },
    { name: 'an answer that stalls after its headers, three times: 503, not 500', answers: Array.from({ length: 3 }, () => ({ status: 200, body: subscriberJson({}), stallAfterBytes: 20 })), status: 503, code: 'upstream_unavailable' },
  ];

  it.each(cases)('$name', async ({ answers, status, code, retryAfter }) => {
    const user = await testUser();
    expect((await deliver(billingEvent('initial-purchase', user.userId, { at: 0, purchased: 0, expires: 30 }))).status).toBe(200);
    renewedRecord(user.userId);
    revenuecat.setClock(day(40));
    const before = await db.sql('select * from public.entitlements where app_user_id = $1', [user.userId]);

    revenuecat.script(...answers);
    const response = await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } });
    expect({ status: response.status, code: response.body?.code }).toEqual({ status, code });
    if (status === 200) return;
    expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    // Nothing of what RevenueCat said, and no setting, reaches the caller (the log has them). (The
    // request id is random hex: it may hold "7225" by chance.)
    expect(response.body.detail).toMatch(/^RevenueCat [^:]*; nothing was changed\./);
    expect(response.text.replace(response.body.requestId, '')).not.toMatch(/REVENUECAT_|maintenance|7225|Invalid API key|html|\\u0000|content type/i);
    if (status === 503) expect(Number(response.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    if (retryAfter) expect(response.headers.get('retry-after')).toBe(retryAfter);
    expect(await db.sql('select * from public.entitlements where app_user_id = $1', [user.userId])).toEqual(before);
    expect(await db.sql(`select event_id from public.billing_events where app_user_id = $1 and type = 'SYNC'`, [user.userId])).toEqual([]);
    // Left marked for the sweep, due after a backoff.
    expect(await db.sql<{ attempts: number }>('select attempts from public.billing_sync_queue where app_user_id = $1', [user.userId])).toEqual([{ attempts: 1 }]);
  });
});

describe.each(DATABASE_KINDS)('the sweep, bounded and shared, on %s', (kind) => {
  const db = suiteDatabase(kind);
  const mark = (ids: string[]) => db.sql(`insert into public.billing_sync_queue (app_user_id, reason) select unnest($1::text[]), 'test'`, [ids]);

  it('ends within its budget when RevenueCat only hangs (no retry or wait starts that cannot end in time), and leaves everyone marked', async () => {
    const ids = Array.from({ length: 8 }, () => `hang-${randomUUID()}`);
    await mark(ids);
    revenuecat.script(...Array.from({ length: 60 }, () => 'hang' as const));
    try {
      // Each attempt times out at 400 ms (REVENUECAT_TIMEOUT_MS) and would be retried twice with a
      // backoff: one sync alone takes 1.8 to 2.4 s, so the deadline cuts the first. (A budget of 2 s
      // leaves the claim before it time on a busy machine: with 1 s, a claim slower than 600 ms
      // left no time for any attempt.) The margin is for the database calls around it.
      const budgetMs = 2000;
      const started = Date.now();
      const result = await sweepBillingSync(budgetMs);
      const elapsed = Date.now() - started;
      expect(elapsed).toBeLessThan(budgetMs + 600);
      expect(result.synced).toBe(0);
      expect(result.failed).toBeGreaterThanOrEqual(1);
      const marked = await db.sql<{ app_user_id: string }>('select app_user_id from public.billing_sync_queue where app_user_id = any($1)', [ids]);
      expect(marked.map((row) => row.app_user_id).sort()).toEqual([...ids].sort());
    } finally {
      revenuecat.unscript(); // the sweep stopped asking before the script ran out
    }
  });

  it('backs off from a subscriber whose answer cannot be stored (a NUL from upstream) instead of taking it again every run', async () => {
    const id = `nul-${randomUUID()}`;
    await mark([id]);
    revenuecat.script({ status: 200, body: subscriberJson({ management_url: '\u0000' }) });
    const seen = revenuecat.requests.length;
    expect(await sweepBillingSync(3000)).toMatchObject({ synced: 0, failed: 1 });
    expect(revenuecat.requests.slice(seen).map((request) => request.appUserId)).toEqual([id]);
    const [row] = await db.sql<{ attempts: number; backoff: number; last_error: string }>(
      `select attempts, extract(epoch from next_attempt_at - now())::int as backoff, last_error from public.billing_sync_queue where app_user_id = $1`, [id]);
    expect(row).toMatchObject({ attempts: 1, last_error: expect.stringContaining('cannot be stored') });
    expect(row!.backoff).toBeGreaterThanOrEqual(55);
    // The next run leaves it alone until the backoff is over.
    const again = revenuecat.requests.length;
    await sweepBillingSync(1000);
    expect(revenuecat.requests.slice(again).map((request) => request.appUserId)).not.toContain(id);
  });

  it.runIf(kind === 'postgres')('two sweeps at once never take the same subscriber: each is fetched once', async () => {
    const ids = Array.from({ length: 20 }, () => `twice-${randomUUID()}`);
    for (const id of ids) renewedRecord(id);
    revenuecat.setClock(day(40));
    await mark(ids);
    const seen = revenuecat.requests.length;
    const [first, second] = await Promise.all([sweepBillingSync(8000), sweepBillingSync(8000)]);
    const fetched = revenuecat.requests.slice(seen).map((request) => request.appUserId).filter((id) => ids.includes(id));
    expect(fetched.sort()).toEqual([...ids].sort());
    expect(first!.synced + second!.synced).toBeGreaterThanOrEqual(ids.length);
    expect(await db.sql('select app_user_id from public.billing_sync_queue where app_user_id = any($1)', [ids])).toEqual([]);
  });
});

describeOn('pglite')('the sync routes without configuration, and their credentials', () => {
  suiteDatabase('pglite');

  it('answers 503 sync_not_configured on a refresh and the admin sync without a RevenueCat key, naming no setting (the log does); the sweep has nothing to do (200); webhooks work as before', async () => {
    const restore = setEnv({ REVENUECAT_SECRET_API_KEY: undefined });
    try {
      const user = await testUser();
      const refresh = await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } });
      const sweep = await callRoute(cronSyncRoute, { headers: { authorization: `Bearer ${CRON_SECRET}` } });
      const admin = await callRoute(adminSyncRoute, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_SECRET}` }, body: { app_user_id: user.userId } });
      for (const response of [refresh, admin]) {
        expect(response).toMatchObject({ status: 503, body: { code: 'sync_not_configured', detail: 'Syncing purchases with RevenueCat is not enabled on this server.' } });
        expect(response.text).not.toContain('REVENUECAT');
      }
      // A scheduler's daily call on a webhooks-only deployment is a success that says why nothing ran.
      expect(sweep).toMatchObject({ status: 200, body: { claimed: 0, synced: 0, nothingToDo: SWEEP_WITHOUT_REVENUECAT } });
      // What to set is for the operator: the error carries it to the log, beside the answer.
      const operatorDetail = (() => {
        try {
          requireRevenueCat();
        } catch (error) {
          return (error as { operatorDetail?: string }).operatorDetail;
        }
      })();
      expect(operatorDetail).toContain('REVENUECAT_SECRET_API_KEY');
      expect((await deliver(billingEvent('transfer', user.userId, { at: 5 }, { app_user_id: undefined, transferred_from: ['someone-else'], transferred_to: [user.userId] }))).status).toBe(200);
    } finally {
      restore();
    }
  });

  const matrix: { route: 'cron' | 'admin'; name: string; headers: Record<string, string>; status: number; code?: string }[] = [
    { route: 'cron', name: 'no Authorization', headers: {}, status: 401, code: 'invalid_cron_secret' },
    { route: 'cron', name: 'the wrong secret', headers: { authorization: 'Bearer nope' }, status: 401, code: 'invalid_cron_secret' },
    { route: 'cron', name: 'the admin secret', headers: { authorization: `Bearer ${ADMIN_SECRET}` }, status: 401, code: 'invalid_cron_secret' },
    { route: 'cron', name: 'the secret with another scheme', headers: { authorization: `Basic ${CRON_SECRET}` }, status: 401, code: 'invalid_cron_secret' },
    { route: 'cron', name: 'a lowercase scheme and two spaces', headers: { authorization: `bearer  ${CRON_SECRET}` }, status: 200 },
    { route: 'admin', name: 'no Authorization', headers: {}, status: 401, code: 'invalid_admin_secret' },
    { route: 'admin', name: 'the cron secret', headers: { authorization: `Bearer ${CRON_SECRET}` }, status: 401, code: 'invalid_admin_secret' },
    { route: 'admin', name: 'the secret with a character changed', headers: { authorization: `Bearer ${ADMIN_SECRET.slice(0, -1)}X` }, status: 401, code: 'invalid_admin_secret' },
    { route: 'admin', name: 'the admin secret', headers: { authorization: `Bearer ${ADMIN_SECRET}` }, status: 404, code: 'subscriber_unknown' },
  ];
  it.each(matrix)('$route with $name: $status', async ({ route, headers, status, code }) => {
    const response = route === 'cron'
      ? await callRoute(cronSyncRoute, { headers })
      : await callRoute(adminSyncRoute, { method: 'POST', headers, body: { app_user_id: `nobody-${randomUUID()}` } });
    expect({ status: response.status, code: response.body?.code }).toEqual({ status, code });
    if (status === 401) expect(response.headers.get('www-authenticate')).toBe(`Bearer realm="${route}"`);
  });

  it.each([['cron', 'CRON_SECRET'], ['admin', 'ADMIN_API_SECRET']] as const)('%s without its secret configured: 503 whatever is sent, not naming %s (the log does)', async (route, variable) => {
    // In local mode the admin routes take the dev admin secret instead: unset, it is a deployment's.
    const restore = setEnv({ ...(route === 'admin' ? DEPLOYMENT_SETTINGS : {}), [variable]: undefined });
    try {
      const response = route === 'cron'
        ? await callRoute(cronSyncRoute, { headers: { authorization: `Bearer ${CRON_SECRET}` } })
        : await callRoute(adminSyncRoute, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_SECRET}` }, body: { app_user_id: 'x' } });
      expect(response).toMatchObject({ status: 503, body: { code: `${route}_not_configured`, detail: 'This route is not enabled on this server.' } });
      expect(response.text).not.toContain(variable);
    } finally {
      restore();
    }
  });
});
