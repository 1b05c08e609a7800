import { randomBytes, randomUUID } from 'node:crypto';
import {
  billingEvent, billingIssue, cancellation, deliveryOrdersOn, describeFlows, DOC, event, expiration, isoDay, play, purchase, refund, renewal, transfer,
  trial, type Flow as SuiteFlow,
} from './support.ts';

/**
 * Product changes, Play pauses, temporary grants, refunds and buying again, promotional grants and
 * overlapping sources: flows from an outside audit that the other suites did not cover (all held
 * when written; kept as regression), each through the real route and SQL, in every delivery order (up to three events; the six covering orders for four; in order,
 * reversed and two sampled orders for more) on Postgres, in order and reversed on PGlite, read as
 * GET /api/me shows it. Each flow quotes the RevenueCat page its expectation rests on (`doc`).
 */
type Role = 'alice' | 'bob' | 'anon';
type Flow = SuiteFlow<Role>;
const newUsers = (): Record<Role, string> => ({ alice: randomUUID(), bob: randomUUID(), anon: `$RCAnonymousID:${randomBytes(16).toString('hex')}` });

const TYPES = DOC.types;
const FLOWS = DOC.flows;
const MANAGE = DOC.manage;
const REFUNDS = DOC.refunds;
const GRACE = DOC.grace;
const PREPAID = DOC.prepaid;
const ENTITLEMENTS = 'https://www.revenuecat.com/docs/getting-started/entitlements';
const FAMILY = 'https://www.revenuecat.com/docs/platform-resources/apple-platform-resources/apple-family-sharing';

const bought = (store: string, tx: string, otx: string, product: string, entitlements: string[] | null = ['pro'], extra: Record<string, unknown> = {}) =>
  ({ store, product_id: product, transaction_id: tx, original_transaction_id: otx, entitlement_ids: entitlements, ...extra });

const MONTHLY = 'com.example.pro.monthly';
const YEARLY = 'com.example.pro.yearly';
const BASIC = 'com.example.basic.monthly';
const PREMIUM = 'com.example.premium.monthly';
const LIFETIME = 'com.example.pro.lifetime';
const P_BASIC = 'basic:monthly';
const P_PREMIUM = 'premium:monthly';
const P_MONTHLY = 'pro:monthly';
const P_YEARLY = 'pro:yearly';
const noAccess = { active: false };

