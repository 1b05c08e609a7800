import { randomUUID } from 'node:crypto';
import type { DatabaseKind } from '../support/databases.ts';
import {
  apple, billingEvent, cancellation, day, deliveryOrdersOn, describeFlows, DOC, event, expiration, isoDay, play, purchase, refund, renewal, trial,
  type Flow,
} from './support.ts';

/**
 * A store's subscription lifecycle as RevenueCat documents it, each flow to the state its pages
 * say: Apple's family sharing, a Google Play pause and an early resume, a trial cancelled and
 * re-enabled, upgrades and downgrades on each store (a downgrade's event generated hours before it takes effect), refunds and their reversal, events whose
 * entitlements are null or empty. Webhooks only, through the real route and SQL, on both engines,
 * in every delivery order on Postgres (in order and reversed on PGlite). The state is read after
 * every event was delivered.
 */
type Role = 'alice';
const newUsers = (): Record<Role, string> => ({ alice: randomUUID() });
const FAMILY = 'https://www.revenuecat.com/docs/platform-resources/apple-platform-resources/apple-family-sharing';
const SAMPLES = 'https://www.revenuecat.com/docs/integrations/webhooks/sample-events';
const BASIC = 'com.example.basic.monthly';
const PREMIUM = 'com.example.premium.monthly';
const bought = (store: string, transaction: string, original: string, product: string, entitlements: string[] | null = ['pro']) =>
  ({ store, product_id: product, transaction_id: transaction, original_transaction_id: original, entitlement_ids: entitlements });
const noAccess = { active: false };

