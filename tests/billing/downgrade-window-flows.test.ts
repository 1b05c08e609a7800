import { randomUUID } from 'node:crypto';
import type { DatabaseKind } from '../support/databases.ts';
import { billingEvent, cancellation, deliveryOrdersOn, describeFlows, DOC, event, expiration, isoDay, purchase, refund, renewal, type Flow } from './support.ts';

/**
 * The window between a downgrade's event and the period it begins: the store generates the new
 * product's RENEWAL (on Google Play its INITIAL_PURCHASE) hours before the old period ends, and
 * the old product grants until the new period begins, not renewing. What else may happen in that
 * window, or after it: a refund of either product and its reversal, the change reverted, the new
 * product expiring before it begins, the old one extended, re-enabled, in grace or cancelled, a
 * Play replacement stamped before its purchase, the next early renewal. In every delivery order on
 * Postgres (in order, reversed and sampled on PGlite); the state is read after every event.
 */

type Role = 'alice';
const newUsers = (): Record<Role, string> => ({ alice: randomUUID() });
const BASIC = 'com.example.basic.monthly';
const PREMIUM = 'com.example.premium.monthly';
const bought = (store: string, transaction: string, original: string, product: string, entitlements: string[] | null = ['pro']) =>
  ({ store, product_id: product, transaction_id: transaction, original_transaction_id: original, entitlement_ids: entitlements });
const noAccess = { active: false };
const A = (tx = '7000') => bought('APP_STORE', tx, '7000', PREMIUM, ['premium']);
const B = (tx = '7001') => bought('APP_STORE', tx, '7000', BASIC, ['basic']);
const WINDOW = `"The customer will retain their entitlement based on the original product. When the customer encounters their next renewal, a RENEWAL event will be dispatched" (${DOC.flows}); an upgrade, crossgrade or downgrade replaces the old product's entitlements (${DOC.manage})`;
const change = (u: string, at = 10) => event('product-change', u, at, 0, 30, { ...A(), new_product_id: BASIC });

