import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EntitlementView } from '../../lib/billing/entitlement-view.ts';
import type { BillingWebhookBody } from '../../lib/billing/webhook-body.ts';
import { closeDatabase } from '../../lib/db/index.ts';
import { DATABASE_KINDS, useTestDatabase, type TestDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { billingEvent, day, deliver, entitlementsOf, eventRow, isoDay } from './support.ts';

/**
 * Event sequences through the real route and the real database (PGlite and the Postgres server),
 * with the expected state after each step. `now` (days after T0) is the injected clock for
 * `active`; event times are in the bodies, as RevenueCat sends them.
 */
type UserKey = 'alice' | 'bob' | 'anon';
type Users = Record<UserKey, string>;
interface Step {
  name: string;
  /** The body to deliver; or `resend` the body of an earlier step (same event id). */
  body?: (u: Users) => BillingWebhookBody;
  resend?: string;
  outcome: 'applied' | 'stale' | 'ignored' | 'duplicate';
  /** The "pro" entitlement of each listed user at `now` (null: the user has no entitlement at all). */
  state: Partial<Record<UserKey, Partial<EntitlementView> | null>>;
  now: number;
}
interface Scenario {
  name: string;
  steps: Step[];
}

const PRO_MONTHLY = 'com.example.pro.monthly';
const PRO_YEARLY = 'com.example.pro.yearly';
const purchase = (u: string, at = 0, expires = 30) => billingEvent('initial-purchase', u, { at, purchased: at, expires });
const renewal = (u: string, at: number, purchased: number, expires: number, fields = {}) => billingEvent('renewal', u, { at, purchased, expires }, fields);
const cancellation = (u: string, reason: string, at: number, purchased: number, expires: number) =>
  billingEvent('cancellation-unsubscribe', u, { at, purchased, expires }, { cancel_reason: reason });

// The bundle RevenueCat sends when a charge fails: same timestamp, any order.
const billingIssue = (u: string) => billingEvent('billing-issue-grace', u, { at: 30.001, purchased: 0, expires: 30 }, { grace_period_expiration_at_ms: day(46) });
const billingError = (u: string) => cancellation(u, 'BILLING_ERROR', 30.001, 0, 30);
const inGrace: Partial<EntitlementView> = { status: 'grace', active: true, willRenew: false, expiresAt: isoDay(30), graceExpiresAt: isoDay(46) };

// Immediate upgrade: PRODUCT_CHANGE and RENEWAL of the new product, dispatched together.
const productChange = (u: string) => billingEvent('product-change', u, { at: 10, purchased: 0, expires: 30 }, { new_product_id: PRO_YEARLY });
const upgradeRenewal = (u: string) =>
  renewal(u, 10, 10, 375, { product_id: PRO_YEARLY, transaction_id: '2000000899997777', period_type: 'NORMAL' });
const upgraded: Partial<EntitlementView> = { status: 'active', active: true, willRenew: true, productId: PRO_YEARLY, expiresAt: isoDay(375) };

const scenarios: Scenario[] = [
  {
    name: 'purchase -> renewal -> cancel -> expire',
    steps: [
      { name: 'purchase', body: (u) => purchase(u.alice), outcome: 'applied', now: 1,
        state: { alice: { status: 'active', active: true, willRenew: true, expiresAt: isoDay(30), productId: PRO_MONTHLY, store: 'APP_STORE', environment: 'PRODUCTION', periodType: 'NORMAL', graceExpiresAt: null } } },
      { name: 'renewal', body: (u) => renewal(u.alice, 30.001, 30, 60), outcome: 'applied', now: 31, state: { alice: { status: 'active', active: true, willRenew: true, expiresAt: isoDay(60) } } },
      { name: 'cancel', body: (u) => cancellation(u.alice, 'UNSUBSCRIBE', 40, 30, 60), outcome: 'applied', now: 41,
        state: { alice: { status: 'cancelled_active', active: true, willRenew: false, expiresAt: isoDay(60) } } },
      { name: 'lapses on time without EXPIRATION', resend: 'cancel', outcome: 'duplicate', now: 60.0001, state: { alice: { status: 'cancelled_active', active: false } } },
      { name: 'expire', body: (u) => billingEvent('expiration', u.alice, { at: 60.02, purchased: 30, expires: 60 }), outcome: 'applied', now: 61,
        state: { alice: { status: 'expired', active: false, willRenew: false, expiresAt: isoDay(60) } } },
    ],
  },
  ...(['BILLING_ISSUE first', 'CANCELLATION BILLING_ERROR first'] as const).map((order): Scenario => ({
    name: `billing issue in grace, then recovery (${order})`,
    steps: [
      { name: 'purchase', body: (u: Users) => purchase(u.alice), outcome: 'applied', now: 1, state: { alice: { status: 'active', active: true } } },
      { name: 'first of the bundle', body: (u: Users) => (order === 'BILLING_ISSUE first' ? billingIssue(u.alice) : billingError(u.alice)), outcome: 'applied', now: 31,
        state: { alice: order === 'BILLING_ISSUE first' ? { ...inGrace, willRenew: true } : { status: 'billing_issue', active: false, willRenew: false } } },
      { name: 'second of the bundle', body: (u: Users) => (order === 'BILLING_ISSUE first' ? billingError(u.alice) : billingIssue(u.alice)), outcome: 'applied', now: 31, state: { alice: inGrace } },
      { name: 'grace ends on time', resend: 'purchase', outcome: 'duplicate', now: 46.5, state: { alice: { ...inGrace, active: false } } },
      { name: 'recovery: renewal', body: (u: Users) => renewal(u.alice, 38, 38, 68), outcome: 'applied', now: 47,
        state: { alice: { status: 'active', active: true, willRenew: true, expiresAt: isoDay(68), graceExpiresAt: null } } },
    ],
  })),
  {
    name: 'renewal before purchase',
    steps: [
      { name: 'renewal arrives first', body: (u) => renewal(u.alice, 30.001, 30, 60), outcome: 'applied', now: 31, state: { alice: { status: 'active', active: true, expiresAt: isoDay(60) } } },
      { name: 'the older purchase changes nothing', body: (u) => purchase(u.alice), outcome: 'stale', now: 31, state: { alice: { status: 'active', active: true, willRenew: true, expiresAt: isoDay(60) } } },
    ],
  },
  {
    name: 'cancellation before purchase',
    steps: [
      { name: 'cancel arrives first', body: (u) => cancellation(u.alice, 'UNSUBSCRIBE', 5, 0, 30), outcome: 'applied', now: 6,
        state: { alice: { status: 'cancelled_active', active: true, willRenew: false, expiresAt: isoDay(30) } } },
      { name: 'the older purchase does not undo it', body: (u) => purchase(u.alice), outcome: 'stale', now: 6, state: { alice: { status: 'cancelled_active', willRenew: false, expiresAt: isoDay(30) } } },
    ],
  },
  {
    name: 'duplicates after newer events',
    steps: [
      { name: 'purchase', body: (u) => purchase(u.alice), outcome: 'applied', now: 1, state: { alice: { status: 'active', willRenew: true } } },
      { name: 'cancel', body: (u) => cancellation(u.alice, 'UNSUBSCRIBE', 3, 0, 30), outcome: 'applied', now: 4, state: { alice: { status: 'cancelled_active', willRenew: false } } },
      { name: 'purchase again (retry)', resend: 'purchase', outcome: 'duplicate', now: 4, state: { alice: { status: 'cancelled_active', willRenew: false } } },
      { name: 'expire', body: (u) => billingEvent('expiration', u.alice, { at: 30.02, purchased: 0, expires: 30 }), outcome: 'applied', now: 31, state: { alice: { status: 'expired', active: false } } },
      { name: 'purchase once more', resend: 'purchase', outcome: 'duplicate', now: 31, state: { alice: { status: 'expired', active: false } } },
      { name: 'cancel again', resend: 'cancel', outcome: 'duplicate', now: 31, state: { alice: { status: 'expired', active: false } } },
    ],
  },
  {
    name: 'transfer',
    steps: [
      { name: 'alice purchases', body: (u) => purchase(u.alice), outcome: 'applied', now: 1, state: { alice: { status: 'active', active: true }, bob: null } },
      { name: 'TRANSFER alice -> bob (anonymous destination first)', outcome: 'applied', now: 5.5,
        body: (u) => billingEvent('transfer', u.bob, { at: 5 }, { app_user_id: undefined, aliases: undefined, original_app_user_id: undefined, transferred_from: [u.alice], transferred_to: [u.anon, u.bob] }),
        state: { alice: { status: 'transferred', active: false, willRenew: false }, bob: { status: 'active', active: true, willRenew: true, expiresAt: isoDay(30) }, anon: null } },
      { name: "a late cancel of alice's, older than the transfer, applies to bob", body: (u) => cancellation(u.alice, 'UNSUBSCRIBE', 4, 0, 30), outcome: 'applied', now: 6,
        state: { alice: { status: 'transferred', active: false }, bob: { status: 'cancelled_active', active: true, willRenew: false } } },
      { name: 'a newer purchase of alice is hers', body: (u) => purchase(u.alice, 7, 37), outcome: 'applied', now: 8,
        state: { alice: { status: 'active', active: true, expiresAt: isoDay(37) }, bob: { status: 'cancelled_active', active: true } } },
    ],
  },
  {
    name: 'transfer before the purchase it moves',
    steps: [
      { name: 'TRANSFER alice -> bob first', outcome: 'ignored', now: 6, state: { alice: null, bob: null },
        body: (u) => billingEvent('transfer', u.bob, { at: 5 }, { app_user_id: undefined, transferred_from: [u.alice], transferred_to: [u.bob] }) },
      { name: "alice's older purchase lands on bob", body: (u) => purchase(u.alice), outcome: 'applied', now: 6, state: { alice: null, bob: { status: 'active', active: true, expiresAt: isoDay(30) } } },
    ],
  },
  ...(['PRODUCT_CHANGE first', 'RENEWAL first'] as const).map((order): Scenario => ({
    name: `immediate upgrade (${order})`,
    steps: [
      { name: 'purchase monthly', body: (u: Users) => purchase(u.alice), outcome: 'applied', now: 1, state: { alice: { status: 'active', productId: PRO_MONTHLY, expiresAt: isoDay(30) } } },
      ...(order === 'PRODUCT_CHANGE first'
        ? ([
            { name: 'PRODUCT_CHANGE: pending, access unchanged', body: (u: Users) => productChange(u.alice), outcome: 'applied', now: 10,
              state: { alice: { status: 'active', productId: PRO_MONTHLY, expiresAt: isoDay(30), willRenew: true } } },
            { name: 'RENEWAL of the yearly product', body: (u: Users) => upgradeRenewal(u.alice), outcome: 'applied', now: 11, state: { alice: upgraded } },
          ] satisfies Step[])
        : ([
            { name: 'RENEWAL of the yearly product', body: (u: Users) => upgradeRenewal(u.alice), outcome: 'applied', now: 11, state: { alice: upgraded } },
            { name: 'PRODUCT_CHANGE of the old period changes nothing', body: (u: Users) => productChange(u.alice), outcome: 'stale', now: 11, state: { alice: upgraded } },
          ] satisfies Step[])),
      { name: 'EXPIRATION of the old monthly period changes nothing', body: (u: Users) => billingEvent('expiration', u.alice, { at: 30.02, purchased: 0, expires: 30 }),
        outcome: 'stale', now: 31, state: { alice: upgraded } },
    ],
  })),
  {
    name: 'refund, a stale renewal, then the refund reversed',
    steps: [
      { name: 'purchase', body: (u) => purchase(u.alice), outcome: 'applied', now: 1, state: { alice: { status: 'active' } } },
      { name: 'renewal', body: (u) => renewal(u.alice, 30.001, 30, 60), outcome: 'applied', now: 31, state: { alice: { status: 'active', expiresAt: isoDay(60) } } },
      { name: 'refund', body: (u) => billingEvent('cancellation-customer-support', u.alice, { at: 35.001, purchased: 30, expires: 35 }), outcome: 'applied', now: 36,
        state: { alice: { status: 'refunded', active: false, willRenew: true, expiresAt: isoDay(35) } } },
      { name: 'a stale renewal cannot re-grant it', body: (u) => renewal(u.alice, 30.002, 30, 60), outcome: 'stale', now: 36, state: { alice: { status: 'refunded', active: false } } },
      { name: 'refund reversed', body: (u) => billingEvent('refund-reversed', u.alice, { at: 37, purchased: 30, expires: 60 }), outcome: 'applied', now: 38,
        state: { alice: { status: 'active', active: true, willRenew: true, expiresAt: isoDay(60) } } },
    ],
  },
  {
    name: 'anonymous purchase, then the signed-in id',
    steps: [
      { name: 'anonymous purchase', body: (u) => purchase(u.anon), outcome: 'applied', now: 1, state: { anon: { status: 'active', active: true }, alice: null } },
      { name: 'renewal names alice with the anonymous alias: the row moves', body: (u) => renewal(u.alice, 30.001, 30, 60, { aliases: [u.anon, u.alice], original_app_user_id: u.anon }),
        outcome: 'applied', now: 31, state: { anon: null, alice: { status: 'active', active: true, expiresAt: isoDay(60) } } },
      { name: 'a late anonymous event, older than the move, goes to alice (and is stale there)', body: (u) => cancellation(u.anon, 'UNSUBSCRIBE', 20, 0, 30),
        outcome: 'stale', now: 31, state: { anon: null, alice: { status: 'active', active: true, willRenew: true, expiresAt: isoDay(60) } } },
    ],
  },
  {
    name: 'signed-in renewal first, the anonymous purchase late',
    steps: [
      { name: 'renewal for alice naming the anonymous alias', body: (u) => renewal(u.alice, 30.001, 30, 60, { aliases: [u.anon, u.alice] }), outcome: 'applied', now: 31,
        state: { alice: { status: 'active', expiresAt: isoDay(60) }, anon: null } },
      { name: 'the anonymous purchase, older, goes to alice and changes nothing', body: (u) => purchase(u.anon), outcome: 'stale', now: 31,
        state: { alice: { status: 'active', expiresAt: isoDay(60) }, anon: null } },
    ],
  },
  {
    name: 'temporary grant, then the validated purchase; another revoked by its EXPIRATION',
    steps: [
      { name: 'temporary grant', body: (u) => billingEvent('temporary-entitlement-grant', u.alice, { at: 0.01, purchased: 0, expires: 1 }), outcome: 'applied', now: 0.5,
        state: { alice: { status: 'temporary', active: true, willRenew: false, expiresAt: isoDay(1) } } },
      { name: 'the purchase replaces it', body: (u) => purchase(u.alice, 0.02, 30), outcome: 'applied', now: 2, state: { alice: { status: 'active', active: true, expiresAt: isoDay(30) } } },
      { name: "bob's temporary grant", body: (u) => billingEvent('temporary-entitlement-grant', u.bob, { at: 0.01, purchased: 0, expires: 1 }), outcome: 'applied', now: 0.5,
        state: { bob: { status: 'temporary', active: true } } },
      { name: 'EXPIRATION with the same transaction id revokes it', outcome: 'applied', now: 0.5, state: { bob: { status: 'expired', active: false } },
        body: (u) => billingEvent('expiration', u.bob, { at: 0.2, purchased: 0, expires: 0.2 }, { transaction_id: 'tmp_9f8e7d6c5b4a' }) },
      { name: 'a temporary grant never replaces a real one', body: (u) => billingEvent('temporary-entitlement-grant', u.alice, { at: 3, purchased: 3, expires: 4 }), outcome: 'stale', now: 3.5,
        state: { alice: { status: 'active', expiresAt: isoDay(30) } } },
    ],
  },
  {
    name: 'lifetime purchase, then a shorter subscription',
    steps: [
      { name: 'lifetime', body: (u) => billingEvent('non-renewing-purchase', u.alice, { at: 0.01, purchased: 0, expires: null }), outcome: 'applied', now: 1000,
        state: { alice: { status: 'active', active: true, willRenew: false, expiresAt: null } } },
      { name: 'a monthly subscription never shortens it', body: (u) => purchase(u.alice, 1, 31), outcome: 'applied', now: 1000, state: { alice: { status: 'active', active: true, expiresAt: null } } },
    ],
  },
];

describe.each(DATABASE_KINDS)('billing sequences on %s', (kind) => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await useTestDatabase(kind);
  });
  afterAll(async () => {
    await closeDatabase();
    await db.close();
  });

  it.each(scenarios)('$name', async ({ steps }) => {
    const users: Users = { alice: `alice-${randomUUID()}`, bob: `bob-${randomUUID()}`, anon: `$RCAnonymousID:${randomBytes(16).toString('hex')}` };
    const sent = new Map<string, BillingWebhookBody>();
    for (const step of steps) {
      const body = step.resend ? sent.get(step.resend)! : step.body!(users);
      sent.set(step.name, body);
      const response = await deliver(body);
      expect({ step: step.name, status: response.status, body: response.body }).toEqual({ step: step.name, status: 200, body: { received: true } });
      const recorded = await eventRow(db, body.event.id);
      expect({ step: step.name, count: recorded!.count, outcome: recorded!.outcome }).toMatchObject({
        step: step.name, count: 1, ...(step.outcome === 'duplicate' ? {} : { outcome: step.outcome }),
      });
      for (const [key, expected] of Object.entries(step.state)) {
        const views = await entitlementsOf(db, users[key as UserKey], new Date(day(step.now)));
        if (expected === null) expect({ step: step.name, user: key, views }).toEqual({ step: step.name, user: key, views: [] });
        else expect({ step: step.name, user: key, view: views.find((view) => view.id === 'pro') }).toMatchObject({ step: step.name, user: key, view: expected });
      }
    }
  });

  it('records sandbox events, and applies them unless BILLING_IGNORE_SANDBOX is on', async () => {
    const applied = `sandbox-${randomUUID()}`;
    const ignored = `sandbox-${randomUUID()}`;
    const first = billingEvent('sandbox-initial-purchase', applied, { at: 0.001 });
    expect((await deliver(first)).status).toBe(200);
    expect(await entitlementsOf(db, applied, new Date(day(0.002)))).toMatchObject([{ id: 'pro', active: true, environment: 'SANDBOX' }]);

    const restore = setEnv({ BILLING_IGNORE_SANDBOX: 'true' });
    try {
      const second = billingEvent('sandbox-initial-purchase', ignored, { at: 0.001 });
      expect(await deliver(second)).toMatchObject({ status: 200, body: { received: true } });
      expect(await entitlementsOf(db, ignored, new Date(day(0.002)))).toEqual([]);
      expect(await eventRow(db, second.event.id)).toMatchObject({ outcome: 'ignored', environment: 'SANDBOX', app_user_id: ignored });
      // Production events are still applied.
      const production = billingEvent('initial-purchase', ignored, { at: 0.001 });
      expect((await deliver(production)).status).toBe(200);
      expect(await entitlementsOf(db, ignored, new Date(day(1)))).toMatchObject([{ id: 'pro', active: true, environment: 'PRODUCTION' }]);
    } finally {
      restore();
    }
  });

  it('keeps every entitlement of a multi-entitlement event, and the raw body', async () => {
    const user = `multi-${randomUUID()}`;
    const body = billingEvent('unknown-fields', user, { at: 0.001 }, { entitlement_ids: ['pro', 'ads_free'] });
    expect((await deliver(body)).status).toBe(200);
    expect((await entitlementsOf(db, user, new Date(day(1)))).map((view) => [view.id, view.active])).toEqual([['ads_free', true], ['pro', true]]);
    const [stored] = await db.sql<{ body: BillingWebhookBody }>('select body from public.billing_events where event_id = $1', [body.event.id]);
    expect(stored!.body).toEqual(body);
  });
});
