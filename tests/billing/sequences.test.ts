import { randomBytes, randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { EntitlementView } from '../../lib/billing/entitlement-view.ts';
import type { BillingWebhookBody } from '../../lib/billing/webhook-body.ts';
import { DATABASE_KINDS, suiteDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { CORPUS_USER, DAY_MS, T0, loadFixture } from './fixtures.ts';
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
  /** What its delivery did (omitted: not checked, where it depends on the random event ids of a same-instant bundle). */
  outcome?: 'applied' | 'stale' | 'ignored' | 'duplicate';
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
// Sent with the BILLING_ISSUE, a few milliseconds after it ("dispatched in order at the same time"):
// at the very same instant the two would be ordered by their random ids, and the second of them
// changes nothing (both say the subscription will not renew) when it is the older one.
const billingError = (u: string) => cancellation(u, 'BILLING_ERROR', 30.001 + 3 / 86_400_000, 0, 30);
const inGrace: Partial<EntitlementView> = { status: 'grace', active: true, willRenew: false, expiresAt: isoDay(30), graceExpiresAt: isoDay(46) };

// Immediate upgrade: PRODUCT_CHANGE and RENEWAL of the new product, dispatched together.
const productChange = (u: string) => billingEvent('product-change', u, { at: 10, purchased: 0, expires: 30 }, { new_product_id: PRO_YEARLY });
const upgradeRenewal = (u: string) =>
  renewal(u, 10, 10, 375, { product_id: PRO_YEARLY, transaction_id: '2000000899997777', period_type: 'NORMAL' });
const upgraded: Partial<EntitlementView> = { status: 'active', active: true, willRenew: true, productId: PRO_YEARLY, expiresAt: isoDay(375) };

// One entitlement granted by two products: a lifetime purchase (its own transaction) beside the
// monthly subscription, or a second subscription (another product, another original transaction).
const PRO_LIFETIME = 'com.example.pro.lifetime';
const lifetimeTx = { transaction_id: '2000000855550001', original_transaction_id: '2000000855550001' };
const lifetime = (u: string, at: number) => billingEvent('non-renewing-purchase', u, { at, purchased: at, expires: null }, lifetimeTx);
const lifetimeRefund = (u: string, at: number, purchased: number) =>
  billingEvent('cancellation-customer-support', u, { at, purchased, expires: null }, { product_id: PRO_LIFETIME, ...lifetimeTx });
const monthlyRefund = (u: string, at: number, purchased: number) => billingEvent('cancellation-customer-support', u, { at, purchased, expires: at });
const expiration = (u: string, at: number, purchased: number, expires: number, fields = {}) => billingEvent('expiration', u, { at, purchased, expires }, fields);
const yearlyTx = { product_id: PRO_YEARLY, transaction_id: '2000000877770001', original_transaction_id: '2000000877770001' };
const lifetimeAccess: Partial<EntitlementView> = { status: 'active', active: true, willRenew: false, productId: PRO_LIFETIME, expiresAt: null };
// The lifetime is shown (it grants longest) while a renewing monthly also grants: it will renew.
const lifetimeAndRenewing: Partial<EntitlementView> = { ...lifetimeAccess, willRenew: true };
const yearlyAccess: Partial<EntitlementView> = { status: 'active', active: true, willRenew: true, productId: PRO_YEARLY, expiresAt: isoDay(375) };

// An upgrade replaces the product of one subscription (same original transaction): the old
// product's row stops granting once the new one's period is known, whatever the order.
const BASIC_YEARLY = 'com.example.basic.yearly';
const PREMIUM_MONTHLY = 'com.example.premium.monthly';
const lineage = (tx: string, productId = PRO_MONTHLY) => ({ product_id: productId, transaction_id: tx, original_transaction_id: '1000' });
const upgradeSteps: Record<'productChange' | 'yearlyRenewal', Step> = {
  productChange: { name: 'PRODUCT_CHANGE monthly -> yearly', body: (u) => billingEvent('product-change', u.alice, { at: 98, purchased: 90, expires: 120 }, { ...lineage('1000'), new_product_id: PRO_YEARLY }),
    outcome: 'applied', now: 98.5, state: { alice: { active: true } } },
  yearlyRenewal: { name: 'RENEWAL of the yearly', body: (u) => renewal(u.alice, 98, 98, 463, lineage('1001', PRO_YEARLY)), outcome: 'applied', now: 98.5,
    state: { alice: { status: 'active', active: true, productId: PRO_YEARLY, expiresAt: isoDay(463) } } },
};
const upgradeThenRefund = (order: 'PRODUCT_CHANGE first' | 'RENEWAL first'): Scenario => ({
  name: `upgrade monthly -> yearly, the yearly refunded: the old monthly does not grant again (${order})`,
  steps: [
    { name: 'monthly purchase', body: (u) => billingEvent('initial-purchase', u.alice, { at: 90, purchased: 90, expires: 120 }, lineage('1000')), outcome: 'applied', now: 91,
      state: { alice: { status: 'active', productId: PRO_MONTHLY } } },
    ...(order === 'PRODUCT_CHANGE first' ? [upgradeSteps.productChange, upgradeSteps.yearlyRenewal] : [upgradeSteps.yearlyRenewal, upgradeSteps.productChange]),
    { name: 'the yearly refunded', body: (u) => billingEvent('cancellation-customer-support', u.alice, { at: 99, purchased: 98, expires: 99 }, lineage('1001', PRO_YEARLY)),
      outcome: 'applied', now: 100, state: { alice: { status: 'refunded', active: false, productId: PRO_YEARLY } } },
    { name: 'nothing grants later either', resend: 'monthly purchase', outcome: 'duplicate', now: 110, state: { alice: { active: false, productId: PRO_YEARLY } } },
  ],
});

// A Stripe first payment that fails: INITIAL_PURCHASE, BILLING_ISSUE (no grace) and CANCELLATION
// BILLING_ERROR at one instant, for one transaction, in any arrival order: one end state.
type BundleEvent = 'INITIAL_PURCHASE' | 'BILLING_ISSUE' | 'CANCELLATION';
const stripeTx = { store: 'STRIPE', transaction_id: 'in_1Stripe0001', original_transaction_id: 'sub_1Stripe0001' };
const stripeBundle: Record<BundleEvent, (u: string) => BillingWebhookBody> = {
  INITIAL_PURCHASE: (u) => billingEvent('initial-purchase', u, { at: 0, purchased: 0, expires: 30 }, stripeTx),
  BILLING_ISSUE: (u) => billingEvent('billing-issue-grace', u, { at: 0, purchased: 0, expires: 30 }, { ...stripeTx, grace_period_expiration_at_ms: null }),
  CANCELLATION: (u) => billingEvent('cancellation-billing-error', u, { at: 0, purchased: 0, expires: 30 }, stripeTx),
};
const bundleOrders: BundleEvent[][] = [
  ['INITIAL_PURCHASE', 'BILLING_ISSUE', 'CANCELLATION'], ['INITIAL_PURCHASE', 'CANCELLATION', 'BILLING_ISSUE'],
  ['BILLING_ISSUE', 'INITIAL_PURCHASE', 'CANCELLATION'], ['BILLING_ISSUE', 'CANCELLATION', 'INITIAL_PURCHASE'],
  ['CANCELLATION', 'INITIAL_PURCHASE', 'BILLING_ISSUE'], ['CANCELLATION', 'BILLING_ISSUE', 'INITIAL_PURCHASE'],
];
const stripeBundleScenario = (order: BundleEvent[]): Scenario => ({
  name: `Stripe incomplete first payment, same-timestamp bundle: ${order.join(', ')}`,
  steps: order.map((type, index): Step => ({
    name: type,
    body: (u) => stripeBundle[type](u.alice),
    // The first delivery applies; what a later one changes depends on where its random id sorts
    // among the events of that instant (the order of a tie), never the end state.
    outcome: index === 0 ? 'applied' : undefined,
    now: 0.5,
    state: index === order.length - 1 ? { alice: { status: 'billing_issue', willRenew: false, store: 'STRIPE' } } : {},
  })),
});

const scenarios: Scenario[] = [
  ...bundleOrders.map(stripeBundleScenario),
  upgradeThenRefund('PRODUCT_CHANGE first'),
  upgradeThenRefund('RENEWAL first'),
  {
    name: 'basic yearly changed to premium monthly: when the monthly expires, the yearly does not grant',
    steps: [
      { name: 'basic yearly', body: (u) => billingEvent('initial-purchase', u.alice, { at: 0, purchased: 0, expires: 365 }, { product_id: BASIC_YEARLY }), outcome: 'applied', now: 1,
        state: { alice: { status: 'active', productId: BASIC_YEARLY } } },
      { name: 'PRODUCT_CHANGE to premium monthly', body: (u) => billingEvent('product-change', u.alice, { at: 60, purchased: 0, expires: 365 }, { product_id: BASIC_YEARLY, new_product_id: PREMIUM_MONTHLY }),
        outcome: 'applied', now: 60.5, state: { alice: { status: 'active', productId: BASIC_YEARLY } } },
      { name: 'premium monthly renewal', body: (u) => renewal(u.alice, 60, 60, 90, { product_id: PREMIUM_MONTHLY, transaction_id: '2000000899998888' }), outcome: 'applied', now: 61,
        state: { alice: { status: 'active', active: true, productId: PREMIUM_MONTHLY, expiresAt: isoDay(90) } } },
      { name: 'premium cancelled', body: (u) => billingEvent('cancellation-unsubscribe', u.alice, { at: 80, purchased: 60, expires: 90 }, { product_id: PREMIUM_MONTHLY }), outcome: 'applied', now: 81, state: { alice: { active: true } } },
      { name: 'premium expires', body: (u) => expiration(u.alice, 90, 60, 90, { product_id: PREMIUM_MONTHLY }), outcome: 'applied', now: 100,
        state: { alice: { active: false } } },
    ],
  },
  {
    name: 'purchase -> renewal -> cancel -> expire',
    steps: [
      { name: 'purchase', body: (u) => purchase(u.alice), outcome: 'applied', now: 1,
        state: { alice: { status: 'active', active: true, willRenew: true, expiresAt: isoDay(30), productId: PRO_MONTHLY, store: 'APP_STORE', environment: 'PRODUCTION', periodType: 'NORMAL', graceExpiresAt: null } } },
      { name: 'renewal', body: (u) => renewal(u.alice, 30.001, 30, 60), outcome: 'applied', now: 31, state: { alice: { status: 'active', active: true, willRenew: true, expiresAt: isoDay(60) } } },
      { name: 'cancel', body: (u) => cancellation(u.alice, 'UNSUBSCRIBE', 40, 30, 60), outcome: 'applied', now: 41,
        state: { alice: { status: 'cancelled_active', active: true, willRenew: false, expiresAt: isoDay(60) } } },
      // The effective state when read: expired (the API never shows a lapsed period as active).
      { name: 'lapses on time without EXPIRATION', resend: 'cancel', outcome: 'duplicate', now: 60.0001, state: { alice: { status: 'expired', active: false, willRenew: false } } },
      { name: 'expire', body: (u) => billingEvent('expiration', u.alice, { at: 60.02, purchased: 30, expires: 60 }), outcome: 'applied', now: 61,
        state: { alice: { status: 'expired', active: false, willRenew: false, expiresAt: isoDay(60) } } },
    ],
  },
  ...(['BILLING_ISSUE first', 'CANCELLATION BILLING_ERROR first'] as const).map((order): Scenario => ({
    name: `billing issue in grace, then recovery (${order})`,
    steps: [
      { name: 'purchase', body: (u: Users) => purchase(u.alice), outcome: 'applied', now: 1, state: { alice: { status: 'active', active: true } } },
      { name: 'first of the bundle', body: (u: Users) => (order === 'BILLING_ISSUE first' ? billingIssue(u.alice) : billingError(u.alice)), outcome: 'applied', now: 31,
        // Without the grace period known yet, the billing issue grants to the period's end (day 30).
        // Either half says it will not renew (RevenueCat's willRenew is false while a billing issue is detected).
        state: { alice: order === 'BILLING_ISSUE first' ? inGrace : { status: 'expired', active: false, willRenew: false } } },
      { name: 'second of the bundle', body: (u: Users) => (order === 'BILLING_ISSUE first' ? billingError(u.alice) : billingIssue(u.alice)), outcome: 'applied', now: 31, state: { alice: inGrace } },
      { name: 'grace ends on time', resend: 'purchase', outcome: 'duplicate', now: 46.5, state: { alice: { ...inGrace, status: 'expired', active: false } } },
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
      // As if delivered in order: alice bought, then the TRANSFER moved it and left her a transferred row.
      { name: "alice's older purchase lands on bob", body: (u) => purchase(u.alice), outcome: 'applied', now: 6,
        state: { alice: { status: 'transferred', active: false }, bob: { status: 'active', active: true, expiresAt: isoDay(30) } } },
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
            // It notes the pending product on the monthly's own row: nothing the yearly grants changes.
            { name: 'PRODUCT_CHANGE of the old period changes nothing shown', body: (u: Users) => productChange(u.alice), outcome: 'applied', now: 11, state: { alice: upgraded } },
          ] satisfies Step[])),
      // Each product has its own row: the monthly's expires, the yearly's still grants.
      { name: 'EXPIRATION of the old monthly period changes nothing shown', body: (u: Users) => billingEvent('expiration', u.alice, { at: 30.02, purchased: 0, expires: 30 }),
        outcome: 'applied', now: 31, state: { alice: upgraded } },
    ],
  })),
  {
    name: 'refund, a stale renewal, then the refund reversed',
    steps: [
      { name: 'purchase', body: (u) => purchase(u.alice), outcome: 'applied', now: 1, state: { alice: { status: 'active' } } },
      { name: 'renewal', body: (u) => renewal(u.alice, 30.001, 30, 60), outcome: 'applied', now: 31, state: { alice: { status: 'active', expiresAt: isoDay(60) } } },
      { name: 'refund', body: (u) => billingEvent('cancellation-customer-support', u.alice, { at: 35.001, purchased: 30, expires: 35 }), outcome: 'applied', now: 36,
        state: { alice: { status: 'refunded', active: false, willRenew: false, expiresAt: isoDay(35) } } },
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
      // In event order the cancellation came before the renewal, which, into the next period, says
      // renewal was turned back on (its UNCANCELLATION lost): still renewing, whatever the order of
      // delivery; the cancellation lands on alice (the anonymous id holds nothing) and changes nothing.
      { name: 'a late anonymous cancellation, older than the move, goes to alice', body: (u) => cancellation(u.anon, 'UNSUBSCRIBE', 20, 0, 30),
        outcome: 'stale', now: 31, state: { anon: null, alice: { status: 'active', active: true, willRenew: true, expiresAt: isoDay(60) } } },
    ],
  },
  ...(['subscriber-alias', 'invoice-issuance'] as const).map((name): Scenario => ({
    name: `anonymous lifetime purchase, then only a ${name} naming the signed-in id: the purchase moves`,
    steps: [
      { name: 'anonymous lifetime', body: (u: Users) => lifetime(u.anon, 1), outcome: 'applied', now: 2, state: { anon: lifetimeAccess, alice: null } },
      { name: name, body: (u: Users) => billingEvent(name, u.alice, { at: 3 }, { original_app_user_id: u.anon, aliases: [u.anon, u.alice] }), outcome: 'applied', now: 4,
        state: { anon: null, alice: lifetimeAccess } },
    ],
  })),
  {
    name: 'a sandbox EXPIRATION of the same product never touches the production subscription',
    steps: [
      { name: 'production purchase', body: (u) => purchase(u.alice), outcome: 'applied', now: 1, state: { alice: { status: 'active', active: true, environment: 'PRODUCTION' } } },
      { name: 'sandbox expiration', outcome: 'applied', now: 3,
        body: (u) => expiration(u.alice, 2, 1, 2, { environment: 'SANDBOX', transaction_id: '2000000700000001', original_transaction_id: '2000000700000001' }),
        state: { alice: { status: 'active', active: true, willRenew: true, environment: 'PRODUCTION', expiresAt: isoDay(30) } } },
    ],
  },
  {
    name: 'a TRANSFER naming a store moves only that store\'s rows',
    steps: [
      { name: 'App Store monthly', body: (u) => purchase(u.alice), outcome: 'applied', now: 1, state: { alice: { productId: PRO_MONTHLY, store: 'APP_STORE' } } },
      { name: 'Play Store yearly', body: (u) => billingEvent('initial-purchase', u.alice, { at: 1, purchased: 1, expires: 366 }, { ...yearlyTx, store: 'PLAY_STORE' }), outcome: 'applied', now: 2,
        state: { alice: { productId: PRO_YEARLY, store: 'PLAY_STORE', active: true } } },
      { name: 'TRANSFER of the App Store purchases alice -> bob', outcome: 'applied', now: 6,
        body: (u) => billingEvent('transfer', u.bob, { at: 5 }, { app_user_id: undefined, store: 'APP_STORE', transferred_from: [u.alice], transferred_to: [u.bob] }),
        state: { alice: { productId: PRO_YEARLY, store: 'PLAY_STORE', active: true, status: 'active' }, bob: { productId: PRO_MONTHLY, store: 'APP_STORE', active: true } } },
      { name: "a late Play Store event of alice's stays hers", outcome: 'applied', now: 6,
        body: (u) => billingEvent('cancellation-unsubscribe', u.alice, { at: 4, purchased: 1, expires: 366 }, { ...yearlyTx, store: 'PLAY_STORE' }),
        state: { alice: { productId: PRO_YEARLY, status: 'cancelled_active', active: true }, bob: { productId: PRO_MONTHLY, status: 'active', willRenew: true } } },
    ],
  },
  {
    name: 'a temporary grant for another product ends with the real purchase: its refund ends access',
    steps: [
      { name: 'temporary grant (yearly product)', body: (u) => billingEvent('temporary-entitlement-grant', u.alice, { at: 0.01, purchased: 0, expires: 3 }, { product_id: PRO_YEARLY }),
        outcome: 'applied', now: 0.02, state: { alice: { status: 'temporary', active: true } } },
      { name: 'the real purchase (monthly)', body: (u) => purchase(u.alice, 0.1, 30), outcome: 'applied', now: 0.2, state: { alice: { status: 'active', productId: PRO_MONTHLY } } },
      { name: 'the monthly refunded: no access', body: (u) => monthlyRefund(u.alice, 0.5, 0.1), outcome: 'applied', now: 0.6, state: { alice: { active: false } } },
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
      // Beside a real row of another product it stands (that row may end before the purchase RevenueCat
      // could not validate yet is): the read shows what grants longer, here the real one.
      { name: 'beside one of another product it stands; the real one, granting longer, is shown',
        body: (u) => billingEvent('temporary-entitlement-grant', u.alice, { at: 3, purchased: 3, expires: 4 }, { product_id: PRO_YEARLY }),
        outcome: 'applied', now: 3.5, state: { alice: { status: 'active', productId: PRO_MONTHLY, expiresAt: isoDay(30) } } },
    ],
  },
  {
    name: 'lifetime bought while subscribed: the monthly renewing, cancelled and expiring never takes it away',
    steps: [
      { name: 'monthly purchase', body: (u) => purchase(u.alice), outcome: 'applied', now: 1, state: { alice: { status: 'active', productId: PRO_MONTHLY, willRenew: true, expiresAt: isoDay(30) } } },
      { name: 'lifetime purchase: shown, as it grants longest', body: (u) => lifetime(u.alice, 2), outcome: 'applied', now: 3, state: { alice: lifetimeAndRenewing } },
      { name: 'monthly renewal', body: (u) => renewal(u.alice, 30.001, 30, 60), outcome: 'applied', now: 31, state: { alice: lifetimeAndRenewing } },
      { name: 'monthly cancellation', body: (u) => cancellation(u.alice, 'UNSUBSCRIBE', 40, 30, 60), outcome: 'applied', now: 41, state: { alice: lifetimeAccess } },
      { name: 'monthly expiration', body: (u) => expiration(u.alice, 60.02, 30, 60), outcome: 'applied', now: 61, state: { alice: lifetimeAccess } },
      { name: 'years later', resend: 'monthly expiration', outcome: 'duplicate', now: 3000, state: { alice: lifetimeAccess } },
    ],
  },
  {
    name: 'lifetime refunded while the monthly is paid: access until the monthly ends, then it lapses',
    steps: [
      { name: 'monthly purchase', body: (u) => purchase(u.alice), outcome: 'applied', now: 1, state: { alice: { status: 'active', expiresAt: isoDay(30) } } },
      { name: 'monthly renewal until day 60', body: (u) => renewal(u.alice, 30.001, 30, 60), outcome: 'applied', now: 31, state: { alice: { status: 'active', expiresAt: isoDay(60) } } },
      { name: 'lifetime on day 32', body: (u) => lifetime(u.alice, 32), outcome: 'applied', now: 32.5, state: { alice: lifetimeAndRenewing } },
      { name: 'lifetime refunded: the monthly still grants', body: (u) => lifetimeRefund(u.alice, 33, 32), outcome: 'applied', now: 34,
        state: { alice: { status: 'active', active: true, willRenew: true, productId: PRO_MONTHLY, expiresAt: isoDay(60) } } },
      { name: 'the monthly ends on day 60', resend: 'lifetime on day 32', outcome: 'duplicate', now: 60.0001,
        state: { alice: { status: 'expired', active: false, productId: PRO_MONTHLY, expiresAt: isoDay(60) } } },
      { name: 'monthly expiration', body: (u) => expiration(u.alice, 60.02, 30, 60), outcome: 'applied', now: 61,
        state: { alice: { status: 'expired', active: false, productId: PRO_MONTHLY } } },
      { name: 'a late copy of the lifetime grant cannot undo its refund', body: (u) => lifetime(u.alice, 32), outcome: 'stale', now: 61,
        state: { alice: { status: 'expired', active: false, productId: PRO_MONTHLY } } },
    ],
  },
  {
    name: 'monthly refunded while a lifetime is owned: access stays',
    steps: [
      { name: 'monthly purchase', body: (u) => purchase(u.alice), outcome: 'applied', now: 1, state: { alice: { status: 'active', productId: PRO_MONTHLY } } },
      { name: 'lifetime purchase', body: (u) => lifetime(u.alice, 5), outcome: 'applied', now: 6, state: { alice: lifetimeAndRenewing } },
      { name: 'monthly refunded', body: (u) => monthlyRefund(u.alice, 10, 0), outcome: 'applied', now: 11, state: { alice: lifetimeAccess } },
      { name: 'a refund without a product changes only the unknown product', body: (u) => billingEvent('cancellation-customer-support', u.alice, { at: 12, purchased: 0, expires: null }, { product_id: undefined }),
        outcome: 'applied', now: 13, state: { alice: lifetimeAccess } },
    ],
  },
  {
    name: 'lifetime delivered after the monthly expired (any order)',
    steps: [
      { name: 'monthly purchase', body: (u) => purchase(u.alice), outcome: 'applied', now: 1, state: { alice: { status: 'active', productId: PRO_MONTHLY } } },
      { name: 'monthly expiration', body: (u) => expiration(u.alice, 30.02, 0, 30), outcome: 'applied', now: 31, state: { alice: { status: 'expired', active: false } } },
      { name: 'the lifetime bought on day 10 arrives late, and grants', body: (u) => lifetime(u.alice, 10), outcome: 'applied', now: 31, state: { alice: lifetimeAccess } },
    ],
  },
  {
    name: 'two subscriptions: crossgrade to a yearly product, then the monthly ends',
    steps: [
      { name: 'monthly purchase', body: (u) => purchase(u.alice), outcome: 'applied', now: 1, state: { alice: { status: 'active', productId: PRO_MONTHLY, expiresAt: isoDay(30) } } },
      { name: 'PRODUCT_CHANGE to the yearly: pending on the monthly, access unchanged', body: (u) => productChange(u.alice), outcome: 'applied', now: 10,
        state: { alice: { status: 'active', productId: PRO_MONTHLY, willRenew: true, expiresAt: isoDay(30) } } },
      { name: 'the yearly, its own purchase, grants longest', body: (u) => billingEvent('initial-purchase', u.alice, { at: 10, purchased: 10, expires: 375 }, yearlyTx),
        outcome: 'applied', now: 11, state: { alice: yearlyAccess } },
      { name: 'the monthly cancelled', body: (u) => cancellation(u.alice, 'UNSUBSCRIBE', 10.001, 0, 30), outcome: 'applied', now: 11, state: { alice: yearlyAccess } },
      { name: 'the monthly refunded', body: (u) => monthlyRefund(u.alice, 12, 0), outcome: 'applied', now: 13, state: { alice: yearlyAccess } },
      { name: 'the monthly expires', body: (u) => expiration(u.alice, 30.02, 0, 30), outcome: 'applied', now: 31, state: { alice: yearlyAccess } },
      { name: 'the yearly cancelled: shown, access until its end', body: (u) => billingEvent('cancellation-unsubscribe', u.alice, { at: 40, purchased: 10, expires: 375 }, yearlyTx),
        outcome: 'applied', now: 41, state: { alice: { ...yearlyAccess, status: 'cancelled_active', willRenew: false } } },
    ],
  },
  {
    name: 'two subscriptions at once: the one granting longest is shown, the other takes over when it is refunded',
    steps: [
      { name: 'yearly purchase', body: (u) => billingEvent('initial-purchase', u.alice, { at: 0, purchased: 0, expires: 365 }, yearlyTx), outcome: 'applied', now: 1,
        state: { alice: { ...yearlyAccess, expiresAt: isoDay(365) } } },
      { name: 'monthly purchase', body: (u) => purchase(u.alice, 1, 31), outcome: 'applied', now: 2, state: { alice: { ...yearlyAccess, expiresAt: isoDay(365) } } },
      { name: 'the yearly refunded: the monthly grants', body: (u) => billingEvent('cancellation-customer-support', u.alice, { at: 5, purchased: 0, expires: 5 }, yearlyTx), outcome: 'applied', now: 6,
        state: { alice: { status: 'active', active: true, willRenew: true, productId: PRO_MONTHLY, expiresAt: isoDay(31) } } },
      { name: 'the refund reversed: the yearly again', body: (u) => billingEvent('refund-reversed', u.alice, { at: 7, purchased: 0, expires: 365 }, yearlyTx), outcome: 'applied', now: 8,
        state: { alice: { ...yearlyAccess, expiresAt: isoDay(365) } } },
    ],
  },
  {
    name: 'every source moves: anonymous monthly and lifetime merge into the signed-in id; a transfer takes both',
    steps: [
      { name: 'anonymous monthly', body: (u) => purchase(u.anon), outcome: 'applied', now: 1, state: { anon: { status: 'active', productId: PRO_MONTHLY } } },
      { name: 'anonymous lifetime', body: (u) => lifetime(u.anon, 2), outcome: 'applied', now: 3, state: { anon: lifetimeAndRenewing } },
      { name: 'renewal names alice with the alias: both move', body: (u) => renewal(u.alice, 30.001, 30, 60, { aliases: [u.anon, u.alice], original_app_user_id: u.anon }),
        outcome: 'applied', now: 31, state: { anon: null, alice: lifetimeAndRenewing } },
      { name: 'the monthly expires: the lifetime stays', body: (u) => expiration(u.alice, 60.02, 30, 60), outcome: 'applied', now: 61, state: { alice: lifetimeAccess } },
      { name: 'TRANSFER alice -> bob', body: (u) => billingEvent('transfer', u.bob, { at: 70 }, { app_user_id: undefined, transferred_from: [u.alice], transferred_to: [u.bob] }),
        outcome: 'applied', now: 71, state: { alice: { status: 'transferred', active: false }, bob: lifetimeAccess } },
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
  const db = suiteDatabase(kind);

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
        step: step.name, count: 1, ...(step.outcome === 'duplicate' || step.outcome === undefined ? {} : { outcome: step.outcome }),
      });
      for (const [key, expected] of Object.entries(step.state)) {
        const views = await entitlementsOf(db, users[key as UserKey], new Date(day(step.now)));
        if (expected === null) expect({ step: step.name, user: key, views }).toEqual({ step: step.name, user: key, views: [] });
        else expect({ step: step.name, user: key, view: views.find((view) => view.id === 'pro') }).toMatchObject({ step: step.name, user: key, view: expected });
      }
    }
  });

  it('replays the README samples: initial-purchase.json then non-renewing-purchase.json show the lifetime, not a mix', async () => {
    for (const name of ['initial-purchase', 'non-renewing-purchase']) expect((await deliver(loadFixture(name))).status).toBe(200);
    const lifetimeSource = { productId: 'com.example.pro.lifetime', store: 'APP_STORE', environment: 'PRODUCTION', status: 'active', active: true, expiresAt: null, graceExpiresAt: null, willRenew: false };
    const monthlySource = { productId: 'com.example.pro.monthly', store: 'APP_STORE', environment: 'PRODUCTION', status: 'expired', active: false, expiresAt: '2026-03-31T10:00:00.000Z', graceExpiresAt: null, willRenew: false };
    expect(await entitlementsOf(db, CORPUS_USER, new Date(T0 + 400 * DAY_MS))).toEqual([{
      id: 'pro', active: true, status: 'active', productId: 'com.example.pro.lifetime', expiresAt: null, willRenew: false,
      graceExpiresAt: null, store: 'APP_STORE', environment: 'PRODUCTION', periodType: 'NORMAL', syncedAt: null, sources: [lifetimeSource, monthlySource],
    }]);
  });

  it('records sandbox events, and applies them in local mode unless BILLING_SANDBOX_GRANTS=false', async () => {
    const applied = `sandbox-${randomUUID()}`;
    const ignored = `sandbox-${randomUUID()}`;
    const first = billingEvent('sandbox-initial-purchase', applied, { at: 0.001 });
    expect((await deliver(first)).status).toBe(200);
    expect(await entitlementsOf(db, applied, new Date(day(0.002)))).toMatchObject([{ id: 'pro', active: true, environment: 'SANDBOX' }]);

    const restore = setEnv({ BILLING_SANDBOX_GRANTS: 'false' });
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