const flows: Flow[] = [
  // ------------------------------------------------------------------ product changes
  {
    name: 'F01 App Store crossgrade to another duration (monthly -> yearly, one entitlement) at period end: monthly to its end renewing, then the yearly',
    doc: `"Crossgrade ... If the durations are different, the new subscription goes into effect at the next renewal date." (${MANAGE}); "The customer will retain their entitlement based on the original product. When the customer encounters their next renewal, a RENEWAL event will be dispatched" (${FLOWS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'X0', 'X0', MONTHLY)),
      event('product-change', u.alice, 10, 0, 30, { ...bought('APP_STORE', 'X0', 'X0', MONTHLY), new_product_id: YEARLY }),
      renewal(u.alice, 30, 30, 395, bought('APP_STORE', 'X1', 'X0', YEARLY)),
    ],
    expected: [
      { now: 40, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(395), productId: YEARLY } } } },
    ],
  },
  {
    name: 'F01b ... read before the renewal: the monthly, to its end, will renew (into the yearly)',
    doc: `"The customer will retain their entitlement based on the original product." (${FLOWS}); "The expiration_at_ms will always be for the product the customer is changing from (old product)." (${MANAGE})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'X0', 'X0', MONTHLY)),
      event('product-change', u.alice, 10, 0, 30, { ...bought('APP_STORE', 'X0', 'X0', MONTHLY), new_product_id: YEARLY }),
    ],
    expected: [{ now: 20, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(30), productId: MONTHLY } } } }],
  },
  {
    name: 'F02 App Store immediate upgrade within one entitlement, and the old product\'s EXPIRATION too: pro from the new product, renewing',
    doc: `"In the case of an immediate product change, a PRODUCT_CHANGE event will be dispatched alongside a RENEWAL event (for App Store subscriptions) ... the customer will immediately have access to the new entitlements." (${FLOWS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'Y0', 'Y0', BASIC)),
      event('product-change', u.alice, 10, 0, 30, { ...bought('APP_STORE', 'Y0', 'Y0', BASIC), new_product_id: PREMIUM }),
      renewal(u.alice, 10.0001, 10, 40, bought('APP_STORE', 'Y1', 'Y0', PREMIUM)),
      expiration(u.alice, 'UNKNOWN', 10.0002, 0, 10, bought('APP_STORE', 'Y0', 'Y0', BASIC)),
    ],
    expected: [{ now: 20, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(40), productId: PREMIUM } } } }],
  },
  {
    name: 'F03 Play immediate crossgrade monthly -> yearly (one entitlement), with the old purchase\'s EXPIRATION: the yearly grants, renewing',
    doc: `Play immediate modes: "Old subscription is cancelled, and new subscription takes effect immediately" (${MANAGE}); "When the product change goes into effect you will receive ... a INITIAL_PURCHASE event on Google Play." (${MANAGE})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, play('GPA.5100-0000-0000-00001', P_MONTHLY)),
      event('product-change', u.alice, 10, 0, 30, { ...play('GPA.5100-0000-0000-00001', P_MONTHLY), new_product_id: undefined }),
      purchase(u.alice, 10.0001, 10, 375, play('GPA.5200-0000-0000-00002', P_YEARLY)),
      expiration(u.alice, 'UNSUBSCRIBE', 10.0002, 0, 10, play('GPA.5100-0000-0000-00001', P_MONTHLY)),
    ],
    expected: [{ now: 20, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(375), productId: P_YEARLY } } } }],
  },
  {
    name: 'F04 Play immediate upgrade, then the new subscription cancelled: the new entitlement to its end, not renewing; the old one gone',
    doc: `"Old subscription is cancelled, and new subscription takes effect immediately" (${MANAGE}); "When a customer cancels their subscription, a CANCELLATION webhook is sent. At the end of the billing cycle, an EXPIRATION webhook is sent" (${FLOWS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...play('GPA.5300-0000-0000-00003', P_BASIC), entitlement_ids: ['basic'] }),
      event('product-change', u.alice, 10, 0, 30, { ...play('GPA.5300-0000-0000-00003', P_BASIC), entitlement_ids: ['basic'], new_product_id: undefined }),
      purchase(u.alice, 10.0001, 10, 40, { ...play('GPA.5400-0000-0000-00004', P_PREMIUM), entitlement_ids: ['premium'] }),
      cancellation(u.alice, 'UNSUBSCRIBE', 15, 10, 40, { ...play('GPA.5400-0000-0000-00004', P_PREMIUM), entitlement_ids: ['premium'] }),
    ],
    expected: [{ now: 20, state: { alice: { basic: noAccess, premium: { active: true, willRenew: false, expiresAt: isoDay(40) } } } }],
  },
  {
    name: 'F05 Play DEFERRED downgrade, then the whole subscription cancelled before it takes effect: premium to its end, not renewing; then nothing',
    doc: `DEFERRED: "Replacement takes effect when the old plan expires" (${MANAGE}); "When a customer cancels their subscription, a CANCELLATION webhook is sent. At the end of the billing cycle, an EXPIRATION webhook is sent and entitlements are revoked." (${FLOWS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...play('GPA.5500-0000-0000-00005', P_PREMIUM), entitlement_ids: ['premium'] }),
      event('product-change', u.alice, 10, 0, 30, { ...play('GPA.5500-0000-0000-00005', P_PREMIUM), entitlement_ids: ['premium'], new_product_id: P_BASIC }),
      cancellation(u.alice, 'UNSUBSCRIBE', 15, 0, 30, { ...play('GPA.5500-0000-0000-00005', P_PREMIUM), entitlement_ids: ['premium'] }),
    ],
    expected: [
      { now: 20, state: { alice: { premium: { active: true, willRenew: false, expiresAt: isoDay(30) }, basic: null } } },
      { now: 31, state: { alice: { premium: noAccess, basic: null } } },
    ],
  },
  {
    name: 'F06 Play prepaid plan switched to the auto-renewing base plan (immediate change): renewing, to the new plan\'s end',
    doc: `"customers can switch back and forth between prepaid and auto-renewing base plans" (${PREPAID}); "Old subscription is cancelled, and new subscription takes effect immediately" (${MANAGE})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...play('GPA.5600-0000-0000-00006', 'pro:prepaid'), period_type: 'PREPAID' }),
      event('product-change', u.alice, 10, 0, 30, { ...play('GPA.5600-0000-0000-00006', 'pro:prepaid'), period_type: 'PREPAID', new_product_id: undefined }),
      purchase(u.alice, 10.0001, 10, 40, { ...play('GPA.5700-0000-0000-00007', P_MONTHLY), period_type: 'NORMAL' }),
    ],
    expected: [{ now: 20, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(40), productId: P_MONTHLY } } } }],
  },
  {
    name: 'F07 Play PRODUCT_CHANGE (immediate, no new_product_id) with entitlement_ids null, then the new product\'s INITIAL_PURCHASE: the old entitlement ends, the new one grants',
    doc: `entitlement_ids "can be NULL if the product_id is not mapped to any entitlements" (${TYPES}); "the customer will immediately have access to the new entitlements" (${FLOWS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...play('GPA.5800-0000-0000-00008', P_BASIC), entitlement_ids: ['basic'] }),
      event('product-change', u.alice, 10, 0, 30, { ...play('GPA.5800-0000-0000-00008', P_BASIC), entitlement_ids: null, new_product_id: undefined }),
      purchase(u.alice, 10.0001, 10, 40, { ...play('GPA.5900-0000-0000-00009', P_PREMIUM), entitlement_ids: ['premium'] }),
    ],
    expected: [{ now: 20, state: { alice: { basic: noAccess, premium: { active: true, willRenew: true, expiresAt: isoDay(40) } } } }],
  },
  {
    name: 'F08 App Store upgrade during an INTRO offer, then the intro product\'s EXPIRATION at its end: the intro entitlement ends then, the upgrade renews',
    doc: `"Apple does not cancel the introductory offer but instead keeps the introductory offer active in addition to the upgraded product." (${MANAGE}); EXPIRATION: "A subscription has expired and access should be removed." (${TYPES})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'Z0', 'Z0', BASIC, ['basic'], { period_type: 'INTRO' })),
      renewal(u.alice, 10, 10, 40, bought('APP_STORE', 'Z1', 'Z0', PREMIUM, ['premium'], { period_type: 'NORMAL' })),
      expiration(u.alice, 'UNSUBSCRIBE', 30, 0, 30, bought('APP_STORE', 'Z0', 'Z0', BASIC, ['basic'], { period_type: 'INTRO' })),
    ],
    expected: [
      { now: 31, state: { alice: { basic: noAccess, premium: { active: true, willRenew: true, expiresAt: isoDay(40) } } } },
    ],
  },
  {
    name: 'F08b ... read before the intro period ends (no PRODUCT_CHANGE delivered): both active, only the upgrade renews',
    doc: `"you can expect two products in the same Subscription Group to be active simultaneously" (${MANAGE})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'Z0', 'Z0', BASIC, ['basic'], { period_type: 'INTRO' })),
      renewal(u.alice, 10, 10, 40, bought('APP_STORE', 'Z1', 'Z0', PREMIUM, ['premium'], { period_type: 'NORMAL' })),
    ],
    expected: [
      { now: 20, state: { alice: { basic: { active: true, willRenew: false, expiresAt: isoDay(30) }, premium: { active: true, willRenew: true, expiresAt: isoDay(40) } } } },
    ],
  },
  // ------------------------------------------------------------------ pauses
  {
    name: 'F09 Play pause scheduled, in effect, then the auto-resume RENEWAL: none while paused, then access renewing',
    doc: `SUBSCRIPTION_PAUSED: revoke "only when receiving an EXPIRATION event (which will have the expiration reason SUBSCRIPTION_PAUSED)" (${TYPES}); "If the customer unpauses their subscription, they regain entitlements and the subscription's billing cycle resumes." (${FLOWS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, play('GPA.6000-0000-0000-00010')),
      event('subscription-paused', u.alice, 20, 0, 30, { ...play('GPA.6000-0000-0000-00010'), auto_resume_at_ms: Date.parse(isoDay(60)) }),
      event('expiration-paused', u.alice, 30, 0, 30, play('GPA.6000-0000-0000-00010')),
      renewal(u.alice, 60, 60, 90, play('GPA.6000-0000-0000-00010..0', PLAY_MONTHLY_DEFAULT(), 'GPA.6000-0000-0000-00010')),
    ],
    expected: [
      { now: 65, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(90) } } } },
    ],
  },
  {
    name: 'F09b ... read while the pause is in effect (before the auto-resume): no access',
    doc: `"Their entitlement is revoked at the end of the subscription term." (${FLOWS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, play('GPA.6000-0000-0000-00010')),
      event('subscription-paused', u.alice, 20, 0, 30, { ...play('GPA.6000-0000-0000-00010'), auto_resume_at_ms: Date.parse(isoDay(60)) }),
      event('expiration-paused', u.alice, 30, 0, 30, play('GPA.6000-0000-0000-00010')),
    ],
    expected: [{ now: 45, state: { alice: { pro: { active: false, status: 'paused' } } } }],
  },
  {
    name: 'F09c ... read after the pause was scheduled, before the period ends: access, the period end unchanged',
    doc: `"You should not revoke access when receiving a SUBSCRIPTION_PAUSED event" (${TYPES})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, play('GPA.6000-0000-0000-00010')),
      event('subscription-paused', u.alice, 20, 0, 30, { ...play('GPA.6000-0000-0000-00010'), auto_resume_at_ms: Date.parse(isoDay(60)) }),
    ],
    expected: [{ now: 25, state: { alice: { pro: { active: true, expiresAt: isoDay(30) } } } }],
  },
  {
    name: 'F10 Play pause scheduled, then the user cancels before it takes effect, then EXPIRATION (UNSUBSCRIBE): access to the period end, not renewing; then none',
    doc: `"When a customer cancels their subscription, a CANCELLATION webhook is sent. At the end of the billing cycle, an EXPIRATION webhook is sent and entitlements are revoked." (${FLOWS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, play('GPA.6100-0000-0000-00011')),
      event('subscription-paused', u.alice, 10, 0, 30, { ...play('GPA.6100-0000-0000-00011'), auto_resume_at_ms: Date.parse(isoDay(60)) }),
      cancellation(u.alice, 'UNSUBSCRIBE', 15, 0, 30, play('GPA.6100-0000-0000-00011')),
      expiration(u.alice, 'UNSUBSCRIBE', 30, 0, 30, play('GPA.6100-0000-0000-00011')),
    ],
    expected: [
      { now: 31, state: { alice: { pro: noAccess } } },
    ],
  },
  {
    name: 'F10b ... read before the period ends: access to the period end, not renewing',
    doc: `"When a customer cancels their subscription, a CANCELLATION webhook is sent." (${FLOWS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, play('GPA.6100-0000-0000-00011')),
      event('subscription-paused', u.alice, 10, 0, 30, { ...play('GPA.6100-0000-0000-00011'), auto_resume_at_ms: Date.parse(isoDay(60)) }),
      cancellation(u.alice, 'UNSUBSCRIBE', 15, 0, 30, play('GPA.6100-0000-0000-00011')),
    ],
    expected: [{ now: 20, state: { alice: { pro: { active: true, willRenew: false, expiresAt: isoDay(30) } } } }],
  },
  // ------------------------------------------------------------------ temporary grants
  {
    name: 'F11 temporary grant, validated as a free trial, the trial cancelled at once: access to the trial end, not renewing',
    doc: `"Once the exceptional situation has been resolved and RevenueCat can validate the purchases, a regular INITIAL_PURCHASE event will be sent." (${TYPES}); "If the customer cancels their subscription at any point during the trial period, a CANCELLATION event is sent, but the user will retain entitlement access for the remainder of the trial's duration." (${FLOWS})`,
    items: (u) => [
      billingEvent('temporary-entitlement-grant', u.alice, { at: 0.001, purchased: 0, expires: 1 }, { store: 'APP_STORE', product_id: MONTHLY, transaction_id: 'tmp_r5_11' }),
      trial(u.alice, 0.01, 0, 7, bought('APP_STORE', 'T11', 'T11', MONTHLY, ['pro'], { period_type: 'TRIAL' })),
      cancellation(u.alice, 'UNSUBSCRIBE', 0.02, 0, 7, bought('APP_STORE', 'T11', 'T11', MONTHLY, ['pro'], { period_type: 'TRIAL' })),
    ],
    expected: [
      { now: 0.5, state: { alice: { pro: { active: true, willRenew: false, expiresAt: isoDay(7) } } } },
      { now: 3, state: { alice: { pro: { active: true, willRenew: false, expiresAt: isoDay(7) } } } },
      { now: 8, state: { alice: { pro: noAccess } } },
    ],
  },
  {
    name: 'F12 temporary grant validated by a lifetime (NON_RENEWING_PURCHASE), then that purchase refunded: no access (the grant does not outlive it)',
    doc: `"Granting a refund will immediately expire the subscription and remove any entitlement access." (${REFUNDS}); the grant is "used to avoid customers making a purchase but not getting access" until validated (${TYPES})`,
    items: (u) => [
      billingEvent('temporary-entitlement-grant', u.alice, { at: 0.001, purchased: 0, expires: 1 }, { store: 'APP_STORE', product_id: LIFETIME, transaction_id: 'tmp_r5_12' }),
      event('non-renewing-purchase', u.alice, 0.01, 0, null, bought('APP_STORE', 'L12', 'L12', LIFETIME)),
      refund(u.alice, 0.2, 0, 0.2, bought('APP_STORE', 'L12', 'L12', LIFETIME)),
    ],
    expected: [{ now: 0.5, state: { alice: { pro: noAccess } } }],
  },
  {
    name: 'F13 an active renewing monthly; a temporary grant for a yearly bought in an outage; its validation fails: the monthly still grants, renewing',
    doc: `"If the purchase can't be validated, an EXPIRATION event with the same transaction_id is sent." (${TYPES}); an expiration of one purchase is not of another ("A single customer may go through this flow multiple times if they purchase multiple products", ${FLOWS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'M13', 'M13', MONTHLY)),
      billingEvent('temporary-entitlement-grant', u.alice, { at: 5.001, purchased: 5, expires: 6 }, { store: 'APP_STORE', product_id: YEARLY, transaction_id: 'tmp_r5_13' }),
      billingEvent('expiration', u.alice, { at: 5.05, purchased: 5, expires: 5.05 }, { store: 'APP_STORE', product_id: YEARLY, transaction_id: 'tmp_r5_13', original_transaction_id: undefined, expiration_reason: 'UNKNOWN', environment: undefined }),
    ],
    expected: [{ now: 10, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(30), productId: MONTHLY } } } }],
  },
  {
    name: 'F14 an active monthly; a temporary grant whose failed validation names the monthly\'s product (as the store names it): the monthly still grants, renewing',
    doc: `"the product_id might be different from the product_id present in the subsequent INITIAL_PURCHASE event" (${TYPES}); the EXPIRATION "with the same transaction_id" is about that grant only (${TYPES})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'M14', 'M14', MONTHLY)),
      billingEvent('temporary-entitlement-grant', u.alice, { at: 5.001, purchased: 5, expires: 6 }, { store: 'APP_STORE', product_id: MONTHLY, transaction_id: 'tmp_r5_14' }),
      billingEvent('expiration', u.alice, { at: 5.05, purchased: 5, expires: 5.05 }, { store: 'APP_STORE', product_id: MONTHLY, transaction_id: 'tmp_r5_14', original_transaction_id: undefined, expiration_reason: 'UNKNOWN' }),
    ],
    expected: [{ now: 10, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(30) } } } }],
  },
  {
    name: 'F15 temporary grant for a second entitlement beside a live subscription of another: the grant ends at its expiry, the subscription is untouched',
    doc: `"The expiration date of the entitlement is always at most 24 hours in the future." (${TYPES})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'M15', 'M15', MONTHLY)),
      billingEvent('temporary-entitlement-grant', u.alice, { at: 5.001, purchased: 5, expires: 6 }, { store: 'APP_STORE', product_id: PREMIUM, transaction_id: 'tmp_r5_15', entitlement_ids: ['premium'] }),
    ],
    expected: [
      { now: 5.5, state: { alice: { pro: { active: true, willRenew: true }, premium: { active: true, status: 'temporary' } } } },
      { now: 7, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(30) }, premium: noAccess } } },
    ],
  },
  // ------------------------------------------------------------------ refunds and purchases again
  {
    name: 'F16 Play refund (CANCELLATION CUSTOMER_SUPPORT + EXPIRATION), then a new purchase of the same product (new order): access, renewing',
    doc: `"Granting a refund will immediately expire the subscription" (${REFUNDS}); INITIAL_PURCHASE: "If the resubscription occurs after the previous subscription has expired." (${FLOWS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, play('GPA.6200-0000-0000-00012')),
      refund(u.alice, 5, 0, 5, play('GPA.6200-0000-0000-00012')),
      expiration(u.alice, 'CUSTOMER_SUPPORT', 5.0001, 0, 5, play('GPA.6200-0000-0000-00012')),
      purchase(u.alice, 10, 10, 40, play('GPA.6300-0000-0000-00013')),
    ],
    expected: [
      { now: 15, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(40) } } } },
    ],
  },
  {
    name: 'F17 App Store refund, then the user resubscribes in the same group (RENEWAL, same original transaction): access, renewing',
    doc: `RENEWAL: "An existing subscription has been renewed or a lapsed user has resubscribed." (${TYPES})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'R17', 'R17', MONTHLY)),
      refund(u.alice, 5, 0, 5, bought('APP_STORE', 'R17', 'R17', MONTHLY)),
      renewal(u.alice, 10, 10, 40, bought('APP_STORE', 'R17b', 'R17', MONTHLY)),
    ],
    expected: [{ now: 15, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(40) } } } }],
  },
  {
    name: 'F18 a lifetime refunded, then bought again (a new transaction): access forever',
    doc: `"non-consumable and consumable purchases that are attached to an entitlement will unlock that content forever" (${ENTITLEMENTS})`,
    items: (u) => [
      event('non-renewing-purchase', u.alice, 0, 0, null, bought('APP_STORE', 'L18a', 'L18a', LIFETIME)),
      refund(u.alice, 5, 0, 5, bought('APP_STORE', 'L18a', 'L18a', LIFETIME)),
      event('non-renewing-purchase', u.alice, 10, 10, null, bought('APP_STORE', 'L18b', 'L18b', LIFETIME)),
    ],
    expected: [{ now: 100, state: { alice: { pro: { active: true, expiresAt: null, willRenew: false } } } }],
  },
  {
    name: 'F19 a monthly refunded, its refund reversed after the period ended with no renewal: no access after the period end',
    doc: `REFUND_REVERSED: "A refund has been reversed." (${TYPES}); expiration_at_ms: "Use this field to determine if a subscription is still active." (${TYPES})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'R19', 'R19', MONTHLY)),
      refund(u.alice, 5, 0, 5, bought('APP_STORE', 'R19', 'R19', MONTHLY)),
      billingEvent('refund-reversed', u.alice, { at: 20, purchased: 0, expires: 30 }, bought('APP_STORE', 'R19', 'R19', MONTHLY)),
    ],
    expected: [
      { now: 25, state: { alice: { pro: { active: true, expiresAt: isoDay(30) } } } },
      { now: 35, state: { alice: { pro: noAccess } } },
    ],
  },
  {
    name: 'F20 a purchase, its refund, then the purchase delivered again (same event id, a retry): still no access',
    doc: `"If we have to retry a webhook for any reason, the retry will have the same id and event_timestamp_ms of the first attempt." (${TYPES})`,
    items: (u) => {
      const bought20 = purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'D20', 'D20', MONTHLY));
      return [bought20, refund(u.alice, 5, 0, 5, bought('APP_STORE', 'D20', 'D20', MONTHLY)), bought20];
    },
    expected: [{ now: 7, state: { alice: { pro: noAccess } } }],
  },
  {
    name: 'F21 the same without event ids (the contract\'s shape): the purchase delivered again within RevenueCat\'s retry window after its refund: still no access',
    doc: `RevenueCat retries up to 5 times (https://www.revenuecat.com/docs/integrations/webhooks); the service's contract shows events without id (interface.md)`,
    items: (u) => {
      const bought21 = purchase(u.alice, 0, 0, 30, { ...bought('APP_STORE', 'D21', 'D21', MONTHLY), id: undefined });
      return [bought21, { ...refund(u.alice, 5, 0, 5, bought('APP_STORE', 'D21', 'D21', MONTHLY)) }, bought21];
    },
    expected: [{ now: 7, state: { alice: { pro: noAccess } } }],
  },
  // ------------------------------------------------------------------ promotional grants
  {
    name: 'F22 a promotional lifetime grant revoked (CANCELLATION DEVELOPER_INITIATED + EXPIRATION at the revoke time): no access',
    doc: `Promo column: CANCELLATION ✅, EXPIRATION ✅ ("A subscription has expired and access should be removed"); DEVELOPER_INITIATED: "Developer cancelled the subscription." Promo ✅ (${TYPES})`,
    items: (u) => [
      event('non-renewing-purchase', u.alice, 0, 0, null, bought('PROMOTIONAL', 'rc_promo_22', 'rc_promo_22', 'rc_promo_pro_lifetime', ['pro'], { period_type: 'PROMOTIONAL' })),
      event('cancellation-developer-initiated', u.alice, 10, 0, 10, bought('PROMOTIONAL', 'rc_promo_22', 'rc_promo_22', 'rc_promo_pro_lifetime', ['pro'], { period_type: 'PROMOTIONAL', cancel_reason: 'DEVELOPER_INITIATED' })),
      expiration(u.alice, 'DEVELOPER_INITIATED', 10.0001, 0, 10, bought('PROMOTIONAL', 'rc_promo_22', 'rc_promo_22', 'rc_promo_pro_lifetime', ['pro'], { period_type: 'PROMOTIONAL' })),
    ],
    expected: [{ now: 11, state: { alice: { pro: noAccess } } }],
  },
  {
    name: 'F23 a promotional lifetime grant revoked, told only by an EXPIRATION whose expiration_at_ms is null: no access',
    doc: `EXPIRATION: "A subscription has expired and access should be removed." (${TYPES}); expiration_at_ms "can be NULL for non-subscription purchases" (${TYPES})`,
    items: (u) => [
      event('non-renewing-purchase', u.alice, 0, 0, null, bought('PROMOTIONAL', 'rc_promo_23', 'rc_promo_23', 'rc_promo_pro_lifetime', ['pro'], { period_type: 'PROMOTIONAL' })),
      expiration(u.alice, 'DEVELOPER_INITIATED', 10, 0, 10, { ...bought('PROMOTIONAL', 'rc_promo_23', 'rc_promo_23', 'rc_promo_pro_lifetime', ['pro'], { period_type: 'PROMOTIONAL' }), expiration_at_ms: null }),
    ],
    expected: [{ now: 11, state: { alice: { pro: noAccess } } }],
  },
  {
    name: 'F24 a renewing App Store monthly and a promotional year of the same entitlement; the promotional grant revoked: the monthly still grants, renewing',
    doc: `"multiple products may unlock the same entitlement" (${ENTITLEMENTS}); the revocation is the promotional grant's own EXPIRATION (${TYPES})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'M24', 'M24', MONTHLY)),
      event('non-renewing-purchase', u.alice, 1, 1, 366, bought('PROMOTIONAL', 'rc_promo_24', 'rc_promo_24', 'rc_promo_pro_yearly', ['pro'], { period_type: 'PROMOTIONAL' })),
      event('cancellation-developer-initiated', u.alice, 10, 1, 10, bought('PROMOTIONAL', 'rc_promo_24', 'rc_promo_24', 'rc_promo_pro_yearly', ['pro'], { period_type: 'PROMOTIONAL', cancel_reason: 'DEVELOPER_INITIATED' })),
      expiration(u.alice, 'DEVELOPER_INITIATED', 10.0001, 1, 10, bought('PROMOTIONAL', 'rc_promo_24', 'rc_promo_24', 'rc_promo_pro_yearly', ['pro'], { period_type: 'PROMOTIONAL' })),
    ],
    expected: [{ now: 15, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(30), store: 'APP_STORE' } } } }],
  },
  // ------------------------------------------------------------------ overlapping sources
  {
    name: 'F25 a monthly granting [pro, ads_free] and a lifetime granting [ads_free]; the monthly cancelled and expired: pro ends, ads_free forever',
    doc: `"a single product can unlock multiple entitlements, and multiple products may unlock the same entitlement" (${ENTITLEMENTS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'M25', 'M25', MONTHLY, ['pro', 'ads_free'])),
      event('non-renewing-purchase', u.alice, 5, 5, null, bought('APP_STORE', 'L25', 'L25', LIFETIME, ['ads_free'])),
      cancellation(u.alice, 'UNSUBSCRIBE', 10, 0, 30, bought('APP_STORE', 'M25', 'M25', MONTHLY, ['pro', 'ads_free'])),
      expiration(u.alice, 'UNSUBSCRIBE', 30, 0, 30, bought('APP_STORE', 'M25', 'M25', MONTHLY, ['pro', 'ads_free'])),
    ],
    expected: [{ now: 31, state: { alice: { pro: noAccess, ads_free: { active: true, expiresAt: null, willRenew: false } } } }],
  },
  {
    name: 'F26 a lifetime [pro] and a monthly [pro, extra]; the monthly refunded: extra ends at once, pro forever',
    doc: `"Granting a refund will immediately expire the subscription and remove any entitlement access." (${REFUNDS}); a lifetime unlocks "forever" (${ENTITLEMENTS})`,
    items: (u) => [
      event('non-renewing-purchase', u.alice, 0, 0, null, bought('APP_STORE', 'L26', 'L26', LIFETIME, ['pro'])),
      purchase(u.alice, 1, 1, 31, bought('APP_STORE', 'M26', 'M26', MONTHLY, ['pro', 'extra'])),
      refund(u.alice, 5, 1, 5, bought('APP_STORE', 'M26', 'M26', MONTHLY, ['pro', 'extra'])),
    ],
    expected: [{ now: 6, state: { alice: { pro: { active: true, expiresAt: null }, extra: noAccess } } }],
  },
  {
    name: 'F27 a renewing App Store monthly and a Stripe yearly of one entitlement; the Stripe yearly refunded: the monthly grants, renewing',
    doc: `"Granting a refund will immediately expire the subscription" (${REFUNDS}); "multiple products may unlock the same entitlement" (${ENTITLEMENTS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'M27', 'M27', MONTHLY)),
      purchase(u.alice, 2, 2, 367, bought('STRIPE', 'in_27', 'sub_27', 'prod_yearly')),
      refund(u.alice, 5, 2, 5, bought('STRIPE', 'in_27', 'sub_27', 'prod_yearly')),
      expiration(u.alice, 'CUSTOMER_SUPPORT', 5.0001, 2, 5, bought('STRIPE', 'in_27', 'sub_27', 'prod_yearly')),
    ],
    expected: [{ now: 10, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(30), store: 'APP_STORE' } } } }],
  },
  {
    name: 'F28 two App Store subscription groups granting one entitlement (different original transactions): the basic refunded, the premium still grants renewing',
    doc: `"multiple products may unlock the same entitlement" (${ENTITLEMENTS}); a refund expires "the subscription" refunded (${REFUNDS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'G1', 'G1', BASIC)),
      purchase(u.alice, 3, 3, 33, bought('APP_STORE', 'G2', 'G2', PREMIUM)),
      refund(u.alice, 5, 0, 5, bought('APP_STORE', 'G1', 'G1', BASIC)),
    ],
    expected: [{ now: 10, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(33), productId: PREMIUM } } } }],
  },
  // ------------------------------------------------------------------ grace periods twice
  {
    name: 'F29 grace, recovered, then a second billing issue with a later grace: in grace until the second grace end',
    doc: `"RevenueCat will only send one billing issue event ... unless a renewal is successful between payment failures" (${GRACE}); grace_period_expiration_at_ms: "Use this field to determine if the user is currently in a grace period." (${TYPES})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'B29', 'B29', MONTHLY)),
      billingIssue(u.alice, 30, 0, 30, 46, bought('APP_STORE', 'B29', 'B29', MONTHLY)),
      renewal(u.alice, 33, 30, 60, bought('APP_STORE', 'B29b', 'B29', MONTHLY)),
      billingIssue(u.alice, 60, 30, 60, 76, bought('APP_STORE', 'B29b', 'B29', MONTHLY)),
    ],
    expected: [{ now: 62, state: { alice: { pro: { active: true, status: 'grace', graceExpiresAt: isoDay(76), willRenew: false } } } }],
  },
  // ------------------------------------------------------------------ prepaid, period types
  {
    name: 'F30 Play prepaid topped up with another prepaid base plan (a longer one): access to the accumulated end, never renewing',
    doc: `"When topping up, customers can purchase any prepaid base plan available from the same subscription ... expiration date that reflects the original expiration date + the full duration" (${PREPAID})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...play('GPA.6400-0000-0000-00014', 'pro:prepaid-month'), period_type: 'PREPAID' }),
      purchase(u.alice, 10, 10, 395, { ...play('GPA.6500-0000-0000-00015', 'pro:prepaid-year'), period_type: 'PREPAID' }),
      expiration(u.alice, 'UNKNOWN', 10.0001, 0, 10, { ...play('GPA.6400-0000-0000-00014', 'pro:prepaid-month'), period_type: 'PREPAID' }),
    ],
    expected: [{ now: 100, state: { alice: { pro: { active: true, willRenew: false, expiresAt: isoDay(395) } } } }],
  },
  {
    name: 'F31 a PROMOTIONAL period_type App Store subscription (granted through RevenueCat) renewed by the store: renewing',
    doc: `period_type: "PROMOTIONAL (for subscriptions granted through RevenueCat)" (${TYPES}); RENEWAL: "An existing subscription has been renewed" (${TYPES})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'P31', 'P31', MONTHLY, ['pro'], { period_type: 'PROMOTIONAL' })),
      renewal(u.alice, 30, 30, 60, bought('APP_STORE', 'P31b', 'P31', MONTHLY, ['pro'], { period_type: 'NORMAL' })),
    ],
    expected: [{ now: 40, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(60) } } } }],
  },
  // ------------------------------------------------------------------ family sharing
  {
    name: 'F32 family sharing: the shared member\'s access follows the purchaser\'s refund (the member\'s EXPIRATION): member none, purchaser none',
    doc: `"True means the user's family made the purchase and this user has access via their family" ... "RevenueCat will automatically revoke any entitlements that were granted by the user's former family." (${FAMILY})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'F32', 'F32', MONTHLY, ['pro'], { is_family_share: false })),
      purchase(u.bob, 0.05, 0, 30, bought('APP_STORE', 'F32m', 'F32m', MONTHLY, ['pro'], { is_family_share: true })),
      refund(u.alice, 5, 0, 5, bought('APP_STORE', 'F32', 'F32', MONTHLY, ['pro'], { is_family_share: false })),
      expiration(u.bob, 'CUSTOMER_SUPPORT', 5.0001, 0, 5, bought('APP_STORE', 'F32m', 'F32m', MONTHLY, ['pro'], { is_family_share: true })),
    ],
    expected: [{ now: 6, state: { alice: { pro: noAccess }, bob: { pro: noAccess } } }],
  },
  // ------------------------------------------------------------------ transfers
  {
    name: 'F33 TRANSFER of a monthly and a lifetime, then the monthly\'s CANCELLATION naming the new owner: bob has pro to the period end (not renewing) and the lifetime; alice nothing',
    doc: `TRANSFER: "the entitlements will be removed from user 1 and added to user 2" (${FLOWS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'S33', 'S33', MONTHLY)),
      event('non-renewing-purchase', u.alice, 1, 1, null, bought('APP_STORE', 'L33', 'L33', LIFETIME, ['lifetime'])),
      transfer([u.alice], [u.bob], 5),
      cancellation(u.bob, 'UNSUBSCRIBE', 10, 0, 30, bought('APP_STORE', 'S33', 'S33', MONTHLY)),
    ],
    expected: [{ now: 15, state: {
      alice: { pro: noAccess, lifetime: noAccess },
      bob: { pro: { active: true, willRenew: false, expiresAt: isoDay(30) }, lifetime: { active: true, expiresAt: null } },
    } }],
  },
  {
    name: 'F34 App Store: cancelled 12 h before the end, expired, and resubscribed two weeks later (RENEWAL of the same group): renewing',
    doc: `RENEWAL: "An existing subscription has been renewed or a lapsed user has resubscribed." (${TYPES}); a resubscription is a new choice to subscribe ("Resubscribe Flow", ${FLOWS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'C34', 'C34', MONTHLY)),
      cancellation(u.alice, 'UNSUBSCRIBE', 29.5, 0, 30, bought('APP_STORE', 'C34', 'C34', MONTHLY)),
      expiration(u.alice, 'UNSUBSCRIBE', 30, 0, 30, bought('APP_STORE', 'C34', 'C34', MONTHLY)),
      renewal(u.alice, 45, 45, 75, bought('APP_STORE', 'C34b', 'C34', MONTHLY)),
    ],
    expected: [{ now: 50, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(75) } } } }],
  },
  {
    name: 'F35 ... the same with the EXPIRATION lost: renewing',
    doc: `as F34 (${TYPES}, ${FLOWS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'C35', 'C35', MONTHLY)),
      cancellation(u.alice, 'UNSUBSCRIBE', 29.5, 0, 30, bought('APP_STORE', 'C35', 'C35', MONTHLY)),
      renewal(u.alice, 45, 45, 75, bought('APP_STORE', 'C35b', 'C35', MONTHLY)),
    ],
    expected: [{ now: 50, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(75) } } } }],
  },
  {
    name: 'F36 Web Billing (RC_BILLING): a billing issue in grace, recovered within it (RENEWAL on the original cycle): active, renewing',
    doc: `"If the payment is recovered within the grace period, the subscription will continue as if the payment was never missed." (${DOC.web}); UNCANCELLATION: "A non-expired cancelled subscription has been re-enabled." (${TYPES})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('RC_BILLING', 'rcb_36', 'rcbsub_36', 'pro_monthly_web')),
      billingIssue(u.alice, 30, 0, 30, 44, bought('RC_BILLING', 'rcb_36', 'rcbsub_36', 'pro_monthly_web')),
      renewal(u.alice, 35, 30, 60, bought('RC_BILLING', 'rcb_36b', 'rcbsub_36', 'pro_monthly_web')),
    ],
    expected: [{ now: 40, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(60), status: 'active' } } } }],
  },
  {
    name: 'F37 App Store upgrade basic -> premium (two entitlements), then the old product\'s auto-renew CANCELLATION arrives late: premium renewing, basic none',
    doc: `"the customer will immediately have access to the new entitlements" (${FLOWS}); "Upgrade. ... They are immediately upgraded and receive a refund of the prorated amount of their original subscription." (${MANAGE})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'U37', 'U37', BASIC, ['basic'])),
      event('product-change', u.alice, 10, 0, 30, { ...bought('APP_STORE', 'U37', 'U37', BASIC, ['basic']), new_product_id: PREMIUM }),
      renewal(u.alice, 10.0001, 10, 40, bought('APP_STORE', 'U37b', 'U37', PREMIUM, ['premium'])),
      cancellation(u.alice, 'UNSUBSCRIBE', 10.2, 0, 30, bought('APP_STORE', 'U37', 'U37', BASIC, ['basic'])),
    ],
    expected: [{ now: 15, state: { alice: { basic: noAccess, premium: { active: true, willRenew: true, expiresAt: isoDay(40) } } } }],
  },
  {
    name: 'F38 App Store upgrade within one entitlement, then Apple\'s prorated refund of the old product (CANCELLATION CUSTOMER_SUPPORT naming it): pro still granted by the upgrade, renewing',
    doc: `"Upgrade. ... They are immediately upgraded and receive a refund of the prorated amount of their original subscription." (${MANAGE})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'U38', 'U38', BASIC)),
      renewal(u.alice, 10, 10, 40, bought('APP_STORE', 'U38b', 'U38', PREMIUM)),
      refund(u.alice, 10.01, 0, 10.01, bought('APP_STORE', 'U38', 'U38', BASIC)),
    ],
    expected: [{ now: 15, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(40), productId: PREMIUM } } } }],
  },
  {
    name: 'F39 Play DEFERRED downgrade taking effect (INITIAL_PURCHASE of the new order at the end) with the old order\'s EXPIRATION, the PRODUCT_CHANGE delivered twice: basic renewing, premium none',
    doc: `"Replacement takes effect when the old plan expires" (${MANAGE}); "the user's entitlements will be replaced by the entitlements from the new product" (${FLOWS}); a retry has "the same id" (${TYPES})`,
    items: (u) => {
      const change = event('product-change', u.alice, 10, 0, 30, { ...play('GPA.6600-0000-0000-00016', P_PREMIUM), entitlement_ids: ['premium'], new_product_id: P_BASIC });
      return [
        purchase(u.alice, 0, 0, 30, { ...play('GPA.6600-0000-0000-00016', P_PREMIUM), entitlement_ids: ['premium'] }),
        change,
        purchase(u.alice, 30, 30, 60, { ...play('GPA.6700-0000-0000-00017', P_BASIC), entitlement_ids: ['basic'] }),
        expiration(u.alice, 'UNSUBSCRIBE', 30.0001, 0, 30, { ...play('GPA.6600-0000-0000-00016', P_PREMIUM), entitlement_ids: ['premium'] }),
        change,
      ];
    },
    expected: [{ now: 31, state: { alice: { premium: noAccess, basic: { active: true, willRenew: true, expiresAt: isoDay(60) } } } }],
  },
  {
    name: 'F40 Play immediate upgrade whose PRODUCT_CHANGE is generated 2 minutes after the new order\'s INITIAL_PURCHASE: the old entitlement ends at once',
    doc: `"a PRODUCT_CHANGE event will be dispatched alongside ... an INITIAL_PURCHASE event (for Google Play subscriptions), and the customer will immediately have access to the new entitlements" (${FLOWS}); "Old subscription is cancelled, and new subscription takes effect immediately" (${MANAGE})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...play('GPA.6800-0000-0000-00018', P_BASIC), entitlement_ids: ['basic'] }),
      purchase(u.alice, 10, 10, 40, { ...play('GPA.6900-0000-0000-00019', P_PREMIUM), entitlement_ids: ['premium'] }),
      event('product-change', u.alice, 10.0014, 0, 30, { ...play('GPA.6800-0000-0000-00018', P_BASIC), entitlement_ids: ['basic'], new_product_id: undefined }),
    ],
    expected: [{ now: 15, state: { alice: { basic: noAccess, premium: { active: true, willRenew: true, expiresAt: isoDay(40) } } } }],
  },
  {
    name: 'F42 Play immediate upgrade, the new order\'s INITIAL_PURCHASE generated 2 hours after the PRODUCT_CHANGE (a late validation): the old entitlement ends',
    doc: `as F40 (${FLOWS}, ${MANAGE})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...play('GPA.7200-0000-0000-00022', P_BASIC), entitlement_ids: ['basic'] }),
      event('product-change', u.alice, 10, 0, 30, { ...play('GPA.7200-0000-0000-00022', P_BASIC), entitlement_ids: ['basic'], new_product_id: undefined }),
      purchase(u.alice, 10 + 2 / 24, 10, 40, { ...play('GPA.7300-0000-0000-00023', P_PREMIUM), entitlement_ids: ['premium'] }),
    ],
    expected: [{ now: 15, state: { alice: { basic: noAccess, premium: { active: true, willRenew: true, expiresAt: isoDay(40) } } } }],
  },
  {
    name: 'F43 a TEMPORARY_ENTITLEMENT_GRANT shaped as RevenueCat\'s sample (no product, entitlements or expiry), then its validated INITIAL_PURCHASE: access, renewing',
    doc: `Sample "Temporary Entitlement Grant" carries only event_timestamp_ms, app_user_id, store, type, id, app_id (${DOC.types.replace('event-types-and-fields', 'sample-events')}); "a regular INITIAL_PURCHASE event will be sent" (${TYPES})`,
    items: (u) => [
      { api_version: '1.0', event: { event_timestamp_ms: Date.parse(isoDay(0.001)), app_user_id: u.alice, store: 'APP_STORE', type: 'TEMPORARY_ENTITLEMENT_GRANT', id: `evt-${randomUUID()}`, app_id: '1234567890' } },
      purchase(u.alice, 0.01, 0, 30, bought('APP_STORE', 'T43', 'T43', MONTHLY)),
    ],
    expected: [{ now: 1, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(30) } } } }],
  },
];

function PLAY_MONTHLY_DEFAULT(): string {
  return 'pro_monthly:monthly';
}

const orders = (n: number, kind: 'pglite' | 'postgres') => deliveryOrdersOn(kind, n, { everyOrderOn: 'postgres', sample: 2, seed: 55 });
describeFlows('product changes, pauses, temporary grants, refunds, promotions and overlapping sources', flows, newUsers, orders);
