import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describeEventEffects, MAX_EVENT_AHEAD_MS } from '../../lib/billing/event-effects.ts';
import { syncSubscriber } from '../../lib/billing/sync.ts';
import type { BillingWebhookBody } from '../../lib/billing/webhook-body.ts';
import { getConfig } from '../../lib/config.ts';
import { startFakeRevenueCat, v1Entitlement as ent, v1Subscription as sub, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { DATABASE_KINDS, suiteDatabase, type DatabaseKind, type TestDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import {
  apple, billingEvent, billingIssue, cancellation, day, deliver, deliverFlowItem, deliveryOrdersOn, DOC, event, eventRow, expectEntitlementState, expiration, flowSettings, isoDay,
  isSnapshotItem, LIFETIME, MONTHLY, purchase, receivedAt, refund, renewal, snapshot, transfer, trial, YEARLY, type ExpectedState, type FlowItem } from './support.ts';

/**
 * Three flows of the fourth outside audit, about what an event means before it meets the stored
 * rows: events RevenueCat sends without `environment` in a deployment (a temporary entitlement
 * grant and its failed validation, record-only events that merge ids), a RENEWAL after a
 * CANCELLATION (Stripe never sends UNCANCELLATION, Apple's can be lost; Apple's trial cancelled
 * less than 24 hours before it converts), and a TRANSFER stamped in the year 4466 followed by a
 * transfer back. Each runs through the real webhook route and SQL, on both engines: in the
 * delivery orders of deliveryOrdersOn on Postgres (every order up to three items, six that hold
 * every order of any three of four), in order and reversed on PGlite. Each `doc` quotes the page the expectation comes from.
 */
type Role = 'alice' | 'bob' | 'anon';
type Users = Record<Role, string>;
interface Flow {
  name: string;
  doc: string;
  items: (u: Users) => FlowItem[];
  expected: ExpectedState[];
  /** Per item id (its index), what its event row must record. */
  outcomes?: Record<number, string>;
}

const newUsers = (): Users => ({ alice: randomUUID(), bob: randomUUID(), anon: `$RCAnonymousID:${randomBytes(16).toString('hex')}` });
/** Minutes and seconds, in days (the flows' clock). */
const min = (minutes: number) => minutes / 1_440;
const sec = (seconds: number) => seconds / 86_400;
const TYPES = 'https://www.revenuecat.com/docs/integrations/webhooks/event-types-and-fields';
const SAMPLES = 'https://www.revenuecat.com/docs/integrations/webhooks/sample-events';
const GRACE = 'https://www.revenuecat.com/docs/subscription-guidance/how-grace-periods-work';
const WEB_REFUNDS = 'https://www.revenuecat.com/docs/web/web-billing/refunding-payments';
const lifetime = (tx: string, otx: string) => ({ store: 'APP_STORE', product_id: LIFETIME, transaction_id: tx, original_transaction_id: otx });
/** RevenueCat's own sample TRANSFER is stamped 78789789798798 (the year 4466). */
const YEAR_4466 = 78_789_789_798_798;

// --- 2. Events RevenueCat sends without `environment` ------------------------------------------

const TEMP_TX = 'tmp_9f8e7d6c5b4a';
/**
 * A TEMPORARY_ENTITLEMENT_GRANT with exactly its guaranteed fields ("app_user_id, purchased_at_ms,
 * expiration_at_ms, event_timestamp_ms, product_id, entitlement_ids, store, transaction_id"), no more.
 */
function temporaryGrant(u: string, at: number, expires: number, fields: Record<string, unknown> = {}): BillingWebhookBody {
  return {
    api_version: '1.0',
    event: {
      id: `evt-${randomUUID()}`, type: 'TEMPORARY_ENTITLEMENT_GRANT', app_user_id: u, purchased_at_ms: day(at), expiration_at_ms: day(expires),
      event_timestamp_ms: day(at), product_id: MONTHLY, entitlement_ids: ['pro'], store: 'APP_STORE', transaction_id: TEMP_TX, ...fields,
    },
  };
}
/** Its failed validation: "an EXPIRATION event with the same transaction_id"; `environment` as given (undefined: none). */
const failedValidation = (u: string, at: number, purchased: number, environment: string | undefined) =>
  event('expiration', u, at, purchased, at, { ...apple(TEMP_TX, TEMP_TX), expiration_reason: 'UNKNOWN', period_type: 'NORMAL', environment });
/** A "Refresh purchases" while RevenueCat grants the entitlement for the purchase it could not validate yet. */
const refreshDuringGrant = (at: number, purchased: number, expires: number) => snapshot('alice', at, {
  entitlements: { pro: ent(MONTHLY, { purchased: day(purchased), expires: day(expires) }) },
  subscriptions: { [MONTHLY]: sub({ purchased: day(purchased), expires: day(expires), transactionId: '2000000777000001' }) },
});
/** A purchase made anonymously (production), and the record-only event that tells the anonymous id is alice's. */
const anonymousPurchase = (u: Users) => purchase(u.anon, 0, 0, 30, { aliases: [u.anon], original_app_user_id: u.anon });
const naming = (u: Users) => ({ app_user_id: u.alice, aliases: [u.anon, u.alice], original_app_user_id: u.anon, environment: undefined });

const environmentFlows: Flow[] = [
  {
    name: 'E01 a TEMPORARY_ENTITLEMENT_GRANT with only its guaranteed fields (no environment) grants in a deployment',
    doc: `TEMPORARY_ENTITLEMENT_GRANT: "it contains less information than a regular purchase event. The following fields are guaranteed to be present: app_user_id, purchased_at_ms, expiration_at_ms, event_timestamp_ms, product_id, entitlement_ids, store, transaction_id" (${TYPES})`,
    items: (u) => [temporaryGrant(u.alice, 1, 2)],
    expected: [
      { now: 1.5, state: { alice: { pro: { active: true, status: 'temporary', productId: MONTHLY, expiresAt: isoDay(2), willRenew: false } } } },
      { now: 2.5, state: { alice: { pro: { active: false } } } },
    ],
    outcomes: { 0: 'applied' },
  },
  ...[{ label: 'without environment', environment: undefined }, { label: 'PRODUCTION', environment: 'PRODUCTION' }].map(({ label, environment }) => ({
    name: `E02 its failed validation (an EXPIRATION with the same transaction id, ${label}) ends it`,
    doc: `"If the purchase can't be validated, an EXPIRATION event with the same transaction_id is sent." (${TYPES})`,
    items: (u: Users) => [temporaryGrant(u.alice, 1, 2), failedValidation(u.alice, 1 + min(90), 1, environment)],
    expected: [{ now: 1 + min(100), state: { alice: { pro: { active: false, status: 'expired', expiresAt: isoDay(1 + min(90)) } } } }],
  })),
  ...[{ label: 'without environment', environment: undefined }, { label: 'PRODUCTION', environment: 'PRODUCTION' }].map(({ label, environment }) => ({
    name: `E03 ... including the row a refresh wrote meanwhile (RevenueCat's record showed the grant as a purchase; EXPIRATION ${label})`,
    doc: `"If the purchase can't be validated, an EXPIRATION event with the same transaction_id is sent." and "the transaction_id might be different from the store's transaction_id" (${TYPES})`,
    items: (u: Users) => [temporaryGrant(u.alice, 1, 2), refreshDuringGrant(1 + min(30), 1, 2), failedValidation(u.alice, 1 + min(90), 1, environment)],
    expected: [{ now: 1 + min(100), state: { alice: { pro: { active: false, status: 'expired' } } } }],
  })),
  {
    name: 'E07 a failed validation naming the product as its store does (a Play base plan: `<product>:monthly`) ends the grant of its transaction too',
    doc: `"If the purchase can't be validated, an EXPIRATION event with the same transaction_id is sent." and "depending on the store, the product_id might be different from the product_id present in the subsequent INITIAL_PURCHASE event" (${TYPES})`,
    items: (u) => [
      temporaryGrant(u.alice, 1, 2, { store: 'PLAY_STORE' }),
      event('expiration', u.alice, 1 + min(90), 1, 1 + min(90), {
        store: 'PLAY_STORE', product_id: `${MONTHLY}:monthly`, transaction_id: TEMP_TX, original_transaction_id: undefined,
        expiration_reason: 'UNKNOWN', period_type: 'NORMAL', environment: 'PRODUCTION',
      }),
    ],
    expected: [{ now: 1 + min(100), state: { alice: { pro: { active: false, status: 'expired', expiresAt: isoDay(1 + min(90)) } } } }],
  },
  {
    name: 'E08 a billing issue of another product naming the same transaction (its INITIAL_PURCHASE not yet here) is about a purchase of its own: its grace stands',
    doc: `BILLING_ISSUE: "grace_period_expiration_at_ms" (${TYPES}); the provisional grant's failed validation is "an EXPIRATION event with the same transaction_id" (${TYPES})`,
    items: (u) => [
      temporaryGrant(u.alice, 1, 2, { store: 'PLAY_STORE' }),
      event('billing-issue-grace', u.alice, 1 + min(90), 1, 1.3, {
        store: 'PLAY_STORE', product_id: `${MONTHLY}:monthly`, transaction_id: TEMP_TX, original_transaction_id: TEMP_TX,
        grace_period_expiration_at_ms: day(10), environment: 'PRODUCTION',
      }),
    ],
    expected: [{ now: 5, state: { alice: { pro: { active: true, status: 'grace', productId: `${MONTHLY}:monthly` } } } }],
  },
  {
    name: 'E04 a temporary grant that says SANDBOX still grants nothing in a deployment',
    doc: `environment: "Store environment." SANDBOX, PRODUCTION (${TYPES})`,
    items: (u) => [temporaryGrant(u.alice, 1, 2, { environment: 'SANDBOX' })],
    expected: [{ now: 1.5, state: { alice: null } }],
    outcomes: { 0: 'ignored' },
  },
  ...([
    ['SUBSCRIBER_ALIAS', 'subscriber-alias'],
    ['EXPERIMENT_ENROLLMENT', 'experiment-enrollment'],
    ['VIRTUAL_CURRENCY_TRANSACTION', 'virtual-currency-transaction'],
  ] as const).map(([type, fixtureName]) => ({
    name: `E05 a ${type} without environment still merges the ids it names: the anonymous purchase is alice's`,
    doc: `aliases: "All app user ids ever used by the subscriber." and "When looking up users from the webhook in your systems, make sure to search both the original_app_user_id and the aliases array."; EXPERIMENT_ENROLLMENT: "This event is not associated with a store."; VIRTUAL_CURRENCY_TRANSACTION names purchase_environment (${TYPES})`,
    items: (u: Users) => [
      anonymousPurchase(u),
      billingEvent(fixtureName, u.alice, { at: 1 }, { ...naming(u), ...(type === 'VIRTUAL_CURRENCY_TRANSACTION' ? { purchase_environment: undefined } : {}) }),
    ],
    expected: [{ now: 2, state: { alice: { pro: { active: true, expiresAt: isoDay(30) } } } }],
  })),
  {
    name: 'E06 a VIRTUAL_CURRENCY_TRANSACTION whose purchase_environment is SANDBOX is told apart as sandbox: recorded, nothing merged',
    doc: `purchase_environment: "The environment where the product purchase was made." SANDBOX, PRODUCTION (${TYPES})`,
    items: (u) => [anonymousPurchase(u), billingEvent('virtual-currency-transaction', u.alice, { at: 1 }, { ...naming(u), purchase_environment: 'SANDBOX' })],
    expected: [{ now: 2, state: { alice: null } }],
    outcomes: { 1: 'ignored' },
  },
];

// --- 6. RENEWAL after CANCELLATION -------------------------------------------------------------

const stripe = (tx: string) => ({ store: 'STRIPE', product_id: 'prod_PRO', transaction_id: tx, original_transaction_id: 'sub_1PRO' });
/** An invoice of one Stripe subscription whose product changes. */
const stripeOf = (invoice: string, product: string) => ({ store: 'STRIPE', product_id: product, transaction_id: invoice, original_transaction_id: 'sub_1' });
const TRIAL_TX = '8000000100000001';
const conversion = (u: string, at: number, start: number, end: number) =>
  event('renewal-trial-conversion', u, at, start, end, { ...apple('8000000100000002', TRIAL_TX), is_trial_conversion: true, period_type: 'NORMAL' });
const trialCancellation = (u: string, at: number, end: number) =>
  cancellation(u, 'UNSUBSCRIBE', at, 0, end, { ...apple(TRIAL_TX, TRIAL_TX), period_type: 'TRIAL' });
const renewing = (expires: number) => ({ active: true, status: 'active', willRenew: true, expiresAt: isoDay(expires) });
const cancelledUntil = (expires: number) => ({ active: true, status: 'cancelled_active', willRenew: false, expiresAt: isoDay(expires) });

const renewalFlows: Flow[] = [
  {
    name: 'R01 Stripe: CANCELLATION, then a RENEWAL into the next period (Stripe sends no UNCANCELLATION): renewing again',
    doc: `UNCANCELLATION is not sent for Stripe (the event table's Stripe column); RENEWAL: "An existing subscription has been renewed or a lapsed user has resubscribed." (${TYPES})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, stripe('in_1')), cancellation(u.alice, 'UNSUBSCRIBE', 10, 0, 30, stripe('in_1')), renewal(u.alice, 30, 30, 60, stripe('in_2'))],
    expected: [{ now: 31, state: { alice: { pro: renewing(60) } } }],
  },
  {
    name: 'R02 App Store: CANCELLATION, its UNCANCELLATION lost, then the RENEWAL: renewing again',
    doc: `"Uncancellations occur when a customer cancels their subscription and then resubscribes before the subscription's expiration occurs." (${DOC.flows}); RENEWAL: "An existing subscription has been renewed" (${TYPES})`,
    items: (u) => [purchase(u.alice, 0, 0, 30), cancellation(u.alice, 'UNSUBSCRIBE', 10, 0, 30), renewal(u.alice, 30 + sec(3), 30, 60, apple('2000000100000002'))],
    expected: [{ now: 31, state: { alice: { pro: renewing(60) } } }],
  },
  {
    name: 'R03 Apple trial cancelled two days before it ends, then converted (RENEWAL): Apple converts only a re-enabled trial, renewing',
    doc: `"Apple requires customers to cancel within 24 hours of the trial's expiration." (${DOC.flows})`,
    items: (u) => [trial(u.alice, 0, 0, 7, apple(TRIAL_TX, TRIAL_TX)), trialCancellation(u.alice, 5, 7), conversion(u.alice, 7 + sec(4), 7, 37)],
    expected: [{ now: 8, state: { alice: { pro: renewing(37) } } }],
  },
  {
    name: 'R04 Apple trial cancelled less than 24 hours before it converts, then the RENEWAL: charged once, still not renewing',
    doc: `"If a user cancels less than 24 hours before the trial expires, you may unexpectedly receive a CANCELLATION event followed by a RENEWAL event." (${DOC.flows})`,
    items: (u) => [trial(u.alice, 0, 0, 7, apple(TRIAL_TX, TRIAL_TX)), trialCancellation(u.alice, 6.5, 7), conversion(u.alice, 7 + sec(4), 7, 37)],
    expected: [{ now: 8, state: { alice: { pro: cancelledUntil(37) } } }],
  },
  {
    name: 'R05 ... the same two events stamped in the same millisecond: the documented state (not renewing, the paid period granted)',
    doc: `"you may unexpectedly receive a CANCELLATION event followed by a RENEWAL event." (${DOC.flows})`,
    items: (u) => [trial(u.alice, 0, 0, 7, apple(TRIAL_TX, TRIAL_TX)), trialCancellation(u.alice, 7, 7), conversion(u.alice, 7, 7, 37)],
    expected: [{ now: 8, state: { alice: { pro: cancelledUntil(37) } } }],
  },
  {
    name: 'R06 Stripe: CANCELLATION and the next period\'s RENEWAL stamped in the same millisecond: renewing again, as in that order',
    doc: `RENEWAL: "An existing subscription has been renewed or a lapsed user has resubscribed." (${TYPES})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, stripe('in_1')), cancellation(u.alice, 'UNSUBSCRIBE', 30, 0, 30, stripe('in_1')), renewal(u.alice, 30, 30, 60, stripe('in_2'))],
    expected: [{ now: 31, state: { alice: { pro: renewing(60) } } }],
  },
  {
    name: 'R07 a CANCELLATION of the renewed period itself, after its RENEWAL: not renewing',
    doc: `"When a customer cancels their subscription, a CANCELLATION webhook is sent. At the end of the billing cycle, an EXPIRATION webhook is sent" (${DOC.flows})`,
    items: (u) => [purchase(u.alice, 0, 0, 30), cancellation(u.alice, 'UNSUBSCRIBE', 10, 0, 30), renewal(u.alice, 30, 30, 60, apple('2000000100000002')),
      cancellation(u.alice, 'UNSUBSCRIBE', 40, 30, 60, apple('2000000100000002'))],
    expected: [{ now: 41, state: { alice: { pro: cancelledUntil(60) } } }],
  },
  {
    name: 'R08 Stripe set to mark an unpaid subscription unpaid: after its EXPIRATION, the zero-price RENEWALs of the open invoice grant nothing',
    doc: `"mark the subscription as unpaid: RevenueCat will revoke access but continues generating RENEWAL events with a zero price while the invoice remains open" (${GRACE})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), billingIssue(u.alice, 30.001, 0, 37, null, stripe('in_1')),
      expiration(u.alice, 'BILLING_ERROR', 37.001, 0, 37, stripe('in_1')), renewal(u.alice, 60.001, 60, 90, { ...stripe('in_2'), price: 0 })],
    expected: [{ now: 61, state: { alice: { pro: { active: false, status: 'expired' } } } }],
  },
  {
    name: 'R09 Stripe set to leave it past due: no EXPIRATION, and a zero-price RENEWAL keeps access',
    doc: `"leave the subscription past-due: RevenueCat will not revoke access and will continue generating RENEWAL events with a zero price" (${GRACE})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), billingIssue(u.alice, 30.001, 0, 37, null, stripe('in_1')),
      renewal(u.alice, 30.002, 30, 60, { ...stripe('in_2'), price: 0 })],
    expected: [{ now: 31, state: { alice: { pro: { active: true, expiresAt: isoDay(60) } } } }],
  },
  {
    name: 'R10 ... unpaid, then the invoice paid: a RENEWAL with its price grants again',
    doc: `RENEWAL: "An existing subscription has been renewed or a lapsed user has resubscribed." (${TYPES})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), expiration(u.alice, 'BILLING_ERROR', 37.001, 0, 37, stripe('in_1')),
      renewal(u.alice, 60.001, 60, 90, { ...stripe('in_2'), price: 0 }), renewal(u.alice, 65, 65, 95, { ...stripe('in_3'), price: 9.99 })],
    expected: [{ now: 66, state: { alice: { pro: renewing(95) } } }],
  },
  {
    name: 'R11 a one-time purchase whose original transaction differs from its own, refunded by an event naming both: access ends',
    doc: `CANCELLATION: "A subscription or non-renewing purchase has been cancelled or refunded" (${TYPES}); a one-time purchase refunded: "the customer immediately loses access" (${WEB_REFUNDS})`,
    items: (u) => [event('non-renewing-purchase', u.alice, 1, 1, null, lifetime('L-2', 'L-1')), refund(u.alice, 5, 1, 5, { ...lifetime('L-2', 'L-1'), price: -79.99 }),
      refund(u.bob, 5, 1, null, { ...lifetime('L-4', 'L-3'), price: -79.99 }), event('non-renewing-purchase', u.bob, 1, 1, null, lifetime('L-4', 'L-3'))],
    expected: [{ now: 6, state: { alice: { pro: { active: false } }, bob: { pro: { active: false } } } }],
  },
  {
    name: 'R12 ... an unpaid Stripe subscription\'s zero-price RENEWAL beside an App Store purchase\'s temporary grant: grants nothing, and ends nothing either',
    doc: `"RevenueCat will revoke access but continues generating RENEWAL events with a zero price" (${GRACE}); TEMPORARY_ENTITLEMENT_GRANT: access "for at most 24 hours" until the purchase validates (${TYPES})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), expiration(u.alice, 'BILLING_ERROR', 37.001, 0, 37, stripe('in_1')),
      temporaryGrant(u.alice, 59.9, 60.9), renewal(u.alice, 60.001, 60, 90, { ...stripe('in_2'), price: 0 })],
    expected: [{ now: 60.5, state: { alice: { pro: { active: true, status: 'temporary' } } } }],
  },
  {
    name: 'R13 ... the refused zero-price RENEWAL naming an entitlement its product was mapped to since: grants that one nothing either',
    doc: `"RevenueCat will revoke access but continues generating RENEWAL events with a zero price" (${GRACE})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), expiration(u.alice, 'BILLING_ERROR', 37.001, 0, 37, stripe('in_1')),
      renewal(u.alice, 60.001, 60, 90, { ...stripe('in_2'), price: 0, entitlement_ids: ['pro', 'extra'] })],
    expected: [{ now: 61, state: { alice: { pro: { active: false }, extra: null } } }],
  },
  {
    name: 'R14 two one-time purchases of one product, the second naming the first as its original, each refunded: no access',
    doc: `a one-time purchase refunded: "the customer immediately loses access" (${WEB_REFUNDS})`,
    items: (u) => [event('non-renewing-purchase', u.alice, 1, 1, null, lifetime('L-1', 'L-1')), event('non-renewing-purchase', u.alice, 2, 2, null, lifetime('L-2', 'L-1')),
      refund(u.alice, 5, 2, 5, { ...lifetime('L-2', 'L-1'), price: -79.99 }), refund(u.alice, 6, 1, 6, { ...lifetime('L-1', 'L-1'), price: -79.99 })],
    expected: [{ now: 7, state: { alice: { pro: { active: false } } } }],
  },
  // A zero-price Stripe RENEWAL that is no unpaid invoice: a product changed back at once, whose
  // RENEWAL carries the subscription's first start (t0) and lands on the row the first change ended.
  {
    name: 'R15 Stripe basic changed at once to premium, then back to basic, whose prorated invoice is $0: basic grants and renews, premium ends',
    doc: `Immediate Product Change: "the customer will immediately have access to the new entitlements ... The RENEWAL event may show the same purchased_at_ms as the original subscription (ie. t0)" (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...stripeOf('in_1', 'prod_basic'), entitlement_ids: ['basic'] }),
      event('product-change', u.alice, 10, 0, 30, { ...stripeOf('in_1', 'prod_basic'), new_product_id: 'prod_premium', entitlement_ids: ['basic'] }),
      renewal(u.alice, 10.0001, 0, 30, { ...stripeOf('in_2', 'prod_premium'), entitlement_ids: ['premium'], price: 4.5 }),
      event('product-change', u.alice, 15, 0, 30, { ...stripeOf('in_2', 'prod_premium'), new_product_id: 'prod_basic', entitlement_ids: ['premium'] }),
      renewal(u.alice, 15.0001, 0, 30, { ...stripeOf('in_3', 'prod_basic'), entitlement_ids: ['basic'], price: 0 }),
    ],
    expected: [{ now: 16, state: { alice: { premium: { active: false }, basic: { active: true, willRenew: true, expiresAt: isoDay(30) } } } }],
  },
  {
    name: 'R16 ... with a 100%-off coupon (every invoice $0), and its next renewal: basic grants on, renewing',
    doc: `RENEWAL: "An existing subscription has been renewed or a lapsed user has resubscribed." (${TYPES}); Immediate Product Change (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...stripeOf('in_1', 'prod_basic'), entitlement_ids: ['basic'], price: 0 }),
      event('product-change', u.alice, 10, 0, 30, { ...stripeOf('in_1', 'prod_basic'), new_product_id: 'prod_premium', entitlement_ids: ['basic'], price: 0 }),
      renewal(u.alice, 10.0001, 0, 30, { ...stripeOf('in_2', 'prod_premium'), entitlement_ids: ['premium'], price: 0 }),
      event('product-change', u.alice, 15, 0, 30, { ...stripeOf('in_2', 'prod_premium'), new_product_id: 'prod_basic', entitlement_ids: ['premium'], price: 0 }),
      renewal(u.alice, 15.0001, 0, 30, { ...stripeOf('in_3', 'prod_basic'), entitlement_ids: ['basic'], price: 0 }),
      renewal(u.alice, 30, 30, 60, { ...stripeOf('in_4', 'prod_basic'), entitlement_ids: ['basic'], price: 0 }),
    ],
    expected: [{ now: 16, state: { alice: { premium: { active: false }, basic: { active: true, willRenew: true } } } }, { now: 35, state: { alice: { premium: { active: false }, basic: { active: true, willRenew: true, expiresAt: isoDay(60) } } } }],
  },
  {
    name: 'R17 ... the same changes during a free trial (price 0 as in any trial): basic grants, premium ends',
    doc: `price: "0 for free trials" (${TYPES}); Immediate Product Change (${DOC.flows})`,
    items: (u) => [
      trial(u.alice, 0, 0, 7, { ...stripeOf('in_1', 'prod_basic'), entitlement_ids: ['basic'], price: 0 }),
      event('product-change', u.alice, 2, 0, 7, { ...stripeOf('in_1', 'prod_basic'), new_product_id: 'prod_premium', entitlement_ids: ['basic'], price: 0 }),
      renewal(u.alice, 2.0001, 0, 7, { ...stripeOf('in_2', 'prod_premium'), entitlement_ids: ['premium'], price: 0, period_type: 'TRIAL' }),
      event('product-change', u.alice, 4, 0, 7, { ...stripeOf('in_2', 'prod_premium'), new_product_id: 'prod_basic', entitlement_ids: ['premium'], price: 0 }),
      renewal(u.alice, 4.0001, 0, 7, { ...stripeOf('in_3', 'prod_basic'), entitlement_ids: ['basic'], price: 0, period_type: 'TRIAL' }),
    ],
    expected: [{ now: 5, state: { alice: { premium: { active: false }, basic: { active: true, willRenew: true } } } }],
  },
  {
    name: 'R18 ... both products granting one entitlement: it shows the product changed back to, renewing',
    doc: `Immediate Product Change (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, stripeOf('in_1', 'prod_basic')),
      event('product-change', u.alice, 10, 0, 30, { ...stripeOf('in_1', 'prod_basic'), new_product_id: 'prod_premium' }),
      renewal(u.alice, 10.0001, 0, 30, { ...stripeOf('in_2', 'prod_premium'), price: 4.5 }),
      event('product-change', u.alice, 15, 0, 30, { ...stripeOf('in_2', 'prod_premium'), new_product_id: 'prod_basic' }),
      renewal(u.alice, 15.0001, 0, 30, { ...stripeOf('in_3', 'prod_basic'), price: 0 }),
    ],
    expected: [{ now: 16, state: { alice: { pro: { active: true, productId: 'prod_basic', willRenew: true } } } }],
  },
  {
    name: 'R19 ... the change back\'s RENEWAL dated at the change, not t0: basic grants all the same, premium ends',
    doc: `Immediate Product Change: the RENEWAL "may show the same purchased_at_ms as the original subscription" (${DOC.flows}): may, so it may not`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...stripeOf('in_1', 'prod_basic'), entitlement_ids: ['basic'] }),
      event('product-change', u.alice, 10, 0, 30, { ...stripeOf('in_1', 'prod_basic'), new_product_id: 'prod_premium', entitlement_ids: ['basic'] }),
      renewal(u.alice, 10.0001, 10, 30, { ...stripeOf('in_2', 'prod_premium'), entitlement_ids: ['premium'], price: 4.5 }),
      event('product-change', u.alice, 15, 10, 30, { ...stripeOf('in_2', 'prod_premium'), new_product_id: 'prod_basic', entitlement_ids: ['premium'] }),
      renewal(u.alice, 15.0001, 15, 30, { ...stripeOf('in_3', 'prod_basic'), entitlement_ids: ['basic'], price: 0 }),
    ],
    expected: [{ now: 16, state: { alice: { premium: { active: false }, basic: { active: true } } } }],
  },
  {
    name: 'R20 ... in a trial, with no PRODUCT_CHANGE delivered and each RENEWAL dated at its change: basic grants, premium ends',
    doc: `price: "0 for free trials" (${TYPES}); Immediate Product Change (${DOC.flows})`,
    items: (u) => [
      trial(u.alice, 0, 0, 7, { ...stripeOf('in_1', 'prod_basic'), entitlement_ids: ['basic'], price: 0 }),
      renewal(u.alice, 2.0001, 2, 7, { ...stripeOf('in_2', 'prod_premium'), entitlement_ids: ['premium'], price: 0, period_type: 'TRIAL' }),
      renewal(u.alice, 4.0001, 4, 7, { ...stripeOf('in_3', 'prod_basic'), entitlement_ids: ['basic'], price: 0, period_type: 'TRIAL' }),
    ],
    expected: [{ now: 5, state: { alice: { premium: { active: false }, basic: { active: true } } } }],
  },
  // The unpaid invoice's own period began before its EXPIRATION: still no access (R08's rule is
  // about the EXPIRATION, not about dates).
  {
    name: 'R21 Stripe marked unpaid: the open invoice\'s zero-price RENEWAL (its period began before the EXPIRATION) grants nothing',
    doc: `"mark the subscription as unpaid: RevenueCat will revoke access but continues generating RENEWAL events with a zero price while the invoice remains open" (${GRACE})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), billingIssue(u.alice, 30.001, 0, 37, null, stripe('in_1')),
      expiration(u.alice, 'BILLING_ERROR', 37.001, 0, 37, stripe('in_1')), renewal(u.alice, 40, 30, 60, { ...stripe('in_2'), price: 0 })],
    expected: [{ now: 41, state: { alice: { pro: { active: false } } } }],
  },
  {
    name: 'R22 ... left past due first (a zero-price RENEWAL kept access), then marked unpaid (EXPIRATION of that period): the next zero-price RENEWAL grants nothing',
    doc: `"leave the subscription past-due: RevenueCat will not revoke access"; "mark the subscription as unpaid: RevenueCat will revoke access" (${GRACE})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), renewal(u.alice, 30.002, 30, 60, { ...stripe('in_2'), price: 0 }),
      expiration(u.alice, 'BILLING_ERROR', 37.001, 30, 37, stripe('in_2')), renewal(u.alice, 40, 30, 60, { ...stripe('in_2'), price: 0 })],
    expected: [{ now: 41, state: { alice: { pro: { active: false } } } }],
  },
  {
    name: 'R23 ... the open invoice\'s zero-price RENEWALs of its own period and of the next, one carrying t0: no access',
    doc: `"continues generating RENEWAL events with a zero price while the invoice remains open" (${GRACE})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), expiration(u.alice, 'BILLING_ERROR', 37.001, 0, 37, stripe('in_1')),
      renewal(u.alice, 37.5, 30, 60, { ...stripe('in_2'), price: 0 }), renewal(u.alice, 45, 0, 60, { ...stripe('in_5'), price: 0 }),
      renewal(u.alice, 60.001, 60, 90, { ...stripe('in_3'), price: 0 })],
    expected: [{ now: 46, state: { alice: { pro: { active: false } } } }, { now: 61, state: { alice: { pro: { active: false } } } }],
  },
  // A row a product change ended, then unpaid itself, or ended by another subscription: still refused.
  {
    name: 'R24 Stripe basic changed at once to premium, changed back to basic at the period\'s end, and that invoice unpaid: its zero-price RENEWAL grants nothing',
    doc: `"mark the subscription as unpaid: RevenueCat will revoke access but continues generating RENEWAL events with a zero price while the invoice remains open" (${GRACE})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...stripeOf('in_1', 'prod_basic'), entitlement_ids: ['basic'], price: 9.99 }),
      event('product-change', u.alice, 10, 0, 30, { ...stripeOf('in_1', 'prod_basic'), new_product_id: 'prod_premium', entitlement_ids: ['basic'] }),
      renewal(u.alice, 10.0001, 0, 30, { ...stripeOf('in_2', 'prod_premium'), entitlement_ids: ['premium'], price: 4.5 }),
      event('product-change', u.alice, 20, 0, 30, { ...stripeOf('in_2', 'prod_premium'), new_product_id: 'prod_basic', entitlement_ids: ['premium'] }),
      billingIssue(u.alice, 30.001, 30, 37, null, { ...stripeOf('in_3', 'prod_basic'), entitlement_ids: ['basic'] }),
      expiration(u.alice, 'BILLING_ERROR', 37.001, 30, 37, { ...stripeOf('in_3', 'prod_basic'), entitlement_ids: ['basic'] }),
      renewal(u.alice, 40.001, 30, 60, { ...stripeOf('in_4', 'prod_basic'), entitlement_ids: ['basic'], price: 0 }),
    ],
    expected: [{ now: 41, state: { alice: { basic: { active: false } } } }],
  },
  {
    name: 'R25 ... the product changed to left pending, a second subscription of it bought, the first unpaid: the first\'s zero-price RENEWAL grants nothing',
    doc: `"mark the subscription as unpaid: RevenueCat will revoke access" (${GRACE}); a second subscription is not a product change of the first`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...stripeOf('in_1', 'prod_basic'), entitlement_ids: ['basic'], price: 9.99 }),
      event('product-change', u.alice, 20, 0, 30, { ...stripeOf('in_1', 'prod_basic'), new_product_id: 'prod_premium', entitlement_ids: ['basic'] }),
      billingIssue(u.alice, 30.001, 0, 30, null, { ...stripeOf('in_1', 'prod_basic'), entitlement_ids: ['basic'] }),
      purchase(u.alice, 31, 31, 61, { store: 'STRIPE', product_id: 'prod_premium', transaction_id: 'in_9', original_transaction_id: 'sub_2', entitlement_ids: ['premium'], price: 19.99 }),
      expiration(u.alice, 'BILLING_ERROR', 37.001, 0, 37, { ...stripeOf('in_1', 'prod_basic'), entitlement_ids: ['basic'] }),
      renewal(u.alice, 40.001, 40, 70, { ...stripeOf('in_2', 'prod_basic'), entitlement_ids: ['basic'], price: 0 }),
    ],
    expected: [{ now: 41, state: { alice: { basic: { active: false }, premium: { active: true } } } }],
  },
  {
    name: 'R26 ... changed at once to premium, and premium unpaid: premium\'s zero-price RENEWAL grants nothing, nor does basic come back',
    doc: `"mark the subscription as unpaid: RevenueCat will revoke access" (${GRACE})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { ...stripeOf('in_1', 'prod_basic'), entitlement_ids: ['basic'], price: 9.99 }),
      event('product-change', u.alice, 10, 0, 30, { ...stripeOf('in_1', 'prod_basic'), new_product_id: 'prod_premium', entitlement_ids: ['basic'] }),
      renewal(u.alice, 10.0001, 0, 30, { ...stripeOf('in_2', 'prod_premium'), entitlement_ids: ['premium'], price: 4.5 }),
      billingIssue(u.alice, 30.001, 0, 37, null, { ...stripeOf('in_2', 'prod_premium'), entitlement_ids: ['premium'] }),
      expiration(u.alice, 'BILLING_ERROR', 37.001, 0, 37, { ...stripeOf('in_2', 'prod_premium'), entitlement_ids: ['premium'] }),
      renewal(u.alice, 40.001, 30, 60, { ...stripeOf('in_5', 'prod_premium'), entitlement_ids: ['premium'], price: 0 }),
    ],
    expected: [{ now: 41, state: { alice: { basic: { active: false }, premium: { active: false } } } }],
  },
  // After a refund, a paid RENEWAL grants, and a REFUND_REVERSED reinstates (a zero-price one after a
  // refund: tests/billing/review-today.test.ts, Z01-Z02).
  {
    name: 'R29 Stripe refunded, a zero-price RENEWAL, then a paid RENEWAL: renewing to the paid period\'s end',
    doc: `RENEWAL: "An existing subscription has been renewed or a lapsed user has resubscribed." (${TYPES})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), refund(u.alice, 5, 0, 5, stripe('in_1')),
      renewal(u.alice, 30.001, 30, 60, { ...stripe('in_2'), price: 0 }), renewal(u.alice, 35, 35, 65, { ...stripe('in_3'), price: 9.99 })],
    expected: [{ now: 36, state: { alice: { pro: renewing(65) } } }],
  },
  {
    name: 'R31 ... refunded, the refund reversed while the period lasts (access back), then a zero-price RENEWAL (left past due): renews',
    doc: `REFUND_REVERSED: "A refund has been reversed" (${TYPES}); "leave the subscription past-due: RevenueCat will not revoke access and will continue generating RENEWAL events with a zero price" (${GRACE})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), refund(u.alice, 5, 0, 5, stripe('in_1')),
      event('refund-reversed', u.alice, 12, 0, 30, stripe('in_1')), renewal(u.alice, 30.001, 30, 60, { ...stripe('in_2'), price: 0 })],
    expected: [{ now: 31, state: { alice: { pro: { active: true, expiresAt: isoDay(60) } } } }],
  },
  {
    name: 'R32 ... refunded, the refund reversed after the period had ended, then a paid RENEWAL: grants',
    doc: `RENEWAL: "An existing subscription has been renewed or a lapsed user has resubscribed." (${TYPES})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), refund(u.alice, 5, 0, 5, stripe('in_1')),
      event('refund-reversed', u.alice, 40, 0, 30, stripe('in_1')), renewal(u.alice, 60.001, 60, 90, { ...stripe('in_2'), price: 9.99 })],
    expected: [{ now: 61, state: { alice: { pro: renewing(90) } } }],
  },
  // An unpaid subscription transferred away and back: the row that comes back is the one the
  // subscription left (expired), not the stale `transferred` one.
  {
    name: 'R33 Stripe marked unpaid (EXPIRATION), transferred to bob and back to alice, then a zero-price RENEWAL: grants nothing',
    doc: `"the entitlements will be removed from user 1 and added to user 2" (${DOC.flows}); "RevenueCat will revoke access but continues generating RENEWAL events with a zero price while the invoice remains open" (${GRACE})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), expiration(u.alice, 'BILLING_ERROR', 37.001, 0, 37, stripe('in_1')),
      transfer([u.alice], [u.bob], 40, { store: 'STRIPE' }), transfer([u.bob], [u.alice], 45, { store: 'STRIPE' }),
      renewal(u.alice, 60.001, 60, 90, { ...stripe('in_2'), price: 0 })],
    expected: [{ now: 61, state: { alice: { pro: { active: false, status: 'expired' } }, bob: { pro: { active: false, status: 'transferred' } } } }],
  },
  {
    name: 'R34 ... the same, the invoice paid (a RENEWAL with its price): alice has access again',
    doc: `RENEWAL: "An existing subscription has been renewed or a lapsed user has resubscribed." (${TYPES}); "the entitlements will be removed from user 1 and added to user 2" (${DOC.flows})`,
    items: (u) => [purchase(u.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), expiration(u.alice, 'BILLING_ERROR', 37.001, 0, 37, stripe('in_1')),
      transfer([u.alice], [u.bob], 40, { store: 'STRIPE' }), transfer([u.bob], [u.alice], 45, { store: 'STRIPE' }),
      renewal(u.alice, 60.001, 60, 90, { ...stripe('in_2'), price: 9.99 })],
    expected: [{ now: 61, state: { alice: { pro: renewing(90) }, bob: { pro: { active: false, status: 'transferred' } } } }],
  },
];

// --- 9. A TRANSFER stamped in the year 4466, then a transfer back ------------------------------

/** A webhook that reached the service at `at` (days), whatever its stamp says. */
interface Arrived {
  arrivedAt: number;
  item: FlowItem;
}
const arrivedAt = (at: number, item: FlowItem): FlowItem => ({ arrivedAt: at, item } as unknown as FlowItem);
const isArrived = (item: FlowItem): item is FlowItem & Arrived => 'arrivedAt' in item;

const transferFlows: Flow[] = [
  {
    name: 'T01 RevenueCat\'s sample TRANSFER (year 4466), then a transfer back made a minute after it arrived: the transfer back holds',
    doc: `RevenueCat's sample TRANSFER carries event_timestamp_ms 78789789798798 (${SAMPLES}); event_timestamp_ms: "The time that the event was generated." (${TYPES}); "the entitlements will be removed from user 1 and added to user 2" (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 365, apple('1000', '1000', YEARLY)),
      arrivedAt(20, transfer([u.alice], [u.bob], 20, { event_timestamp_ms: YEAR_4466 })),
      arrivedAt(20 + min(1), transfer([u.bob], [u.alice], 20 + min(1))),
    ],
    expected: [{ now: 21, state: { alice: { pro: { active: true, productId: YEARLY, expiresAt: isoDay(365) } }, bob: { pro: { active: false, status: 'transferred' } } } }],
  },
  {
    name: 'T02 ... and when the sample TRANSFER is the last word (no transfer back): it moves the purchase',
    doc: `"the entitlements will be removed from user 1 and added to user 2" (${DOC.flows})`,
    items: (u) => [purchase(u.alice, 0, 0, 365, apple('1000', '1000', YEARLY)), arrivedAt(20, transfer([u.alice], [u.bob], 20, { event_timestamp_ms: YEAR_4466 }))],
    expected: [{ now: 21, state: { alice: { pro: { active: false, status: 'transferred' } }, bob: { pro: { active: true, productId: YEARLY } } } }],
  },
  {
    name: 'T03 ... then a transfer back, and a third transfer a minute later again: each lands where the newest says',
    doc: `"the entitlements will be removed from user 1 and added to user 2" (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 365, apple('1000', '1000', YEARLY)),
      arrivedAt(20, transfer([u.alice], [u.bob], 20, { event_timestamp_ms: YEAR_4466 })),
      arrivedAt(20 + min(1), transfer([u.bob], [u.alice], 20 + min(1))),
      arrivedAt(20 + min(2), transfer([u.alice], [u.bob], 20 + min(2))),
    ],
    expected: [{ now: 21, state: { alice: { pro: { active: false, status: 'transferred' } }, bob: { pro: { active: true, productId: YEARLY } } } }],
  },
];

// --- How the flows run -------------------------------------------------------------------------

const SECRET = randomBytes(24).toString('hex');
/** A complete deployment that is not local mode (its DATABASE_URL is never dialled: the test database stands in). */
const DEPLOYED = {
  DATABASE_URL: 'postgres://app:unused@127.0.0.1:9/app',
  SUPABASE_JWT_SECRET: 'x'.repeat(40),
  SUBSCRIPTION_WEBHOOK_SECRET: SECRET,
  LEAGUES_WEBHOOK_SECRET: randomBytes(24).toString('hex'),
  APP_ORIGIN: 'https://app.example.com',
  LOCAL_DEV: undefined,
  BILLING_SANDBOX_GRANTS: undefined,
};

/**
 * Deliver one item. In a deployment a webhook carries the deployment's secret and a refresh is the
 * sync the refresh route runs (the route first asks the Supabase Auth server whether the session is
 * still signed in, and this setting names none); in local mode with BILLING_SANDBOX_GRANTS=false,
 * the same flows go through both routes.
 */
async function deliverItem(item: FlowItem, users: Users, revenuecat: FakeRevenueCat): Promise<void> {
  if (isArrived(item)) return receivedAt(item.arrivedAt, () => deliverItem(item.item, users, revenuecat));
  if (getConfig().local) return deliverFlowItem(item, users, revenuecat);
  if (!isSnapshotItem(item)) {
    const response = await deliver(item, { authorization: `Bearer ${SECRET}` });
    expect({ event: item.event.type, status: response.status }).toEqual({ event: item.event.type, status: 200 });
    return;
  }
  revenuecat.setCustomer(users[item.snapshotOf as Role], item.customer);
  revenuecat.setClock(day(item.at));
  expect((await syncSubscriber(users[item.snapshotOf as Role], { reason: 'user', maxSlotWaitMs: 3000 })).outcome).not.toBe('failed');
}

/** Every order (or a sample) on Postgres; in order and reversed on PGlite (deliveryOrdersOn). */
const orders = (n: number, kind: DatabaseKind) => deliveryOrdersOn(kind, n, { everyOrderOn: 'postgres', sample: 4, seed: 4009 });

async function runFlow(db: TestDatabase, flow: Flow, revenuecat: FakeRevenueCat): Promise<void> {
  for (const order of orders(flow.items(newUsers()).length, db.kind)) {
    const users = newUsers();
    const items = flow.items(users);
    for (const index of order) await deliverItem(items[index]!, users, revenuecat);
    const label = `${flow.name.slice(0, 3)} order ${order.join(',')}`;
    for (const state of flow.expected) await expectEntitlementState(db, users, state, `${label}, day ${state.now}`);
    for (const [index, outcome] of Object.entries(flow.outcomes ?? {})) {
      const item = items[Number(index)]!;
      const body = (isArrived(item) ? item.item : item) as BillingWebhookBody;
      expect({ label, index, row: await eventRow(db, body.event.id) }).toMatchObject({ label, index, row: { outcome, count: 1 } });
    }
  }
}

let revenuecat: FakeRevenueCat;
beforeAll(async () => {
  revenuecat = await startFakeRevenueCat();
});
afterAll(async () => {
  await revenuecat.close();
});

const SETTINGS = [
  // Where sandbox purchases grant nothing: a deployment, and local mode asked to do what production does.
  { name: 'a deployment', env: (rc: FakeRevenueCat) => ({ ...flowSettings(rc), ...DEPLOYED }), flows: environmentFlows },
  { name: 'local mode with BILLING_SANDBOX_GRANTS=false', env: (rc: FakeRevenueCat) => ({ ...flowSettings(rc), BILLING_SANDBOX_GRANTS: 'false' }), flows: environmentFlows },
  { name: 'local mode', env: (rc: FakeRevenueCat) => flowSettings(rc), flows: [...renewalFlows, ...transferFlows] },
];

describe.each(DATABASE_KINDS)('billing round four: what an event means, in every delivery order, on %s', (kind) => {
  const db = suiteDatabase(kind);
  afterAll(() => revenuecat.setClock(undefined));

  for (const setting of SETTINGS) {
    describe(setting.name, () => {
      let restoreEnv: () => void;
      beforeAll(() => {
        restoreEnv = setEnv(setting.env(revenuecat));
        expect(getConfig().billingIgnoreSandbox).toBe(setting.flows === environmentFlows);
      });
      afterAll(() => restoreEnv());
      for (const flow of setting.flows) it(flow.name, () => runFlow(db, flow, revenuecat), 240_000);
    });
  }
});

describe.each(DATABASE_KINDS)('a one-time purchase found by its own transaction on %s', (kind) => {
  const db = suiteDatabase(kind);
  it('its REFUND_REVERSED naming both ids reinstates its row and asks no sync (no new purchase)', async () => {
    const user = randomUUID();
    for (const body of [event('non-renewing-purchase', user, 1, 1, null, lifetime('L-2', 'L-1')), refund(user, 5, 1, 5, { ...lifetime('L-2', 'L-1'), price: -79.99 })]) {
      expect((await deliver(body)).status).toBe(200);
    }
    const reversed = event('refund-reversed', user, 6, 1, null, lifetime('L-2', 'L-1'));
    const result = await db.adapter.call('record_billing_event', { p_body: reversed, p_plan: describeEventEffects(reversed.event, new Date()), p_sync_after: 'gaps' });
    expect(result).toMatchObject({ outcome: 'applied', syncIds: [] });
    expect(await db.sql('select status from public.entitlements where app_user_id = $1', [user])).toEqual([{ status: 'active' }]);
  });
});

describe('the plans behind the flows', () => {
  const NOW = new Date(day(100));
  const deployed = { ignoreSandbox: true };

  it('tells sandbox apart wherever an event says it, and exempts only what RevenueCat sends without an environment', () => {
    const u = newUsers();
    expect(describeEventEffects(temporaryGrant(u.alice, 1, 2).event, NOW, deployed)).toMatchObject({ ignoredReason: null, effects: [{ action: 'temporary_grant' }] });
    expect(describeEventEffects(temporaryGrant(u.alice, 1, 2, { environment: 'SANDBOX' }).event, NOW, deployed)).toMatchObject({ ignoredReason: 'sandbox_ignored' });
    // A temporary grant that names another environment, and every other lifecycle event without one: not known to be real.
    expect(describeEventEffects(temporaryGrant(u.alice, 1, 2, { environment: 'STAGING' }).event, NOW, deployed)).toMatchObject({ ignoredReason: 'environment_unknown' });
    expect(describeEventEffects(purchase(u.alice, 1, 1, 31, { environment: undefined }).event, NOW, deployed)).toMatchObject({ ignoredReason: 'environment_unknown' });
    // An EXPIRATION (which never grants) without one is taken when it names the transaction it ends.
    expect(describeEventEffects(failedValidation(u.alice, 1.5, 1, undefined).event, NOW, deployed)).toMatchObject({ ignoredReason: null, effects: [{ action: 'revoke' }] });
    expect(describeEventEffects({ ...failedValidation(u.alice, 1.5, 1, undefined).event, transaction_id: undefined }, NOW, deployed))
      .toMatchObject({ ignoredReason: 'environment_unknown' });
    expect(describeEventEffects(failedValidation(u.alice, 1.5, 1, 'SANDBOX').event, NOW, deployed)).toMatchObject({ ignoredReason: 'sandbox_ignored' });
    const vct = billingEvent('virtual-currency-transaction', u.alice, { at: 1 }, naming(u));
    expect(describeEventEffects(vct.event, NOW, deployed)).toMatchObject({ environment: 'PRODUCTION', move: 'merge', ignoredReason: null });
    expect(describeEventEffects({ ...vct.event, purchase_environment: 'SANDBOX' }, NOW, deployed)).toMatchObject({ environment: 'SANDBOX', ignoredReason: 'sandbox_ignored' });
    expect(describeEventEffects(billingEvent('subscriber-alias', u.alice, { at: 1 }, naming(u)).event, NOW, deployed)).toMatchObject({ move: 'merge', ignoredReason: null });
  });

  it('marks a RENEWAL (not an extension) as turning renewal back on, and an App Store subscription cancelled in the last 24 hours of its period', () => {
    const u = newUsers();
    expect(describeEventEffects(renewal(u.alice, 30, 30, 60).event, NOW).effects[0]).toMatchObject({ renewal: 'continue', resumesRenewal: true });
    expect(describeEventEffects(event('subscription-extended', u.alice, 30, 0, 60).event, NOW).effects[0]).not.toHaveProperty('resumesRenewal');
    expect(describeEventEffects(renewal(u.alice, 30, 30, 60, { period_type: 'PREPAID' }).event, NOW).effects[0]).toMatchObject({ renewal: 'off' });
    expect(describeEventEffects(trialCancellation(u.alice, 6.5, 7).event, NOW).effects[0]).toMatchObject({ cancelsWithinChargeWindow: true });
    expect(describeEventEffects(trialCancellation(u.alice, 7, 7).event, NOW).effects[0]).toMatchObject({ cancelsWithinChargeWindow: true });
    expect(describeEventEffects(trialCancellation(u.alice, 5, 7).event, NOW).effects[0]).not.toHaveProperty('cancelsWithinChargeWindow');
    // Only Apple's stores, any period (Apple charges every renewal within the last 24 hours).
    const playTrial = cancellation(u.alice, 'UNSUBSCRIBE', 6.5, 0, 7, { store: 'PLAY_STORE', period_type: 'TRIAL' });
    expect(describeEventEffects(playTrial.event, NOW).effects[0]).not.toHaveProperty('cancelsWithinChargeWindow');
    expect(describeEventEffects(cancellation(u.alice, 'UNSUBSCRIBE', 29.5, 0, 30).event, NOW).effects[0]).toMatchObject({ cancelsWithinChargeWindow: true });
    expect(describeEventEffects(cancellation(u.alice, 'UNSUBSCRIBE', 28.5, 0, 30).event, NOW).effects[0]).not.toHaveProperty('cancelsWithinChargeWindow');
    // A price increase the customer did not accept is not charged.
    expect(describeEventEffects(cancellation(u.alice, 'PRICE_INCREASE', 29.5, 0, 30).event, NOW).effects[0]).not.toHaveProperty('cancelsWithinChargeWindow');
  });

  it('orders a stamp beyond the skew allowance at the receive time, and the same when computed again from the stored time', () => {
    const sample = transfer(['a'], ['b'], 0, { event_timestamp_ms: YEAR_4466 }).event;
    const plan = describeEventEffects(sample, NOW);
    expect(plan.eventAt).toBe(NOW.toISOString());
    expect(describeEventEffects(sample, new Date(plan.eventAt), { recorded: true }).eventAt).toBe(plan.eventAt);
    expect(describeEventEffects({ ...sample, event_timestamp_ms: NOW.getTime() + MAX_EVENT_AHEAD_MS - 1 }, NOW).eventAt)
      .toBe(new Date(NOW.getTime() + MAX_EVENT_AHEAD_MS - 1).toISOString());
  });
});
