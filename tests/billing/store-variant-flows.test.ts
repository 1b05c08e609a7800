import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { startFakeRevenueCat, v1Entitlement as ent, v1Subscription as sub, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { DATABASE_KINDS, suiteDatabase, type DatabaseKind } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { billingEvent, day, deliveryOrdersOn, describeFlows, DOC, isoDay, READER_NAMES, READERS, readerSettings, runFlowInOrders, snapshot, transfer, WEBHOOKS_ONLY, type Flow } from './support.ts';

/**
 * Store-specific lifecycles (Amazon, Paddle, Web Billing, Stripe), product changes, pauses,
 * billing issues, refunds reversed, non-renewing purchases, temporary grants, identity chains across
 * three users, sandbox beside production, events with several entitlement ids and an entitlement
 * whose products change. Through the real route and SQL; every delivery order the harness offers
 * on PGlite (in order and reversed on Postgres). The state is read after every event was
 * delivered. Webhooks only, except where they cannot say everything (an entitlement detached from
 * a product, a TRANSFER naming no purchase): there RevenueCat's record is fetched too, as the sync
 * the event asks for does (that the event asks for it: tests/billing/sync.test.ts).
 */
type Role = 'alice' | 'bob' | 'carol' | 'anon';
const newUsers = (): Record<Role, string> => ({
  alice: randomUUID(), bob: randomUUID(), carol: randomUUID(), anon: `$RCAnonymousID:${randomBytes(16).toString('hex')}`,
});

const ENTITLEMENTS = 'https://www.revenuecat.com/docs/getting-started/entitlements';
const RESTORE = 'https://www.revenuecat.com/docs/projects/restore-behavior';
const NONSUB = 'https://www.revenuecat.com/docs/platform-resources/non-subscriptions';
const PADDLE = 'https://www.revenuecat.com/docs/web/integrations/paddle';
const SAMPLES = 'https://www.revenuecat.com/docs/integrations/webhooks/sample-events';

/** A purchase's store, product, transactions and entitlements. */
const bought = (store: string, transaction: string, original: string, product: string, entitlements: string[] | null = ['pro'], extra: Record<string, unknown> = {}) =>
  ({ store, product_id: product, transaction_id: transaction, original_transaction_id: original, entitlement_ids: entitlements, ...extra });
/** Any event: fixture, user, event time, purchase time, expiry (days after T0), fields. */
const ev = (fixtureName: string, u: string, at: number, purchased: number | undefined, expires: number | null | undefined, fields: Record<string, unknown>) =>
  billingEvent(fixtureName, u, { at, ...(purchased !== undefined ? { purchased } : {}), ...(expires !== undefined ? { expires } : {}) }, fields);
const sec = (n: number) => n / 86_400;
const noAccess = { active: false };
const customer = (original: string, ...aliases: string[]) => ({ original_app_user_id: original, aliases: [original, ...aliases] });

// Amazon: receipts; no grace period ("Amazon ❌ Not supported", how grace periods work).
const AMZ = 'com.example.pro.monthly.amazon';
const amazon = (receipt: string, original = 'amzn-r-1') => bought('AMAZON', receipt, original, AMZ);
// Paddle: the transaction is a txn_, the original transaction the sub_.
const paddle = (txn: string, sub = 'sub_01paddle', product = 'pri_01pro_monthly') => bought('PADDLE', txn, sub, product);
// Web Billing (RC_BILLING).
const WB_BASIC = 'web_basic_monthly';
const WB_PREMIUM = 'web_premium_monthly';
const web = (tx: string, product = WB_BASIC, entitlements: string[] = ['pro'], original = 'rcb_sub_1') => bought('RC_BILLING', tx, original, product, entitlements);
// Stripe.
const stripe = (invoice: string, sub = 'sub_1STRIPE', product = 'prod_BASIC', entitlements: string[] = ['pro']) => bought('STRIPE', invoice, sub, product, entitlements);
// App Store.
const BASIC = 'com.example.basic.monthly';
const PREMIUM = 'com.example.premium.monthly';
const YEARLY = 'com.example.pro.yearly';
const appStore = (tx: string, original = '7000', product = PREMIUM, entitlements: string[] | null = ['pro']) => bought('APP_STORE', tx, original, product, entitlements);
// Google Play.
const PLAY = 'pro_monthly:monthly';
const playStore = (order: string, product = PLAY, entitlements: string[] | null = ['pro'], original = order.replace(/\.\.\d+$/, '')) =>
  bought('PLAY_STORE', order, original, product, entitlements);

const flows: Flow<Role>[] = [
  // ---------------------------------------------------------------- Amazon
  {
    name: 'A1 Amazon: purchase, renewal, unsubscribe, expiration: access to the paid end, then none',
    doc: `Cancellation flow: "At the end of the billing cycle, an EXPIRATION webhook is sent and entitlements are revoked." (${DOC.flows}); Amazon column of the event table (${DOC.types})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, amazon('amzn-r-1')),
      ev('renewal', u.alice, 30, 30, 60, amazon('amzn-r-2')),
      ev('cancellation-unsubscribe', u.alice, 40, 30, 60, { ...amazon('amzn-r-2'), cancel_reason: 'UNSUBSCRIBE' }),
      ev('expiration', u.alice, 60, 30, 60, { ...amazon('amzn-r-2'), expiration_reason: 'UNSUBSCRIBE' }),
    ],
    expected: [{ now: 61, state: { alice: { pro: noAccess } } }],
  },
  {
    name: 'A2 Amazon billing issue (no grace on Amazon): BILLING_ISSUE, CANCELLATION and EXPIRATION at once, later recovered by a RENEWAL',
    doc: `"If you do not have grace periods enabled, you'll immediately receive an EXPIRATION webhook" (${DOC.flows}); Amazon: grace "Not supported" (${DOC.grace}); RENEWAL: "a lapsed user has resubscribed" (${DOC.types})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, amazon('amzn-r-1')),
      ev('billing-issue-no-grace', u.alice, 30, 0, 30, { ...amazon('amzn-r-1'), grace_period_expiration_at_ms: null }),
      ev('cancellation-billing-error', u.alice, 30 + sec(0.001), 0, 30, { ...amazon('amzn-r-1'), cancel_reason: 'BILLING_ERROR' }),
      ev('expiration-billing-error', u.alice, 30 + sec(0.002), 0, 30, { ...amazon('amzn-r-1'), expiration_reason: 'BILLING_ERROR' }),
      ev('renewal', u.alice, 35, 35, 65, amazon('amzn-r-3')),
    ],
    expected: [{ now: 36, state: { alice: { pro: { active: true, willRenew: true, status: 'active', expiresAt: isoDay(65) } } } }],
  },
  {
    name: 'A3 Amazon: a temporary grant, then the validated INITIAL_PURCHASE (another transaction id): the purchase grants, renewing, past the grant',
    doc: `TEMPORARY_ENTITLEMENT_GRANT (Amazon ✅): "a regular INITIAL_PURCHASE event will be sent"; "the transaction_id might be different" (${DOC.types})`,
    items: (u) => [
      ev('temporary-entitlement-grant', u.alice, 0.001, 0, 1, { store: 'AMAZON', product_id: AMZ, transaction_id: 'tmp_amzn_1', entitlement_ids: ['pro'] }),
      ev('initial-purchase', u.alice, 0.3, 0, 30, amazon('amzn-r-9', 'amzn-r-9')),
    ],
    expected: [{ now: 2, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(30), status: 'active' } } } }],
  },
  // ---------------------------------------------------------------- Paddle
  {
    name: 'P1 Paddle: purchase, renewal, cancellation at period end, expiration',
    doc: `Paddle Billing subscriptions are tracked by RevenueCat (${PADDLE}); Cancellation flow (${DOC.flows})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, paddle('txn_01')),
      ev('renewal', u.alice, 30, 30, 60, paddle('txn_02')),
      ev('cancellation-unsubscribe', u.alice, 40, 30, 60, { ...paddle('txn_02'), cancel_reason: 'UNSUBSCRIBE' }),
      ev('expiration', u.alice, 60, 30, 60, { ...paddle('txn_02'), expiration_reason: 'UNSUBSCRIBE' }),
    ],
    expected: [{ now: 61, state: { alice: { pro: noAccess } } }],
  },
  {
    name: 'P2 Paddle: the latest period refunded (CANCELLATION CUSTOMER_SUPPORT + EXPIRATION): no access at once',
    doc: `CUSTOMER_SUPPORT: "a web (Web Billing or Stripe Billing) subscription was refunded" (${DOC.types}); "Granting a refund will immediately expire the subscription and remove any entitlement access." (${DOC.refunds})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, paddle('txn_01')),
      ev('renewal', u.alice, 30, 30, 60, paddle('txn_02')),
      ev('cancellation-customer-support', u.alice, 35, 30, 35, { ...paddle('txn_02'), cancel_reason: 'CUSTOMER_SUPPORT', price: -9.99 }),
      ev('expiration', u.alice, 35 + sec(0.001), 30, 35, { ...paddle('txn_02'), expiration_reason: 'CUSTOMER_SUPPORT' }),
    ],
    expected: [{ now: 36, state: { alice: { pro: noAccess } } }],
  },
  {
    name: 'P3 Paddle: a one-time (lifetime) purchase beside a Paddle subscription that expires: the lifetime still grants, forever',
    doc: `"non-consumable and consumable purchases that are attached to an entitlement will unlock that content forever" (${ENTITLEMENTS}); Paddle one-time purchases supported (${NONSUB})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, paddle('txn_01')),
      ev('non-renewing-purchase', u.alice, 5, 5, null, bought('PADDLE', 'txn_life_1', 'txn_life_1', 'pri_01pro_lifetime')),
      ev('cancellation-unsubscribe', u.alice, 10, 0, 30, { ...paddle('txn_01'), cancel_reason: 'UNSUBSCRIBE' }),
      ev('expiration', u.alice, 30, 0, 30, { ...paddle('txn_01'), expiration_reason: 'UNSUBSCRIBE' }),
    ],
    expected: [{ now: 100, state: { alice: { pro: { active: true, expiresAt: null, willRenew: false, productId: 'pri_01pro_lifetime' } } } }],
  },
  // ---------------------------------------------------------------- Web Billing
  {
    name: 'WB1 Web Billing upgrade (immediate): PRODUCT_CHANGE and the new product\'s RENEWAL of the same subscription: the old entitlement ends, the new grants',
    doc: `"An upgrade, where the subscription change happens immediately" (${DOC.web}); immediate product change: "the customer will immediately have access to the new entitlements" (${DOC.flows})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, web('rcb_tx_1', WB_BASIC, ['basic'])),
      ev('product-change', u.alice, 10, 0, 30, { ...web('rcb_tx_1', WB_BASIC, ['basic']), new_product_id: WB_PREMIUM }),
      ev('renewal', u.alice, 10 + sec(1), 10, 40, web('rcb_tx_2', WB_PREMIUM, ['premium'])),
    ],
    expected: [{ now: 11, state: { alice: { basic: noAccess, premium: { active: true, willRenew: true, expiresAt: isoDay(40) } } } }],
  },
  {
    name: 'WB2 Web Billing downgrade (end of cycle): the old product keeps granting until the renewal, then the new one replaces it',
    doc: `"A downgrade, where the subscription change is scheduled for the end of the current billing cycle" (${DOC.web}); "The customer will retain their entitlement based on the original product" (${DOC.flows})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, web('rcb_tx_1', WB_PREMIUM, ['premium'])),
      ev('product-change', u.alice, 10, 0, 30, { ...web('rcb_tx_1', WB_PREMIUM, ['premium']), new_product_id: WB_BASIC }),
      ev('renewal', u.alice, 30, 30, 60, web('rcb_tx_2', WB_BASIC, ['basic'])),
    ],
    expected: [{ now: 31, state: { alice: { premium: noAccess, basic: { active: true, willRenew: true, expiresAt: isoDay(60) } } } }],
  },
  {
    name: 'WB3 Web Billing: cancelled, the cancellation reverted (UNCANCELLATION), then the renewal: never loses access, renewing',
    doc: `"Customers can reactivate auto-renewal ... RevenueCat generates an UNCANCELLATION event. The subscription continues and renews without interruption" (${DOC.web})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, web('rcb_tx_1')),
      ev('cancellation-unsubscribe', u.alice, 10, 0, 30, { ...web('rcb_tx_1'), cancel_reason: 'UNSUBSCRIBE' }),
      ev('uncancellation', u.alice, 15, 0, 30, web('rcb_tx_1')),
      ev('renewal', u.alice, 30, 30, 60, web('rcb_tx_2')),
    ],
    expected: [{ now: 31, state: { alice: { pro: { active: true, willRenew: true, status: 'active', expiresAt: isoDay(60) } } } }],
  },
  {
    name: 'WB4 Web Billing: an INVOICE_ISSUANCE for a checkout whose payment never completes grants nothing',
    doc: `INVOICE_ISSUANCE: "a new invoice is created ... that has not yet been paid" (${DOC.types}); "if the initial payment for the subscription fails, no subscription is generated" (${DOC.web})`,
    items: (u) => [
      ev('invoice-issuance', u.alice, 0, 0, undefined, { store: 'RC_BILLING', product_id: WB_BASIC, environment: 'PRODUCTION' }),
    ],
    expected: [{ now: 1, state: { alice: null } }],
  },
  {
    name: 'WB5 Web Billing grace ends (EXPIRATION), then the payment is recovered: a new cycle from the recovery',
    doc: `Case 2: "If the payment couldn't be recovered by the end of the grace period, an EXPIRATION event is sent ... If the payment is later recovered ... a RENEWAL event is sent. The next subscription cycle restarts from the time that the billing was recovered" (${DOC.web})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, web('rcb_tx_1')),
      ev('billing-issue-grace', u.alice, 30, 0, 30, { ...web('rcb_tx_1'), grace_period_expiration_at_ms: Date.parse(isoDay(44)) }),
      ev('cancellation-billing-error', u.alice, 30 + sec(0.001), 0, 30, { ...web('rcb_tx_1'), cancel_reason: 'BILLING_ERROR' }),
      ev('expiration-billing-error', u.alice, 44, 0, 30, { ...web('rcb_tx_1'), expiration_reason: 'BILLING_ERROR' }),
      ev('renewal', u.alice, 50, 50, 80, web('rcb_tx_2')),
    ],
    expected: [{ now: 51, state: { alice: { pro: { active: true, willRenew: true, status: 'active', expiresAt: isoDay(80) } } } }],
  },
  // ---------------------------------------------------------------- Stripe
  {
    name: 'S1 Stripe trial cancelled during the trial, then its EXPIRATION: access for the trial, then none',
    doc: `Trial flow (unsuccessful conversion): "the user will retain entitlement access for the remainder of the trial's duration. Once the trial duration elapses, an EXPIRATION event will be sent" (${DOC.flows})`,
    items: (u) => [
      ev('initial-purchase-trial', u.alice, 0, 0, 7, { ...stripe('in_trial_1'), period_type: 'TRIAL', price: 0 }),
      ev('cancellation-unsubscribe', u.alice, 3, 0, 7, { ...stripe('in_trial_1'), period_type: 'TRIAL', cancel_reason: 'UNSUBSCRIBE' }),
      ev('expiration', u.alice, 7, 0, 7, { ...stripe('in_trial_1'), period_type: 'TRIAL', expiration_reason: 'UNSUBSCRIBE' }),
    ],
    expected: [{ now: 8, state: { alice: { pro: noAccess } } }],
  },
  {
    name: 'S2 Stripe trial cancelled in its last day, renewal turned back on (Stripe sends no UNCANCELLATION), converted: renewing',
    doc: `UNCANCELLATION: Stripe ❌ (${DOC.types}); trial conversion: "a RENEWAL event is dispatched and the user is billed" (${DOC.flows}); Apple's 24-hour rule is Apple's only`,
    items: (u) => [
      ev('initial-purchase-trial', u.alice, 0, 0, 7, { ...stripe('in_trial_1'), period_type: 'TRIAL', price: 0 }),
      ev('cancellation-unsubscribe', u.alice, 6.5, 0, 7, { ...stripe('in_trial_1'), period_type: 'TRIAL', cancel_reason: 'UNSUBSCRIBE' }),
      ev('renewal', u.alice, 7, 7, 37, { ...stripe('in_2'), is_trial_conversion: true, price: 9.99 }),
    ],
    expected: [{ now: 8, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(37) } } } }],
  },
  {
    name: 'S3 Stripe immediate upgrade during a trial (RENEWAL of the new product with purchased_at = t0): the new entitlement, the old one ends',
    doc: `"For immediate product changes in Stripe ... The RENEWAL event may show the same purchased_at_ms as the original subscription (ie. t0)" (${DOC.flows})`,
    items: (u) => [
      ev('initial-purchase-trial', u.alice, 0, 0, 7, { ...stripe('in_trial_1', 'sub_1STRIPE', 'prod_BASIC', ['basic']), period_type: 'TRIAL', price: 0 }),
      ev('product-change', u.alice, 3, 0, 7, { ...stripe('in_trial_1', 'sub_1STRIPE', 'prod_BASIC', ['basic']), new_product_id: 'prod_PREMIUM' }),
      ev('renewal', u.alice, 3 + sec(1), 0, 7, { ...stripe('in_up_1', 'sub_1STRIPE', 'prod_PREMIUM', ['premium']), period_type: 'TRIAL', price: 0 }),
    ],
    expected: [{ now: 4, state: { alice: { basic: noAccess, premium: { active: true, willRenew: true, expiresAt: isoDay(7) } } } }],
  },
  // ---------------------------------------------------------------- product changes
  {
    name: 'C1 App Store downgrade scheduled, then the subscription cancelled before the renewal, then EXPIRATION: nothing grants after',
    doc: `Change at period end: "When the customer encounters their next renewal, a RENEWAL event will be dispatched" (${DOC.flows}); Cancellation flow (${DOC.flows})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, appStore('7000', '7000', PREMIUM, ['premium'])),
      ev('product-change', u.alice, 10, 0, 30, { ...appStore('7000', '7000', PREMIUM, ['premium']), new_product_id: BASIC }),
      ev('cancellation-unsubscribe', u.alice, 20, 0, 30, { ...appStore('7000', '7000', PREMIUM, ['premium']), cancel_reason: 'UNSUBSCRIBE' }),
      ev('expiration', u.alice, 30, 0, 30, { ...appStore('7000', '7000', PREMIUM, ['premium']), expiration_reason: 'UNSUBSCRIBE' }),
    ],
    expected: [{ now: 31, state: { alice: { premium: noAccess, basic: null } } }],
  },
  {
    name: 'C2 App Store downgrade scheduled then reverted (PRODUCT_CHANGE back), then the renewal of the original product: it renews, the other never grants',
    doc: `PRODUCT_CHANGE: "This does not mean the new subscription is in effect immediately." (${DOC.types}); "the user's entitlements will be replaced by the entitlements from the new product" only at the renewal (${DOC.flows})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, appStore('7000', '7000', PREMIUM, ['premium'])),
      ev('product-change', u.alice, 10, 0, 30, { ...appStore('7000', '7000', PREMIUM, ['premium']), new_product_id: BASIC }),
      ev('product-change', u.alice, 12, 0, 30, { ...appStore('7000', '7000', PREMIUM, ['premium']), new_product_id: PREMIUM }),
      ev('renewal', u.alice, 30, 30, 60, appStore('7001', '7000', PREMIUM, ['premium'])),
    ],
    expected: [{ now: 31, state: { alice: { premium: { active: true, willRenew: true, expiresAt: isoDay(60) }, basic: null } } }],
  },
  {
    name: 'C3 Play immediate upgrade from a product granting [pro, extra] to one granting [pro]: extra ends at once, pro from the new product',
    doc: `Immediate change (Play, all modes but DEFERRED): PRODUCT_CHANGE alongside the new product's INITIAL_PURCHASE (${DOC.flows}); "Old subscription is cancelled, and new subscription takes effect immediately" (${DOC.manage})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, playStore('GPA.1100-1100-1100-11000', 'bundle_monthly:monthly', ['pro', 'extra'])),
      ev('product-change', u.alice, 10, 0, 30, { ...playStore('GPA.1100-1100-1100-11000', 'bundle_monthly:monthly', ['pro', 'extra']), new_product_id: undefined }),
      ev('initial-purchase', u.alice, 10 + sec(1), 10, 40, playStore('GPA.2200-2200-2200-22000', 'pro_yearly:yearly', ['pro'])),
    ],
    expected: [{ now: 11, state: { alice: { extra: noAccess, pro: { active: true, willRenew: true, expiresAt: isoDay(40), productId: 'pro_yearly:yearly' } } } }],
  },
  {
    name: 'C4 App Store upgrade (RENEWAL of the same subscription) from a product granting [pro, extra] to one granting [pro]: extra ends',
    doc: `"the customer will immediately have access to the new entitlements"; at a change "the user's entitlements will be replaced by the entitlements from the new product" (${DOC.flows})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, appStore('7000', '7000', BASIC, ['pro', 'extra'])),
      ev('product-change', u.alice, 10, 0, 30, { ...appStore('7000', '7000', BASIC, ['pro', 'extra']), new_product_id: PREMIUM }),
      ev('renewal', u.alice, 10 + sec(1), 10, 40, appStore('7001', '7000', PREMIUM, ['pro'])),
    ],
    expected: [{ now: 11, state: { alice: { extra: noAccess, pro: { active: true, willRenew: true, expiresAt: isoDay(40), productId: PREMIUM } } } }],
  },
  // ---------------------------------------------------------------- pauses
  {
    name: 'PA1 Play pause takes effect, then the user cancels while paused: no access at or after the auto-resume date',
    doc: `"Their entitlement is revoked at the end of the subscription term" (${DOC.flows}); EXPIRATION reason SUBSCRIPTION_PAUSED; CANCELLATION (${DOC.types})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, playStore('GPA.3300-3300-3300-33000')),
      ev('subscription-paused', u.alice, 10, 0, 30, { ...playStore('GPA.3300-3300-3300-33000'), auto_resume_at_ms: Date.parse(isoDay(60)) }),
      ev('expiration-paused', u.alice, 30, 0, 30, playStore('GPA.3300-3300-3300-33000')),
      ev('cancellation-unsubscribe', u.alice, 40, 0, 30, { ...playStore('GPA.3300-3300-3300-33000'), cancel_reason: 'UNSUBSCRIBE' }),
    ],
    expected: [
      { now: 45, state: { alice: { pro: { active: false, willRenew: false } } } },
      { now: 61, state: { alice: { pro: noAccess } } },
    ],
  },
  {
    name: 'PA2 Play pause in effect, the charge at resume fails without grace (account hold): no access; then recovered: access, renewing',
    doc: `BILLING_ISSUE with no grace period (${DOC.grace}); "If billing succeeds ... you'll receive a RENEWAL event" (${DOC.flows}); "they regain entitlements and the subscription's billing cycle resumes" (${DOC.flows})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, playStore('GPA.4400-4400-4400-44000')),
      ev('subscription-paused', u.alice, 10, 0, 30, { ...playStore('GPA.4400-4400-4400-44000'), auto_resume_at_ms: Date.parse(isoDay(60)) }),
      ev('expiration-paused', u.alice, 30, 0, 30, playStore('GPA.4400-4400-4400-44000')),
      ev('billing-issue-no-grace', u.alice, 60, 0, 30, { ...playStore('GPA.4400-4400-4400-44000'), grace_period_expiration_at_ms: null }),
      ev('renewal', u.alice, 65, 65, 95, playStore('GPA.4400-4400-4400-44000..0')),
    ],
    expected: [{ now: 66, state: { alice: { pro: { active: true, willRenew: true, status: 'active', expiresAt: isoDay(95) } } } }],
  },
  {
    name: 'PA3 the same, the account hold not recovered: no access after the resume date',
    doc: `BILLING_ISSUE: "This does not mean the subscription has expired" but with no grace period access is not retained (${DOC.grace}); "Their entitlement is revoked at the end of the subscription term" (${DOC.flows})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, playStore('GPA.4500-4500-4500-45000')),
      ev('subscription-paused', u.alice, 10, 0, 30, { ...playStore('GPA.4500-4500-4500-45000'), auto_resume_at_ms: Date.parse(isoDay(60)) }),
      ev('expiration-paused', u.alice, 30, 0, 30, playStore('GPA.4500-4500-4500-45000')),
      ev('billing-issue-no-grace', u.alice, 60, 0, 30, { ...playStore('GPA.4500-4500-4500-45000'), grace_period_expiration_at_ms: null }),
    ],
    expected: [{ now: 61, state: { alice: { pro: noAccess } } }],
  },
  // ---------------------------------------------------------------- billing issues
  {
    name: 'B1 App Store billing issue without grace (BILLING_ISSUE stamped after the period ended), EXPIRATION, later recovered by a RENEWAL: renewing',
    doc: `Sample BILLING_ISSUE stamped after its expiration_at_ms (${SAMPLES}); "If you do not have grace periods enabled, you'll immediately receive an EXPIRATION" (${DOC.flows}); RENEWAL: "a lapsed user has resubscribed" (${DOC.types})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, appStore('7000', '7000')),
      ev('billing-issue-no-grace', u.alice, 30.2, 0, 30, { ...appStore('7000', '7000'), grace_period_expiration_at_ms: null }),
      ev('cancellation-billing-error', u.alice, 30.2 + sec(0.001), 0, 30, { ...appStore('7000', '7000'), cancel_reason: 'BILLING_ERROR' }),
      ev('expiration-billing-error', u.alice, 30.2 + sec(0.002), 0, 30, { ...appStore('7000', '7000'), expiration_reason: 'BILLING_ERROR' }),
      ev('renewal', u.alice, 40, 40, 70, appStore('7001', '7000')),
    ],
    expected: [{ now: 41, state: { alice: { pro: { active: true, willRenew: true, status: 'active', expiresAt: isoDay(70) } } } }],
  },
  {
    name: 'B2 App Store grace: the user turns auto-renew off during grace, the grace ends (EXPIRATION BILLING_ERROR): no access',
    doc: `"At the end of the grace period, if billing has not been successful, an EXPIRATION event will be sent and entitlements will be revoked." (${DOC.flows})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, appStore('7000', '7000')),
      ev('billing-issue-grace', u.alice, 30, 0, 30, { ...appStore('7000', '7000'), grace_period_expiration_at_ms: Date.parse(isoDay(46)) }),
      ev('cancellation-billing-error', u.alice, 30 + sec(0.001), 0, 30, { ...appStore('7000', '7000'), cancel_reason: 'BILLING_ERROR' }),
      ev('cancellation-unsubscribe', u.alice, 35, 0, 30, { ...appStore('7000', '7000'), cancel_reason: 'UNSUBSCRIBE' }),
      ev('expiration-billing-error', u.alice, 46, 0, 30, { ...appStore('7000', '7000'), expiration_reason: 'BILLING_ERROR' }),
    ],
    expected: [{ now: 47, state: { alice: { pro: noAccess } } }],
  },
  // ---------------------------------------------------------------- refunds
  {
    name: 'R1 REFUND_REVERSED after the user had unsubscribed and the period was refunded: access again to the period end, still not renewing',
    doc: `REFUND_REVERSED: "A refund has been reversed." (${DOC.types}); CUSTOMER_SUPPORT: "this does not mean that a subscription's autorenewal preference has been deactivated" and so a refund does not change it either way (${DOC.types})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, appStore('7000', '7000')),
      ev('cancellation-unsubscribe', u.alice, 10, 0, 30, { ...appStore('7000', '7000'), cancel_reason: 'UNSUBSCRIBE' }),
      ev('cancellation-customer-support', u.alice, 12, 0, 12, { ...appStore('7000', '7000'), cancel_reason: 'CUSTOMER_SUPPORT', price: -9.99 }),
      ev('refund-reversed', u.alice, 15, 0, 30, appStore('7000', '7000')),
    ],
    expected: [{ now: 16, state: { alice: { pro: { active: true, willRenew: false, expiresAt: isoDay(30) } } } }],
  },
  // ---------------------------------------------------------------- non-renewing purchases
  {
    name: 'N1 two non-renewing 30-day passes, the second bought before the first ends: access to the later end, never renewing',
    doc: `"Non-renewing subscription: a purchase that unlocks content for a specific period of time" (${NONSUB}); NON_RENEWING_PURCHASE (${DOC.types})`,
    items: (u) => [
      ev('non-renewing-purchase', u.alice, 0, 0, 30, bought('APP_STORE', '8001', '8001', 'com.example.pass.30d')),
      ev('non-renewing-purchase', u.alice, 20, 20, 50, bought('APP_STORE', '8002', '8002', 'com.example.pass.30d')),
    ],
    expected: [{ now: 40, state: { alice: { pro: { active: true, willRenew: false, expiresAt: isoDay(50) } } } }],
  },
  {
    name: 'N2 a consumable mapped to no entitlement (entitlement_ids null) beside a monthly: the monthly alone decides, lapsing at its end',
    doc: `entitlement_ids "can be NULL if the product_id is not mapped to any entitlements" (${DOC.types}); consumables not attached to an entitlement unlock nothing (${NONSUB})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, appStore('7000', '7000')),
      ev('non-renewing-purchase', u.alice, 5, 5, null, bought('APP_STORE', '8100', '8100', 'coins_100', null)),
      ev('cancellation-unsubscribe', u.alice, 10, 0, 30, { ...appStore('7000', '7000'), cancel_reason: 'UNSUBSCRIBE' }),
    ],
    expected: [{ now: 31, state: { alice: { pro: noAccess } } }],
  },
  {
    name: 'N3 a consumable attached to the entitlement: unlocked forever, even after its subscription sibling expires',
    doc: `"if you add a consumable product to an entitlement, RevenueCat will report that entitlement as unlocked (forever), even after one purchase" (${NONSUB})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, appStore('7000', '7000')),
      ev('non-renewing-purchase', u.alice, 5, 5, null, bought('APP_STORE', '8200', '8200', 'coins_100', ['pro'])),
      ev('expiration', u.alice, 30, 0, 30, { ...appStore('7000', '7000'), expiration_reason: 'UNSUBSCRIBE' }),
    ],
    expected: [{ now: 200, state: { alice: { pro: { active: true, expiresAt: null, willRenew: false } } } }],
  },
  // ---------------------------------------------------------------- temporary grants
  {
    name: 'T1 a temporary grant to an anonymous id, the user signs in (SUBSCRIBER_ALIAS), the validated purchase names the signed-in id: active, renewing',
    doc: `TEMPORARY_ENTITLEMENT_GRANT then "a regular INITIAL_PURCHASE event will be sent" (${DOC.types}); an anonymous id's purchases are aliased with the new App User ID (${RESTORE})`,
    items: (u) => [
      ev('temporary-entitlement-grant', u.anon, 0.001, 0, 1, { store: 'APP_STORE', product_id: PREMIUM, transaction_id: 'tmp_t1', entitlement_ids: ['pro'], aliases: [u.anon], original_app_user_id: u.anon }),
      ev('subscriber-alias', u.alice, 0.1, undefined, undefined, customer(u.anon, u.alice)),
      ev('initial-purchase', u.alice, 0.2, 0, 30, { ...appStore('9100', '9100'), ...customer(u.anon, u.alice) }),
    ],
    expected: [{ now: 2, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(30), status: 'active' } } } }],
  },
  {
    name: 'T2 a temporary grant whose validation fails (EXPIRATION with its transaction id) beside a live Play subscription: the Play one still grants',
    doc: `"If the purchase can't be validated, an EXPIRATION event with the same transaction_id is sent." (${DOC.types})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, playStore('GPA.5500-5500-5500-55000')),
      ev('temporary-entitlement-grant', u.alice, 5, 5, 6, { store: 'APP_STORE', product_id: PREMIUM, transaction_id: 'tmp_t2', entitlement_ids: ['pro'], environment: undefined }),
      ev('expiration', u.alice, 5.5, 5, 5.5, { store: 'APP_STORE', product_id: PREMIUM, transaction_id: 'tmp_t2', original_transaction_id: undefined, entitlement_ids: ['pro'], expiration_reason: 'UNKNOWN', environment: undefined }),
    ],
    expected: [{ now: 7, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(30), store: 'PLAY_STORE' } } } }],
  },
  // ---------------------------------------------------------------- intermediate states (the prefix of a flow above)
  {
    name: 'A1b Amazon: ... before its EXPIRATION: access to the paid end, not renewing',
    doc: `"the user will retain entitlement access" until the end of the period after a CANCELLATION (${DOC.flows})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, amazon('amzn-r-1')),
      ev('renewal', u.alice, 30, 30, 60, amazon('amzn-r-2')),
      ev('cancellation-unsubscribe', u.alice, 40, 30, 60, { ...amazon('amzn-r-2'), cancel_reason: 'UNSUBSCRIBE' }),
    ],
    expected: [{ now: 45, state: { alice: { pro: { active: true, willRenew: false, expiresAt: isoDay(60), store: 'AMAZON' } } } }],
  },
  {
    name: 'P1b Paddle: ... before its EXPIRATION: access to the paid end, not renewing',
    doc: `Cancellation flow (${DOC.flows})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, paddle('txn_01')),
      ev('renewal', u.alice, 30, 30, 60, paddle('txn_02')),
      ev('cancellation-unsubscribe', u.alice, 40, 30, 60, { ...paddle('txn_02'), cancel_reason: 'UNSUBSCRIBE' }),
    ],
    expected: [{ now: 45, state: { alice: { pro: { active: true, willRenew: false, expiresAt: isoDay(60), store: 'PADDLE' } } } }],
  },
  {
    name: 'WB2b Web Billing downgrade scheduled, before the renewal: the old product still grants, to its end',
    doc: `"The customer will retain their entitlement based on the original product" (${DOC.flows}); downgrade "scheduled for the end of the current billing cycle" (${DOC.web})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, web('rcb_tx_1', WB_PREMIUM, ['premium'])),
      ev('product-change', u.alice, 10, 0, 30, { ...web('rcb_tx_1', WB_PREMIUM, ['premium']), new_product_id: WB_BASIC }),
    ],
    expected: [{ now: 20, state: { alice: { premium: { active: true, expiresAt: isoDay(30) }, basic: null } } }],
  },
  {
    name: 'WB5b Web Billing grace ended (EXPIRATION) and not yet recovered: no access',
    doc: `Case 2 (${DOC.web})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, web('rcb_tx_1')),
      ev('billing-issue-grace', u.alice, 30, 0, 30, { ...web('rcb_tx_1'), grace_period_expiration_at_ms: Date.parse(isoDay(44)) }),
      ev('cancellation-billing-error', u.alice, 30 + sec(0.001), 0, 30, { ...web('rcb_tx_1'), cancel_reason: 'BILLING_ERROR' }),
      ev('expiration-billing-error', u.alice, 44, 0, 30, { ...web('rcb_tx_1'), expiration_reason: 'BILLING_ERROR' }),
    ],
    expected: [{ now: 45, state: { alice: { pro: noAccess } } }],
  },
  {
    name: 'S1b Stripe trial cancelled, before its end: access for the rest of the trial, not renewing',
    doc: `"the user will retain entitlement access for the remainder of the trial's duration" (${DOC.flows})`,
    items: (u) => [
      ev('initial-purchase-trial', u.alice, 0, 0, 7, { ...stripe('in_trial_1'), period_type: 'TRIAL', price: 0 }),
      ev('cancellation-unsubscribe', u.alice, 3, 0, 7, { ...stripe('in_trial_1'), period_type: 'TRIAL', cancel_reason: 'UNSUBSCRIBE' }),
    ],
    expected: [{ now: 5, state: { alice: { pro: { active: true, willRenew: false, expiresAt: isoDay(7) } } } }],
  },
  {
    name: 'B1b App Store billing issue without grace (BILLING_ISSUE stamped after the period ended), CANCELLATION and EXPIRATION, not recovered: no access, not renewing',
    doc: `"If you do not have grace periods enabled, you'll immediately receive an EXPIRATION webhook and the customer's entitlements will be revoked." (${DOC.flows})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, appStore('7000', '7000')),
      ev('billing-issue-no-grace', u.alice, 30.2, 0, 30, { ...appStore('7000', '7000'), grace_period_expiration_at_ms: null }),
      ev('cancellation-billing-error', u.alice, 30.2 + sec(0.001), 0, 30, { ...appStore('7000', '7000'), cancel_reason: 'BILLING_ERROR' }),
      ev('expiration-billing-error', u.alice, 30.2 + sec(0.002), 0, 30, { ...appStore('7000', '7000'), expiration_reason: 'BILLING_ERROR' }),
    ],
    expected: [{ now: 35, state: { alice: { pro: { active: false, willRenew: false } } } }],
  },
  {
    name: 'B2b App Store grace, auto-renew turned off during it, the grace not yet over: access in grace, not renewing',
    doc: `"the customer will retain entitlements as the app store retries the customer's billing method" (${DOC.flows}); grace_period_expiration_at_ms (${DOC.types})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, appStore('7000', '7000')),
      ev('billing-issue-grace', u.alice, 30, 0, 30, { ...appStore('7000', '7000'), grace_period_expiration_at_ms: Date.parse(isoDay(46)) }),
      ev('cancellation-billing-error', u.alice, 30 + sec(0.001), 0, 30, { ...appStore('7000', '7000'), cancel_reason: 'BILLING_ERROR' }),
      ev('cancellation-unsubscribe', u.alice, 35, 0, 30, { ...appStore('7000', '7000'), cancel_reason: 'UNSUBSCRIBE' }),
    ],
    expected: [{ now: 40, state: { alice: { pro: { active: true, status: 'grace', willRenew: false } } } }],
  },
  // ---------------------------------------------------------------- identity
  {
    name: 'I1 a TRANSFER chain across three users (alice -> bob -> carol), then the renewal names carol: carol has it, alice and bob not',
    doc: `Transfer flow: "the entitlements will be removed from user 1 and added to user 2" (${DOC.flows}); TRANSFER (${DOC.types})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, appStore('7000', '7000')),
      transfer([u.alice], [u.bob], 5),
      transfer([u.bob], [u.carol], 10),
      ev('renewal', u.carol, 30, 30, 60, appStore('7001', '7000')),
    ],
    expected: [{ now: 31, state: {
      alice: { pro: noAccess }, bob: { pro: noAccess }, carol: { pro: { active: true, willRenew: true, expiresAt: isoDay(60) } },
    } }],
  },
  {
    name: 'I2 a TRANSFER chain that comes back (alice -> bob -> carol -> alice): alice has it, the others not',
    doc: `Transfer flow (${DOC.flows}); "only one customer at a time can have access" (${RESTORE})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, appStore('7000', '7000')),
      transfer([u.bob], [u.carol], 10),
      transfer([u.alice], [u.bob], 5),
      transfer([u.carol], [u.alice], 15),
    ],
    expected: [{ now: 16, state: {
      alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(30) } }, bob: { pro: noAccess }, carol: { pro: noAccess },
    } }],
  },
  {
    name: 'I3 a TRANSFER to an anonymous id, which then signs in as bob (the anonymous id aliased into bob): bob has it, alice not',
    doc: `"If an anonymous ID restores and the owner of the receipt is an identified App User ID, we will ... transfer the receipt to the anonymous user"; anonymous ids are "merged (aliased)" when signing in (${RESTORE})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, appStore('7000', '7000')),
      transfer([u.alice], [u.anon], 5),
      ev('subscriber-alias', u.bob, 6, undefined, undefined, customer(u.anon, u.bob)),
      ev('renewal', u.bob, 30, 30, 60, { ...appStore('7001', '7000'), ...customer(u.anon, u.bob) }),
    ],
    expected: [{ now: 31, state: { alice: { pro: noAccess }, bob: { pro: { active: true, willRenew: true, expiresAt: isoDay(60) } } } }],
  },
  {
    name: 'I4 a TRANSFER from alice to an anonymous id, which then signs in as alice again: alice has it back',
    doc: `anonymous receiver of a transfer; on sign-in "that App User ID will be aliased with the new App User ID" (${RESTORE})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, appStore('7000', '7000')),
      transfer([u.alice], [u.anon], 5),
      ev('subscriber-alias', u.alice, 6, undefined, undefined, customer(u.anon, u.alice)),
    ],
    expected: [{ now: 7, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(30) } } } }],
  },
  {
    name: 'I6 a transfer and a transfer back with a renewal and a cancellation between, any order: alice has it, cancelled, to the renewed end',
    doc: `Transfer flow (${DOC.flows}); CANCELLATION (${DOC.types}); "only one customer at a time can have access" (${RESTORE})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, appStore('7000', '7000')),
      transfer([u.alice], [u.bob], 5),
      ev('renewal', u.bob, 30, 30, 60, appStore('7001', '7000')),
      transfer([u.bob], [u.alice], 40),
      ev('cancellation-unsubscribe', u.alice, 45, 30, 60, { ...appStore('7001', '7000'), cancel_reason: 'UNSUBSCRIBE' }),
    ],
    expected: [{ now: 46, state: { alice: { pro: { active: true, willRenew: false, expiresAt: isoDay(60) } }, bob: { pro: noAccess } } }],
  },
  {
    name: 'I7 Roku upgrade (no PRODUCT_CHANGE on Roku): the new product\'s INITIAL_PURCHASE grants at once, renewing',
    doc: `Roku: "Upgrading products will cancel the previous subscription and start the new one immediately" (${DOC.manage}); PRODUCT_CHANGE Roku ❌ (${DOC.types})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, bought('ROKU', 'roku-1', 'roku-1', 'roku_basic', ['pro'])),
      ev('cancellation-unsubscribe', u.alice, 10, 0, 30, { ...bought('ROKU', 'roku-1', 'roku-1', 'roku_basic', ['pro']), cancel_reason: 'UNSUBSCRIBE' }),
      ev('initial-purchase', u.alice, 10 + sec(1), 10, 40, bought('ROKU', 'roku-2', 'roku-2', 'roku_premium', ['pro', 'premium'])),
    ],
    expected: [{ now: 11, state: { alice: {
      pro: { active: true, willRenew: true, expiresAt: isoDay(40) }, premium: { active: true, willRenew: true, expiresAt: isoDay(40) },
    } } }],
  },
  // ---------------------------------------------------------------- several entitlements / mapping changes
  {
    name: 'M2 a product granting [pro, extra] refunded (both named): neither grants',
    doc: `"Granting a refund will immediately expire the subscription and remove any entitlement access." (${DOC.refunds})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, appStore('7600', '7600', BASIC, ['pro', 'extra'])),
      ev('cancellation-customer-support', u.alice, 10, 0, 10, { ...appStore('7600', '7600', BASIC, ['pro', 'extra']), cancel_reason: 'CUSTOMER_SUPPORT', price: -9.99 }),
      ev('expiration', u.alice, 10 + sec(0.001), 0, 10, { ...appStore('7600', '7600', BASIC, ['pro', 'extra']), expiration_reason: 'CUSTOMER_SUPPORT' }),
    ],
    expected: [{ now: 11, state: { alice: { pro: noAccess, extra: noAccess } } }],
  },
  {
    name: 'M3 a monthly granting [pro]; extra attached to it too; a CANCELLATION names [pro, extra]: both active to the period end, not renewing',
    doc: `"Attaching an entitlement to a product will grant that entitlement to any customers that have previously purchased that product." (${ENTITLEMENTS})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, appStore('7700', '7700', BASIC, ['pro'])),
      ev('cancellation-unsubscribe', u.alice, 10, 0, 30, { ...appStore('7700', '7700', BASIC, ['pro', 'extra']), cancel_reason: 'UNSUBSCRIBE' }),
    ],
    expected: [{ now: 11, state: { alice: {
      pro: { active: true, willRenew: false, expiresAt: isoDay(30) }, extra: { active: true, willRenew: false, expiresAt: isoDay(30) },
    } } }],
  },
  {
    name: 'M4 a monthly granting [pro, extra]; extra detached; the next RENEWAL names [pro]: extra not active in the renewed period',
    doc: `"detaching an entitlement from a product will remove it for any customers that have previously purchased that product" (${ENTITLEMENTS})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, appStore('7800', '7800', BASIC, ['pro', 'extra'])),
      ev('renewal', u.alice, 30, 30, 60, appStore('7801', '7800', BASIC, ['pro'])),
    ],
    expected: [{ now: 31, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(60) }, extra: noAccess } } }],
  },
];

