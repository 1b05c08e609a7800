import { randomBytes, randomUUID } from 'node:crypto';
import type { DatabaseKind } from '../support/databases.ts';
import {
  apple, cancellation, deliveryOrdersOn, DOC, event, expiration, isoDay, MONTHLY, play, purchase, refund, renewal,
  transfer, YEARLY, type Flow, describeFlows } from './support.ts';

/**
 * An outside review of three billing changes of 2026-12-08: a zero-price Stripe RENEWAL refused on a
 * `refunded` row (reverted after this review), a transfer back that replaces the receiver's
 * `transferred` row, and the lineage ordered by when the store acted on the App Store, the Mac App
 * Store and Google Play. Real webhook route and SQL, both engines; every order up to three items,
 * six covering every order of any three of four, in order + reversed + four sampled beyond, on
 * Postgres; in order and reversed on PGlite.
 *
 * Z01, Z02 and Z05 are what the reverted rule got wrong: a refund alone does not revoke a Stripe
 * subscription's next invoices, so their zero-price RENEWAL (a 100%-off coupon, a past-due
 * invoice, a change back's proration) grants.
 *
 * Flows marked `failing` are known faults, not fixed: the service's state differs from what
 * RevenueCat's pages say; they run as it.fails (SHOW_KNOWN_FAULTS=1 runs them as plain tests, to
 * see the diffs):
 *   L08, L10       a Play immediate replacement whose old product's RENEWAL is generated after the
 *                  replacement (basic keeps granting), and an App Store upgrade made before the old
 *                  product's already-charged period begins, that RENEWAL generated after the
 *                  upgrade's (premium is cut at the old period's start).
 * L04, L06 and L11 failed before the lineage change and pass now.
 */
type Role = 'alice' | 'bob' | 'anon';
type Users = Record<Role, string>;

const newUsers = (): Users => ({ alice: randomUUID(), bob: randomUUID(), anon: `$RCAnonymousID:${randomBytes(16).toString('hex')}` });
const TYPES = DOC.types;
const FLOWS = DOC.flows;
const GRACE = 'https://www.revenuecat.com/docs/subscription-guidance/how-grace-periods-work (Stripe)';
const REFUNDS = 'https://www.revenuecat.com/docs/subscription-guidance/refunds';
const PAST_DUE = `"If you've configured Stripe to leave the subscription past-due: RevenueCat will not revoke access and will continue generating RENEWAL events with a zero price" (${GRACE})`;
const STRIPE_REFUND = `Stripe: "RevenueCat will automatically detect when a refund has been issued through Stripe. Note that you have the option in Stripe to refund, or refund and revoke access." ("Granting a refund will immediately expire the subscription" is said of Google Play and Web Billing refunds from RevenueCat's dashboard) (${REFUNDS})`;

const stripe = (tx: string) => ({ store: 'STRIPE', product_id: 'prod_PRO', transaction_id: tx, original_transaction_id: 'sub_1REVIEW' });
const stripeOf = (invoice: string, product: string, entitlement: string) =>
  ({ store: 'STRIPE', product_id: product, transaction_id: invoice, original_transaction_id: 'sub_1SWITCH', entitlement_ids: [entitlement] });
const renewing = (expires: number) => ({ active: true, willRenew: true, expiresAt: isoDay(expires) });

// --- Change 1: zero-price Stripe RENEWAL on a refunded row; REFUND_REVERSED of an ended period ----

