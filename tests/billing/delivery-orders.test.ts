import { randomBytes, randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { EntitlementView } from '../../lib/billing/entitlement-view.ts';
import type { BillingWebhookBody } from '../../lib/billing/webhook-body.ts';
import { DATABASE_KINDS, suiteDatabase, type DatabaseKind, type TestDatabase } from '../support/databases.ts';
import { billingEvent, day, deliver, deliveryOrdersOn, entitlementsOf, expectEntitlementState, isoDay, receivedAt } from './support.ts';

/**
 * RevenueCat's documented flows, each delivered in EVERY order RevenueCat may produce (retries,
 * lost and resent deliveries, bundles sent at once): one final state, the state of delivery in event
 * order. The ten classes of the billing-semantics audit, then a property over random interleavings
 * of generated subscription histories. Real route, real database, both engines.
 */
type Role = 'alice' | 'bob' | 'carol' | 'anon';
type Users = Record<Role, string>;
interface Expected {
  /** Days after T0: the clock the state is read at. */
  now: number;
  /** Per role and entitlement id: the view (partial), or null for "no entitlement at all". */
  state: Partial<Record<Role, Record<string, Partial<EntitlementView> | null> | null>>;
}
interface FlowCase {
  name: string;
  events: (u: Users) => BillingWebhookBody[];
  expected: Expected[];
}

const newUsers = (): Users => ({ alice: `alice-${randomUUID()}`, bob: `bob-${randomUUID()}`, carol: `carol-${randomUUID()}`, anon: `$RCAnonymousID:${randomBytes(16).toString('hex')}` });
const ms = 1 / 86_400_000;

const MONTHLY = 'com.example.pro.monthly';
const YEARLY = 'com.example.pro.yearly';
const PREMIUM_MONTHLY = 'com.example.premium.monthly';
const purchase = (u: string, at = 0, expires = 30, fields = {}) => billingEvent('initial-purchase', u, { at, purchased: at, expires }, fields);
const renewal = (u: string, at: number, purchased: number, expires: number, fields = {}) =>
  billingEvent('renewal', u, { at, purchased, expires }, { transaction_id: `2000000${Math.round(purchased * 1000)}`, ...fields });
const cancellation = (u: string, reason: string, at: number, purchased: number, expires: number, fields = {}) =>
  billingEvent('cancellation-unsubscribe', u, { at, purchased, expires }, { cancel_reason: reason, ...fields });
const expiration = (u: string, at: number, purchased: number, expires: number, fields = {}) => billingEvent('expiration', u, { at, purchased, expires }, fields);

/** Every order (or a sample) on Postgres; in order and reversed on PGlite (deliveryOrdersOn). */
const orders = (n: number, kind: DatabaseKind) => deliveryOrdersOn(kind, n, { everyOrderOn: 'postgres', sample: 5, seed: 11 });

async function deliverAll(bodies: BillingWebhookBody[], order: number[]): Promise<void> {
  for (const index of order) {
    const response = await deliver(bodies[index]!);
    expect({ event: bodies[index]!.event.type, status: response.status }).toEqual({ event: bodies[index]!.event.type, status: 200 });
  }
}

const flows: FlowCase[] = [
  {
    // 1. BILLING_ISSUE and CANCELLATION BILLING_ERROR are sent together; the grace period they
    // report is a fact of the period, whichever arrives first.
    name: '1. billing bundle (cancellation a few ms newer): in grace in every order',
    events: (u) => [
      purchase(u.alice),
      billingEvent('billing-issue-grace', u.alice, { at: 30.001, purchased: 0, expires: 30 }, { grace_period_expiration_at_ms: day(46) }),
      cancellation(u.alice, 'BILLING_ERROR', 30.001 + 5 * ms, 0, 30),
    ],
    expected: [
      { now: 31, state: { alice: { pro: { status: 'grace', active: true, willRenew: false, expiresAt: isoDay(30), graceExpiresAt: isoDay(46) } } } },
      { now: 47, state: { alice: { pro: { status: 'expired', active: false } } } },
    ],
  },
  {
    // 1b. ... and the grace recovered by a renewal.
    name: '1b. billing bundle then recovery: renews again in every order',
    events: (u) => [
      purchase(u.alice),
      cancellation(u.alice, 'BILLING_ERROR', 30.001, 0, 30),
      billingEvent('billing-issue-grace', u.alice, { at: 30.001 - 3 * ms, purchased: 0, expires: 30 }, { grace_period_expiration_at_ms: day(46) }),
      renewal(u.alice, 38, 38, 68),
    ],
    expected: [{ now: 40, state: { alice: { pro: { status: 'active', active: true, willRenew: true, expiresAt: isoDay(68), graceExpiresAt: null } } } }],
  },
  {
    // 2. Stripe reports its retry window as the new expiration (grace always null).
    name: '2. Stripe billing issue inside the new expiration: access until it, in every order',
    events: (u) => {
      const stripe = { store: 'STRIPE', transaction_id: 'in_1', original_transaction_id: 'sub_1' };
      return [
        purchase(u.alice, 0, 30, stripe),
        billingEvent('billing-issue-no-grace', u.alice, { at: 30.001, purchased: 0, expires: 37 }, stripe),
        cancellation(u.alice, 'BILLING_ERROR', 30.001 + ms, 0, 37, stripe),
      ];
    },
    expected: [
      { now: 33, state: { alice: { pro: { status: 'billing_issue', active: true, willRenew: false, expiresAt: isoDay(37) } } } },
      { now: 37.5, state: { alice: { pro: { status: 'expired', active: false, willRenew: false } } } },
    ],
  },
  {
    // 2b. A CANCELLATION of the next period whose RENEWAL is lost (or still being retried).
    name: '2b. cancellation of a period whose renewal never arrives: access to its end',
    events: (u) => [purchase(u.alice), cancellation(u.alice, 'UNSUBSCRIBE', 40, 30, 60)],
    expected: [{ now: 45, state: { alice: { pro: { status: 'cancelled_active', active: true, willRenew: false, expiresAt: isoDay(60) } } } }],
  },
  {
    name: '2c. ... and when the renewal does arrive, the same in every order',
    events: (u) => [purchase(u.alice), renewal(u.alice, 30.001, 30, 60), cancellation(u.alice, 'UNSUBSCRIBE', 40, 30, 60)],
    expected: [{ now: 45, state: { alice: { pro: { status: 'cancelled_active', active: true, willRenew: false, expiresAt: isoDay(60) } } } }],
  },
  {
    // 3. The monthly lapsed without its EXPIRATION: it grants nothing when the temporary grant begins.
    name: '3. temporary grant after a period lapsed without its EXPIRATION: granted',
    events: (u) => [
      purchase(u.alice),
      billingEvent('temporary-entitlement-grant', u.alice, { at: 40, purchased: 40, expires: 41 }, { product_id: YEARLY, transaction_id: 'tmp_1' }),
    ],
    expected: [
      { now: 40.5, state: { alice: { pro: { status: 'temporary', active: true, productId: YEARLY } } } },
      { now: 41.5, state: { alice: { pro: { status: 'expired', active: false } } } },
    ],
  },
  {
    // 4. An upgrade to a product whose entitlements differ: the old product's stop, whatever their id.
    name: '4. upgrade to a product with other entitlements: the old one stops granting and renewing',
    events: (u) => {
      const lineage = (product: string, tx: string) => ({ product_id: product, transaction_id: tx, original_transaction_id: '1000' });
      return [
        billingEvent('initial-purchase', u.alice, { at: 0, purchased: 0, expires: 30 }, { ...lineage('com.example.basic.monthly', '1000'), entitlement_ids: ['basic'] }),
        billingEvent('product-change', u.alice, { at: 10, purchased: 0, expires: 30 }, { ...lineage('com.example.basic.monthly', '1000'), entitlement_ids: ['basic'], new_product_id: 'com.example.premium.monthly' }),
        renewal(u.alice, 10 + ms, 10, 40, { ...lineage('com.example.premium.monthly', '1001'), entitlement_ids: ['premium'] }),
      ];
    },
    expected: [{
      now: 11,
      state: { alice: {
        basic: { active: false, willRenew: false, status: 'expired' },
        premium: { active: true, willRenew: true, status: 'active', expiresAt: isoDay(40) },
      } },
    }],
  },
  {
    // 5. One customer seen under two real ids (legacy aliasing; restore "keep with original").
    name: '5. two identified ids of one subscriber: one state, held by the id that had it, shown to both',
    events: (u) => [
      purchase(u.alice, 0, 30, { aliases: [u.alice], original_app_user_id: u.alice }),
      renewal(u.bob, 30.001, 30, 60, { original_app_user_id: u.alice, aliases: [u.alice, u.bob] }),
      cancellation(u.bob, 'UNSUBSCRIBE', 40, 30, 60, { original_app_user_id: u.alice, aliases: [u.alice, u.bob] }),
    ],
    // bob is the id the app signs in with now (RevenueCat's "last seen" app_user_id): GET /api/me for bob shows it too.
    expected: [{ now: 45, state: {
      alice: { pro: { status: 'cancelled_active', active: true, willRenew: false, expiresAt: isoDay(60) } },
      bob: { pro: { status: 'cancelled_active', active: true, willRenew: false, expiresAt: isoDay(60), sources: [expect.objectContaining({ productId: MONTHLY })] } },
    } }],
  },
  {
    // RevenueCat names the source customer of a TRANSFER by the id it knows; its rows are under the other id.
    name: '5c. a TRANSFER naming the id that was merged into another moves that customer\'s rows',
    events: (u) => [
      purchase(u.alice, 0, 30, { aliases: [u.alice], original_app_user_id: u.alice }),
      renewal(u.bob, 30.001, 30, 60, { original_app_user_id: u.alice, aliases: [u.alice, u.bob] }),
      billingEvent('transfer', u.carol, { at: 40 }, { app_user_id: undefined, aliases: undefined, original_app_user_id: undefined, transferred_from: [u.bob], transferred_to: [u.carol] }),
    ],
    expected: [{
      now: 41,
      state: {
        alice: { pro: { active: false, status: 'transferred' } },
        bob: { pro: { active: false, status: 'transferred' } },
        carol: { pro: { active: true, status: 'active', willRenew: true, expiresAt: isoDay(60) } },
      },
    }],
  },
  {
    // Found by an outside review: the same product id on two stores was one row, so a refund on one ended both.
    name: 'the same product id on two stores: a refund on one leaves what the other paid for',
    events: (u) => {
      const play = { store: 'PLAY_STORE', transaction_id: 'GPA.1', original_transaction_id: 'GPA.1' };
      const apple = { store: 'APP_STORE', transaction_id: 'apple-1', original_transaction_id: 'apple-1' };
      return [
        purchase(u.alice, 0, 20, play),
        purchase(u.alice, 1, 31, apple),
        cancellation(u.alice, 'CUSTOMER_SUPPORT', 2, 1, 2, apple),
      ];
    },
    expected: [{
      now: 3,
      state: { alice: { pro: {
        active: true, store: 'PLAY_STORE', expiresAt: isoDay(20),
        sources: [expect.objectContaining({ store: 'PLAY_STORE', active: true }), expect.objectContaining({ store: 'APP_STORE', status: 'refunded', active: false })],
      } } },
    }],
  },
  {
    name: '5b. a TRANSFER between two real users is still a transfer, not a merge',
    events: (u) => [
      purchase(u.alice, 0, 30, { aliases: [u.alice], original_app_user_id: u.alice }),
      billingEvent('transfer', u.bob, { at: 5 }, { app_user_id: undefined, aliases: undefined, original_app_user_id: undefined, transferred_from: [u.alice], transferred_to: [u.bob] }),
      renewal(u.bob, 30.001, 30, 60, { original_app_user_id: u.bob, aliases: [u.bob] }),
      purchase(u.alice, 20, 50, { product_id: YEARLY, transaction_id: 'a-2', original_transaction_id: 'a-2', aliases: [u.alice], original_app_user_id: u.alice }),
    ],
    expected: [{
      now: 31,
      state: {
        alice: { pro: { active: true, productId: YEARLY, expiresAt: isoDay(50), sources: [expect.objectContaining({ productId: YEARLY }), expect.objectContaining({ productId: MONTHLY, status: 'transferred' })] } },
        bob: { pro: { active: true, productId: MONTHLY, expiresAt: isoDay(60), sources: [expect.objectContaining({ productId: MONTHLY })] } },
      },
    }],
  },
  {
    // 6. The EXPIRATION of the old period was generated after the RENEWAL of the new one.
    name: '6. a renewal for a new period, older than the previous period\'s EXPIRATION: grants',
    events: (u) => [purchase(u.alice), renewal(u.alice, 30.02, 30, 60), expiration(u.alice, 30.05, 0, 30)],
    expected: [{ now: 31, state: { alice: { pro: { status: 'active', active: true, willRenew: true, expiresAt: isoDay(60) } } } }],
  },
  {
    // 7. A production TRANSFER never takes the sandbox purchases.
    name: '7. a production TRANSFER leaves the sandbox rows (and late sandbox events) where they are',
    events: (u) => {
      const sandbox = { environment: 'SANDBOX', transaction_id: 's-1', original_transaction_id: 's-1' };
      return [
        purchase(u.alice, 0, 3, sandbox),
        purchase(u.alice, 0.5, 30.5),
        billingEvent('transfer', u.bob, { at: 1 }, { app_user_id: undefined, aliases: undefined, original_app_user_id: undefined, transferred_from: [u.alice], transferred_to: [u.bob] }),
        cancellation(u.alice, 'UNSUBSCRIBE', 0.8, 0, 3, sandbox),
      ];
    },
    expected: [{
      now: 2,
      state: {
        alice: { pro: { active: true, environment: 'SANDBOX', status: 'cancelled_active', willRenew: false } },
        bob: { pro: { active: true, environment: 'PRODUCTION', sources: [expect.objectContaining({ environment: 'PRODUCTION' })] } },
      },
    }],
  },
  {
    // 8. The documented "trial cancelled less than 24 h before conversion": CANCELLATION then RENEWAL.
    name: '8. a renewal after a late trial cancellation does not turn renewal back on',
    events: (u) => {
      const trial = { product_id: MONTHLY, store: 'APP_STORE', original_transaction_id: 'trial-1' };
      return [
        billingEvent('initial-purchase-trial', u.alice, { at: 0, purchased: 0, expires: 3 }, { ...trial, transaction_id: 'trial-1' }),
        cancellation(u.alice, 'UNSUBSCRIBE', 2.5, 0, 3, { ...trial, transaction_id: 'trial-1' }),
        billingEvent('renewal-trial-conversion', u.alice, { at: 3.001, purchased: 3, expires: 33 }, { ...trial, transaction_id: 'trial-2' }),
      ];
    },
    expected: [{ now: 4, state: { alice: { pro: { status: 'cancelled_active', active: true, willRenew: false, expiresAt: isoDay(33) } } } }],
  },
  {
    name: '8b. SUBSCRIPTION_EXTENDED and REFUND_REVERSED keep a cancelled subscription cancelled',
    events: (u) => [
      purchase(u.alice),
      cancellation(u.alice, 'UNSUBSCRIBE', 5, 0, 30),
      billingEvent('subscription-extended', u.alice, { at: 6, purchased: 0, expires: 37 }),
      billingEvent('cancellation-customer-support', u.alice, { at: 8, purchased: 0, expires: 8 }),
      billingEvent('refund-reversed', u.alice, { at: 9, purchased: 0, expires: 37 }),
    ],
    expected: [{ now: 10, state: { alice: { pro: { status: 'cancelled_active', active: true, willRenew: false, expiresAt: isoDay(37) } } } }],
  },
  {
    // 9. entitlement_ids null (the dashboard mapping changed): the product's rows still end.
    name: '9. a refund with entitlement_ids null ends the product\'s rows',
    events: (u) => [purchase(u.alice), billingEvent('cancellation-customer-support', u.alice, { at: 5, purchased: 0, expires: 5 }, { entitlement_ids: null })],
    expected: [{ now: 6, state: { alice: { pro: { status: 'refunded', active: false } } } }],
  },
  {
    name: '9b. an EXPIRATION with entitlement_ids null ends the product\'s rows, every entitlement',
    events: (u) => [purchase(u.alice, 0, 30, { entitlement_ids: ['pro', 'ads_free'] }), expiration(u.alice, 20, 0, 20, { entitlement_ids: null })],
    expected: [{ now: 21, state: { alice: { pro: { status: 'expired', active: false }, ads_free: { status: 'expired', active: false } } } }],
  },
  {
    // 10. A renewing monthly beside a cancelled yearly that grants longer.
    name: '10. a cancelled yearly shown beside a renewing monthly: it will renew, both sources listed',
    events: (u) => {
      const yearly = { product_id: YEARLY, transaction_id: 'y-1', original_transaction_id: 'y-1' };
      return [
        purchase(u.alice, 0, 365, yearly),
        cancellation(u.alice, 'UNSUBSCRIBE', 5, 0, 365, yearly),
        purchase(u.alice, 6, 36),
      ];
    },
    expected: [{
      now: 10,
      state: { alice: { pro: {
        productId: YEARLY, status: 'cancelled_active', active: true, willRenew: true, expiresAt: isoDay(365),
        sources: [
          { productId: YEARLY, store: 'APP_STORE', environment: 'PRODUCTION', status: 'cancelled_active', active: true, expiresAt: isoDay(365), graceExpiresAt: null, willRenew: false },
          { productId: MONTHLY, store: 'APP_STORE', environment: 'PRODUCTION', status: 'active', active: true, expiresAt: isoDay(36), graceExpiresAt: null, willRenew: true },
        ],
      } } },
    }],
  },
  {
    // Events without product_id: keyed by their original transaction, never one shared row.
    name: 'a monthly EXPIRATION without product_id never touches a lifetime purchase without one',
    events: (u) => {
      const lifetime = { product_id: undefined, transaction_id: 'L-1', original_transaction_id: 'L-1' };
      const monthly = { product_id: undefined, transaction_id: 'M-1', original_transaction_id: 'M-1' };
      return [
        billingEvent('non-renewing-purchase', u.alice, { at: 1, purchased: 1, expires: null }, lifetime),
        purchase(u.alice, 0, 30, monthly),
        expiration(u.alice, 30.01, 0, 30, monthly),
      ];
    },
    expected: [{ now: 31, state: { alice: { pro: { status: 'active', active: true, expiresAt: null, productId: null } } } }],
  },
  {
    // Identity across a merge: the anonymous purchase, the alias, a late anonymous event.
    name: 'an anonymous purchase, the signed-in renewal naming it, a late anonymous cancellation',
    events: (u) => [
      purchase(u.anon, 0, 30, { aliases: [u.anon], original_app_user_id: u.anon }),
      renewal(u.alice, 30.001, 30, 60, { aliases: [u.anon, u.alice], original_app_user_id: u.anon }),
      cancellation(u.anon, 'UNSUBSCRIBE', 20, 0, 30, { aliases: [u.anon], original_app_user_id: u.anon }),
    ],
    // The cancellation lands on alice (the anonymous id holds nothing); the RENEWAL after it, into the
    // next period, says renewal was turned back on (its UNCANCELLATION lost): renewing.
    expected: [{ now: 31, state: { anon: null, alice: { pro: { status: 'active', active: true, willRenew: true, expiresAt: isoDay(60) } } } }],
  },
];

describe.each(DATABASE_KINDS)('documented flows in every delivery order, on %s', (kind) => {
  const db = suiteDatabase(kind);

  it.each(flows)('$name', async ({ events, expected }) => {
    const count = events(newUsers()).length;
    for (const order of orders(count, kind)) {
      const users = newUsers();
      await deliverAll(events(users), order);
      for (const state of expected) await expectEntitlementState(db, users, state, `order ${order.join(',')}, day ${state.now}`);
    }
  });
});

// ---------------------------------------------------------------------------------------------
// Property: a generated subscription history, delivered in a random order, ends in the state of
// delivery in event order (compared at several clocks, user ids aside).

interface HistoryEvent {
  make: (u: Users) => BillingWebhookBody;
}

/** A subscription history in event order: a purchase, then what happens at each period boundary. */
const history = fc
  .record({
    trial: fc.boolean(),
    steps: fc.array(fc.constantFrom('renew', 'billing-grace-recover', 'billing-grace-expire', 'cancel-expire', 'cancel-uncancel', 'upgrade',
      'refund', 'transfer', 'pause-resume', 'lifetime', 'temporary', 'billing-issue-alone', 'stripe-window', 'temporary-near-end', 'cross-upgrade',
      'alias'), { minLength: 1, maxLength: 5 }),
  })
  .map(({ trial, steps }) => {
    const events: HistoryEvent[] = [];
    let start = 0;
    let end = 3;
    let product = MONTHLY;
    let entitlements = ['pro'];
    let owner: Role = 'alice';
    // Set once the customer is also known under bob (RevenueCat's aliasing): its events name both.
    let identity: ((u: Users) => Record<string, unknown>) | null = null;
    let tx = 1;
    let transfers = 0;
    const lineage = () => ({ product_id: product, transaction_id: `t-${tx}`, original_transaction_id: 't-1', entitlement_ids: entitlements });
    events.push({ make: (u) => billingEvent(trial ? 'initial-purchase-trial' : 'initial-purchase', u.alice, { at: 0, purchased: 0, expires: end }, lineage()) });
    let ended = false;
    for (const step of steps) {
      if (ended) break;
      const [s, e, facts] = [start, end, lineage()];
      const who: Role = owner;
      const pushedBefore = events.length;
      const named = identity;
      const next = () => {
        tx += 1;
        start = end;
        end += 30;
        const renewed = lineage();
        const [ns, ne, nwho] = [start, end, owner];
        return (at: number) => ({ make: (u: Users) => renewal(u[nwho], at, ns, ne, renewed) });
      };
      switch (step) {
        case 'renew':
          events.push(next()(e + 0.001));
          break;
        case 'billing-grace-recover':
        case 'billing-grace-expire':
          events.push({ make: (u) => billingEvent('billing-issue-grace', u[who], { at: e + 0.001, purchased: s, expires: e }, { ...facts, grace_period_expiration_at_ms: day(e + 6) }) });
          events.push({ make: (u) => cancellation(u[who], 'BILLING_ERROR', e + 0.001 + ms, s, e, facts) });
          if (step === 'billing-grace-recover') events.push(next()(e + 3));
          else {
            events.push({ make: (u) => expiration(u[who], e + 6.01, s, e, { ...facts, expiration_reason: 'BILLING_ERROR' }) });
            ended = true;
          }
          break;
        case 'cancel-expire':
          events.push({ make: (u) => cancellation(u[who], 'UNSUBSCRIBE', s + 1, s, e, facts) });
          events.push({ make: (u) => expiration(u[who], e + 0.01, s, e, facts) });
          ended = true;
          break;
        case 'cancel-uncancel':
          events.push({ make: (u) => cancellation(u[who], 'UNSUBSCRIBE', s + 1, s, e, facts) });
          events.push({ make: (u) => billingEvent('uncancellation', u[who], { at: s + 2, purchased: s, expires: e }, facts) });
          events.push(next()(e + 0.001));
          break;
        case 'upgrade': {
          events.push({ make: (u) => billingEvent('product-change', u[who], { at: s + 1, purchased: s, expires: e }, { ...facts, new_product_id: YEARLY }) });
          product = YEARLY;
          tx += 1;
          const upgraded = lineage();
          const upgradeAt = s + 1;
          start = upgradeAt;
          end = upgradeAt + 365;
          const [ns, ne] = [start, end];
          events.push({ make: (u) => renewal(u[who], upgradeAt + ms, ns, ne, upgraded) });
          break;
        }
        case 'refund':
          events.push({ make: (u) => billingEvent('cancellation-customer-support', u[who], { at: s + 1, purchased: s, expires: s + 1 }, facts) });
          ended = true;
          break;
        case 'transfer': {
          // (An aliased customer is alice and bob at once: it transfers to carol.)
          const to: Role = identity ? 'carol' : who === 'alice' ? 'bob' : 'alice';
          identity = null;
          // Its own instant: RevenueCat never sends a transfer at the very millisecond of another event
          // of the customer, and events of one instant and rank are ordered by their (random) ids.
          const at = s + 0.8 + transfers++ * 0.01;
          events.push({ make: (u) => billingEvent('transfer', u[to], { at }, { app_user_id: undefined, aliases: undefined, original_app_user_id: undefined, transferred_from: [u[who]], transferred_to: [u[to]] }) });
          owner = to;
          break;
        }
        case 'pause-resume':
          events.push({ make: (u) => billingEvent('subscription-paused', u[who], { at: s + 1, purchased: s, expires: e }, { ...facts, auto_resume_at_ms: day(e + 10) }) });
          events.push({ make: (u) => expiration(u[who], e + 0.01, s, e, { ...facts, expiration_reason: 'SUBSCRIPTION_PAUSED' }) });
          start = e + 10;
          end = start + 30;
          tx += 1;
          {
            const resumed = lineage();
            const [ns, ne] = [start, end];
            events.push({ make: (u) => renewal(u[who], ns + 0.001, ns, ne, resumed) });
          }
          break;
        case 'lifetime':
          events.push({ make: (u) => billingEvent('non-renewing-purchase', u[who], { at: s + 2, purchased: s + 2, expires: null }, { transaction_id: `life-${s}`, original_transaction_id: `life-${s}` }) });
          break;
        case 'temporary':
          events.push({ make: (u) => billingEvent('temporary-entitlement-grant', u[who], { at: s + 0.5, purchased: s + 0.5, expires: s + 1.5 }, { product_id: YEARLY, transaction_id: `tmp-${s}` }) });
          break;
        case 'billing-issue-alone':
          // The CANCELLATION BILLING_ERROR sent with it is lost; the payment recovers in grace.
          events.push({ make: (u) => billingEvent('billing-issue-grace', u[who], { at: e + 0.001, purchased: s, expires: e }, { ...facts, grace_period_expiration_at_ms: day(e + 6) }) });
          events.push(next()(e + 3));
          break;
        case 'stripe-window':
          // Stripe's retry window inside the expiration the billing issue reports; the retry succeeds.
          events.push({ make: (u) => billingEvent('billing-issue-no-grace', u[who], { at: e + 0.001, purchased: s, expires: e + 7 }, facts) });
          events.push({ make: (u) => cancellation(u[who], 'BILLING_ERROR', e + 0.001 + 3 * ms, s, e + 7, facts) });
          events.push(next()(e + 3));
          break;
        case 'temporary-near-end':
          // A purchase RevenueCat cannot validate yet, just before the current period ends.
          events.push({ make: (u) => billingEvent('temporary-entitlement-grant', u[who], { at: e - 0.1, purchased: e - 0.1, expires: e + 0.9 }, { product_id: YEARLY, transaction_id: `tmpn-${e}` }) });
          break;
        case 'cross-upgrade': {
          // An upgrade to a product of another entitlement (same original transaction).
          events.push({ make: (u) => billingEvent('product-change', u[who], { at: s + 1, purchased: s, expires: e }, { ...facts, new_product_id: PREMIUM_MONTHLY }) });
          product = PREMIUM_MONTHLY;
          entitlements = ['premium'];
          tx += 1;
          const upgraded = lineage();
          const upgradeAt = s + 1;
          start = upgradeAt;
          end = upgradeAt + 30;
          const [ns, ne] = [start, end];
          events.push({ make: (u) => renewal(u[who], upgradeAt + ms, ns, ne, upgraded) });
          break;
        }
        case 'alias':
          // The customer signs in as bob too (legacy aliasing): from the next renewal on, events name both ids.
          if (identity || who !== 'alice') {
            events.push(next()(e + 0.001));
            break;
          }
          identity = (u) => ({ original_app_user_id: u.alice, aliases: [u.alice, u.bob] });
          owner = 'bob';
          events.push(next()(e + 0.001));
          break;
      }
      // Events of an aliased customer name all its ids (a TRANSFER names them in transferred_from).
      const stepIdentity = step === 'alias' ? identity : named;
      if (stepIdentity) {
        for (let i = pushedBefore; i < events.length; i++) {
          const make = events[i]!.make;
          events[i] = { make: (u) => {
            const body = make(u);
            if (body.event.type === 'TRANSFER') body.event.transferred_from = [u.alice, u.bob];
            else Object.assign(body.event, stepIdentity(u));
            return body;
          } };
        }
      }
    }
    return { events, last: end };
  });

/** What each role sees at a few clocks, with user ids taken out. */
async function snapshot(db: TestDatabase, users: Users, clocks: number[]): Promise<unknown> {
  const out: Record<string, unknown> = {};
  for (const role of ['alice', 'bob', 'carol', 'anon'] as Role[]) {
    for (const now of clocks) out[`${role}@${now}`] = await entitlementsOf(db, users[role], new Date(day(now)));
  }
  return out;
}

describe.each(DATABASE_KINDS)('random interleavings of generated histories, on %s', (kind) => {
  const db = suiteDatabase(kind);

  it('end in the state of delivery in event order', async () => {
    await fc.assert(
      fc.asyncProperty(history.chain((h) => fc.tuple(fc.constant(h), fc.shuffledSubarray(h.events.map((_, i) => i), { minLength: h.events.length, maxLength: h.events.length }))),
        async ([{ events, last }, shuffled]) => {
          const clocks = [1, Math.round(last / 2), last - 0.5, last + 10];
          // Delivered once the history happened (its stamps reach past the real clock).
          const inOrder = newUsers();
          await receivedAt(last + 20, () => deliverAll(events.map((e) => e.make(inOrder)), events.map((_, i) => i)));
          const reordered = newUsers();
          await receivedAt(last + 20, () => deliverAll(events.map((e) => e.make(reordered)), shuffled));
          expect(await snapshot(db, reordered, clocks)).toEqual(await snapshot(db, inOrder, clocks));
        }),
      { numRuns: 30, seed: 20261123 },
    );
  });
});