const flows: Flow<Role>[] = [
  {
    name: 'downgrade early RENEWAL(B), then refund of A (latest period) before T',
    doc: WINDOW,
    items: (u) => [purchase(u.alice, 0, 0, 30, A()), change(u.alice), renewal(u.alice, 29.6, 30, 60, B()), refund(u.alice, 29.7, 0, 29.7, A())],
    expected: [
      { now: 29.8, state: { alice: { premium: noAccess } } },
      { now: 31, state: { alice: { premium: noAccess, basic: { active: true, willRenew: true, expiresAt: isoDay(60) } } } },
    ],
  },
  {
    name: 'downgrade early RENEWAL(B), then refund of B after it began',
    doc: WINDOW,
    items: (u) => [purchase(u.alice, 0, 0, 30, A()), change(u.alice), renewal(u.alice, 29.6, 30, 60, B()), refund(u.alice, 35, 30, 35, B())],
    expected: [
      { now: 36, state: { alice: { premium: noAccess, basic: noAccess } } },
    ],
  },
  {
    name: 'downgrade early RENEWAL(B), refund of A at 20, REFUND_REVERSED of A at 29.7',
    doc: WINDOW,
    items: (u) => [purchase(u.alice, 0, 0, 30, A()), change(u.alice), refund(u.alice, 20, 0, 20, A()), renewal(u.alice, 29.6, 30, 60, B()),
      billingEvent('refund-reversed', u.alice, { at: 29.7, purchased: 0, expires: 30 }, A())],
    expected: [
      { now: 29.8, state: { alice: { premium: { active: true, expiresAt: isoDay(30), willRenew: false } } } },
      { now: 31, state: { alice: { premium: noAccess, basic: { active: true } } } },
    ],
  },
  {
    name: 'downgrade early RENEWAL(B), then REFUND_REVERSED of A after B began (A refunded at 20)',
    doc: WINDOW,
    items: (u) => [purchase(u.alice, 0, 0, 30, A()), change(u.alice), refund(u.alice, 20, 0, 20, A()), renewal(u.alice, 29.6, 30, 60, B()),
      billingEvent('refund-reversed', u.alice, { at: 31, purchased: 0, expires: 30 }, A())],
    expected: [
      { now: 29.8, state: { alice: { premium: noAccess } } },
      { now: 32, state: { alice: { premium: noAccess, basic: { active: true } } } },
    ],
  },
  {
    name: 'downgrade early RENEWAL(B), user upgrades back to A at 35 (revert)',
    doc: WINDOW,
    items: (u) => [purchase(u.alice, 0, 0, 30, A()), change(u.alice), renewal(u.alice, 29.6, 30, 60, B()), renewal(u.alice, 35, 35, 65, A('7002'))],
    expected: [
      { now: 36, state: { alice: { premium: { active: true, expiresAt: isoDay(65) }, basic: noAccess } } },
    ],
  },
  {
    name: 'downgrade early RENEWAL(B), B EXPIRATION (family share revoked) at 29.7 before T',
    doc: WINDOW,
    items: (u) => [purchase(u.alice, 0, 0, 30, A()), change(u.alice), renewal(u.alice, 29.6, 30, 60, B()), expiration(u.alice, 'UNKNOWN', 29.7, 30, 29.7, B())],
    expected: [
      { now: 29.8, state: { alice: { premium: { active: true, expiresAt: isoDay(30) }, basic: noAccess } } },
      { now: 31, state: { alice: { premium: noAccess, basic: noAccess } } },
    ],
  },
  {
    name: 'downgrade early RENEWAL(B), SUBSCRIPTION_EXTENDED of A at 29.7 pushing A to 40',
    doc: WINDOW,
    items: (u) => [purchase(u.alice, 0, 0, 30, A()), change(u.alice), renewal(u.alice, 29.6, 30, 60, B()),
      billingEvent('subscription-extended', u.alice, { at: 29.7, purchased: 0, expires: 40 }, A())],
    expected: [
      { now: 29.8, state: { alice: { premium: { active: true } } } },
      { now: 31, state: { alice: { basic: { active: true } } } },
    ],
  },
  {
    name: 'downgrade early RENEWAL(B), A UNCANCELLATION at 29.7 (stale client)',
    doc: WINDOW,
    items: (u) => [purchase(u.alice, 0, 0, 30, A()), change(u.alice), renewal(u.alice, 29.6, 30, 60, B()),
      billingEvent('uncancellation', u.alice, { at: 29.7, purchased: 0, expires: 30 }, A())],
    expected: [
      { now: 29.8, state: { alice: { premium: { active: true, willRenew: false, expiresAt: isoDay(30) } } } },
      { now: 31, state: { alice: { premium: noAccess, basic: { active: true } } } },
    ],
  },
  {
    name: 'A in grace (billing issue at 30, grace to 46), B RENEWAL generated at 33 for period beginning 33.3',
    doc: WINDOW,
    items: (u) => [purchase(u.alice, 0, 0, 30, A()), change(u.alice),
      billingEvent('billing-issue-grace', u.alice, { at: 30, purchased: 0, expires: 30 }, { ...A(), grace_period_expiration_at_ms: Date.parse(isoDay(46)) }),
      renewal(u.alice, 33, 33.3, 63.3, B())],
    expected: [
      { now: 33.1, state: { alice: { premium: { active: true } } } },
      { now: 33.5, state: { alice: { premium: noAccess, basic: { active: true } } } },
    ],
  },
  {
    name: 'Play immediate replacement (no new_product_id), new INITIAL_PURCHASE stamped before its purchase (clock skew 0.01d)',
    doc: WINDOW,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('PLAY_STORE', 'GPA.1-1-1-1', 'GPA.1-1-1-1', 'premium_monthly:monthly', ['premium'])),
      event('product-change', u.alice, 10, 0, 30, { ...bought('PLAY_STORE', 'GPA.1-1-1-1', 'GPA.1-1-1-1', 'premium_monthly:monthly', ['premium']), new_product_id: undefined }),
      purchase(u.alice, 10, 10.01, 40, bought('PLAY_STORE', 'GPA.2-2-2-2', 'GPA.2-2-2-2', 'basic_monthly:monthly', ['basic'])),
    ],
    expected: [
      { now: 10.02, state: { alice: { premium: noAccess, basic: { active: true } } } },
    ],
  },
  {
    name: 'downgrade early RENEWAL(B) and B next-period early RENEWAL; no event about A after T',
    doc: WINDOW,
    items: (u) => [purchase(u.alice, 0, 0, 30, A()), change(u.alice), renewal(u.alice, 29.6, 30, 60, B()), renewal(u.alice, 59.6, 60, 90, B('7003'))],
    expected: [
      { now: 29.8, state: { alice: { premium: { active: true, expiresAt: isoDay(30) } } } },
      { now: 61, state: { alice: { premium: noAccess, basic: { active: true, expiresAt: isoDay(90) } } } },
    ],
  },
  {
    name: 'downgrade early RENEWAL(B), then CANCELLATION (unsubscribe) of A at 29.7 naming A',
    doc: WINDOW,
    items: (u) => [purchase(u.alice, 0, 0, 30, A()), change(u.alice), renewal(u.alice, 29.6, 30, 60, B()), cancellation(u.alice, 'UNSUBSCRIBE', 29.7, 0, 30, A())],
    expected: [
      { now: 29.8, state: { alice: { premium: { active: true, expiresAt: isoDay(30) } } } },
      { now: 31, state: { alice: { premium: noAccess, basic: { active: true, willRenew: true } } } },
    ],
  },
];