/** Every order the harness offers on PGlite; in order and reversed on Postgres. */
const orders = (n: number, kind: DatabaseKind) => deliveryOrdersOn(kind, n, { everyOrderOn: 'pglite', sample: 6, seed: 1111 });

describeFlows('store-specific flows, in every delivery order', flows, newUsers, orders);

// ---------------------------------------------------------------- sandbox beside production (deployed: sandbox grants nothing)
const sandboxFlows: Flow<Role>[] = [
  {
    name: 'SB1 a SANDBOX TRANSFER from alice to bob (TestFlight restore) leaves alice\'s production subscription with her; bob gets nothing',
    doc: `environment: "Store environment. SANDBOX, PRODUCTION" (${DOC.types}); a sandbox restore moves sandbox purchases (restore behavior for sandbox, ${RESTORE})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, appStore('7000', '7000')),
      ev('initial-purchase', u.alice, 1, 1, 1.01, { ...appStore('s-100', 's-100'), environment: 'SANDBOX' }),
      transfer([u.alice], [u.bob], 5, { environment: 'SANDBOX' }),
      ev('renewal', u.bob, 5.1, 5.1, 5.11, { ...appStore('s-101', 's-100'), environment: 'SANDBOX' }),
    ],
    expected: [{ now: 6, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(30), environment: 'PRODUCTION' } }, bob: null } }],
  },
  {
    name: 'SB2 a sandbox refund naming the same product and transaction ids as the production purchase leaves the production purchase granting',
    doc: `environment SANDBOX vs PRODUCTION (${DOC.types}); a sandbox purchase costs nobody anything`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, appStore('7000', '7000')),
      ev('cancellation-customer-support', u.alice, 5, 0, 5, { ...appStore('7000', '7000'), cancel_reason: 'CUSTOMER_SUPPORT', price: -9.99, environment: 'SANDBOX' }),
      ev('expiration', u.alice, 5 + sec(0.001), 0, 5, { ...appStore('7000', '7000'), expiration_reason: 'CUSTOMER_SUPPORT', environment: 'SANDBOX' }),
    ],
    expected: [{ now: 6, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(30) } } } }],
  },
];

describeFlows('store-specific sandbox flows (BILLING_SANDBOX_GRANTS=false)', sandboxFlows, newUsers, orders, { ...WEBHOOKS_ONLY, BILLING_SANDBOX_GRANTS: 'false' });

// ---------------------------------------------------------------- where the webhooks cannot say everything: RevenueCat's record
const recordFlows: Flow<Role>[] = [
  {
    name: 'M1 a yearly granting [pro, extra]; extra is detached from the product; a CANCELLATION then names [pro], and RevenueCat\'s record is fetched: extra no longer active',
    doc: `"detaching an entitlement from a product will remove it for any customers that have previously purchased that product" (${ENTITLEMENTS}); entitlement_ids are the product's entitlements at the event (${DOC.types})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 365, appStore('7500', '7500', YEARLY, ['pro', 'extra'])),
      ev('cancellation-unsubscribe', u.alice, 100, 0, 365, { ...appStore('7500', '7500', YEARLY, ['pro']), cancel_reason: 'UNSUBSCRIBE' }),
      // RevenueCat's record, fetched by the sync the cancellation asks for (reason mapping).
      snapshot('alice', 100.01, { subscriptions: { [YEARLY]: sub({ purchased: day(0), expires: day(365), unsubscribed: day(100) }) }, entitlements: { pro: ent(YEARLY, { purchased: day(0), expires: day(365) }) } }),
    ],
    expected: [{ now: 101, state: { alice: { pro: { active: true, willRenew: false, expiresAt: isoDay(365) }, extra: noAccess } } }],
  },
  {
    name: 'M1b a yearly granting [pro]; the product unmapped from every entitlement; a CANCELLATION then names none (entitlement_ids null), and RevenueCat\'s record is fetched: pro no longer active',
    doc: `"detaching an entitlement from a product will remove it for any customers that have previously purchased that product" (${ENTITLEMENTS}); entitlement_ids "can be NULL if the product_id is not mapped to any entitlements" (${DOC.types})`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 365, appStore('7510', '7510', YEARLY, ['pro'])),
      ev('cancellation-unsubscribe', u.alice, 100, 0, 365, { ...appStore('7510', '7510', YEARLY, null), cancel_reason: 'UNSUBSCRIBE' }),
      snapshot('alice', 100.01, { subscriptions: { [YEARLY]: sub({ purchased: day(0), expires: day(365), unsubscribed: day(100) }) }, entitlements: {} }),
    ],
    expected: [{ now: 101, state: { alice: { pro: noAccess } } }],
  },
  {
    name: 'M9 a yearly refunded, its REFUND_REVERSED lost; RevenueCat\'s record is fetched: active to the period\'s end again (the record is not refused as a later grant of the refunded period would be)',
    doc: `"A refund has been reversed" (${DOC.types}); a sync stores what RevenueCat's record says the customer has (docs/sync.md)`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 365, appStore('7610', '7610', YEARLY, ['pro'])),
      ev('cancellation-customer-support', u.alice, 10, 0, 10, { ...appStore('7610', '7610', YEARLY, ['pro']), cancel_reason: 'CUSTOMER_SUPPORT', price: -99.99 }),
      snapshot('alice', 12, { subscriptions: { [YEARLY]: sub({ purchased: day(0), expires: day(365) }) }, entitlements: { pro: ent(YEARLY, { purchased: day(0), expires: day(365) }) } }),
    ],
    expected: [{ now: 13, state: { alice: { pro: { active: true, expiresAt: isoDay(365) } } } }],
  },
  {
    name: 'I5 two Stripe subscriptions of alice (pro and extra); bob is given the pro one (TRANSFER, store STRIPE), then both sides\' records are fetched: alice keeps extra',
    doc: `Restore behavior: "if UserA buys a subscription, then UserB ... restores transactions, UserB would now have access to the subscription and it would be revoked from UserA" (${RESTORE}); each Stripe subscription is sent as its own sub_ token (https://www.revenuecat.com/docs/web/integrations/stripe)`,
    items: (u) => [
      ev('initial-purchase', u.alice, 0, 0, 30, stripe('in_a1', 'sub_A', 'prod_PRO', ['pro'])),
      ev('initial-purchase', u.alice, 1, 1, 31, stripe('in_b1', 'sub_B', 'prod_EXTRA', ['extra'])),
      transfer([u.alice], [u.bob], 5, { store: 'STRIPE' }),
      // Both sides' records, fetched by the syncs a TRANSFER asks for: the webhook names no purchase.
      snapshot('alice', 5.01, { subscriptions: { prod_EXTRA: sub({ purchased: day(1), expires: day(31), store: 'stripe' }) }, entitlements: { extra: ent('prod_EXTRA', { purchased: day(1), expires: day(31) }) } }),
      snapshot('bob', 5.01, { subscriptions: { prod_PRO: sub({ purchased: day(0), expires: day(30), store: 'stripe' }) }, entitlements: { pro: ent('prod_PRO', { purchased: day(0), expires: day(30) }) } }),
    ],
    expected: [{ now: 6, state: { alice: { extra: { active: true }, pro: noAccess }, bob: { pro: { active: true } } } }],
  },
];

