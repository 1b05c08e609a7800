import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EntitlementView } from '../../lib/billing/entitlement-view.ts';
import { DATABASE_KINDS, suiteDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { startFakeRevenueCat, v1Entitlement as ent, v1Subscription as sub, type FakeCustomer, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import {
  billingIssue, cancellation, day, deliverFlowItem, entitlementsOf, event, expiration, flowSettings, LIFETIME, MONTHLY, play, purchase, refund, snapshot,
  trial, type FlowItem } from './support.ts';

/**
 * One rule for both paths: for every state of the model table (docs/billing.md), what webhooks
 * alone make of it and what a snapshot of RevenueCat's record in that state makes of it (a
 * customer the service never heard of, refreshing) read the same in GET /api/me: access, status,
 * renewal, expiry, grace end, product and store, and each source. With REST v1 alone and with v2
 * beside it, on both engines.
 */
interface State {
  name: string;
  /** The webhooks that lead to the state. */
  events: (u: string) => FlowItem[];
  /** RevenueCat's record in that state, fetched at `at`. */
  at: number;
  record: FakeCustomer;
  /** When both are read. */
  now: number;
  /** What both read (a check that the state is the one named). */
  reads: Partial<EntitlementView>;
}

const time = (days: number) => new Date(day(days)).toISOString().replace(/\.\d{3}Z$/, 'Z');
const PLAY = 'pro_monthly';
const playSub = (fields: Parameters<typeof sub>[0], extra: Record<string, unknown> = {}) => ({ ...sub({ store: 'play_store', ...fields }), product_plan_identifier: 'monthly', ...extra });
const playEnt = (fields: Parameters<typeof ent>[1]) => ({ ...ent(PLAY, fields), product_plan_identifier: 'monthly' });
const lifetime = { store: 'APP_STORE', product_id: LIFETIME, transaction_id: '7000000100000009', original_transaction_id: '7000000100000009' };
const lifetimeRecord: FakeCustomer = {
  entitlements: { pro: ent(LIFETIME, { purchased: day(1), expires: null }) },
  non_subscriptions: { [LIFETIME]: [{ id: 'rc_life', is_sandbox: false, purchase_date: time(1), store: 'app_store', store_transaction_id: lifetime.transaction_id }] },
};
const PROMO = 'rc_promo_pro_monthly';
const promo = { store: 'PROMOTIONAL', product_id: PROMO, transaction_id: 'promo_1', original_transaction_id: 'promo_1', period_type: 'PROMOTIONAL' };
const stripe = { store: 'STRIPE', product_id: 'prod_PRO', transaction_id: 'in_1', original_transaction_id: 'sub_1' };

const states: State[] = [
  {
    name: 'active, renewing', events: (u) => [purchase(u, 0, 0, 30)], at: 10, now: 10.5, reads: { status: 'active', willRenew: true },
    record: { entitlements: { pro: ent(MONTHLY, { purchased: day(0), expires: day(30) }) }, subscriptions: { [MONTHLY]: sub({ purchased: day(0), expires: day(30), transactionId: '1000' }) } },
  },
  {
    name: 'a free trial', events: (u) => [trial(u, 0, 0, 7)], at: 3, now: 3.5, reads: { status: 'active', willRenew: true },
    record: { entitlements: { pro: ent(MONTHLY, { purchased: day(0), expires: day(7) }) }, subscriptions: { [MONTHLY]: sub({ purchased: day(0), expires: day(7), periodType: 'trial', transactionId: '1000' }) } },
  },
  {
    name: 'cancelled, to the period\'s end', events: (u) => [purchase(u, 0, 0, 30), cancellation(u, 'UNSUBSCRIBE', 5, 0, 30)], at: 10, now: 10.5, reads: { status: 'cancelled_active', willRenew: false },
    record: { entitlements: { pro: ent(MONTHLY, { purchased: day(0), expires: day(30) }) }, subscriptions: { [MONTHLY]: sub({ purchased: day(0), expires: day(30), unsubscribed: day(5), transactionId: '1000' }) } },
  },
  {
    name: 'in a grace period (BILLING_ISSUE with CANCELLATION BILLING_ERROR)',
    events: (u) => [purchase(u, 0, 0, 30), billingIssue(u, 30.001, 0, 30, 46), cancellation(u, 'BILLING_ERROR', 30.0011, 0, 30)], at: 35, now: 35.5,
    reads: { status: 'grace', active: true, willRenew: false },
    record: {
      entitlements: { pro: ent(MONTHLY, { purchased: day(0), expires: day(30), grace: day(46) }) },
      subscriptions: { [MONTHLY]: sub({ purchased: day(0), expires: day(30), billingIssue: day(30.001), grace: day(46), unsubscribed: day(30.0011), transactionId: '1000' }) },
    },
  },
  {
    name: 'in a grace period, auto-renewal turned off then on again',
    events: (u) => [purchase(u, 0, 0, 30), billingIssue(u, 30.001, 0, 30, 46), cancellation(u, 'BILLING_ERROR', 30.0011, 0, 30),
      cancellation(u, 'UNSUBSCRIBE', 33, 0, 30), event('uncancellation', u, 34, 0, 30)], at: 35, now: 35.5,
    reads: { status: 'grace', active: true, willRenew: false },
    record: {
      entitlements: { pro: ent(MONTHLY, { purchased: day(0), expires: day(30), grace: day(46) }) },
      subscriptions: { [MONTHLY]: sub({ purchased: day(0), expires: day(30), billingIssue: day(30.001), grace: day(46), transactionId: '1000' }) },
    },
  },
  {
    name: 'a billing issue in Stripe\'s retry window',
    events: (u) => [purchase(u, 0, 0, 30, stripe), billingIssue(u, 30.001, 0, 37, null, stripe), cancellation(u, 'BILLING_ERROR', 30.0011, 0, 37, stripe)], at: 33, now: 33.5,
    reads: { status: 'billing_issue', active: true, willRenew: false },
    record: {
      entitlements: { pro: ent('prod_PRO', { purchased: day(0), expires: day(37) }) },
      subscriptions: { prod_PRO: sub({ purchased: day(0), expires: day(37), store: 'stripe', billingIssue: day(30.001), unsubscribed: day(30.0011), transactionId: 'in_1' }) },
    },
  },
  {
    name: 'Stripe gave up retrying',
    events: (u) => [purchase(u, 0, 0, 30, stripe), billingIssue(u, 30.001, 0, 37, null, stripe), cancellation(u, 'BILLING_ERROR', 34, 0, 34, stripe)], at: 35, now: 35.5,
    reads: { status: 'expired', active: false, willRenew: false },
    record: {
      entitlements: { pro: ent('prod_PRO', { purchased: day(0), expires: day(34) }) },
      subscriptions: { prod_PRO: sub({ purchased: day(0), expires: day(34), store: 'stripe', billingIssue: day(30.001), unsubscribed: day(34), transactionId: 'in_1' }) },
    },
  },
  {
    name: 'a Play pause scheduled',
    events: (u) => [purchase(u, 0, 0, 30, play('GPA.1')), event('subscription-paused', u, 10, 0, 30, { ...play('GPA.1'), auto_resume_at_ms: day(60) })], at: 11, now: 11.5,
    reads: { status: 'active', willRenew: true },
    record: {
      entitlements: { pro: playEnt({ purchased: day(0), expires: day(30) }) },
      subscriptions: { [PLAY]: playSub({ purchased: day(0), expires: day(30), transactionId: 'GPA.1' }, { auto_resume_date: time(60) }) },
    },
  },
  {
    name: 'a Play pause in effect',
    events: (u) => [purchase(u, 0, 0, 30, play('GPA.1')), event('subscription-paused', u, 10, 0, 30, { ...play('GPA.1'), auto_resume_at_ms: day(60) }),
      expiration(u, 'SUBSCRIPTION_PAUSED', 30.01, 0, 30, play('GPA.1'))], at: 31, now: 31.5,
    reads: { status: 'paused', active: false, willRenew: false },
    record: {
      entitlements: { pro: playEnt({ purchased: day(0), expires: day(30) }) },
      subscriptions: { [PLAY]: playSub({ purchased: day(0), expires: day(30), transactionId: 'GPA.1' }, { auto_resume_date: time(60) }) },
    },
  },
  {
    name: 'expired', events: (u) => [purchase(u, 0, 0, 30), cancellation(u, 'UNSUBSCRIBE', 5, 0, 30), expiration(u, 'UNSUBSCRIBE', 30.01, 0, 30)], at: 31, now: 31.5,
    reads: { status: 'expired', active: false, willRenew: false },
    record: { entitlements: { pro: ent(MONTHLY, { purchased: day(0), expires: day(30) }) }, subscriptions: { [MONTHLY]: sub({ purchased: day(0), expires: day(30), unsubscribed: day(5), transactionId: '1000' }) } },
  },
  {
    name: 'refunded', events: (u) => [purchase(u, 0, 0, 30), refund(u, 5, 0, 5)], at: 6, now: 6.5, reads: { status: 'refunded', active: false, willRenew: false },
    record: { entitlements: { pro: ent(MONTHLY, { purchased: day(0), expires: day(30) }) }, subscriptions: { [MONTHLY]: sub({ purchased: day(0), expires: day(30), refunded: day(5), transactionId: '1000' }) } },
  },
  {
    name: 'a lifetime purchase', events: (u) => [event('non-renewing-purchase', u, 1, 1, null, lifetime)], at: 10, now: 10.5,
    reads: { status: 'active', active: true, willRenew: false, expiresAt: null }, record: lifetimeRecord,
  },
  {
    name: 'a lifetime purchase whose refund was reversed',
    events: (u) => [event('non-renewing-purchase', u, 1, 1, null, lifetime), refund(u, 5, 1, 5, lifetime), event('refund-reversed', u, 8, 1, null, lifetime)], at: 9, now: 9.5,
    reads: { status: 'active', active: true, willRenew: false, expiresAt: null }, record: lifetimeRecord,
  },
  {
    name: 'a Play prepaid plan', events: (u) => [purchase(u, 0, 0, 30, { ...play('GPA.2'), period_type: 'PREPAID' })], at: 10, now: 10.5,
    reads: { status: 'active', willRenew: false },
    record: { entitlements: { pro: playEnt({ purchased: day(0), expires: day(30) }) }, subscriptions: { [PLAY]: playSub({ purchased: day(0), expires: day(30), periodType: 'prepaid', transactionId: 'GPA.2' }) } },
  },
  {
    name: 'a promotional grant', events: (u) => [event('non-renewing-purchase', u, 0, 0, 30, promo)], at: 10, now: 10.5, reads: { status: 'active', willRenew: false },
    record: { entitlements: { pro: ent(PROMO, { purchased: day(0), expires: day(30) }) }, subscriptions: { [PROMO]: sub({ purchased: day(0), expires: day(30), store: 'promotional', transactionId: 'promo_1' }) } },
  },
  {
    name: 'a promotional grant revoked early', events: (u) => [event('non-renewing-purchase', u, 0, 0, 30, promo), cancellation(u, 'DEVELOPER_INITIATED', 10, 0, 10, promo)],
    at: 11, now: 11.5, reads: { status: 'expired', active: false, willRenew: false },
    record: { entitlements: { pro: ent(PROMO, { purchased: day(0), expires: day(10) }) }, subscriptions: { [PROMO]: sub({ purchased: day(0), expires: day(10), store: 'promotional', transactionId: 'promo_1' }) } },
  },
  {
    name: 'a Play subscription replaced at once by an unnamed product (its new product\'s purchase not heard of)',
    events: (u) => [purchase(u, 0, 0, 30, play('GPA.3')), event('product-change', u, 10, 0, 30, { ...play('GPA.3'), new_product_id: undefined })], at: 11, now: 11.5,
    reads: { status: 'cancelled_active', active: true, willRenew: false },
    record: { entitlements: { pro: playEnt({ purchased: day(0), expires: day(30) }) }, subscriptions: { [PLAY]: playSub({ purchased: day(0), expires: day(30), unsubscribed: day(10), transactionId: 'GPA.3' }) } },
  },
];

/** What the two paths must agree on (the time of the last confirmation and the period type's source aside). */
const comparable = (view: EntitlementView | undefined) => view && {
  id: view.id, active: view.active, status: view.status, willRenew: view.willRenew, expiresAt: view.expiresAt, graceExpiresAt: view.graceExpiresAt,
  productId: view.productId, store: view.store, environment: view.environment,
  sources: view.sources.map(({ productId, store, status, active, expiresAt, graceExpiresAt, willRenew }) => ({ productId, store, status, active, expiresAt, graceExpiresAt, willRenew })),
};

let revenuecat: FakeRevenueCat;
beforeAll(async () => {
  revenuecat = await startFakeRevenueCat();
});
afterAll(async () => {
  await revenuecat.close();
});

describe.each(DATABASE_KINDS)('webhooks and a snapshot of the same state read the same, on %s', (kind) => {
  const db = suiteDatabase(kind);
  for (const v2 of [false, true]) {
    describe(v2 ? 'REST v1 + v2' : 'REST v1', () => {
      let restoreEnv: () => void;
      beforeAll(() => {
        restoreEnv = setEnv({
          ...flowSettings(revenuecat),
          REVENUECAT_V2_SECRET_API_KEY: v2 ? revenuecat.v2ApiKey : undefined,
          REVENUECAT_PROJECT_ID: v2 ? revenuecat.projectId : undefined,
        });
      });
      afterAll(() => {
        revenuecat.setClock(undefined);
        restoreEnv();
      });

      it.each(states)('$name', async (state) => {
        const [byWebhooks, bySnapshot] = [randomUUID(), randomUUID()];
        for (const item of state.events(byWebhooks)) await deliverFlowItem(item, { byWebhooks });
        await deliverFlowItem(snapshot('bySnapshot', state.at, state.record), { bySnapshot }, revenuecat);
        const now = new Date(day(state.now));
        const [fromWebhooks, fromSnapshot] = [(await entitlementsOf(db, byWebhooks, now))[0], (await entitlementsOf(db, bySnapshot, now))[0]];
        expect(fromWebhooks).toMatchObject(state.reads);
        expect(comparable(fromSnapshot)).toEqual(comparable(fromWebhooks));
      });
    });
  }
});

