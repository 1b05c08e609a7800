import { randomUUID } from 'node:crypto';
import type { DatabaseKind } from '../support/databases.ts';
import { apple, billingEvent, billingIssue, cancellation, deliveryOrdersOn, describeFlows, DOC, event, isoDay, purchase, refund, renewal, type Flow } from './support.ts';

/**
 * A refunded period stays refunded: what a later event about that period (an UNCANCELLATION, a
 * cancellation carrying the period's end) cannot give back or move, and what a REFUND_REVERSED of
 * an older period, which RevenueCat sends for a period that has ended, cannot take from the period
 * the subscription has moved on to (a renewal in grace, an expiry), nor from a provisional grant of
 * another purchase. In every delivery order on Postgres (in order, reversed and sampled on PGlite);
 * the state is read after every event.
 */

type Role = 'alice';
const newUsers = (): Record<Role, string> => ({ alice: randomUUID() });
const REFUNDED = `"Granting a refund will immediately expire the subscription and remove any entitlement access" (${DOC.refunds}); UNCANCELLATION: "A non-expired cancelled subscription has been re-enabled" (${DOC.types})`;
const REVERSED = `REFUND_REVERSED: "A refund has been reversed" (${DOC.types}); RevenueCat's sample reverses a period that had ended; a subscription in grace keeps its entitlements "as the app store retries" (${DOC.flows})`;
/** Period 1 (days 0-30) refunded at day 10, then renewed for days 30-60. */
const refundedThenRenewed = (u: string) => [purchase(u, 0, 0, 30), refund(u, 10, 0, 10), renewal(u, 30, 30, 60)];
const refundReversedOfPeriodOne = (u: string, at: number) => billingEvent('refund-reversed', u, { at, purchased: 0, expires: 30 }, apple('1000'));

const flows: Flow<Role>[] = [
  {
    name: 'UNSUBSCRIBE, refund, then an UNCANCELLATION carrying the period\'s end: the refunded period stays without access',
    doc: REFUNDED,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      cancellation(u.alice, 'UNSUBSCRIBE', 5, 0, 30),
      refund(u.alice, 10, 0, 10),
      event('expiration', u.alice, 10, 0, 10, { expiration_reason: 'CUSTOMER_SUPPORT' }),
      event('uncancellation', u.alice, 12, 0, 30),
    ],
    expected: [{ now: 13, state: { alice: { pro: { active: false, status: 'refunded', expiresAt: isoDay(10) } } } }],
  },
  {
    name: 'refund, then an UNCANCELLATION naming an entitlement the product was mapped to since: it grants neither',
    doc: REFUNDED,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      refund(u.alice, 10, 0, 10),
      event('uncancellation', u.alice, 12, 0, 30, { entitlement_ids: ['pro', 'extra'] }),
    ],
    expected: [{ now: 13, state: { alice: { pro: { active: false }, extra: null } } }],
  },
  {
    name: 'refund, then the period extended (SUBSCRIPTION_EXTENDED): still refunded',
    doc: REFUNDED,
    items: (u) => [purchase(u.alice, 0, 0, 30), refund(u.alice, 10, 0, 10), event('subscription-extended', u.alice, 12, 0, 35)],
    expected: [{ now: 13, state: { alice: { pro: { active: false, status: 'refunded' } } } }],
  },
  {
    name: 'refund, then an UNCANCELLATION: the next period\'s RENEWAL grants again',
    doc: REFUNDED,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      refund(u.alice, 10, 0, 10),
      event('uncancellation', u.alice, 12, 0, 30),
      renewal(u.alice, 30, 30, 60),
    ],
    expected: [{ now: 31, state: { alice: { pro: { active: true, status: 'active', expiresAt: isoDay(60) } } } }],
  },
  {
    name: 'refund at day 5, then an UNSUBSCRIBE carrying the period\'s end: the access ended at the refund',
    doc: REFUNDED,
    items: (u) => [purchase(u.alice, 0, 0, 30), refund(u.alice, 5, 0, 5), cancellation(u.alice, 'UNSUBSCRIBE', 6, 0, 30)],
    expected: [{ now: 7, state: { alice: { pro: { active: false, status: 'refunded', expiresAt: isoDay(5) } } } }],
  },
  {
    name: 'period 1 refunded, renewed, period 2 fails into grace (to day 76), period 1\'s refund reversed on day 62: still in grace',
    doc: REVERSED,
    items: (u) => [
      ...refundedThenRenewed(u.alice),
      billingIssue(u.alice, 60, 30, 60, 76, apple('2030000')),
      cancellation(u.alice, 'BILLING_ERROR', 60, 30, 60, apple('2030000')),
      refundReversedOfPeriodOne(u.alice, 62),
    ],
    expected: [{ now: 63, state: { alice: { pro: { active: true, status: 'grace', graceExpiresAt: isoDay(76) } } } }],
  },
  {
    name: 'period 1 refunded, renewed to day 60 and expired then, period 1\'s refund reversed on day 62: the access ended at day 60',
    doc: REVERSED,
    items: (u) => [
      ...refundedThenRenewed(u.alice),
      event('expiration', u.alice, 60, 30, 60, { ...apple('2030000'), expiration_reason: 'UNSUBSCRIBE' }),
      refundReversedOfPeriodOne(u.alice, 62),
    ],
    expected: [{ now: 63, state: { alice: { pro: { active: false, expiresAt: isoDay(60) } } } }],
  },
  {
    name: 'a refunded monthly; a yearly bought in a store outage (TEMPORARY_ENTITLEMENT_GRANT to day 41); the month\'s refund reversed at day 40.2: the provisional grant still gives access',
    doc: `${REVERSED}; TEMPORARY_ENTITLEMENT_GRANT: "The expiration date of the entitlement is always at most 24 hours in the future" until the purchase is validated (${DOC.types})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      refund(u.alice, 10, 0, 10),
      billingEvent('temporary-entitlement-grant', u.alice, { at: 40, purchased: 40, expires: 41 }, { store: 'APP_STORE', product_id: 'com.example.pro.yearly', transaction_id: 'tmp-9' }),
      refundReversedOfPeriodOne(u.alice, 40.2),
    ],
    expected: [{ now: 40.3, state: { alice: { pro: { active: true, status: 'temporary', productId: 'com.example.pro.yearly' } } } }],
  },
  {
    name: 'the latest period refunded, then its refund reversed: access comes back to the period\'s end',
    doc: REVERSED,
    items: (u) => [purchase(u.alice, 0, 0, 30), refund(u.alice, 10, 0, 10), billingEvent('refund-reversed', u.alice, { at: 12, purchased: 0, expires: 30 }, apple('1000'))],
    expected: [{ now: 13, state: { alice: { pro: { active: true, expiresAt: isoDay(30) } } } }],
  },
];

const orders = (n: number, kind: DatabaseKind) => deliveryOrdersOn(kind, n, { everyOrderOn: 'postgres', sample: 6, seed: 1313 });

describeFlows('a refunded period stays refunded', flows, newUsers, orders);