// REST v1 says which product grants an entitlement only for the one it shows: with v1 alone a
// detached entitlement that another purchase also grants stays on the detached purchase's row
// (docs/billing.md). v2 lists what each purchase grants, and settles it. In order only: the record
// is read where the flow reads it.
const YEARLY_PRO = 'com.example.pro.yearly';
const EXTRA_MONTHLY = 'com.example.extra.monthly';
const settledByV2: Flow<Role> = {
  name: 'extra detached from a yearly while a monthly also grants extra: REST v2\'s record ends the yearly\'s extra, the monthly\'s runs to its end',
  doc: `"detaching an entitlement from a product will remove it for any customers that have previously purchased that product" (${ENTITLEMENTS}); v2 lists the entitlements each purchase grants (https://www.revenuecat.com/docs/api-v2)`,
  items: (u) => [
    ev('initial-purchase', u.alice, 0, 0, 365, bought('APP_STORE', '7500', '7500', YEARLY_PRO, ['pro', 'extra'])),
    ev('initial-purchase', u.alice, 100, 100, 130, bought('APP_STORE', '9100', '9100', EXTRA_MONTHLY, ['extra'])),
    ev('cancellation-unsubscribe', u.alice, 110, 0, 365, { ...bought('APP_STORE', '7500', '7500', YEARLY_PRO, ['pro']), cancel_reason: 'UNSUBSCRIBE' }),
    snapshot('alice', 110.01, {
      subscriptions: {
        [YEARLY_PRO]: sub({ purchased: day(0), expires: day(365), unsubscribed: day(110) }),
        [EXTRA_MONTHLY]: sub({ purchased: day(100), expires: day(130), unsubscribed: day(105) }),
      },
      entitlements: { pro: ent(YEARLY_PRO, { purchased: day(0), expires: day(365) }), extra: ent(EXTRA_MONTHLY, { purchased: day(100), expires: day(130) }) },
      productEntitlements: { [YEARLY_PRO]: ['pro'], [EXTRA_MONTHLY]: ['extra'] },
    }),
    ev('uncancellation', u.alice, 150, 0, 365, bought('APP_STORE', '7500', '7500', YEARLY_PRO, ['pro'])),
  ],
  expected: [{ now: 120, state: { alice: { pro: { active: true }, extra: { active: true, expiresAt: isoDay(130) } } } },
    { now: 151, state: { alice: { pro: { active: true, willRenew: true }, extra: { active: false } } } }],
};
const inOrder = (n: number) => [Array.from({ length: n }, (_, i) => i)];

let revenuecat: FakeRevenueCat;
beforeAll(async () => {
  revenuecat = await startFakeRevenueCat();
});
afterAll(async () => {
  await revenuecat.close();
});

describe.each(DATABASE_KINDS)('store-specific flows settled by RevenueCat\'s record, on %s', (kind) => {
  const db = suiteDatabase(kind);
  afterAll(() => revenuecat.setClock(undefined));

  // Whichever record a sync reads (REST v1, v2 alone, both), to the same end state.
  for (const reader of READERS) {
    describe(READER_NAMES[reader], () => {
      let restoreEnv: () => void;
      beforeAll(() => {
        restoreEnv = setEnv(readerSettings(revenuecat, reader));
      });
      afterAll(() => restoreEnv());

      for (const flow of recordFlows) {
        it(flow.name, () => runFlowInOrders(db, flow, newUsers, orders, revenuecat), 240_000);
      }
      if (reader !== 'v1') it(settledByV2.name, () => runFlowInOrders(db, settledByV2, newUsers, inOrder, revenuecat), 240_000);
    });
  }
});
