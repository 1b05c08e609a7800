import { randomBytes, randomUUID } from 'node:crypto';
import type { DatabaseKind } from '../support/databases.ts';
import {
  apple, billingEvent, billingIssue, cancellation, deliveryOrdersOn, describeFlows, DOC, event, expiration, isoDay, play, purchase, refund, renewal, transfer,
  trial, type Flow as SuiteFlow,
} from './support.ts';

/**
 * Flows at the stores' edges, each resting on a quoted RevenueCat (or App Store) sentence (its
 * `doc`): product changes during offers and grace, temporary grants, pauses, passes, lifetimes beside
 * subscriptions, transfers (also into a customer known by its anonymous id too), and an App Store
 * cancellation in the 24 hours Apple charges the next period in. Through the real route and SQL, in
 * every delivery order on Postgres (in order and reversed on PGlite), read as GET /api/me shows it
 * after all of a flow's events were delivered.
 */
type Role = 'alice' | 'bob' | 'anon';
type Flow = SuiteFlow<Role>;
const newUsers = (): Record<Role, string> => ({ alice: randomUUID(), bob: randomUUID(), anon: `$RCAnonymousID:${randomBytes(16).toString('hex')}` });

const MANAGE = DOC.manage;
const TYPES = DOC.types;
const FLOWS = DOC.flows;
const REFUNDS = DOC.refunds;

/** A purchase's store, product, transactions and entitlements. */
const bought = (store: string, tx: string, otx: string, product: string, entitlements: string[] | null = ['pro'], extra: Record<string, unknown> = {}) =>
  ({ store, product_id: product, transaction_id: tx, original_transaction_id: otx, entitlement_ids: entitlements, ...extra });

const BASIC = 'com.example.basic.monthly';
const PREMIUM = 'com.example.premium.monthly';
const LIFETIME = 'com.example.pro.lifetime';
const PASS = 'com.example.pro.pass30';
const PLAY_BASIC = 'basic:monthly';
const PLAY_PREMIUM = 'premium:monthly';
const AMZ_BASIC = 'com.example.basic.amazon';
const AMZ_PREMIUM = 'com.example.premium.amazon';
const noAccess = { active: false };
const customer = (original: string, ...aliases: string[]) => ({ original_app_user_id: original, aliases: [original, ...aliases] });
const TEMP = `TEMPORARY_ENTITLEMENT_GRANT: "a regular INITIAL_PURCHASE event will be sent" once validated; "If the purchase can't be validated, an EXPIRATION event with the same transaction_id is sent"; "the transaction_id might be different ... the product_id might be different" (${TYPES})`;