const refundFlows: Flow<Role>[] = [
  {
    name: 'Z01 Stripe: period 1 paid then refunded (Stripe "refund", access not revoked in Stripe), period 2 invoiced at 0 (100%-off coupon / past-due): renews',
    doc: `${STRIPE_REFUND}; ${PAST_DUE}; RENEWAL: "An existing subscription has been renewed or a lapsed user has resubscribed." (${TYPES})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), refund(u.alice, 5, 0, 5, stripe('in_1')),
      renewal(u.alice, 30.001, 30, 60, { ...stripe('in_2'), price: 0 })],
    expected: [{ now: 31, state: { alice: { pro: { active: true, expiresAt: isoDay(60) } } } }],
  },
  {
    name: 'Z02 Stripe: refunded, the refund reversed after the period ended, then a zero-price RENEWAL (coupon / past-due): renews',
    doc: `REFUND_REVERSED: "A refund has been reversed" (${TYPES}); ${PAST_DUE}`,
    items: (u) => [purchase(u.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), refund(u.alice, 5, 0, 5, stripe('in_1')),
      event('refund-reversed', u.alice, 40, 0, 30, stripe('in_1')), renewal(u.alice, 60.001, 60, 90, { ...stripe('in_2'), price: 0 })],
    expected: [{ now: 61, state: { alice: { pro: { active: true, expiresAt: isoDay(90) } } } }],
  },
  {
    name: 'Z03 Stripe: refunded, then a PAID renewal, then a zero-price renewal (coupon / past-due): renews to the last period',
    doc: `RENEWAL (${TYPES}); ${PAST_DUE}`,
    items: (u) => [purchase(u.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), refund(u.alice, 5, 0, 5, stripe('in_1')),
      renewal(u.alice, 30.001, 30, 60, { ...stripe('in_2'), price: 9.99 }), renewal(u.alice, 60.001, 60, 90, { ...stripe('in_3'), price: 0 })],
    expected: [{ now: 61, state: { alice: { pro: { active: true, expiresAt: isoDay(90) } } } }],
  },
  {
    name: 'Z04 Stripe: refunded, the refund reversed while the period lasts, duplicates of both delivered: active renewing to 30',
    doc: `REFUND_REVERSED: "A refund has been reversed" (${TYPES}); "the retry will have the same id and event_timestamp_ms of the first attempt" (${TYPES})`,
    items: (u) => {
      const r = refund(u.alice, 5, 0, 5, stripe('in_1'));
      const rr = event('refund-reversed', u.alice, 12, 0, 30, stripe('in_1'));
      return [purchase(u.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), r, rr, r, rr];
    },
    expected: [{ now: 13, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(30) } } } }],
  },
  {
    name: 'Z05 Stripe: basic changed to premium at once, basic\'s invoice refunded, then changed back to basic at once (proration leaves 0 to pay): basic grants, premium ends',
    doc: `Immediate Product Change: "the customer will immediately have access to the new entitlements"; Stripe's RENEWAL "may show the same purchased_at_ms as the original subscription (ie. t0)" (${FLOWS}); ${STRIPE_REFUND}`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...stripeOf('in_1', 'prod_basic', 'basic'), price: 4.99 }),
      renewal(u.alice, 10, 0, 30, { ...stripeOf('in_2', 'prod_premium', 'premium'), price: 5 }),
      refund(u.alice, 12, 0, 12, stripeOf('in_1', 'prod_basic', 'basic')),
      renewal(u.alice, 15, 0, 30, { ...stripeOf('in_3', 'prod_basic', 'basic'), price: 0 }),
    ],
    expected: [{ now: 16, state: { alice: { premium: { active: false }, basic: { active: true, expiresAt: isoDay(30) } } } }],
  },
  {
    name: 'Z06 App Store: refunded, the refund reversed after the period ended, then the next RENEWAL (paid): renewing',
    doc: `EXPIRATION reason CUSTOMER_SUPPORT "does not mean that a subscription's autorenewal preference has been deactivated since refunds can be given without cancelling a subscription" (${TYPES}); RENEWAL (${TYPES})`,
    items: (u) => [purchase(u.alice, 0, 0, 30), refund(u.alice, 5, 0, 5), event('refund-reversed', u.alice, 40, 0, 30, apple('1000')),
      renewal(u.alice, 45, 45, 75, apple('2000000000000045'))],
    expected: [{ now: 46, state: { alice: { pro: renewing(75) } } }],
  },
  {
    name: 'Z07 App Store: refunded (auto-renewal left on), the next period renewed (paid), then the refund of the first period reversed after it ended: renewing to the renewed end',
    doc: `"refunds can be given without cancelling a subscription" (EXPIRATION reasons, ${TYPES}); REFUND_REVERSED: "A refund has been reversed" (${TYPES})`,
    items: (u) => [purchase(u.alice, 0, 0, 30), refund(u.alice, 5, 0, 5), renewal(u.alice, 30, 30, 60, apple('2000000000000030')),
      event('refund-reversed', u.alice, 40, 0, 30, apple('1000'))],
    expected: [{ now: 41, state: { alice: { pro: renewing(60) } } }],
  },
  {
    name: 'Z08 Stripe: refunded, the refund reversed after the period ended, the open invoice\'s zero-price RENEWAL, then the invoice paid: renewing',
    doc: `RENEWAL: "An existing subscription has been renewed or a lapsed user has resubscribed." (${TYPES})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), refund(u.alice, 5, 0, 5, stripe('in_1')),
      event('refund-reversed', u.alice, 40, 0, 30, stripe('in_1')), renewal(u.alice, 60.001, 60, 90, { ...stripe('in_2'), price: 0 }),
      renewal(u.alice, 65, 65, 95, { ...stripe('in_3'), price: 9.99 })],
    expected: [{ now: 66, state: { alice: { pro: renewing(95) } } }],
  },
  {
    name: 'Z09 Stripe: the latest period refunded, then the customer subscribes again (a new subscription, a free trial) and its first renewal is 100%-off: active',
    doc: `INITIAL_PURCHASE: "A new subscription has been purchased." (${TYPES}); ${PAST_DUE}`,
    items: (u) => [purchase(u.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), refund(u.alice, 5, 0, 5, stripe('in_1')),
      purchase(u.alice, 40, 40, 47, { store: 'STRIPE', product_id: 'prod_PRO', transaction_id: 'in_9', original_transaction_id: 'sub_2REVIEW', period_type: 'TRIAL', price: 0 }),
      renewal(u.alice, 47.001, 47, 77, { store: 'STRIPE', product_id: 'prod_PRO', transaction_id: 'in_10', original_transaction_id: 'sub_2REVIEW', price: 0 })],
    expected: [{ now: 48, state: { alice: { pro: { active: true, expiresAt: isoDay(77) } } } }],
  },
];

// --- Change 2: a transfer back replaces the receiver's `transferred` row --------------------------

const transferFlows: Flow<Role>[] = [
  {
    name: 'T01 App Store: transferred to bob, bob\'s RENEWAL, then transferred back to alice: alice has the renewed period, renewing',
    doc: `"you'll receive a TRANSFER event and the entitlements will be removed from user 1 and added to user 2" (${FLOWS})`,
    items: (u) => [purchase(u.alice, 0, 0, 30), transfer([u.alice], [u.bob], 10), renewal(u.bob, 30, 30, 60, apple('2000000000000030')),
      transfer([u.bob], [u.alice], 40)],
    expected: [{ now: 41, state: { alice: { pro: renewing(60) }, bob: { pro: { active: false } } } }],
  },
  {
    name: 'T02 Stripe active: transferred to bob and back, the transfer back delivered twice: alice active (a transfer back of an active row stays active)',
    doc: `"the entitlements will be removed from user 1 and added to user 2" (${FLOWS}); retries keep their id (${TYPES})`,
    items: (u) => {
      const back = transfer([u.bob], [u.alice], 15, { store: 'STRIPE' });
      return [purchase(u.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), transfer([u.alice], [u.bob], 10, { store: 'STRIPE' }), back, back];
    },
    expected: [{ now: 16, state: { alice: { pro: renewing(30) }, bob: { pro: { active: false } } } }],
  },
  {
    name: 'T03 Stripe: transferred to bob, refunded while bob\'s, transferred back, then the zero-price RENEWAL: alice nothing (refunded)',
    doc: `"the entitlements will be removed from user 1 and added to user 2" (${FLOWS}); "RevenueCat will revoke access but continues generating RENEWAL events with a zero price while the invoice remains open" (${GRACE})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), transfer([u.alice], [u.bob], 10, { store: 'STRIPE' }),
      refund(u.bob, 12, 0, 12, stripe('in_1')), transfer([u.bob], [u.alice], 15, { store: 'STRIPE' })],
    expected: [{ now: 16, state: { alice: { pro: { active: false } }, bob: { pro: { active: false } } } }],
  },
  {
    name: 'T04 App Store: away at 10, back at 20, away again at 25: bob has it (three transfers, any order)',
    doc: `"the entitlements will be removed from user 1 and added to user 2" (${FLOWS})`,
    items: (u) => [purchase(u.alice, 0, 0, 30), transfer([u.alice], [u.bob], 10), transfer([u.bob], [u.alice], 20), transfer([u.alice], [u.bob], 25)],
    expected: [{ now: 26, state: { alice: { pro: { active: false } }, bob: { pro: renewing(30) } } }],
  },
  {
    name: 'T05 App Store: cancelled while alice\'s, transferred away and back, the period\'s EXPIRATION delivered to alice: expired',
    doc: `"When a customer cancels their subscription, a CANCELLATION webhook is sent. At the end of the billing cycle, an EXPIRATION webhook is sent" (${FLOWS})`,
    items: (u) => [purchase(u.alice, 0, 0, 30), cancellation(u.alice, 'UNSUBSCRIBE', 5, 0, 30), transfer([u.alice], [u.bob], 10),
      transfer([u.bob], [u.alice], 20), expiration(u.alice, 'UNSUBSCRIBE', 30, 0, 30)],
    expected: [{ now: 31, state: { alice: { pro: { active: false, willRenew: false, expiresAt: isoDay(30) } }, bob: { pro: { active: false } } } }],
  },
  {
    name: 'T06 Stripe: transferred to bob, marked unpaid while bob\'s (EXPIRATION BILLING_ERROR), transferred back, then the open invoice\'s zero-price RENEWAL: alice nothing',
    doc: `"RevenueCat will revoke access but continues generating RENEWAL events with a zero price while the invoice remains open" (${GRACE}); "the entitlements will be removed from user 1 and added to user 2" (${FLOWS})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), transfer([u.alice], [u.bob], 10, { store: 'STRIPE' }),
      expiration(u.bob, 'BILLING_ERROR', 37, 0, 37, stripe('in_1')), transfer([u.bob], [u.alice], 40, { store: 'STRIPE' }),
      renewal(u.alice, 60.001, 60, 90, { ...stripe('in_2'), price: 0 })],
    expected: [{ now: 61, state: { alice: { pro: { active: false } }, bob: { pro: { active: false } } } }],
  },
  {
    name: 'T07 ... the same, the invoice then paid (a RENEWAL with its price): alice renewing',
    doc: `RENEWAL: "An existing subscription has been renewed or a lapsed user has resubscribed." (${TYPES})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), transfer([u.alice], [u.bob], 10, { store: 'STRIPE' }),
      expiration(u.bob, 'BILLING_ERROR', 37, 0, 37, stripe('in_1')), transfer([u.bob], [u.alice], 40, { store: 'STRIPE' }),
      renewal(u.alice, 60.001, 60, 90, { ...stripe('in_2'), price: 9.99 })],
    expected: [{ now: 61, state: { alice: { pro: renewing(90) }, bob: { pro: { active: false } } } }],
  },
];