const flows: Flow<Role>[] = [
  {
    name: 'a trial converts, its RENEWAL (is_trial_conversion) arriving before the trial\'s INITIAL_PURCHASE: active, renewing, to the paid end',
    doc: `A trial: INITIAL_PURCHASE with period_type TRIAL, then a RENEWAL when it converts (${DOC.flows})`,
    items: (u) => [
      trial(u.alice, 0, 0, 7),
      renewal(u.alice, 7, 7, 37, { ...apple('1001'), is_trial_conversion: true }),
    ],
    expected: [{ now: 8, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(37), periodType: 'NORMAL' } } } }],
  },
  {
    name: 'family sharing: her own purchase and a shared one of the same product; the shared one revoked (she left the family): her own still grants',
    doc: `"RevenueCat will automatically revoke any entitlements that were granted by the user's former family" (${FAMILY}); is_family_share (${DOC.types})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...apple('500', '500'), is_family_share: false }),
      purchase(u.alice, 1, 1, 31, { ...apple('900', '900'), is_family_share: true }),
      expiration(u.alice, 'UNKNOWN', 10, 1, 10, { ...apple('900', '900'), is_family_share: true }),
    ],
    expected: [{ now: 11, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(30) } } } }],
  },
  {
    name: 'family sharing only: the shared purchase revoked mid-period: no access',
    doc: `"RevenueCat will automatically revoke any entitlements that were granted by the user's former family" (${FAMILY})`,
    items: (u) => [
      purchase(u.alice, 1, 1, 31, { ...apple('900', '900'), is_family_share: true }),
      expiration(u.alice, 'UNKNOWN', 10, 1, 10, { ...apple('900', '900'), is_family_share: true }),
    ],
    expected: [{ now: 11, state: { alice: { pro: noAccess } } }],
  },
  {
    name: 'a Google Play pause takes effect, then the user resumes early (a RENEWAL before auto_resume_at): access, renewing, a new cycle',
    doc: `"If the customer unpauses their subscription, they regain entitlements and the subscription's billing cycle resumes." (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, play('GPA.1111-1111-1111-11111')),
      event('subscription-paused', u.alice, 10, 0, 30, { ...play('GPA.1111-1111-1111-11111'), auto_resume_at_ms: day(60) }),
      event('expiration-paused', u.alice, 30, 0, 30, play('GPA.1111-1111-1111-11111')),
      renewal(u.alice, 45, 45, 75, play('GPA.1111-1111-1111-11111..0')),
    ],
    expected: [{ now: 46, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(75), status: 'active' } } } }],
  },
  {
    name: 'a Google Play pause scheduled, then cancelled before it takes effect, then its EXPIRATION at the period\'s end: no access after it',
    doc: `"You should not revoke access when receiving a SUBSCRIPTION_PAUSED event"; CANCELLATION; EXPIRATION (${DOC.types})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, play('GPA.7777-7777-7777-77777')),
      event('subscription-paused', u.alice, 10, 0, 30, { ...play('GPA.7777-7777-7777-77777'), auto_resume_at_ms: day(60) }),
      cancellation(u.alice, 'UNSUBSCRIBE', 15, 0, 30, play('GPA.7777-7777-7777-77777')),
      expiration(u.alice, 'UNSUBSCRIBE', 30, 0, 30, play('GPA.7777-7777-7777-77777')),
    ],
    expected: [{ now: 31, state: { alice: { pro: noAccess } } }],
  },
  {
    name: 'an App Store trial cancelled, re-enabled (UNCANCELLATION) and converted: renewing',
    doc: `UNCANCELLATION: "A non-expired cancelled subscription has been re-enabled." (${DOC.types}); a trial's conversion (${DOC.flows})`,
    items: (u) => [
      trial(u.alice, 0, 0, 7),
      cancellation(u.alice, 'UNSUBSCRIBE', 2, 0, 7, { period_type: 'TRIAL' }),
      event('uncancellation', u.alice, 4, 0, 7, { period_type: 'TRIAL' }),
      renewal(u.alice, 7, 7, 37, { ...apple('1001'), is_trial_conversion: true }),
    ],
    expected: [{ now: 8, state: { alice: { pro: { active: true, willRenew: true, status: 'active', expiresAt: isoDay(37) } } } }],
  },
  {
    name: 'the same, cancelled and re-enabled within the trial\'s last 24 hours: renewing',
    doc: `UNCANCELLATION: "A non-expired cancelled subscription has been re-enabled." (${DOC.types})`,
    items: (u) => [
      trial(u.alice, 0, 0, 7),
      cancellation(u.alice, 'UNSUBSCRIBE', 6.5, 0, 7, { period_type: 'TRIAL' }),
      event('uncancellation', u.alice, 6.7, 0, 7, { period_type: 'TRIAL' }),
      renewal(u.alice, 7, 7, 37, { ...apple('1001'), is_trial_conversion: true }),
    ],
    expected: [{ now: 8, state: { alice: { pro: { active: true, willRenew: true, status: 'active', expiresAt: isoDay(37) } } } }],
  },
  {
    name: 'a Google Play downgrade at renewal (DEFERRED), applied by a RENEWAL of the new product under a new order: the old entitlement ends, the new grants',
    doc: `"When the customer encounters their next renewal, a RENEWAL event will be dispatched ... the user's entitlements will be replaced by the entitlements from the new product." (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('PLAY_STORE', 'GPA.2222-2222-2222-22222', 'GPA.2222-2222-2222-22222', 'premium_monthly:monthly', ['premium'])),
      event('product-change', u.alice, 10, 0, 30, { ...bought('PLAY_STORE', 'GPA.2222-2222-2222-22222', 'GPA.2222-2222-2222-22222', 'premium_monthly:monthly', ['premium']), new_product_id: 'basic_monthly:monthly' }),
      renewal(u.alice, 30, 30, 60, bought('PLAY_STORE', 'GPA.3333-3333-3333-33333', 'GPA.3333-3333-3333-33333', 'basic_monthly:monthly', ['basic'])),
    ],
    expected: [{ now: 31, state: { alice: { premium: noAccess, basic: { active: true, willRenew: true, expiresAt: isoDay(60) } } } }],
  },
  {
    name: 'an App Store downgrade at renewal whose RENEWAL is generated hours before the old period ends: the old entitlement grants to its end, then the new one',
    doc: `"The customer will retain their entitlement based on the original product. When the customer encounters their next renewal, a RENEWAL event will be dispatched" (${DOC.flows}); RevenueCat's sample RENEWAL is stamped hours before its purchased_at_ms (${SAMPLES})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', '7000', '7000', PREMIUM, ['premium'])),
      event('product-change', u.alice, 10, 0, 30, { ...bought('APP_STORE', '7000', '7000', PREMIUM, ['premium']), new_product_id: BASIC }),
      renewal(u.alice, 29.6, 30, 60, bought('APP_STORE', '7001', '7000', BASIC, ['basic'])),
    ],
    expected: [
      { now: 29.8, state: { alice: { premium: { active: true, willRenew: false, expiresAt: isoDay(30), graceExpiresAt: null } } } },
      { now: 31, state: { alice: { premium: noAccess, basic: { active: true, willRenew: true, expiresAt: isoDay(60) } } } },
    ],
  },
  {
    name: 'a Google Play DEFERRED downgrade applied by the new product\'s INITIAL_PURCHASE, generated hours before the old period ends: the old entitlement grants to its end',
    doc: `"When the product change goes into effect you will receive a RENEWAL event on Apple and Stripe or a INITIAL_PURCHASE event on Google Play"; DEFERRED: "Replacement takes effect when the old plan expires" (${DOC.manage})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('PLAY_STORE', 'GPA.7100-7100-7100-71000', 'GPA.7100-7100-7100-71000', 'premium_monthly:monthly', ['premium'])),
      event('product-change', u.alice, 10, 0, 30, { ...bought('PLAY_STORE', 'GPA.7100-7100-7100-71000', 'GPA.7100-7100-7100-71000', 'premium_monthly:monthly', ['premium']), new_product_id: 'basic_monthly:monthly' }),
      purchase(u.alice, 29.6, 30, 60, bought('PLAY_STORE', 'GPA.7200-7200-7200-72000', 'GPA.7200-7200-7200-72000', 'basic_monthly:monthly', ['basic'])),
    ],
    expected: [
      { now: 29.8, state: { alice: { premium: { active: true, willRenew: false, expiresAt: isoDay(30), graceExpiresAt: null } } } },
      { now: 31, state: { alice: { premium: noAccess, basic: { active: true, willRenew: true, expiresAt: isoDay(60) } } } },
    ],
  },
  {
    name: 'two App Store upgrades in one period (basic, premium, ultra; one entitlement each): only the last grants',
    doc: `An upgrade: "the user's entitlements will be replaced by the entitlements from the new product" (${DOC.manage}, ${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'T0', 'T0', BASIC, ['basic'])),
      renewal(u.alice, 5, 5, 35, bought('APP_STORE', 'T1', 'T0', PREMIUM, ['premium'])),
      renewal(u.alice, 10, 10, 40, bought('APP_STORE', 'T2', 'T0', 'com.example.ultra.monthly', ['ultra'])),
    ],
    expected: [{ now: 11, state: { alice: { basic: noAccess, premium: noAccess, ultra: { active: true, willRenew: true, expiresAt: isoDay(40) } } } }],
  },
  {
    name: 'a RENEWAL naming entitlement_ids null (the product mapped to none), then its CANCELLATION: no access after the old period',
    doc: `entitlement_ids: "It can be NULL if the product_id is not mapped to any entitlements." (${DOC.types})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      renewal(u.alice, 30, 30, 60, { ...apple('1001'), entitlement_ids: null }),
      cancellation(u.alice, 'UNSUBSCRIBE', 40, 30, 60, { ...apple('1001'), entitlement_ids: null }),
    ],
    expected: [{ now: 45, state: { alice: { pro: noAccess } } }],
  },
  {
    name: 'an EXPIRATION whose expiration_at_ms is null: no access',
    doc: `EXPIRATION: "A subscription has expired and access should be removed." (${DOC.types})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      event('expiration', u.alice, 10, 0, null, { ...apple('1000'), expiration_reason: 'UNSUBSCRIBE' }),
    ],
    expected: [{ now: 11, state: { alice: { pro: noAccess } } }],
  },
  {
    name: 'a refund of the latest period after SUBSCRIPTION_EXTENDED pushed its end back: no access',
    doc: `"Granting a refund will immediately expire the subscription and remove any entitlement access." (${DOC.refunds}); SUBSCRIPTION_EXTENDED (${DOC.types})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      renewal(u.alice, 30, 30, 60, apple('1001')),
      event('subscription-extended', u.alice, 35, 30, 75, apple('1001')),
      refund(u.alice, 40, 30, 40, apple('1001')),
    ],
    expected: [{ now: 41, state: { alice: { pro: noAccess } } }],
  },
  {
    name: 'a Google Play trial whose first charge fails into grace, then succeeds: renewing',
    doc: `With a grace period "the customer will retain entitlements ... If billing succeeds at any point during the grace period, you'll receive a RENEWAL event" (${DOC.flows})`,
    items: (u) => [
      trial(u.alice, 0, 0, 7, play('GPA.4545-4545-4545-45454')),
      billingEvent('billing-issue-grace', u.alice, { at: 7, purchased: 0, expires: 7 }, { ...play('GPA.4545-4545-4545-45454'), period_type: 'TRIAL', grace_period_expiration_at_ms: day(10) }),
      cancellation(u.alice, 'BILLING_ERROR', 7.0001, 0, 7, { ...play('GPA.4545-4545-4545-45454'), period_type: 'TRIAL' }),
      renewal(u.alice, 9, 9, 39, { ...play('GPA.4545-4545-4545-45454..0'), is_trial_conversion: true }),
    ],
    expected: [{ now: 9.5, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(39), status: 'active' } } } }],
  },
  {
    name: 'a refund naming entitlement_ids [] (empty, not null): no access',
    doc: `"Granting a refund will immediately expire the subscription and remove any entitlement access." (${DOC.refunds})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      refund(u.alice, 10, 0, 10, { entitlement_ids: [] }),
    ],
    expected: [{ now: 11, state: { alice: { pro: noAccess } } }],
  },
  {
    name: 'an App Store refund of the latest period, then REFUND_REVERSED: access again, renewing',
    doc: `REFUND_REVERSED: "A refund has been reversed." (${DOC.types})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      renewal(u.alice, 30, 30, 60, apple('1001')),
      refund(u.alice, 40, 30, 40, apple('1001')),
      billingEvent('refund-reversed', u.alice, { at: 45, purchased: 30, expires: 60 }, apple('1001')),
    ],
    expected: [{ now: 46, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(60) } } } }],
  },
];

/** Every order on Postgres; in order and reversed on PGlite (deliveryOrdersOn). */
const orders = (n: number, kind: DatabaseKind) => deliveryOrdersOn(kind, n, { everyOrderOn: 'postgres', sample: 6, seed: 5005 });

describeFlows('store lifecycles as RevenueCat documents them, in every delivery order', flows, newUsers, orders);