const orders = (n: number, kind: DatabaseKind) => deliveryOrdersOn(kind, n, { everyOrderOn: 'postgres', sample: 10, seed: 1212 });

describeFlows('a downgrade\'s window before the new period', flows, newUsers, orders);

// Stripe changes a subscription's product at once, and its RENEWAL of the new product "may show the
// same purchased_at_ms as the original subscription (ie. t0)" (event flows): a change back to a
// product held earlier grants it again, though its period is "older" than the row's. (A later
// UNCANCELLATION or extension of a product an upgrade replaced, which RevenueCat's pages do not say
// it sends, is not told apart from it: it too begins now.)
const T0 = `"The RENEWAL event may show the same purchased_at_ms as the original subscription (ie. t0), because that is how Stripe represents the status of the subscription after the product change" (${DOC.flows})`;
const second = (n: number) => n / 86_400;
const stripe = (invoice: string, product: string, entitlements: string[]) => bought('STRIPE', invoice, 'sub_1SWITCH', product, entitlements);
const stripeSwitchFlows: Flow<Role>[] = [
  {
    name: 'Stripe basic, then premium, then basic again (immediate changes, RENEWALs at t0), each its own entitlement: basic grants after the change back',
    doc: T0,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, stripe('in_1', BASIC, ['basic'])),
      event('product-change', u.alice, 10, 0, 30, { ...stripe('in_1', BASIC, ['basic']), new_product_id: undefined }),
      renewal(u.alice, 10 + second(1), 0, 30, stripe('in_2', PREMIUM, ['premium'])),
      event('product-change', u.alice, 15, 0, 30, { ...stripe('in_2', PREMIUM, ['premium']), new_product_id: undefined }),
      renewal(u.alice, 15 + second(1), 0, 30, stripe('in_3', BASIC, ['basic'])),
    ],
    expected: [{ now: 16, state: { alice: { basic: { active: true }, premium: noAccess } } }],
  },
  {
    name: 'Stripe basic, then premium, then basic again, one entitlement: it shows basic, renewing',
    doc: T0,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, stripe('in_1', BASIC, ['pro'])),
      renewal(u.alice, 10 + second(1), 0, 30, stripe('in_2', PREMIUM, ['pro'])),
      renewal(u.alice, 15 + second(1), 0, 30, stripe('in_3', BASIC, ['pro'])),
    ],
    expected: [{ now: 16, state: { alice: { pro: { active: true, productId: BASIC, willRenew: true } } } }],
  },
  {
    name: 'Stripe basic renewed at 30, premium at 40 (t0), basic again at 45 (t0): basic grants',
    doc: T0,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, stripe('in_1', BASIC, ['basic'])),
      renewal(u.alice, 30 + second(1), 30, 60, stripe('in_2', BASIC, ['basic'])),
      renewal(u.alice, 40 + second(1), 0, 60, stripe('in_3', PREMIUM, ['premium'])),
      renewal(u.alice, 45 + second(1), 0, 60, stripe('in_4', BASIC, ['basic'])),
    ],
    expected: [{ now: 46, state: { alice: { basic: { active: true }, premium: noAccess } } }],
  },
  {
    name: 'Stripe basic refunded at 5 (the subscription kept), premium at 10 (t0), basic again at 15 (t0): basic grants (a charge is not a grant of the refunded period)',
    doc: T0,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, stripe('in_1', BASIC, ['basic'])),
      refund(u.alice, 5, 0, 5, stripe('in_1', BASIC, ['basic'])),
      renewal(u.alice, 10 + second(1), 0, 30, stripe('in_2', PREMIUM, ['premium'])),
      renewal(u.alice, 15 + second(1), 0, 30, stripe('in_3', BASIC, ['basic'])),
    ],
    expected: [{ now: 16, state: { alice: { basic: { active: true }, premium: noAccess } } }],
  },
];

describeFlows('Stripe changing back to a product held earlier', stripeSwitchFlows, newUsers, orders);