// --- Change 3: lineage by when the store acted ----------------------------------------------------

const basic = (tx: string) => ({ ...apple(tx, '1000', MONTHLY), entitlement_ids: ['basic'] });
const premium = (tx: string) => ({ ...apple(tx, '1000', YEARLY), entitlement_ids: ['premium'] });
const PLAY_BASIC = 'basic_monthly:monthly';
const PLAY_PREMIUM = 'premium_monthly:monthly';

const lineageFlows: Flow<Role>[] = [
  {
    name: 'L01 App Store: downgrade premium->basic at period end, basic\'s RENEWAL generated hours before the period begins: premium to its end, then basic',
    doc: `"In the case of a product change at period end ... The customer will retain their entitlement based on the original product. When the customer encounters their next renewal, a RENEWAL event will be dispatched ... and the user's entitlements will be replaced by the entitlements from the new product." (${FLOWS})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, premium('1000')),
      event('product-change', u.alice, 10, 0, 30, { ...premium('1000'), new_product_id: MONTHLY }),
      renewal(u.alice, 29.8, 30, 60, basic('2000000000000030'))],
    expected: [
      { now: 29.9, state: { alice: { premium: { active: true, expiresAt: isoDay(30) } } } },
      { now: 31, state: { alice: { premium: { active: false }, basic: renewing(60) } } },
    ],
  },
  {
    name: 'L02 App Store: upgrade basic->premium, then change back (downgrade at period end), basic\'s RENEWAL generated hours before: premium to its end, then basic',
    doc: `Immediate Product Change: "the customer will immediately have access to the new entitlements"; product change at period end: "The customer will retain their entitlement based on the original product" (${FLOWS})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, basic('1000')),
      renewal(u.alice, 10, 10, 375, premium('2000000000000010')),
      event('product-change', u.alice, 20, 10, 375, { ...premium('2000000000000010'), new_product_id: MONTHLY }),
      renewal(u.alice, 374.8, 375, 405, basic('2000000000000375'))],
    expected: [
      { now: 100, state: { alice: { premium: { active: true, expiresAt: isoDay(375) } } } },
      { now: 376, state: { alice: { premium: { active: false }, basic: renewing(405) } } },
    ],
  },
  {
    name: 'L03 App Store: upgrade basic->premium, then basic\'s REFUND_REVERSED of its earlier refund: premium stays',
    doc: `"the customer will immediately have access to the new entitlements" (${FLOWS}); REFUND_REVERSED: "A refund has been reversed" (${TYPES})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, basic('1000')), refund(u.alice, 5, 0, 5, basic('1000')),
      renewal(u.alice, 10, 10, 375, premium('2000000000000010')), event('refund-reversed', u.alice, 15, 0, 30, basic('1000'))],
    expected: [{ now: 16, state: { alice: { premium: renewing(375) } } }],
  },
  {
    name: 'L04 App Store: upgrade basic->premium, then an UNCANCELLATION and SUBSCRIPTION_EXTENDED of basic\'s (replaced) period: premium stays, basic not',
    doc: `"the customer will immediately have access to the new entitlements" (${FLOWS}); SUBSCRIPTION_EXTENDED (${TYPES})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, basic('1000')), renewal(u.alice, 10, 10, 375, premium('2000000000000010')),
      event('uncancellation', u.alice, 12, 0, 30, basic('1000')), event('subscription-extended', u.alice, 14, 0, 40, basic('1000'))],
    expected: [{ now: 16, state: { alice: { premium: renewing(375), basic: { active: false } } } }],
  },
  {
    name: 'L05 App Store: a CANCELLATION-only row of basic (bought before the service existed), then the upgrade to premium: premium, basic ended',
    doc: `"the customer will immediately have access to the new entitlements" (${FLOWS})`,
    items: (u) => [cancellation(u.alice, 'UNSUBSCRIBE', 20, 0, 30, basic('1000')), renewal(u.alice, 25, 25, 390, premium('2000000000000025'))],
    expected: [{ now: 26, state: { alice: { premium: renewing(390), basic: { active: false } } } }],
  },
  {
    name: 'L06 App Store: Y01 with basic\'s late RENEWAL lacking purchased_at_ms: premium grants, basic not',
    doc: `"the customer will immediately have access to the new entitlements" (${FLOWS}); event_timestamp_ms "Does not necessarily coincide with when the action that triggered the event occurred" (${TYPES})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, basic('1000')),
      renewal(u.alice, 30.02, 30.02, 395.02, premium('2000000000000302')),
      renewal(u.alice, 30.03, 30, 60, { ...basic('2000000000000300'), purchased_at_ms: undefined })],
    expected: [{ now: 31, state: { alice: { premium: renewing(395.02), basic: { active: false } } } }],
  },
  {
    name: 'L07 Google Play immediate replacement (new order id): PRODUCT_CHANGE without new_product_id, premium\'s INITIAL_PURCHASE: premium, basic ended',
    doc: `new_product_id: "Only available in PRODUCT_CHANGE events for Play Store subscriptions with the DEFERRED replacement mode" (${TYPES}); "Old subscription is cancelled, and new subscription takes effect immediately" (${DOC.manage})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, { ...play('GPA.1111-0000-0000-00001', PLAY_BASIC), entitlement_ids: ['basic'] }),
      event('product-change', u.alice, 10, 0, 30, { ...play('GPA.1111-0000-0000-00001', PLAY_BASIC), new_product_id: undefined, entitlement_ids: ['basic'] }),
      purchase(u.alice, 10.001, 10, 40, { ...play('GPA.2222-0000-0000-00002', PLAY_PREMIUM), entitlement_ids: ['premium'] })],
    expected: [{ now: 11, state: { alice: { premium: renewing(40), basic: { active: false } } } }],
  },
  {
    name: 'L08 Google Play: basic renews, minutes later an immediate replacement to premium; basic\'s RENEWAL generated after premium\'s INITIAL_PURCHASE: premium, basic ended',
    doc: `"Old subscription is cancelled, and new subscription takes effect immediately" (${DOC.manage}); "the customer will immediately have access to the new entitlements" (${FLOWS})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, { ...play('GPA.1111-0000-0000-00003', PLAY_BASIC), entitlement_ids: ['basic'] }),
      event('product-change', u.alice, 30.02, 30, 60, { ...play('GPA.1111-0000-0000-00003..0', PLAY_BASIC), new_product_id: undefined, entitlement_ids: ['basic'] }),
      purchase(u.alice, 30.02, 30.02, 60.02, { ...play('GPA.2222-0000-0000-00004', PLAY_PREMIUM), entitlement_ids: ['premium'] }),
      renewal(u.alice, 30.03, 30, 60, { ...play('GPA.1111-0000-0000-00003..0', PLAY_BASIC), entitlement_ids: ['basic'] })],
    expected: [{ now: 31, state: { alice: { premium: renewing(60.02), basic: { active: false } } } }],
    failing: true,
  },
  {
    name: 'L10 App Store: basic renewed (period from 30), the customer upgrades at 29.8 before that period begins; basic\'s RENEWAL generated after the upgrade\'s (one receipt): premium grants, basic not',
    doc: `Immediate Product Change: "the customer will immediately have access to the new entitlements" (${FLOWS}); event_timestamp_ms: "Does not necessarily coincide with when the action that triggered the event occurred" (${TYPES})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, basic('1000')),
      renewal(u.alice, 29.8, 29.8, 394.8, premium('2000000000000298')),
      renewal(u.alice, 29.9, 30, 60, basic('2000000000000300'))],
    expected: [{ now: 31, state: { alice: { premium: renewing(394.8), basic: { active: false } } } }],
    failing: true,
  },
  {
    name: 'L09 Google Play deferred replacement: PRODUCT_CHANGE naming premium, premium begins at basic\'s period end: basic to its end, then premium',
    doc: `"In the case of a product change at period end ... The customer will retain their entitlement based on the original product" (${FLOWS}); new_product_id for Play DEFERRED (${TYPES})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, { ...play('GPA.1111-0000-0000-00005', PLAY_BASIC), entitlement_ids: ['basic'] }),
      event('product-change', u.alice, 10, 0, 30, { ...play('GPA.1111-0000-0000-00005', PLAY_BASIC), new_product_id: PLAY_PREMIUM, entitlement_ids: ['basic'] }),
      renewal(u.alice, 30.01, 30, 60, { ...play('GPA.2222-0000-0000-00006', PLAY_PREMIUM), entitlement_ids: ['premium'] })],
    expected: [{ now: 31, state: { alice: { premium: renewing(60), basic: { active: false } } } }],
  },
  {
    name: 'L11 App Store: Y02 (one entitlement) with both RENEWALs delivered twice (retries): premium, renewing',
    doc: `"the retry will have the same id and event_timestamp_ms of the first attempt" (${TYPES}); "the customer will immediately have access to the new entitlements" (${FLOWS})`,
    items: (u) => {
      const up = renewal(u.alice, 30.02, 30.02, 395.02, apple('2000000000000302', '1000', YEARLY));
      const old = renewal(u.alice, 30.03, 30, 60, apple('2000000000000300'));
      return [purchase(u.alice, 0, 0, 30), up, old, up, old];
    },
    expected: [{ now: 61, state: { alice: { pro: { active: true, productId: YEARLY, willRenew: true, expiresAt: isoDay(395.02) } } } }],
  },
];

/** Every order (or a sample) on Postgres; in order and reversed on PGlite (deliveryOrdersOn). */
const orders = (n: number, kind: DatabaseKind) => deliveryOrdersOn(kind, n, { everyOrderOn: 'postgres', sample: 4, seed: 1208 });


const ALL = [...refundFlows, ...transferFlows, ...lineageFlows];
describeFlows('review of 2026-12-08 billing changes, in every delivery order', ALL, newUsers, orders);