const flows: Flow[] = [
  // ------------------------------------------------------------------ product changes
  {
    name: 'App Store upgrade during a paid introductory offer (INTRO): the intro product stays active beside the upgrade; only the upgrade renews',
    doc: `"When a customer upgrades products during an introductory period (including a free trial), Apple does not cancel the introductory offer but instead keeps the introductory offer active in addition to the upgraded product." (${MANAGE})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'T0', 'T0', BASIC, ['basic'], { period_type: 'INTRO' })),
      event('product-change', u.alice, 10, 0, 30, { ...bought('APP_STORE', 'T0', 'T0', BASIC, ['basic'], { period_type: 'INTRO' }), new_product_id: PREMIUM }),
      renewal(u.alice, 10.0001, 10, 40, bought('APP_STORE', 'T1', 'T0', PREMIUM, ['premium'], { period_type: 'NORMAL' })),
    ],
    expected: [{ now: 20, state: { alice: { basic: { active: true, willRenew: false, expiresAt: isoDay(30) }, premium: { active: true, willRenew: true, expiresAt: isoDay(40) } } } }],
  },
  {
    name: 'Play immediate upgrade during a free trial (PRODUCT_CHANGE without new_product_id + INITIAL_PURCHASE of the new order): the trial product stops at once',
    doc: `Play replacement modes: "Old subscription is cancelled, and new subscription takes effect immediately" (${MANAGE}); "In the case of an immediate product change ... the customer will immediately have access to the new entitlements" (${FLOWS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 7, { ...play('GPA.1100-0000-0000-00001', PLAY_BASIC), entitlement_ids: ['basic'], period_type: 'TRIAL' }),
      event('product-change', u.alice, 3, 0, 7, { ...play('GPA.1100-0000-0000-00001', PLAY_BASIC), entitlement_ids: ['basic'], period_type: 'TRIAL', new_product_id: undefined }),
      purchase(u.alice, 3.0001, 3, 33, { ...play('GPA.1200-0000-0000-00002', PLAY_PREMIUM), entitlement_ids: ['premium'] }),
    ],
    expected: [{ now: 4, state: { alice: { basic: noAccess, premium: { active: true, willRenew: true, expiresAt: isoDay(33) } } } }],
  },
  {
    name: 'Stripe change at period end (PRODUCT_CHANGE, then the RENEWAL of the new product at the renewal): the old entitlement to the period end, then only the new one',
    doc: `"In the case of a product change at period end ... The customer will retain their entitlement based on the original product. When the customer encounters their next renewal, a RENEWAL event will be dispatched ... the user's entitlements will be replaced by the entitlements from the new product." Changes at period end occur "For scheduled product changes in Stripe" (${FLOWS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('STRIPE', 'in_1', 'sub_1CHG', 'prod_PREMIUM', ['premium'])),
      event('product-change', u.alice, 10, 0, 30, { ...bought('STRIPE', 'in_1', 'sub_1CHG', 'prod_PREMIUM', ['premium']), new_product_id: undefined }),
      renewal(u.alice, 30, 30, 60, bought('STRIPE', 'in_2', 'sub_1CHG', 'prod_BASIC', ['basic'])),
    ],
    expected: [
      { now: 31, state: { alice: { premium: noAccess, basic: { active: true, willRenew: true, expiresAt: isoDay(60) } } } },
    ],
  },
  {
    name: 'Amazon has no product change: basic cancelled, premium bought: both grant pro, the entitlement renews (premium); then premium alone',
    doc: `"Amazon does not support changing products. Customers will need to cancel their existing subscription and re-subscribe to a different product." (${MANAGE})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('AMAZON', 'amzn-b-1', 'amzn-b-1', AMZ_BASIC)),
      cancellation(u.alice, 'UNSUBSCRIBE', 10, 0, 30, bought('AMAZON', 'amzn-b-1', 'amzn-b-1', AMZ_BASIC)),
      purchase(u.alice, 12, 12, 42, bought('AMAZON', 'amzn-p-1', 'amzn-p-1', AMZ_PREMIUM)),
    ],
    expected: [
      { now: 20, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(42), productId: AMZ_PREMIUM } } } },
      { now: 35, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(42) } } } },
    ],
  },
  // ------------------------------------------------------------------ temporary grants
  {
    name: 'Play temporary grant, validated by an INITIAL_PURCHASE of another transaction and product id, then that purchase refunded: no access',
    doc: `${TEMP}; "Granting a refund will immediately expire the subscription and remove any entitlement access." (${REFUNDS})`,
    items: (u) => [
      billingEvent('temporary-entitlement-grant', u.alice, { at: 0.001, purchased: 0, expires: 1 }, { store: 'PLAY_STORE', product_id: 'pro_monthly', transaction_id: 'GPA.TEMP-0000-0000-00001' }),
      purchase(u.alice, 0.01, 0, 30, play('GPA.1300-0000-0000-00003')),
      refund(u.alice, 0.2, 0, 0.2, play('GPA.1300-0000-0000-00003')),
    ],
    expected: [{ now: 0.5, state: { alice: { pro: noAccess } } }],
  },
  {
    name: 'App Store temporary grant whose validation failed (EXPIRATION, same transaction), then a real purchase: access, renewing',
    doc: `${TEMP}; INITIAL_PURCHASE: "A new subscription has been purchased." (${TYPES})`,
    items: (u) => [
      billingEvent('temporary-entitlement-grant', u.alice, { at: 0.001, purchased: 0, expires: 1 }, { store: 'APP_STORE', product_id: BASIC, transaction_id: 'tmp_af06' }),
      billingEvent('expiration', u.alice, { at: 0.05, purchased: 0, expires: 0.05 }, { store: 'APP_STORE', product_id: BASIC, transaction_id: 'tmp_af06', original_transaction_id: undefined, expiration_reason: 'UNKNOWN' }),
      purchase(u.alice, 0.1, 0.1, 30.1, bought('APP_STORE', 'T60', 'T60', BASIC)),
    ],
    expected: [{ now: 1, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(30.1) } } } }],
  },
  {
    name: 'a temporary grant, never validated: no access after its expiry even though a lifetime of another entitlement stays',
    doc: `"The expiration date of the entitlement is always at most 24 hours in the future." (${TYPES}); NON_RENEWING_PURCHASE: "A customer has made a purchase that will not auto-renew." (${TYPES})`,
    items: (u) => [
      event('non-renewing-purchase', u.alice, 0, 0, null, { ...bought('APP_STORE', 'L1', 'L1', LIFETIME, ['lifetime']) }),
      billingEvent('temporary-entitlement-grant', u.alice, { at: 1.001, purchased: 1, expires: 2 }, { store: 'APP_STORE', product_id: PREMIUM, transaction_id: 'tmp_af07', entitlement_ids: ['premium'] }),
    ],
    expected: [
      { now: 1.5, state: { alice: { lifetime: { active: true, expiresAt: null }, premium: { active: true, status: 'temporary' } } } },
      { now: 3, state: { alice: { lifetime: { active: true, expiresAt: null }, premium: noAccess } } },
    ],
  },
  // ------------------------------------------------------------------ pauses, billing issues, extensions
  {
    name: 'Play pause in effect, then the user buys again (a new order) before the auto-resume: access, renewing',
    doc: `SUBSCRIPTION_PAUSED: revoke "only when receiving an EXPIRATION event (which will have the expiration reason SUBSCRIPTION_PAUSED)" (${TYPES}); INITIAL_PURCHASE: "A new subscription has been purchased." (${TYPES})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, play('GPA.1400-0000-0000-00004')),
      event('subscription-paused', u.alice, 20, 0, 30, { ...play('GPA.1400-0000-0000-00004'), auto_resume_at_ms: Date.parse(isoDay(90)) }),
      event('expiration-paused', u.alice, 30, 0, 30, play('GPA.1400-0000-0000-00004')),
      purchase(u.alice, 40, 40, 70, play('GPA.1500-0000-0000-00005')),
    ],
    expected: [
      { now: 45, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(70) } } } },
    ],
  },
  {
    name: 'App Store free trial whose conversion charge fails into a grace period: access in grace, not renewing; then EXPIRATION BILLING_ERROR: none',
    doc: `"If you do have grace periods enabled, the customer will retain entitlements as the app store retries ... At the end of the grace period, if billing has not been successful, an EXPIRATION event will be sent and entitlements will be revoked." (${FLOWS})`,
    items: (u) => [
      trial(u.alice, 0, 0, 7),
      billingIssue(u.alice, 7, 0, 7, 13, { period_type: 'TRIAL' }),
      event('cancellation-billing-error', u.alice, 7.0001, 0, 7, { period_type: 'TRIAL', cancel_reason: 'BILLING_ERROR' }),
      event('expiration-billing-error', u.alice, 13, 0, 7, { period_type: 'TRIAL', expiration_reason: 'BILLING_ERROR' }),
    ],
    expected: [{ now: 14, state: { alice: { pro: noAccess } } }],
  },
  {
    name: 'App Store free trial whose conversion charge fails into a grace period, read before the grace ends: in grace, not renewing',
    doc: `as the flow before (${FLOWS}); grace_period_expiration_at_ms: "Use this field to determine if the user is currently in a grace period." (${TYPES})`,
    items: (u) => [
      trial(u.alice, 0, 0, 7),
      billingIssue(u.alice, 7, 0, 7, 13, { period_type: 'TRIAL' }),
      event('cancellation-billing-error', u.alice, 7.0001, 0, 7, { period_type: 'TRIAL', cancel_reason: 'BILLING_ERROR' }),
    ],
    expected: [{ now: 10, state: { alice: { pro: { active: true, status: 'grace', willRenew: false, graceExpiresAt: isoDay(13) } } } }],
  },
  {
    name: 'Play: SUBSCRIPTION_EXTENDED (charge deferred), then BILLING_ISSUE without grace and EXPIRATION: no access after the extended date',
    doc: `"you will receive a SUBSCRIPTION_EXTENDED webhook, followed by either a RENEWAL or BILLING_ISSUE webhook within the next 24 hours." (${TYPES}); "If you do not have grace periods enabled, you'll immediately receive an EXPIRATION webhook and the customer's entitlements will be revoked." (${FLOWS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, play('GPA.1600-0000-0000-00006')),
      event('subscription-extended', u.alice, 30, 0, 30.5, play('GPA.1600-0000-0000-00006')),
      billingIssue(u.alice, 30.5, 0, 30.5, null, play('GPA.1600-0000-0000-00006')),
      event('expiration-billing-error', u.alice, 30.5001, 0, 30.5, { ...play('GPA.1600-0000-0000-00006'), expiration_reason: 'BILLING_ERROR' }),
    ],
    expected: [{ now: 31, state: { alice: { pro: noAccess } } }],
  },
  // ------------------------------------------------------------------ one-time purchases beside subscriptions
  {
    name: 'a 30-day non-renewing pass refunded, then the refund reversed: active to its end, never renewing',
    doc: `REFUND_REVERSED: "A refund has been reversed." NON_RENEWING_PURCHASE: "A customer has made a purchase that will not auto-renew." (${TYPES})`,
    items: (u) => [
      event('non-renewing-purchase', u.alice, 0, 0, 30, bought('APP_STORE', 'P1', 'P1', PASS)),
      refund(u.alice, 5, 0, 5, bought('APP_STORE', 'P1', 'P1', PASS)),
      billingEvent('refund-reversed', u.alice, { at: 8, purchased: 0, expires: 30 }, bought('APP_STORE', 'P1', 'P1', PASS)),
    ],
    expected: [{ now: 10, state: { alice: { pro: { active: true, willRenew: false, expiresAt: isoDay(30) } } } }],
  },
  {
    name: 'a lifetime beside a monthly of the same entitlement: the monthly refunded, the lifetime still grants forever, never renews',
    doc: `"Granting a refund will immediately expire the subscription" (${REFUNDS}); a refund is of the subscription, and "non-consumable and consumable purchases that are attached to an entitlement will unlock that content forever" (https://www.revenuecat.com/docs/getting-started/entitlements)`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'M1', 'M1', BASIC)),
      event('non-renewing-purchase', u.alice, 2, 2, null, bought('APP_STORE', 'L2', 'L2', LIFETIME)),
      refund(u.alice, 5, 0, 5, bought('APP_STORE', 'M1', 'M1', BASIC)),
    ],
    expected: [{ now: 100, state: { alice: { pro: { active: true, expiresAt: null, willRenew: false, productId: LIFETIME } } } }],
  },
  // ------------------------------------------------------------------ two purchases of one entitlement
  {
    name: 'an App Store monthly and a Play yearly both grant pro: the App Store one refunded, the Play one cancelled: access to the Play end, not renewing',
    doc: `"Granting a refund will immediately expire the subscription" (${REFUNDS}); "When a customer cancels their subscription, a CANCELLATION webhook is sent. At the end of the billing cycle, an EXPIRATION webhook is sent and entitlements are revoked." (${FLOWS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'A1', 'A1', BASIC)),
      purchase(u.alice, 5, 5, 365, { ...play('GPA.1700-0000-0000-00007', 'pro_yearly:yearly') }),
      refund(u.alice, 10, 0, 10, bought('APP_STORE', 'A1', 'A1', BASIC)),
      cancellation(u.alice, 'UNSUBSCRIBE', 12, 5, 365, { ...play('GPA.1700-0000-0000-00007', 'pro_yearly:yearly') }),
    ],
    expected: [{ now: 20, state: { alice: { pro: { active: true, willRenew: false, expiresAt: isoDay(365), store: 'PLAY_STORE' } } } }],
  },
  // ------------------------------------------------------------------ identity
  {
    name: 'TRANSFER naming the App Store moves the App Store subscription and the App Store lifetime: bob has both, alice neither',
    doc: `"you'll receive a TRANSFER event and the entitlements will be removed from user 1 and added to user 2" (${FLOWS}); TRANSFER: "A transfer of transactions and entitlements was initiated between one App User ID(s) to another." (${TYPES})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'S1', 'S1', BASIC)),
      event('non-renewing-purchase', u.alice, 1, 1, null, bought('APP_STORE', 'L3', 'L3', LIFETIME, ['lifetime'])),
      transfer([u.alice], [u.bob], 5, { store: 'APP_STORE' }),
    ],
    expected: [{ now: 6, state: {
      alice: { pro: noAccess, lifetime: noAccess },
      bob: { pro: { active: true, expiresAt: isoDay(30) }, lifetime: { active: true, expiresAt: null } },
    } }],
  },
  {
    name: 'anonymous purchase, SUBSCRIBER_ALIAS to alice, then the refund (naming alice with the anonymous alias): alice has no access',
    doc: `aliases: "All app user ids ever used by the subscriber." "When looking up users from the webhook in your systems, make sure to search both the original_app_user_id and the aliases array." (${TYPES}); refund (${REFUNDS})`,
    items: (u) => [
      purchase(u.anon, 0, 0, 30, customer(u.anon)),
      billingEvent('subscriber-alias', u.alice, { at: 1 }, customer(u.anon, u.alice)),
      refund(u.alice, 5, 0, 5, customer(u.anon, u.alice)),
    ],
    expected: [{ now: 6, state: { alice: { pro: noAccess } } }],
  },
  {
    name: 'a TRANSFER, then a renewal naming the new owner, then its refund: bob no access, alice none either',
    doc: `"the entitlements will be removed from user 1 and added to user 2" (${FLOWS}); refund (${REFUNDS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      transfer([u.alice], [u.bob], 5),
      renewal(u.bob, 30, 30, 60, apple('2001', '1000')),
      refund(u.bob, 35, 30, 35, apple('2001', '1000')),
    ],
    expected: [{ now: 36, state: { alice: { pro: noAccess }, bob: { pro: noAccess } } }],
  },
  // ------------------------------------------------------------------ duplicates
  {
    name: 'the RENEWAL delivered again (same event id) after the subscription was cancelled and expired: still no access',
    doc: `"If we have to retry a webhook for any reason, the retry will have the same id and event_timestamp_ms of the first attempt." (${TYPES})`,
    items: (u) => {
      const renewed = renewal(u.alice, 30, 30, 60);
      return [
        purchase(u.alice, 0, 0, 30),
        renewed,
        expiration(u.alice, 'UNSUBSCRIBE', 60, 30, 60, apple('200030000', '1000')),
        renewed,
      ];
    },
    expected: [{ now: 61, state: { alice: { pro: noAccess } } }],
  },
  {
    name: 'trial, converted (RENEWAL, is_trial_conversion), then the converted period refunded: no access; a late TRIAL cancellation does not bring it back',
    doc: `"the trial converts into an active subscription. At this point, a RENEWAL event is dispatched" (${FLOWS}); refund (${REFUNDS})`,
    items: (u) => [
      trial(u.alice, 0, 0, 7),
      renewal(u.alice, 7, 7, 37, { is_trial_conversion: true, period_type: 'NORMAL' }),
      refund(u.alice, 10, 7, 10, apple('20007000', '1000')),
      cancellation(u.alice, 'UNSUBSCRIBE', 10.5, 7, 37, apple('20007000', '1000')),
    ],
    expected: [{ now: 11, state: { alice: { pro: noAccess } } }],
  },
  {
    name: 'Apple upgrade (immediate), then the user downgrades back at period end: premium to its end, then basic renewing',
    doc: `Apple: upgrades are immediate; downgrades "at period end"; "The customer will retain their entitlement based on the original product. When the customer encounters their next renewal, a RENEWAL event will be dispatched" (${FLOWS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'U0', 'U0', BASIC, ['basic'])),
      renewal(u.alice, 10, 10, 40, bought('APP_STORE', 'U1', 'U0', PREMIUM, ['premium'])),
      event('product-change', u.alice, 15, 10, 40, { ...bought('APP_STORE', 'U1', 'U0', PREMIUM, ['premium']), new_product_id: BASIC }),
      renewal(u.alice, 40, 40, 70, bought('APP_STORE', 'U2', 'U0', BASIC, ['basic'])),
    ],
    expected: [
      { now: 41, state: { alice: { basic: { active: true, willRenew: true, expiresAt: isoDay(70) }, premium: noAccess } } },
    ],
  },
  {
    name: 'Play deferred downgrade whose new product arrives as a RENEWAL under a new order: the old product stops at the change',
    doc: `"When the customer encounters their next renewal, a RENEWAL event will be dispatched for both App Store and Google Play subscriptions ... the user's entitlements will be replaced by the entitlements from the new product." (${FLOWS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...play('GPA.1800-0000-0000-00008', PLAY_PREMIUM), entitlement_ids: ['premium'] }),
      event('product-change', u.alice, 10, 0, 30, { ...play('GPA.1800-0000-0000-00008', PLAY_PREMIUM), entitlement_ids: ['premium'], new_product_id: PLAY_BASIC }),
      renewal(u.alice, 30, 30, 60, { ...play('GPA.1900-0000-0000-00009', PLAY_BASIC), entitlement_ids: ['basic'] }),
    ],
    expected: [
      { now: 31, state: { alice: { premium: noAccess, basic: { active: true, willRenew: true, expiresAt: isoDay(60) } } } },
    ],
  },
  // ------------------------------------------------------------------ batch 2
  {
    name: 'App Store monthly cancelled 12 hours before its renewal, Apple still charges it (RENEWAL): access to the new end, but not renewing',
    doc: `"The Apple subscription terms require users to cancel subscriptions at least 24 hours before the next renewal." (${MANAGE}); "If a user cancels less than 24 hours before the trial expires, you may unexpectedly receive a CANCELLATION event followed by a RENEWAL event." (${FLOWS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      cancellation(u.alice, 'UNSUBSCRIBE', 29.5, 0, 30),
      renewal(u.alice, 30, 30, 60),
    ],
    expected: [{ now: 31, state: { alice: { pro: { active: true, expiresAt: isoDay(60), willRenew: false } } } }],
  },
  {
    name: '... then charged again at the next renewal: renewal was turned back on (its UNCANCELLATION lost), renewing',
    doc: `RENEWAL: "An existing subscription has been renewed" (${TYPES}); a charge after the window's means auto-renewal is on again`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      cancellation(u.alice, 'UNSUBSCRIBE', 29.5, 0, 30),
      renewal(u.alice, 30, 30, 60),
      renewal(u.alice, 60, 60, 90),
    ],
    expected: [{ now: 61, state: { alice: { pro: { active: true, expiresAt: isoDay(90), willRenew: true } } } }],
  },
  {
    name: 'App Store daily periods (as short as a sandbox\'s): cancelled 12 hours before a renewal, charged in the window, then charged again: renewing again',
    doc: `"Your account will be charged for renewal within 24 hours prior to the end of the current period" (the App Store's auto-renewal terms, as ${MANAGE} restates them)`,
    items: (u) => [
      purchase(u.alice, 0, 0, 1),
      cancellation(u.alice, 'UNSUBSCRIBE', 0.5, 0, 1),
      renewal(u.alice, 1.001, 1, 2),
      renewal(u.alice, 2.001, 2, 3),
    ],
    expected: [{ now: 2.5, state: { alice: { pro: { active: true, expiresAt: isoDay(3), willRenew: true } } } }],
  },
  {
    name: 'App Store grace period, then the failing period refunded: no access at once',
    doc: `"Granting a refund will immediately expire the subscription and remove any entitlement access." (${REFUNDS}); CANCELLATION is fired for a refund "if the latest subscription period of a subscription is refunded" (${TYPES})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      billingIssue(u.alice, 30, 0, 30, 46),
      refund(u.alice, 35, 0, 35),
    ],
    expected: [{ now: 36, state: { alice: { pro: { active: false } } } }],
  },
  {
    name: 'App Store upgrade during a free trial, then the upgrade refunded: the trial product still active to its end',
    doc: `Apple "keeps the introductory offer active in addition to the upgraded product" (${MANAGE}); a refund ends the refunded subscription (${REFUNDS})`,
    items: (u) => [
      trial(u.alice, 0, 0, 7, bought('APP_STORE', 'V0', 'V0', BASIC, ['basic'], { period_type: 'TRIAL' })),
      renewal(u.alice, 2, 2, 32, bought('APP_STORE', 'V1', 'V0', PREMIUM, ['premium'], { period_type: 'NORMAL' })),
      refund(u.alice, 3, 2, 3, bought('APP_STORE', 'V1', 'V0', PREMIUM, ['premium'])),
    ],
    expected: [{ now: 4, state: { alice: { basic: { active: true, expiresAt: isoDay(7) }, premium: noAccess } } }],
  },
  {
    name: 'refunded, transferred, then the refund reversed (naming the new owner): bob has it, alice not',
    doc: `"the entitlements will be removed from user 1 and added to user 2" (${FLOWS}); REFUND_REVERSED: "A refund has been reversed." (${TYPES})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      refund(u.alice, 5, 0, 5),
      transfer([u.alice], [u.bob], 6),
      billingEvent('refund-reversed', u.bob, { at: 8, purchased: 0, expires: 30 }, apple('1000')),
    ],
    expected: [{ now: 10, state: { alice: { pro: noAccess }, bob: { pro: { active: true, expiresAt: isoDay(30) } } } }],
  },
  {
    name: 'a temporary grant, transferred to bob, then validated (INITIAL_PURCHASE naming bob): bob has it, renewing; alice nothing',
    doc: `${TEMP}; "the entitlements will be removed from user 1 and added to user 2" (${FLOWS})`,
    items: (u) => [
      billingEvent('temporary-entitlement-grant', u.alice, { at: 0.001, purchased: 0, expires: 1 }, { store: 'APP_STORE', product_id: BASIC, transaction_id: 'tmp_af25' }),
      transfer([u.alice], [u.bob], 0.01),
      purchase(u.bob, 0.02, 0, 30, bought('APP_STORE', 'tmp_af25', 'tmp_af25', BASIC)),
    ],
    expected: [{ now: 2, state: { alice: { pro: noAccess }, bob: { pro: { active: true, willRenew: true, expiresAt: isoDay(30) } } } }],
  },
  {
    name: 'Play subscription in grace, then an immediate upgrade (PRODUCT_CHANGE without new_product_id + new order): the old entitlement ends at once',
    doc: `"Old subscription is cancelled, and new subscription takes effect immediately" (${MANAGE})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...play('GPA.2000-0000-0000-00010', PLAY_BASIC), entitlement_ids: ['basic'] }),
      billingIssue(u.alice, 30, 0, 30, 37, { ...play('GPA.2000-0000-0000-00010', PLAY_BASIC), entitlement_ids: ['basic'] }),
      event('product-change', u.alice, 32, 0, 30, { ...play('GPA.2000-0000-0000-00010', PLAY_BASIC), entitlement_ids: ['basic'], new_product_id: undefined }),
      purchase(u.alice, 32.0001, 32, 62, { ...play('GPA.2100-0000-0000-00011', PLAY_PREMIUM), entitlement_ids: ['premium'] }),
    ],
    expected: [{ now: 33, state: { alice: { basic: noAccess, premium: { active: true, willRenew: true } } } }],
  },
  {
    name: 'Play pause: auto-resumed (RENEWAL), then the resumed period refunded: no access',
    doc: `"If the customer unpauses their subscription, they regain entitlements" (${FLOWS}); "Granting a refund will immediately expire the subscription" (${REFUNDS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, play('GPA.2200-0000-0000-00012')),
      event('expiration-paused', u.alice, 30, 0, 30, play('GPA.2200-0000-0000-00012')),
      renewal(u.alice, 60, 60, 90, play('GPA.2200-0000-0000-00012..0')),
      refund(u.alice, 65, 60, 65, play('GPA.2200-0000-0000-00012..0')),
    ],
    expected: [{ now: 66, state: { alice: { pro: noAccess } } }],
  },
  {
    name: 'Stripe: cancelled at period end, then the current invoice refunded: no access, not renewing',
    doc: `"Granting a refund will immediately expire the subscription and remove any entitlement access." (${REFUNDS}); Stripe refunds are detected (${REFUNDS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('STRIPE', 'in_a', 'sub_cancelled_refunded', 'prod_PRO')),
      cancellation(u.alice, 'UNSUBSCRIBE', 5, 0, 30, bought('STRIPE', 'in_a', 'sub_cancelled_refunded', 'prod_PRO')),
      refund(u.alice, 10, 0, 10, bought('STRIPE', 'in_a', 'sub_cancelled_refunded', 'prod_PRO')),
    ],
    expected: [{ now: 11, state: { alice: { pro: { active: false, willRenew: false } } } }],
  },
  {
    name: 'App Store trial, a downgrade scheduled during it, converted into the new product (RENEWAL): the new product renews, the trial product ends',
    doc: `Product change at period end: "the user's entitlements will be replaced by the entitlements from the new product" (${FLOWS})`,
    items: (u) => [
      trial(u.alice, 0, 0, 7, bought('APP_STORE', 'W0', 'W0', PREMIUM, ['premium'], { period_type: 'TRIAL' })),
      event('product-change', u.alice, 3, 0, 7, { ...bought('APP_STORE', 'W0', 'W0', PREMIUM, ['premium'], { period_type: 'TRIAL' }), new_product_id: BASIC }),
      renewal(u.alice, 7, 7, 37, bought('APP_STORE', 'W1', 'W0', BASIC, ['basic'], { period_type: 'NORMAL', is_trial_conversion: true })),
    ],
    expected: [{ now: 8, state: { alice: { premium: noAccess, basic: { active: true, willRenew: true, expiresAt: isoDay(37) } } } }],
  },
  {
    name: 'App Store upgrade during an INTRO offer, the intro period then EXPIRES: the upgrade still grants, renewing',
    doc: `Apple "keeps the introductory offer active in addition to the upgraded product" (${MANAGE}); EXPIRATION: "A subscription has expired and access should be removed." (${TYPES})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'X0', 'X0', BASIC, ['pro'], { period_type: 'INTRO' })),
      renewal(u.alice, 10, 10, 40, bought('APP_STORE', 'X1', 'X0', PREMIUM, ['pro'], { period_type: 'NORMAL' })),
      expiration(u.alice, 'UNSUBSCRIBE', 30, 0, 30, bought('APP_STORE', 'X0', 'X0', BASIC, ['pro'], { period_type: 'INTRO' })),
    ],
    expected: [{ now: 31, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(40), productId: PREMIUM } } } }],
  },
  {
    name: 'Play deferred downgrade, the old product extended first (SUBSCRIPTION_EXTENDED): the old product grants to the extended end',
    doc: `SUBSCRIPTION_EXTENDED: "the expiration date of the current subscription period has been pushed back to the future" (${TYPES}); "The customer will retain their entitlement based on the original product." (${FLOWS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...play('GPA.2300-0000-0000-00013', PLAY_PREMIUM), entitlement_ids: ['premium'] }),
      event('product-change', u.alice, 10, 0, 30, { ...play('GPA.2300-0000-0000-00013', PLAY_PREMIUM), entitlement_ids: ['premium'], new_product_id: PLAY_BASIC }),
      event('subscription-extended', u.alice, 12, 0, 37, { ...play('GPA.2300-0000-0000-00013', PLAY_PREMIUM), entitlement_ids: ['premium'] }),
    ],
    expected: [{ now: 33, state: { alice: { premium: { active: true, expiresAt: isoDay(37) } } } }],
  },
  {
    name: 'App Store paid introductory period (INTRO) cancelled 12 hours before it ends, Apple still charges the regular price (RENEWAL): access, not renewing',
    doc: `"The Apple subscription terms require users to cancel subscriptions at least 24 hours before the next renewal." (${MANAGE}); "If a user cancels less than 24 hours before the trial expires, you may unexpectedly receive a CANCELLATION event followed by a RENEWAL event." (${FLOWS})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { period_type: 'INTRO' }),
      cancellation(u.alice, 'UNSUBSCRIBE', 29.5, 0, 30, { period_type: 'INTRO' }),
      renewal(u.alice, 30, 30, 60, { period_type: 'NORMAL' }),
    ],
    expected: [{ now: 31, state: { alice: { pro: { active: true, expiresAt: isoDay(60), willRenew: false } } } }],
  },
  {
    name: 'a TRANSFER whose transferred_to names the receiving customer\'s anonymous id and bob: bob also has what that anonymous id bought',
    doc: `transferred_to: "App User ID(s) that are receiving the transactions and entitlements taken from transferred_from" (${TYPES}); RevenueCat's sample TRANSFER names the receiving customer's anonymous id and its signed-in id in transferred_to (https://www.revenuecat.com/docs/integrations/webhooks/sample-events); "If the purchase is currently associated with an anonymous App User ID, that App User ID will be aliased with the new App User ID instead (ie. the purchase is shared between the App User IDs)" (https://www.revenuecat.com/docs/projects/restore-behavior); aliasing: "The user can then be referenced by any of their aliases and the same result will be returned." (https://www.revenuecat.com/docs/dashboard-and-metrics/customer-profile)`,
    items: (u) => [
      purchase(u.anon, 0, 0, 30, { ...bought('APP_STORE', 'N1', 'N1', BASIC, ['basic']), ...customer(u.anon) }),
      purchase(u.alice, 1, 1, 366, { ...bought('APP_STORE', 'Y1', 'Y1', 'com.example.pro.yearly', ['pro']), ...customer(u.alice) }),
      transfer([u.alice], [u.anon, u.bob], 5),
    ],
    expected: [{ now: 6, state: {
      alice: { pro: noAccess },
      bob: { pro: { active: true, expiresAt: isoDay(366) }, basic: { active: true, expiresAt: isoDay(30) } },
    } }],
  },
  {
    name: 'the same with a lifetime the anonymous id bought (no later event will ever name it): bob has the lifetime',
    doc: `as the flow before: transferred_to: "App User ID(s) that are receiving the transactions and entitlements" (${TYPES}); "non-consumable and consumable purchases that are attached to an entitlement will unlock that content forever" (https://www.revenuecat.com/docs/getting-started/entitlements)`,
    items: (u) => [
      event('non-renewing-purchase', u.anon, 0, 0, null, { ...bought('APP_STORE', 'L9', 'L9', LIFETIME, ['lifetime']), ...customer(u.anon) }),
      purchase(u.alice, 1, 1, 366, { ...bought('APP_STORE', 'Y2', 'Y2', 'com.example.pro.yearly', ['pro']), ...customer(u.alice) }),
      transfer([u.alice], [u.anon, u.bob], 5),
    ],
    expected: [{ now: 6, state: { bob: { pro: { active: true }, lifetime: { active: true, expiresAt: null } } } }],
  },
];

/** Every order (or a sample) on Postgres; in order and reversed on PGlite (deliveryOrdersOn). */
const orders = (n: number, kind: DatabaseKind) => deliveryOrdersOn(kind, n, { everyOrderOn: 'postgres', sample: 6, seed: 1414 });

describeFlows('flows at the stores\' edges, in every delivery order', flows, newUsers, orders);
