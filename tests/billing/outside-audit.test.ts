import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DATABASE_KINDS, suiteDatabase, type DatabaseKind } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { startFakeRevenueCat, v1Entitlement as ent, v1Subscription as sub, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import {
  apple, billingEvent, billingIssue, cancellation, day, deliveryOrdersOn, DOC, event, expiration, isoDay, LIFETIME,
  MONTHLY, play, purchase, refund, renewal, snapshot, transfer, trial, YEARLY, type ExpectedState, type FlowItem, flowSettings, runFlowInOrders,
} from './support.ts';

/**
 * Outside audit of the entitlement model (issues 11 and 14): sequences written to break it, from
 * RevenueCat's documentation, not copies of the flows in audit.test.ts or delivery-orders.test.ts.
 * Each of the ten classes of issue 11 is combined with other documented flows (grace with recovery,
 * Stripe's retry window, upgrades then refunds, aliases then transfers, sandbox beside production,
 * snapshots of RevenueCat's record), with realistic bodies (tests/billing/fixtures) and millisecond
 * timestamps where RevenueCat's own are that close. Every flow runs through the real route and SQL on
 * both engines in the orders RevenueCat may deliver it (every order up to three deliveries, six
 * that hold every order of any three of four, else in order, reversed and a fixed sample), and the state is read as GET /api/me shows it after the last
 * event. Each `doc` quotes the page the expectation comes from.
 */
type Role = 'alice' | 'bob' | 'carol' | 'dave' | 'anon';
type Users = Record<Role, string>;
interface Flow {
  name: string;
  doc: string;
  items: (u: Users) => FlowItem[];
  expected: ExpectedState[];
}

const newUsers = (): Users => ({
  alice: randomUUID(),
  bob: randomUUID(),
  carol: randomUUID(),
  dave: randomUUID(),
  anon: `$RCAnonymousID:${randomBytes(16).toString('hex')}`,
});

/** Seconds, in days (the flows' clock): RevenueCat's timestamps are milliseconds apart within a bundle. */
const sec = (seconds: number) => seconds / 86_400;
const BASIC = 'com.example.basic.monthly';
const PREMIUM = 'com.example.premium.monthly';
const PRO_PLAY = 'pro_monthly:monthly';
/** One App Store subscription lineage (one original transaction) across products. */
const lineage = (product: string, tx: string, entitlement: string) => ({ ...apple(tx, '5000000100000001', product), entitlement_ids: [entitlement] });
const stripe = (tx: string, product = 'prod_PRO', subscription = 'sub_1PROMONTHLY') =>
  ({ store: 'STRIPE', product_id: product, transaction_id: tx, original_transaction_id: subscription });
/** Who RevenueCat says the customer is (app_user_id is the last seen id). */
const customer = (original: string, ...aliases: string[]) => ({ original_app_user_id: original, aliases: [original, ...aliases] });
const temporaryGrant = (u: string, at: number, expires: number, product: string, tx: string) =>
  billingEvent('temporary-entitlement-grant', u, { at, purchased: at, expires }, { product_id: product, transaction_id: tx });

const flows: Flow[] = [
  // --- 1. Grace is a fact of the period ----------------------------------------------------
  {
    name: 'O01 (1) grace bundle 3 ms apart, recovery RENEWAL in grace on the original cycle, then an UNSUBSCRIBE of the new period',
    doc: `"If billing succeeds at any point during the grace period, you'll receive a RENEWAL event and entitlements won't be revoked." and "When a customer cancels their subscription, a CANCELLATION webhook is sent. At the end of the billing cycle, an EXPIRATION webhook is sent" (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      billingIssue(u.alice, 30 + sec(4.211), 0, 30, 46),
      cancellation(u.alice, 'BILLING_ERROR', 30 + sec(4.214), 0, 30),
      renewal(u.alice, 33.2, 30, 60, apple('2000000900000001')),
      cancellation(u.alice, 'UNSUBSCRIBE', 40, 30, 60, apple('2000000900000001')),
    ],
    expected: [
      { now: 41, state: { alice: { pro: { active: true, status: 'cancelled_active', willRenew: false, expiresAt: isoDay(60), graceExpiresAt: null } } } },
      { now: 60.5, state: { alice: { pro: { active: false, status: 'expired', willRenew: false } } } },
    ],
  },
  {
    name: 'O02 (1, 6) grace ends (EXPIRATION BILLING_ERROR), then the payment recovers in billing retry: a new cycle, renewing',
    doc: `"The EXPIRATION event with expiration reason BILLING_ERROR is fired if the grace period (if set up) has ended without recovering the payment" (${DOC.types}); RENEWAL: "An existing subscription has been renewed or a lapsed user has resubscribed." (${DOC.types})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      billingIssue(u.alice, 30 + sec(4.211), 0, 30, 46),
      cancellation(u.alice, 'BILLING_ERROR', 30 + sec(4.214), 0, 30),
      expiration(u.alice, 'BILLING_ERROR', 46 + sec(2), 0, 30),
      renewal(u.alice, 52, 52, 82, apple('2000000900000002')),
    ],
    expected: [{ now: 53, state: { alice: { pro: { active: true, status: 'active', willRenew: true, expiresAt: isoDay(82), graceExpiresAt: null } } } }],
  },
  {
    name: 'O03 (1, 8) BILLING_ISSUE in grace whose CANCELLATION BILLING_ERROR never arrives: access in grace, not renewing',
    doc: `"These subscriptions are considered cancelled because they are now past due, but will not be considered expired until the end of their grace period." (${DOC.grace}); RevenueCat's SDK: willRenew = !(isPromo || isLifetime || hasUnsubscribed || hasBillingIssues) (purchases-ios EntitlementInfo.willRenewWithExpirationDate)`,
    items: (u) => [purchase(u.alice, 0, 0, 30), billingIssue(u.alice, 30 + sec(4.211), 0, 30, 46)],
    expected: [{ now: 35, state: { alice: { pro: { active: true, status: 'grace', willRenew: false, graceExpiresAt: isoDay(46) } } } }],
  },

  // --- 2. Flags carry the expiration of their period ---------------------------------------
  {
    name: 'O04 (2, 1) Stripe: the retry window inside the new expiration, BILLING_ISSUE and CANCELLATION 3 ms apart, then the retry succeeds',
    doc: `BILLING_ISSUE: "There has been a problem trying to charge the subscriber. This does not mean the subscription has expired." (${DOC.types}); "If billing succeeds at any point during the grace period, you'll receive a RENEWAL event and entitlements won't be revoked." (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, stripe('in_1PRO0001')),
      renewal(u.alice, 30 + sec(1.5), 30, 60, stripe('in_1PRO0002')),
      billingIssue(u.alice, 60 + sec(2.2), 30, 67, null, stripe('in_1PRO0002')),
      cancellation(u.alice, 'BILLING_ERROR', 60 + sec(2.203), 30, 67, stripe('in_1PRO0002')),
      renewal(u.alice, 63.4, 60, 90, stripe('in_1PRO0003')),
    ],
    expected: [{ now: 64, state: { alice: { pro: { active: true, status: 'active', willRenew: true, expiresAt: isoDay(90), graceExpiresAt: null } } } }],
  },
  {
    name: 'O05 (2) Stripe: the retries fail, EXPIRATION at the end of the window: no access',
    doc: `EXPIRATION: "A subscription has expired and access should be removed." (${DOC.types})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, stripe('in_1PRO0001')),
      billingIssue(u.alice, 30 + sec(2.2), 0, 37, null, stripe('in_1PRO0001')),
      cancellation(u.alice, 'BILLING_ERROR', 30 + sec(2.203), 0, 37, stripe('in_1PRO0001')),
      expiration(u.alice, 'BILLING_ERROR', 37 + sec(3), 0, 37, stripe('in_1PRO0001')),
    ],
    expected: [{ now: 37.5, state: { alice: { pro: { active: false, status: 'expired', willRenew: false } } } }],
  },
  {
    name: 'O06 (2, 8) a CANCELLATION of the next period before its RENEWAL arrives, then an UNCANCELLATION: access to that period\'s end, renewing',
    doc: `"Uncancellations occur when a customer cancels their subscription and then resubscribes before the subscription's expiration occurs. In this scenario, the customer never loses entitlements." (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      renewal(u.alice, 30 + sec(61.25), 30, 60, apple('2000000900000003')),
      cancellation(u.alice, 'UNSUBSCRIBE', 40, 30, 60, apple('2000000900000003')),
      event('uncancellation', u.alice, 42, 30, 60, apple('2000000900000003')),
    ],
    expected: [
      { now: 45, state: { alice: { pro: { active: true, status: 'active', willRenew: true, expiresAt: isoDay(60) } } } },
      { now: 61, state: { alice: { pro: { active: false, status: 'expired', willRenew: false } } } },
    ],
  },
  {
    name: 'O07 (2) a refunded period is not given back by a later UNSUBSCRIBE that carries the period\'s expiration',
    doc: `CUSTOMER_SUPPORT: "Note that this does not mean that a subscription's autorenewal preference has been deactivated since refunds can be given without cancelling a subscription." (${DOC.types}); "Granting a refund will immediately expire the subscription and remove any entitlement access." (${DOC.refunds})`,
    items: (u) => [purchase(u.alice, 0, 0, 30), refund(u.alice, 5, 0, 5), cancellation(u.alice, 'UNSUBSCRIBE', 6, 0, 30)],
    expected: [{ now: 7, state: { alice: { pro: { active: false, status: 'refunded', willRenew: false } } } }],
  },

  // --- 3. Temporary grants, judged by what grants when read --------------------------------
  {
    name: 'O08 (3, 6) a cancelled monthly lapses without EXPIRATION, a temporary grant, the validated purchase, then the monthly\'s late EXPIRATION',
    doc: `TEMPORARY_ENTITLEMENT_GRANT: "Once the exceptional situation has been resolved and RevenueCat can validate the purchases, a regular INITIAL_PURCHASE event will be sent." (${DOC.types})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      cancellation(u.alice, 'UNSUBSCRIBE', 10, 0, 30),
      temporaryGrant(u.alice, 40, 41, YEARLY, 'tmp_ab12cd34'),
      purchase(u.alice, 40.2, 40 + sec(30), 405, apple('3000000100000001', '3000000100000001', YEARLY)),
      expiration(u.alice, 'UNSUBSCRIBE', 30 + sec(3600.123), 0, 30),
    ],
    expected: [{ now: 41.5, state: { alice: { pro: { active: true, status: 'active', productId: YEARLY, willRenew: true, expiresAt: isoDay(405) } } } }],
  },
  {
    name: 'O09 (3) a temporary grant while a cancelled monthly still grants, which lapses before the purchase is validated: access from the grant',
    doc: `TEMPORARY_ENTITLEMENT_GRANT: "RevenueCat was temporarily unable to validate a purchase ... and has granted a short-term entitlement to the customer ... used to avoid customers making a purchase but not getting access to their entitlement." (${DOC.types})`,
    items: (u) => [purchase(u.alice, 0, 0, 30), cancellation(u.alice, 'UNSUBSCRIBE', 10, 0, 30), temporaryGrant(u.alice, 29.9, 30.9, YEARLY, 'tmp_cd34ef56')],
    expected: [
      { now: 30.2, state: { alice: { pro: { active: true, status: 'temporary', productId: YEARLY, willRenew: false, expiresAt: isoDay(30.9) } } } },
      { now: 31, state: { alice: { pro: { active: false } } } },
    ],
  },
  {
    name: 'O10 (3) ... and once the purchase is validated: the purchase grants, renewing',
    doc: `TEMPORARY_ENTITLEMENT_GRANT: "Once the exceptional situation has been resolved and RevenueCat can validate the purchases, a regular INITIAL_PURCHASE event will be sent." (${DOC.types})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      cancellation(u.alice, 'UNSUBSCRIBE', 10, 0, 30),
      temporaryGrant(u.alice, 29.9, 30.9, YEARLY, 'tmp_cd34ef56'),
      purchase(u.alice, 30.5, 29.9, 394.9, apple('3000000200000001', '3000000200000001', YEARLY)),
    ],
    expected: [{ now: 31, state: { alice: { pro: { active: true, status: 'active', productId: YEARLY, willRenew: true, expiresAt: isoDay(394.9) } } } }],
  },
  {
    name: 'O11 (3) a temporary grant for the same product as an expired subscription, then its INITIAL_PURCHASE: access, renewing',
    doc: `TEMPORARY_ENTITLEMENT_GRANT: "depending on the store, the product_id might be different from the product_id present in the subsequent INITIAL_PURCHASE event" (${DOC.types}); here it is the same one`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      cancellation(u.alice, 'UNSUBSCRIBE', 10, 0, 30),
      expiration(u.alice, 'UNSUBSCRIBE', 30 + sec(40), 0, 30),
      temporaryGrant(u.alice, 40, 41, MONTHLY, 'tmp_ef56ab78'),
      purchase(u.alice, 40.1, 40, 70, apple('4000000100000001', '4000000100000001')),
    ],
    expected: [{ now: 41, state: { alice: { pro: { active: true, status: 'active', willRenew: true, expiresAt: isoDay(70) } } } }],
  },
  {
    name: 'O12 (3) a temporary grant that is never validated (EXPIRATION with its transaction id) beside a lapsed monthly: no access',
    doc: `TEMPORARY_ENTITLEMENT_GRANT: "If the purchase can't be validated, an EXPIRATION event with the same transaction_id is sent." (${DOC.types})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      temporaryGrant(u.alice, 40, 41, YEARLY, 'tmp_gh78ij90'),
      expiration(u.alice, 'UNKNOWN', 40.3, 40, 40.3, { store: 'APP_STORE', product_id: YEARLY, transaction_id: 'tmp_gh78ij90', original_transaction_id: undefined }),
    ],
    expected: [{ now: 40.5, state: { alice: { pro: { active: false } } } }],
  },

  // --- 4. Product changes across entitlements ----------------------------------------------
  {
    name: 'O13 (4, refund) upgrade to a product with other entitlements, then the new product is refunded: neither grants',
    doc: `"the customer will immediately have access to the new entitlements" (${DOC.flows}); Apple upgrade: "They are immediately upgraded and receive a refund of the prorated amount of their original subscription." (${DOC.manage}); "Granting a refund will immediately expire the subscription and remove any entitlement access." (${DOC.refunds})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, lineage(BASIC, '5000000100000001', 'basic')),
      event('product-change', u.alice, 10, 0, 30, { ...lineage(BASIC, '5000000100000001', 'basic'), new_product_id: PREMIUM }),
      renewal(u.alice, 10 + sec(2.5), 10, 40, lineage(PREMIUM, '5000000100000002', 'premium')),
      refund(u.alice, 15, 10, 15, lineage(PREMIUM, '5000000100000002', 'premium')),
    ],
    expected: [{ now: 16, state: { alice: { basic: { active: false, willRenew: false }, premium: { active: false, status: 'refunded' } } } }],
  },
  {
    name: 'O14 (4) upgrade of a subscription whose only event here is a CANCELLATION (bought before this service): the old entitlement stops',
    doc: `"In the case of an immediate product change, both a PRODUCT_CHANGE and RENEWAL event will be dispatched and the customer will immediately have access to the new entitlements." (${DOC.flows}); Apple upgrade: "They are immediately upgraded and receive a refund of the prorated amount of their original subscription." (${DOC.manage})`,
    items: (u) => [
      cancellation(u.alice, 'UNSUBSCRIBE', 5, 0, 30, lineage(BASIC, '5000000100000001', 'basic')),
      event('product-change', u.alice, 10, 0, 30, { ...lineage(BASIC, '5000000100000001', 'basic'), new_product_id: PREMIUM }),
      renewal(u.alice, 10 + sec(2.5), 10, 40, lineage(PREMIUM, '5000000100000002', 'premium')),
    ],
    expected: [{ now: 11, state: { alice: { basic: { active: false, willRenew: false }, premium: { active: true, willRenew: true, expiresAt: isoDay(40) } } } }],
  },
  {
    name: 'O15 (4) downgrade at period end to a product with other entitlements, and the old product\'s EXPIRATION: the new one\'s replace them',
    doc: `"When the customer encounters their next renewal, a RENEWAL event will be dispatched, the user will be billed at the new product's price, and the user's entitlements will be replaced by the entitlements from the new product." (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, lineage(PREMIUM, '5000000100000001', 'premium')),
      event('product-change', u.alice, 10, 0, 30, { ...lineage(PREMIUM, '5000000100000001', 'premium'), new_product_id: BASIC }),
      renewal(u.alice, 30 + sec(1), 30, 60, lineage(BASIC, '5000000100000002', 'basic')),
      expiration(u.alice, 'UNSUBSCRIBE', 30 + sec(3), 0, 30, lineage(PREMIUM, '5000000100000001', 'premium')),
    ],
    expected: [{ now: 31, state: { alice: { premium: { active: false, willRenew: false }, basic: { active: true, willRenew: true, expiresAt: isoDay(60) } } } }],
  },
  {
    name: 'O16 (4) Stripe immediate upgrade across entitlements in a later period (RENEWAL with purchased_at = t0): the old stops',
    doc: `"For immediate product changes in Stripe. Please note: The RENEWAL event may show the same purchased_at_ms as the original subscription (ie. t0)" (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...stripe('in_1BAS0001', 'prod_BASIC', 'sub_1BASIC'), entitlement_ids: ['basic'] }),
      renewal(u.alice, 30 + sec(1.1), 30, 60, { ...stripe('in_1BAS0002', 'prod_BASIC', 'sub_1BASIC'), entitlement_ids: ['basic'] }),
      event('product-change', u.alice, 40, 30, 60, { ...stripe('in_1BAS0002', 'prod_BASIC', 'sub_1BASIC'), entitlement_ids: ['basic'], new_product_id: undefined }),
      renewal(u.alice, 40 + sec(0.8), 0, 60, { ...stripe('in_1PRE0003', 'prod_PREMIUM', 'sub_1BASIC'), entitlement_ids: ['premium'] }),
    ],
    expected: [{ now: 41, state: { alice: { basic: { active: false, willRenew: false }, premium: { active: true, willRenew: true, expiresAt: isoDay(60) } } } }],
  },

  {
    name: 'O17 (5, 7) a TRANSFER into an id RevenueCat aliased with another (legacy sharing): both ids of the customer have it',
    doc: `aliases: "All app user ids ever used by the subscriber." and "When looking up users from the webhook in your systems, make sure to search both the original_app_user_id and the aliases array." (${DOC.types}); "you'll receive a TRANSFER event and the entitlements will be removed from user 1 and added to user 2." (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, customer(u.alice)),
      renewal(u.bob, 30 + sec(1), 30, 60, customer(u.alice, u.bob)),
      purchase(u.dave, 1, 1, 366, { ...apple('6000000100000001', '6000000100000001', YEARLY), ...customer(u.dave) }),
      transfer([u.dave], [u.bob], 40),
    ],
    expected: [{
      now: 41,
      state: {
        alice: { pro: { active: true, productId: YEARLY, willRenew: true, sources: [expect.objectContaining({ productId: YEARLY }), expect.objectContaining({ productId: MONTHLY, active: true })] } },
        bob: { pro: { active: true, productId: YEARLY, willRenew: true, sources: [expect.objectContaining({ productId: YEARLY }), expect.objectContaining({ productId: MONTHLY, active: true })] } },
        dave: { pro: { active: false, status: 'transferred' } },
      },
    }],
  },
  // --- 5. One customer under several ids ---------------------------------------------------
  {
    name: 'O18 (5, 10) two real ids that each bought something, then named as one customer: one state, both products, shown to either',
    doc: `"Share between App User IDs (legacy): The legacy behavior is to merge (alias) any App User IDs that restore the same underlying subscription and treat them as the same subscriber moving forward." (https://www.revenuecat.com/docs/projects/restore-behavior)`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, customer(u.alice)),
      purchase(u.bob, 1, 1, 366, { ...play('GPA.3333-4444-5555-66666', 'pro_yearly:yearly'), ...customer(u.bob) }),
      cancellation(u.bob, 'UNSUBSCRIBE', 20, 1, 366, { ...play('GPA.3333-4444-5555-66666', 'pro_yearly:yearly'), ...customer(u.alice, u.bob) }),
      renewal(u.alice, 30 + sec(1), 30, 60, customer(u.alice, u.bob)),
    ],
    expected: [{
      now: 31,
      state: Object.fromEntries((['alice', 'bob'] as const).map((role) => [role, { pro: {
        active: true, productId: 'pro_yearly:yearly', status: 'cancelled_active', willRenew: true,
        sources: [expect.objectContaining({ productId: 'pro_yearly:yearly', willRenew: false }), expect.objectContaining({ productId: MONTHLY, willRenew: true, expiresAt: isoDay(60) })],
      } }])),
    }],
  },

  // --- 6. A new period's RENEWAL older than the old period's EXPIRATION ---------------------
  {
    name: 'O19 (6, 8) resubscribe after a lapse: the RENEWAL generated 246 ms before the old period\'s EXPIRATION: access, renewing',
    doc: `RENEWAL: "An existing subscription has been renewed or a lapsed user has resubscribed." (${DOC.types}); "the actual event will show the original time of the renewal in the event_timestamp_ms field." (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      cancellation(u.alice, 'UNSUBSCRIBE', 10, 0, 30),
      renewal(u.alice, 30 + sec(3599.877), 30 + sec(1800), 60 + sec(1800), apple('2000000900000009')),
      expiration(u.alice, 'UNSUBSCRIBE', 30 + sec(3600.123), 0, 30),
    ],
    expected: [{ now: 31, state: { alice: { pro: { active: true, status: 'active', willRenew: true, expiresAt: isoDay(60 + sec(1800)) } } } }],
  },
  {
    name: 'O20 (6, 1) billing retry recovers just as grace ends: the RENEWAL 1 s older than the EXPIRATION BILLING_ERROR grants, renewing',
    doc: `"If billing succeeds at any point during the grace period, you'll receive a RENEWAL event and entitlements won't be revoked." (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      billingIssue(u.alice, 30 + sec(4.211), 0, 30, 46),
      cancellation(u.alice, 'BILLING_ERROR', 30 + sec(4.214), 0, 30),
      renewal(u.alice, 46 - sec(1), 46 - sec(1.5), 76 - sec(1.5), apple('2000000900000010')),
      expiration(u.alice, 'BILLING_ERROR', 46, 0, 30),
    ],
    expected: [{ now: 47, state: { alice: { pro: { active: true, status: 'active', willRenew: true, expiresAt: isoDay(76 - sec(1.5)), graceExpiresAt: null } } } }],
  },

  // --- 7. Environments ---------------------------------------------------------------------
  {
    name: 'O21 (7) sandbox and production of one product id: a production TRANSFER moves production only; later events of each stay apart',
    doc: `environment: "Store environment." SANDBOX, PRODUCTION (${DOC.types}); TRANSFER: "A transfer of transactions and entitlements was initiated between one App User ID(s) to another." (${DOC.types})`,
    items: (u) => {
      const sandbox = { ...apple('7000000100000001', '7000000100000001'), environment: 'SANDBOX' };
      const production = apple('7000000200000001', '7000000200000001');
      return [
        purchase(u.alice, 0, 0, 30, sandbox),
        purchase(u.alice, 0.5, 0.5, 30.5, production),
        transfer([u.alice], [u.bob], 1),
        renewal(u.alice, 30 + sec(1), 30, 60, { ...sandbox, transaction_id: '7000000100000002' }),
        cancellation(u.bob, 'UNSUBSCRIBE', 10, 0.5, 30.5, { ...production, ...customer(u.bob) }),
      ];
    },
    expected: [{
      now: 20,
      state: {
        alice: { pro: { active: true, environment: 'SANDBOX', willRenew: true, expiresAt: isoDay(60),
          sources: [expect.objectContaining({ environment: 'SANDBOX', active: true }), expect.objectContaining({ environment: 'PRODUCTION', status: 'transferred', active: false })] } },
        bob: { pro: { active: true, environment: 'PRODUCTION', status: 'cancelled_active', willRenew: false, expiresAt: isoDay(30.5), sources: [expect.objectContaining({ environment: 'PRODUCTION' })] } },
      },
    }],
  },
  {
    name: 'O22 (7) a SANDBOX TRANSFER moves the sandbox purchase only',
    doc: `environment: "Store environment." SANDBOX, PRODUCTION (${DOC.types})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...apple('7000000100000001', '7000000100000001'), environment: 'SANDBOX' }),
      purchase(u.alice, 0.5, 0.5, 30.5, apple('7000000200000001', '7000000200000001')),
      transfer([u.alice], [u.bob], 1, { environment: 'SANDBOX' }),
    ],
    expected: [{
      now: 2,
      state: {
        alice: { pro: { active: true, environment: 'PRODUCTION', expiresAt: isoDay(30.5) } },
        bob: { pro: { active: true, environment: 'SANDBOX', expiresAt: isoDay(30), sources: [expect.objectContaining({ environment: 'SANDBOX' })] } },
      },
    }],
  },

  // --- 8. Auto-renewal ---------------------------------------------------------------------
  {
    name: 'O23 (8) trial cancelled < 24 h before conversion, the RENEWAL, then SUBSCRIPTION_EXTENDED: still not renewing, until the new date',
    doc: `"If a user cancels less than 24 hours before the trial expires, you may unexpectedly receive a CANCELLATION event followed by a RENEWAL event." (${DOC.flows}); SUBSCRIPTION_EXTENDED: "the expiration date of the current subscription period has been pushed back to the future" (${DOC.types})`,
    items: (u) => [
      trial(u.alice, 0, 0, 3, apple('8000000100000001', '8000000100000001')),
      cancellation(u.alice, 'UNSUBSCRIBE', 2.5, 0, 3, apple('8000000100000001', '8000000100000001')),
      event('renewal-trial-conversion', u.alice, 3 + sec(4), 3, 33, apple('8000000100000002', '8000000100000001')),
      event('subscription-extended', u.alice, 10, 3, 40, apple('8000000100000002', '8000000100000001')),
    ],
    expected: [{ now: 34, state: { alice: { pro: { active: true, status: 'cancelled_active', willRenew: false, expiresAt: isoDay(40) } } } }],
  },
  {
    name: 'O24 (8) Play resubscribe reported as RENEWAL after a cancelled subscription lapsed without EXPIRATION: renewing',
    doc: `"For resubscriptions on Google Play, Google may classify the transaction as a renewal rather than an initial purchase." (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, play('GPA.1212-3434-5656-78787')),
      cancellation(u.alice, 'UNSUBSCRIBE', 10, 0, 30, play('GPA.1212-3434-5656-78787')),
      renewal(u.alice, 45, 45, 75, play('GPA.1212-3434-5656-78787..1')),
    ],
    expected: [{ now: 46, state: { alice: { pro: { active: true, status: 'active', willRenew: true, expiresAt: isoDay(75) } } } }],
  },

  // --- 9. entitlement_ids null -------------------------------------------------------------
  {
    name: 'O25 (9, 5) a refund with entitlement_ids null, named by the alias, of a product the customer holds under the other id: every entitlement ends',
    doc: `entitlement_ids: "It can be NULL if the product_id is not mapped to any entitlements." (${DOC.types}); "Granting a refund will immediately expire the subscription and remove any entitlement access." (${DOC.refunds})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { entitlement_ids: ['pro', 'ads_free'], ...customer(u.alice) }),
      renewal(u.bob, 30 + sec(1), 30, 60, { ...apple('2000000900000025'), entitlement_ids: ['pro', 'ads_free'], ...customer(u.alice, u.bob) }),
      refund(u.bob, 35, 30, 35, { ...apple('2000000900000025'), entitlement_ids: null, ...customer(u.alice, u.bob) }),
    ],
    expected: [{
      now: 36,
      state: Object.fromEntries((['alice', 'bob'] as const).map((role) => [role, {
        pro: { active: false, status: 'refunded' }, ads_free: { active: false, status: 'refunded' },
      }])),
    }],
  },
  {
    name: 'O26 (9, 7) an EXPIRATION with entitlement_ids null for production leaves the sandbox purchase of the same product',
    doc: `environment: "Store environment." SANDBOX, PRODUCTION (${DOC.types}); entitlement_ids "can be NULL" (${DOC.types})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 60, { ...apple('7000000100000001', '7000000100000001'), environment: 'SANDBOX' }),
      purchase(u.alice, 0.5, 0.5, 30.5, apple('7000000200000001', '7000000200000001')),
      cancellation(u.alice, 'UNSUBSCRIBE', 10, 0.5, 30.5, apple('7000000200000001', '7000000200000001')),
      expiration(u.alice, 'UNSUBSCRIBE', 30.5 + sec(2), 0.5, 30.5, { ...apple('7000000200000001', '7000000200000001'), entitlement_ids: null }),
    ],
    expected: [{
      now: 31,
      state: { alice: { pro: { active: true, environment: 'SANDBOX', expiresAt: isoDay(60),
        sources: [expect.objectContaining({ environment: 'SANDBOX' }), expect.objectContaining({ environment: 'PRODUCTION', status: 'expired', active: false })] } } },
    }],
  },

  // --- 10. Every source of an entitlement ----------------------------------------------------
  {
    name: 'O27 (10, refund) a cancelled yearly and a renewing monthly on one entitlement, the yearly refunded: the monthly shown, renewing',
    doc: `"Granting a refund will immediately expire the subscription and remove any entitlement access." (${DOC.refunds}); "A single customer may go through this flow multiple times if they purchase multiple products." (${DOC.flows})`,
    items: (u) => {
      const yearly = apple('9000000100000001', '9000000100000001', YEARLY);
      return [purchase(u.alice, 0, 0, 365, yearly), cancellation(u.alice, 'UNSUBSCRIBE', 5, 0, 365, yearly), purchase(u.alice, 6, 6, 36), refund(u.alice, 8, 0, 8, yearly)];
    },
    expected: [{
      now: 10,
      state: { alice: { pro: {
        active: true, productId: MONTHLY, status: 'active', willRenew: true, expiresAt: isoDay(36),
        sources: [
          expect.objectContaining({ productId: MONTHLY, active: true, willRenew: true }),
          expect.objectContaining({ productId: YEARLY, active: false, status: 'refunded', willRenew: false }),
        ],
      } } },
    }],
  },
  {
    name: 'O28 (10) a lifetime purchase beside a renewing monthly: the lifetime shown, the entitlement renews',
    doc: `expiration_at_ms "can be NULL for non-subscription purchases" (${DOC.types}); "A single customer may go through this flow multiple times if they purchase multiple products." (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      event('non-renewing-purchase', u.alice, 5, 5, null, { ...apple('L-100', 'L-100', LIFETIME) }),
      renewal(u.alice, 30 + sec(1), 30, 60),
    ],
    expected: [{
      now: 31,
      state: { alice: { pro: {
        active: true, productId: LIFETIME, expiresAt: null, willRenew: true,
        sources: [expect.objectContaining({ productId: LIFETIME, willRenew: false }), expect.objectContaining({ productId: MONTHLY, willRenew: true, expiresAt: isoDay(60) })],
      } } },
    }],
  },

  // --- Events without product_id -------------------------------------------------------------
  {
    name: 'O29 a monthly whose EXPIRATION and refund carry no product_id nor entitlement_ids, beside lifetime purchases with and without one',
    doc: `expiration_at_ms "can be NULL for non-subscription purchases" (${DOC.types}); a refund ends the purchase it refunds (${DOC.refunds}), not another`,
    items: (u) => {
      const monthly = { product_id: undefined, transaction_id: 'M-100', original_transaction_id: 'M-100' };
      return [
        event('non-renewing-purchase', u.alice, 1, 1, null, { ...apple('L-100', 'L-100', LIFETIME) }),
        event('non-renewing-purchase', u.alice, 2, 2, null, { product_id: undefined, transaction_id: 'L-200', original_transaction_id: 'L-200' }),
        purchase(u.alice, 0, 0, 30, monthly),
        refund(u.alice, 5, 0, 5, { ...monthly, entitlement_ids: null }),
        expiration(u.alice, 'CUSTOMER_SUPPORT', 5 + sec(2), 0, 5, { ...monthly, entitlement_ids: null }),
      ];
    },
    expected: [{ now: 31, state: { alice: { pro: { active: true, expiresAt: null, willRenew: false } } } }],
  },

  // --- Snapshots of RevenueCat's record (issue 14) --------------------------------------------
  {
    name: 'O30 (14) a snapshot, then a CANCELLATION generated before it arrives late: as RevenueCat\'s record says',
    doc: `issue 14: "authoritative for the subscriber at its request_date_ms"; v1 subscription unsubscribe_detected_at (${DOC.v1}); CANCELLATION keeps access to the period's end (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      renewal(u.alice, 30 + sec(1), 30, 60, apple('2000000900000030')),
      snapshot('alice', 38, { entitlements: { pro: ent(MONTHLY, { purchased: day(30), expires: day(60) }) },
        subscriptions: { [MONTHLY]: sub({ purchased: day(30), expires: day(60), unsubscribed: day(35), transactionId: '2000000900000030' }) } }),
      cancellation(u.alice, 'UNSUBSCRIBE', 35, 30, 60, apple('2000000900000030')),
    ],
    expected: [{ now: 39, state: { alice: { pro: { active: true, status: 'cancelled_active', willRenew: false, expiresAt: isoDay(60) } } } }],
  },
  {
    name: 'O31 (14, 2) a snapshot, then the CANCELLATION of the next period whose RENEWAL is lost: access to that period\'s end',
    doc: `issue 14: "a webhook event newer than the snapshot still wins"; CANCELLATION keeps access to the period's end (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      snapshot('alice', 20, { entitlements: { pro: ent(MONTHLY, { purchased: day(0), expires: day(30) }) }, subscriptions: { [MONTHLY]: sub({ purchased: day(0), expires: day(30), transactionId: '1000' }) } }),
      cancellation(u.alice, 'UNSUBSCRIBE', 40, 30, 60, apple('2000000900000031')),
    ],
    expected: [{ now: 45, state: { alice: { pro: { active: true, status: 'cancelled_active', willRenew: false, expiresAt: isoDay(60) } } } }],
  },
  {
    name: 'O32 (14, 1) a snapshot in grace, the grace bundle arriving after it, then the EXPIRATION at the grace end: no access',
    doc: `"To detect grace periods in the GET /subscriber endpoint, watch for the value of grace_period_expires_date on a subscription object" (${DOC.grace}); "At the end of the grace period, if billing has not been successful, an EXPIRATION event will be sent and entitlements will be revoked." (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      billingIssue(u.alice, 30 + sec(4.211), 0, 30, 46),
      cancellation(u.alice, 'BILLING_ERROR', 30 + sec(4.214), 0, 30),
      snapshot('alice', 35, { entitlements: { pro: ent(MONTHLY, { purchased: day(0), expires: day(30), grace: day(46) }) },
        subscriptions: { [MONTHLY]: sub({ purchased: day(0), expires: day(30), billingIssue: day(30), grace: day(46), unsubscribed: day(30), transactionId: '1000' }) } }),
      expiration(u.alice, 'BILLING_ERROR', 46 + sec(2), 0, 30),
    ],
    expected: [{ now: 47, state: { alice: { pro: { active: false, status: 'expired', willRenew: false } } } }],
  },
  {
    name: 'O33 (14, 5) the alias refreshes (RevenueCat\'s original_app_user_id is the other id): one state, shown to both',
    doc: `original_app_user_id: "The first app user id used by the subscriber." (${DOC.types}); v1 subscriber original_app_user_id (${DOC.v1})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, customer(u.alice)),
      renewal(u.bob, 30 + sec(1), 30, 60, { ...apple('2000000900000033'), ...customer(u.alice, u.bob) }),
      snapshot('bob', 40, {
        original_app_user_id: u.alice,
        entitlements: { pro: ent(MONTHLY, { purchased: day(30), expires: day(60) }) },
        subscriptions: { [MONTHLY]: sub({ purchased: day(30), expires: day(60), unsubscribed: day(39), transactionId: '2000000900000033' }) },
      }),
    ],
    expected: [{
      now: 41,
      state: {
        alice: { pro: { active: true, status: 'cancelled_active', willRenew: false, expiresAt: isoDay(60), sources: [expect.objectContaining({ productId: MONTHLY })] } },
        bob: { pro: { active: true, status: 'cancelled_active', willRenew: false, expiresAt: isoDay(60), sources: [expect.objectContaining({ productId: MONTHLY })] } },
      },
    }],
  },

  {
    name: 'O34 (14, 5) the id merged into another refreshes, and RevenueCat\'s record shows one of the customer\'s purchases refunded: it stops granting',
    doc: `"Granting a refund will immediately expire the subscription and remove any entitlement access." (${DOC.refunds}); v1 subscription refunded_at (${DOC.v1}); issue 14: "authoritative for the subscriber at its request_date_ms"`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, customer(u.alice)),
      purchase(u.bob, 1, 1, 366, { ...play('GPA.3333-4444-5555-66666', 'pro_yearly:yearly'), ...customer(u.bob) }),
      cancellation(u.bob, 'UNSUBSCRIBE', 20, 1, 366, { ...play('GPA.3333-4444-5555-66666', 'pro_yearly:yearly'), ...customer(u.alice, u.bob) }),
      snapshot('alice', 40, {
        original_app_user_id: u.alice,
        entitlements: { pro: ent(MONTHLY, { purchased: day(30), expires: day(60) }) },
        subscriptions: {
          [MONTHLY]: sub({ purchased: day(30), expires: day(60), transactionId: '2000000900000034' }),
          pro_yearly: { ...sub({ purchased: day(1), expires: day(366), store: 'play_store', unsubscribed: day(20), refunded: day(35), transactionId: 'GPA.3333-4444-5555-66666' }), product_plan_identifier: 'yearly' },
        },
      }),
    ],
    expected: [{
      now: 41,
      state: Object.fromEntries((['alice', 'bob'] as const).map((role) => [role, { pro: {
        active: true, productId: MONTHLY, willRenew: true, expiresAt: isoDay(60),
        sources: [expect.objectContaining({ productId: MONTHLY }), expect.objectContaining({ productId: 'pro_yearly:yearly', status: 'refunded', active: false })],
      } }])),
    }],
  },
  {
    name: 'O35 (14, 9) a snapshot after the dashboard mapping changed (the product now unlocks another entitlement): the old entitlement stops',
    doc: `v1 entitlements: "Dictionary of the entitlements of this Customer (including any expired entitlements)" (${DOC.v1}), so an entitlement it does not list is not the customer's; issue 14: "rows it no longer shows stop granting"`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      snapshot('alice', 10, {
        entitlements: { premium: ent(MONTHLY, { purchased: day(0), expires: day(30) }) },
        subscriptions: { [MONTHLY]: sub({ purchased: day(0), expires: day(30), transactionId: '1000' }) },
      }),
    ],
    expected: [{ now: 11, state: { alice: { pro: { active: false }, premium: { active: true, willRenew: true, expiresAt: isoDay(30) } } } }],
  },  {
    name: 'O36 (4) upgrade whose new product\'s RENEWAL is lost and only its CANCELLATION arrives: the new product grants, the old stops',
    doc: `"In the case of an immediate product change, both a PRODUCT_CHANGE and RENEWAL event will be dispatched and the customer will immediately have access to the new entitlements." (${DOC.flows}); Apple upgrade: "They are immediately upgraded and receive a refund of the prorated amount of their original subscription." (${DOC.manage})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, lineage(BASIC, '5000000100000001', 'basic')),
      event('product-change', u.alice, 10, 0, 30, { ...lineage(BASIC, '5000000100000001', 'basic'), new_product_id: PREMIUM }),
      cancellation(u.alice, 'UNSUBSCRIBE', 20, 10, 40, lineage(PREMIUM, '5000000100000002', 'premium')),
    ],
    expected: [{ now: 21, state: { alice: { basic: { active: false, willRenew: false }, premium: { active: true, status: 'cancelled_active', willRenew: false, expiresAt: isoDay(40) } } } }],
  },
  {
    name: 'O37 (14, 8) a snapshot shows the period refunded with auto-renewal still on; the next RENEWAL, newer, grants again, renewing',
    doc: `CANCELLATION: "Note that in the event of refunds, a subscription's auto-renewal setting may still be active." (${DOC.types}); issue 14: "a webhook event newer than the snapshot still wins"`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      renewal(u.alice, 30 + sec(1), 30, 60, apple('2000000900000037')),
      snapshot('alice', 40, { entitlements: { pro: ent(MONTHLY, { purchased: day(30), expires: day(60) }) },
        subscriptions: { [MONTHLY]: sub({ purchased: day(30), expires: day(60), refunded: day(36), transactionId: '2000000900000037' }) } }),
      renewal(u.alice, 60 + sec(1), 60, 90, apple('2000000900000038')),
    ],
    expected: [{ now: 61, state: { alice: { pro: { active: true, status: 'active', willRenew: true, expiresAt: isoDay(90) } } } }],
  },
  {
    name: 'O38 (14, 6) a snapshot between a resubscription\'s RENEWAL and the old period\'s late EXPIRATION: access, renewing',
    doc: `RENEWAL: "a lapsed user has resubscribed" (${DOC.types}); issue 14: "authoritative for the subscriber at its request_date_ms"`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      cancellation(u.alice, 'UNSUBSCRIBE', 10, 0, 30),
      renewal(u.alice, 30 + sec(1800), 30 + sec(1790), 60 + sec(1790), apple('2000000900000039')),
      snapshot('alice', 30 + sec(2400), { entitlements: { pro: ent(MONTHLY, { purchased: day(30 + sec(1790)), expires: day(60 + sec(1790)) }) },
        subscriptions: { [MONTHLY]: sub({ purchased: day(30 + sec(1790)), expires: day(60 + sec(1790)), transactionId: '2000000900000039' }) } }),
      expiration(u.alice, 'UNSUBSCRIBE', 30 + sec(3600.123), 0, 30),
    ],
    expected: [{ now: 31, state: { alice: { pro: { active: true, status: 'active', willRenew: true, expiresAt: isoDay(60 + sec(1790)) } } } }],
  },

  // --- A change at period end names a product the customer also buys on its own --------------
  {
    name: 'O39 two Google accounts: a change of basic to premium at period end leaves basic, paid to its end, granting beside the other account\'s premium',
    doc: `"Product Change at Period End ... The customer will retain their entitlement based on the original product." (${DOC.flows}); original_transaction_id: "transaction_id of the original transaction in the subscription" (${DOC.types}): the premium bought on day 5 is another subscription`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...play('GPA.3900-0000-0000-00001', 'basic:monthly'), entitlement_ids: ['basic'] }),
      purchase(u.alice, 5, 5, 35, { ...play('GPA.3900-0000-0000-00002', 'premium:monthly'), entitlement_ids: ['premium'] }),
      event('product-change', u.alice, 10, 0, 30, { ...play('GPA.3900-0000-0000-00001', 'basic:monthly'), entitlement_ids: ['basic'], new_product_id: 'premium:monthly' }),
    ],
    expected: [{ now: 11, state: { alice: {
      basic: { active: true, expiresAt: isoDay(30), productId: 'basic:monthly' },
      premium: { active: true, expiresAt: isoDay(35), productId: 'premium:monthly' } } } }],
  },
  {
    name: 'O40 two Google accounts, one entitlement: the other account\'s premium refunded; basic, changing to premium at period end, still grants to its end',
    doc: `"The customer will retain their entitlement based on the original product." (${DOC.flows}); a refund is of one purchase: "Granting a refund will immediately expire the subscription" (https://www.revenuecat.com/docs/subscription-guidance/refunds)`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, play('GPA.4000-0000-0000-00001', 'basic:monthly')),
      purchase(u.alice, 5, 5, 35, play('GPA.4000-0000-0000-00002', 'premium:monthly')),
      event('product-change', u.alice, 10, 0, 30, { ...play('GPA.4000-0000-0000-00001', 'basic:monthly'), new_product_id: 'premium:monthly' }),
      refund(u.alice, 12, 5, 12, play('GPA.4000-0000-0000-00002', 'premium:monthly')),
    ],
    expected: [{ now: 13, state: { alice: { pro: { active: true, expiresAt: isoDay(30), productId: 'basic:monthly' } } } }],
  },
  {
    name: 'O41 two Apple IDs: a yearly paid to day 365 with a downgrade to monthly scheduled keeps granting after the other Apple ID\'s monthly lapses',
    doc: `"The customer will retain their entitlement based on the original product. When the customer encounters their next renewal, a RENEWAL event will be dispatched" (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 365, apple('4100000000000001', '4100000000000001', YEARLY)),
      purchase(u.alice, 5, 5, 35, apple('4100000000000002', '4100000000000002', MONTHLY)),
      event('product-change', u.alice, 10, 0, 365, { ...apple('4100000000000001', '4100000000000001', YEARLY), new_product_id: MONTHLY }),
      cancellation(u.alice, 'UNSUBSCRIBE', 12, 5, 35, apple('4100000000000002', '4100000000000002', MONTHLY)),
    ],
    expected: [{ now: 40, state: { alice: { pro: { active: true, expiresAt: isoDay(365), productId: YEARLY } } } }],
  },
  {
    name: 'O42 two Google accounts: when the change at period end takes effect (a new order at the old period\'s end), it replaces basic; the other account\'s premium is untouched',
    doc: `"When the product change goes into effect you will receive a RENEWAL event on Apple and Stripe or a INITIAL_PURCHASE event on Google Play." (${DOC.manage}); "the user's entitlements will be replaced by the entitlements from the new product." (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...play('GPA.4200-0000-0000-00001', 'basic:monthly'), entitlement_ids: ['basic'] }),
      purchase(u.alice, 5, 5, 35, { ...play('GPA.4200-0000-0000-00002', 'premium:monthly'), entitlement_ids: ['premium'] }),
      event('product-change', u.alice, 10, 0, 30, { ...play('GPA.4200-0000-0000-00001', 'basic:monthly'), entitlement_ids: ['basic'], new_product_id: 'premium:monthly' }),
      purchase(u.alice, 30 + sec(1), 30, 60, { ...play('GPA.4200-0000-0000-00003', 'premium:monthly'), entitlement_ids: ['premium'] }),
    ],
    expected: [{ now: 31, state: { alice: {
      basic: { active: false, willRenew: false },
      premium: { active: true, willRenew: true, expiresAt: isoDay(60) } } } }],
  },
  {
    name: 'O43 two Google accounts: basic replaced at once by a product whose purchase is lost keeps granting to its paid end; the other account\'s premium, begun before the change, is not the replacement',
    doc: `new_product_id is "Only available in PRODUCT_CHANGE events for Play Store subscriptions with the DEFERRED replacement mode and App Store subscriptions" (${DOC.types}); "Old subscription is cancelled, and new subscription takes effect immediately." (${DOC.manage}): the replacement begins at the change, not before it`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...play('GPA.4300-0000-0000-00001', 'basic:monthly'), entitlement_ids: ['basic'] }),
      purchase(u.alice, 5, 5, 35, { ...play('GPA.4300-0000-0000-00002', 'premium:monthly'), entitlement_ids: ['premium'] }),
      event('product-change', u.alice, 10, 0, 30, { ...play('GPA.4300-0000-0000-00001', 'basic:monthly'), entitlement_ids: ['basic'], new_product_id: undefined }),
    ],
    expected: [{ now: 11, state: { alice: {
      basic: { active: true, willRenew: false, expiresAt: isoDay(30) },
      premium: { active: true, willRenew: true, expiresAt: isoDay(35) } } } }],
  },
  {
    name: 'O44 two Google accounts: basic replaced at once ends where its replacement began, not where the other account\'s premium began',
    doc: `"Old subscription is cancelled, and new subscription takes effect immediately." and the change arrives as "a INITIAL_PURCHASE event on Google Play" (${DOC.manage})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...play('GPA.4400-0000-0000-00001', 'basic:monthly'), entitlement_ids: ['basic'] }),
      purchase(u.alice, 5, 5, 35, { ...play('GPA.4400-0000-0000-00002', 'premium:monthly'), entitlement_ids: ['premium'] }),
      event('product-change', u.alice, 10, 0, 30, { ...play('GPA.4400-0000-0000-00001', 'basic:monthly'), entitlement_ids: ['basic'], new_product_id: undefined }),
      purchase(u.alice, 10 + sec(1), 10, 40, { ...play('GPA.4400-0000-0000-00003', 'plus:monthly'), entitlement_ids: ['plus'] }),
    ],
    expected: [{ now: 11, state: { alice: {
      basic: { active: false, willRenew: false, expiresAt: isoDay(10 + sec(1)) },
      premium: { active: true, expiresAt: isoDay(35) },
      plus: { active: true, willRenew: true, expiresAt: isoDay(40) } } } }],
  },

  // --- A sync names a renewal whose RENEWAL webhook was lost, beside an ended second purchase ----
  {
    name: 'O45 two Google accounts: a sync shows the live one renewed under a new order; its CANCELLATION then stops it renewing (the ended one is not taken for it)',
    doc: `v1 keys subscriptions by product and names the latest store_transaction_id (https://www.revenuecat.com/docs/api-v1/customer-info-model); "A CANCELLATION webhook is sent ... At the end of the billing cycle, an EXPIRATION webhook is sent" (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...play('GPA.4500-0000-0000-00001', PRO_PLAY), entitlement_ids: ['pro'] }),
      purchase(u.alice, 5, 5, 35, { ...play('GPA.4500-0000-0000-00002', PRO_PLAY), entitlement_ids: ['pro'] }),
      cancellation(u.alice, 'UNSUBSCRIBE', 20, 5, 35, { ...play('GPA.4500-0000-0000-00002', PRO_PLAY), entitlement_ids: ['pro'] }),
      expiration(u.alice, 'UNSUBSCRIBE', 35 + sec(1), 5, 35, { ...play('GPA.4500-0000-0000-00002', PRO_PLAY), entitlement_ids: ['pro'] }),
      snapshot('alice', 40, { entitlements: { pro: ent(PRO_PLAY, { purchased: day(30), expires: day(60) }) },
        subscriptions: { [PRO_PLAY]: sub({ store: 'play_store', purchased: day(30), expires: day(60), transactionId: 'GPA.4500-0000-0000-00001..0' }) } }),
      cancellation(u.alice, 'UNSUBSCRIBE', 45, 30, 60, { ...play('GPA.4500-0000-0000-00001..0', PRO_PLAY), entitlement_ids: ['pro'] }),
    ],
    expected: [{ now: 46, state: { alice: { pro: { active: true, willRenew: false, expiresAt: isoDay(60) } } } }],
  },
  {
    name: 'O46 two Google accounts: a sync shows the live one renewed under a new order; its refund then ends access',
    doc: `"Granting a refund will immediately expire the subscription and remove any entitlement access" (https://www.revenuecat.com/docs/subscription-guidance/refunds)`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...play('GPA.4600-0000-0000-00001', PRO_PLAY), entitlement_ids: ['pro'] }),
      purchase(u.alice, 5, 5, 35, { ...play('GPA.4600-0000-0000-00002', PRO_PLAY), entitlement_ids: ['pro'] }),
      cancellation(u.alice, 'UNSUBSCRIBE', 20, 5, 35, { ...play('GPA.4600-0000-0000-00002', PRO_PLAY), entitlement_ids: ['pro'] }),
      expiration(u.alice, 'UNSUBSCRIBE', 35 + sec(1), 5, 35, { ...play('GPA.4600-0000-0000-00002', PRO_PLAY), entitlement_ids: ['pro'] }),
      snapshot('alice', 40, { entitlements: { pro: ent(PRO_PLAY, { purchased: day(30), expires: day(60) }) },
        subscriptions: { [PRO_PLAY]: sub({ store: 'play_store', purchased: day(30), expires: day(60), transactionId: 'GPA.4600-0000-0000-00001..0' }) } }),
      refund(u.alice, 45, 30, 45, { ...play('GPA.4600-0000-0000-00001..0', PRO_PLAY), entitlement_ids: ['pro'] }),
    ],
    expected: [{ now: 46, state: { alice: { pro: { active: false } } } }],
  },
  {
    name: 'O47 two Apple IDs: a sync shows the live one renewed (its RENEWAL lost); its refund then ends access',
    doc: `"Granting a refund will immediately expire the subscription and remove any entitlement access" (https://www.revenuecat.com/docs/subscription-guidance/refunds); v1 names the latest store_transaction_id (https://www.revenuecat.com/docs/api-v1/customer-info-model)`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, apple('4700000000000001', '4700000000000001')),
      purchase(u.alice, 5, 5, 35, apple('4700000000000005', '4700000000000005')),
      cancellation(u.alice, 'UNSUBSCRIBE', 20, 5, 35, apple('4700000000000005', '4700000000000005')),
      expiration(u.alice, 'UNSUBSCRIBE', 35 + sec(1), 5, 35, apple('4700000000000005', '4700000000000005')),
      snapshot('alice', 40, { entitlements: { pro: ent(MONTHLY, { purchased: day(30), expires: day(60) }) },
        subscriptions: { [MONTHLY]: sub({ purchased: day(30), expires: day(60), transactionId: '4700000000000002' }) } }),
      refund(u.alice, 45, 30, 45, apple('4700000000000002', '4700000000000001')),
    ],
    expected: [{ now: 46, state: { alice: { pro: { active: false } } } }],
  },

  // --- The dashboard moved the product to another entitlement: the old one only loses ----------
  {
    name: 'O48 a product moved from pro to premium: the CANCELLATION of its renewed period (naming premium) does not bring back pro, which the renewal did not extend',
    doc: `entitlement_ids: "Entitlement identifiers of the subscription" (${DOC.types}), the product's entitlements when the event was sent: the renewed period grants premium, not pro, and a cancellation of it only stops its renewal`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...apple('4800000000000001', '4800000000000001'), entitlement_ids: ['pro'] }),
      renewal(u.alice, 30 + sec(1), 30, 60, { ...apple('4800000000000002', '4800000000000001'), entitlement_ids: ['premium'] }),
      cancellation(u.alice, 'UNSUBSCRIBE', 40, 30, 60, { ...apple('4800000000000002', '4800000000000001'), entitlement_ids: ['premium'] }),
    ],
    expected: [{ now: 45, state: { alice: {
      pro: { active: false },
      premium: { active: true, willRenew: false, expiresAt: isoDay(60) } } } }],
  },
  {
    name: 'O49 a product moved from pro to premium: a BILLING_ISSUE in grace (naming premium) puts premium in grace, not pro',
    doc: `entitlement_ids: "Entitlement identifiers of the subscription" (${DOC.types}); "If billing succeeds at any point during the grace period, you'll receive a RENEWAL event and entitlements won't be revoked" (${DOC.flows}): grace is the named entitlements'`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...apple('4900000000000001', '4900000000000001'), entitlement_ids: ['pro'] }),
      renewal(u.alice, 30 + sec(1), 30, 60, { ...apple('4900000000000002', '4900000000000001'), entitlement_ids: ['premium'] }),
      billingIssue(u.alice, 60 + sec(1), 30, 60, 76, { ...apple('4900000000000002', '4900000000000001'), entitlement_ids: ['premium'] }),
    ],
    expected: [{ now: 65, state: { alice: {
      pro: { active: false },
      premium: { active: true, status: 'grace', willRenew: false } } } }],
  },
  {
    name: 'O50 a product unmapped from every entitlement: the CANCELLATION of its renewed period (entitlement_ids null) does not extend pro, which the renewal did not',
    doc: `entitlement_ids: "It can be NULL if the product_id is not mapped to any entitlements" (${DOC.types}): the renewed period grants nothing, and a cancellation of it only stops its renewal`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...apple('5000000000000001', '5000000000000001'), entitlement_ids: ['pro'] }),
      renewal(u.alice, 30 + sec(1), 30, 60, { ...apple('5000000000000002', '5000000000000001'), entitlement_ids: null }),
      cancellation(u.alice, 'UNSUBSCRIBE', 40, 30, 60, { ...apple('5000000000000002', '5000000000000001'), entitlement_ids: null }),
    ],
    expected: [{ now: 20, state: { alice: { pro: { active: true, expiresAt: isoDay(30) } } } }, { now: 45, state: { alice: { pro: { active: false } } } }],
  },
  {
    name: 'O51 a product unmapped from every entitlement: a BILLING_ISSUE in grace (entitlement_ids null) does not put pro in grace',
    doc: `entitlement_ids: "It can be NULL if the product_id is not mapped to any entitlements" (${DOC.types}); grace keeps the entitlements of the product, and it has none`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...apple('5100000000000001', '5100000000000001'), entitlement_ids: ['pro'] }),
      billingIssue(u.alice, 30 + sec(1), 0, 30, 46, { ...apple('5100000000000001', '5100000000000001'), entitlement_ids: null }),
    ],
    expected: [{ now: 35, state: { alice: { pro: { active: false } } } }],
  },

  // --- An event without transaction ids beside two subscriptions of its product --------------
  {
    name: 'O52 two Stripe subscriptions of one product: a refund without transaction ids of the older one\'s period refunds that one, not the newer',
    doc: `purchased_at_ms: "Time when the transaction was purchased"; CANCELLATION: "A subscription or non-renewing purchase has been cancelled or refunded" (${DOC.types}): the event's own period says which subscription it is about`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, stripe('in_A1', 'prod_PRO', 'sub_A')),
      renewal(u.alice, 30 + sec(1), 30, 60, stripe('in_A2', 'prod_PRO', 'sub_A')),
      purchase(u.alice, 40, 40, 70, stripe('in_B1', 'prod_PRO', 'sub_B')),
      refund(u.alice, 45, 30, 45, { ...stripe('in_A2', 'prod_PRO', 'sub_A'), transaction_id: undefined, original_transaction_id: undefined }),
      refund(u.alice, 50, 40, 50, stripe('in_B1', 'prod_PRO', 'sub_B')),
    ],
    expected: [{ now: 51, state: { alice: { pro: { active: false } } } }],
  },
  {
    name: 'O53 two Stripe subscriptions of one product: a CANCELLATION without transaction ids of the older one\'s period stops that one renewing',
    doc: `"When a customer cancels their subscription, a CANCELLATION webhook is sent" (${DOC.flows}); purchased_at_ms and expiration_at_ms are the transaction's (${DOC.types})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, stripe('in_A1', 'prod_PRO', 'sub_A')),
      renewal(u.alice, 30 + sec(1), 30, 60, stripe('in_A2', 'prod_PRO', 'sub_A')),
      purchase(u.alice, 40, 40, 70, stripe('in_B1', 'prod_PRO', 'sub_B')),
      cancellation(u.alice, 'UNSUBSCRIBE', 45, 30, 60, { ...stripe('in_A2', 'prod_PRO', 'sub_A'), transaction_id: undefined, original_transaction_id: undefined }),
      cancellation(u.alice, 'UNSUBSCRIBE', 46, 40, 70, stripe('in_B1', 'prod_PRO', 'sub_B')),
    ],
    expected: [{ now: 50, state: { alice: { pro: { active: true, willRenew: false } } } }],
  },
  {
    name: 'O54 two Stripe subscriptions of one product: a RENEWAL without transaction ids renews the one whose period ends where it begins, not the newer',
    doc: `RENEWAL: "An existing subscription has been renewed" (${DOC.types}); its purchased_at_ms is when the renewed period began, where the older subscription's ended`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, stripe('in_A1', 'prod_PRO', 'sub_A')),
      purchase(u.alice, 20, 20, 50, stripe('in_B1', 'prod_PRO', 'sub_B')),
      renewal(u.alice, 30 + sec(1), 30, 60, { ...stripe('in_A2', 'prod_PRO', 'sub_A'), transaction_id: undefined, original_transaction_id: undefined }),
      cancellation(u.alice, 'UNSUBSCRIBE', 35, 20, 50, stripe('in_B1', 'prod_PRO', 'sub_B')),
    ],
    expected: [{ now: 40, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(60) } } } }],
  },

  // --- A refund's EXPIRATION, then the refund reversed ------------------------------------------
  {
    name: 'O55 an App Store refund, its EXPIRATION (CUSTOMER_SUPPORT), then REFUND_REVERSED: active and renewing again, as before the refund',
    doc: `CUSTOMER_SUPPORT: "Note that this does not mean that a subscription's autorenewal preference has been deactivated since refunds can be given without cancelling a subscription"; REFUND_REVERSED: "A refund has been reversed" (${DOC.types})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      refund(u.alice, 5, 0, 5),
      expiration(u.alice, 'CUSTOMER_SUPPORT', 5 + sec(2), 0, 5),
      event('refund-reversed', u.alice, 8, 0, 30),
    ],
    expected: [{ now: 9, state: { alice: { pro: { active: true, status: 'active', willRenew: true, expiresAt: isoDay(30) } } } }],
  },
  {
    name: 'O56 an App Store refund told only by its EXPIRATION (CUSTOMER_SUPPORT): no access, refunded',
    doc: `CUSTOMER_SUPPORT: "Customer received a refund from Apple support" (${DOC.types}); "Granting a refund will immediately expire the subscription and remove any entitlement access." (${DOC.refunds})`,
    items: (u) => [purchase(u.alice, 0, 0, 30), expiration(u.alice, 'CUSTOMER_SUPPORT', 5, 0, 5)],
    expected: [{ now: 6, state: { alice: { pro: { active: false, status: 'refunded' } } } }],
  },
];

// ---------------------------------------------------------------------------------------------

/** Every order (or a sample) on Postgres; in order and reversed on PGlite (deliveryOrdersOn). */
const orders = (n: number, kind: DatabaseKind) => deliveryOrdersOn(kind, n, { everyOrderOn: 'postgres', sample: 3, seed: 2611 });

let revenuecat: FakeRevenueCat;
beforeAll(async () => {
  revenuecat = await startFakeRevenueCat();
});
afterAll(async () => {
  await revenuecat.close();
});

describe.each(DATABASE_KINDS)('outside audit: adversarial flows in every delivery order, on %s', (kind) => {
  const db = suiteDatabase(kind);
  let restoreEnv: () => void;
  beforeAll(() => {
    restoreEnv = setEnv(flowSettings(revenuecat));
  });
  afterAll(() => {
    revenuecat.setClock(undefined);
    restoreEnv();
  });

  for (const flow of flows) it(flow.name, () => runFlowInOrders(db, flow, newUsers, orders, revenuecat), 180_000);
});
