import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DATABASE_KINDS, suiteDatabase, type DatabaseKind, type TestDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { startFakeRevenueCat, v1Entitlement as ent, v1Subscription as sub, type FakeCustomer, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import {
  apple, billingIssue, cancellation, day, deliverFlowItem, deliveryOrdersOn, DOC, event, expectEntitlementState, isoDay, isSnapshotItem, LIFETIME,
  MONTHLY, play, purchase, readerSettings, receivedAt, refund, renewal, snapshot, transfer, YEARLY, type ExpectedState, type FlowItem } from './support.ts';

/**
 * The billing model against eleven more of RevenueCat's documented flows (grace with auto-renewal
 * turned off and on, Stripe giving up, lifetimes v1 does not show, a lost webhook, a Play pause
 * that renews, a promotional grant revoked early, an event stamped far in the future, a reversed
 * refund, Google Play's immediate upgrade). Each flow runs in the orders RevenueCat may deliver it
 * (every order up to three deliveries, six that hold every order of any three of four, else in
 * order, reversed and a fixed sample), on both engines,
 * through the real routes and SQL:
 *   - webhooks alone (its snapshot items left out),
 *   - webhooks and syncs from RevenueCat's stand-in with REST v1 only (the flow's snapshots, and
 *     `record`: RevenueCat's record once every event happened, fetched like any other item),
 *   - the same with REST v2 configured beside v1.
 * A flow expects the same state everywhere unless it says otherwise (what v1 alone cannot know).
 * Each `doc` quotes the page the expectation comes from.
 */
type Role = 'alice' | 'bob';
type Users = Record<Role, string>;
type Run = 'webhooks' | 'v1' | 'v2';
interface Flow {
  name: string;
  doc: string;
  items: (u: Users) => FlowItem[];
  /** RevenueCat's record after every event of the flow (whose, when, what), fetched in the sync runs. */
  record?: { of: Role; at: number; customer: (u: Users) => FakeCustomer };
  expected: ExpectedState[];
  /** What a run expects instead of `expected`. */
  expectedIn?: Partial<Record<Run, ExpectedState[]>>;
  /** Extra runs: a sync run without the final record (what the flow's own snapshots settle). */
  withoutRecord?: Partial<Record<'v1' | 'v2', ExpectedState[]>>;
}

/** Seconds, in days (the flows' clock). */
const sec = (seconds: number) => seconds / 86_400;
const stripe = (tx: string) => ({ store: 'STRIPE', product_id: 'prod_PRO', transaction_id: tx, original_transaction_id: 'sub_1PROMONTHLY' });
const PLAY_LIFETIME = 'pro_lifetime';
const appleLifetime = { store: 'APP_STORE', product_id: LIFETIME, transaction_id: '7000000100000001', original_transaction_id: '7000000100000001' };
const playLifetime = { store: 'PLAY_STORE', product_id: PLAY_LIFETIME, transaction_id: 'GPA.7000-0000-0000-00001', original_transaction_id: 'GPA.7000-0000-0000-00001' };
const lifetimePurchase = (u: string, at: number, facts: Record<string, unknown>) => event('non-renewing-purchase', u, at, at, null, facts);
const v1Purchase = (at: number, store: string, id: string) => ({ id: `rc_${id}`, is_sandbox: false, purchase_date: new Date(day(at)).toISOString().replace(/\.\d{3}Z$/, 'Z'), store, store_transaction_id: id });
const PROMO = 'rc_promo_pro_monthly';
const promo = { store: 'PROMOTIONAL', product_id: PROMO, transaction_id: 'promo_8f1d2c3b', original_transaction_id: 'promo_8f1d2c3b', period_type: 'PROMOTIONAL' };
const playBasic = (order: string) => ({ ...play(order, 'basic:monthly'), entitlement_ids: ['basic'] });
const playPremium = (order: string) => ({ ...play(order, 'premium:monthly'), entitlement_ids: ['premium'] });
/** RevenueCat's own sample TRANSFER is stamped 78789789798798 (the year 4466). */
const YEAR_4466 = 78_789_789_798_798;

/** An App Store and a Play lifetime of `pro`, and a snapshot where v1 shows only the Play one under it. */
const twoLifetimes = (u: Users): FlowItem[] => [
  lifetimePurchase(u.alice, 1, appleLifetime),
  lifetimePurchase(u.alice, 2, playLifetime),
  snapshot('alice', 5, {
    entitlements: { pro: ent(PLAY_LIFETIME, { purchased: day(2), expires: null }) },
    non_subscriptions: { [LIFETIME]: [v1Purchase(1, 'app_store', appleLifetime.transaction_id)], [PLAY_LIFETIME]: [v1Purchase(2, 'play_store', playLifetime.transaction_id)] },
    productEntitlements: { [LIFETIME]: ['pro'], [PLAY_LIFETIME]: ['pro'] },
  }),
];

/** A webhook that reached the service at a given time (days), whatever its stamp says. */
interface Received {
  receivedAt: number;
  item: FlowItem;
}
const arrivedAt = (at: number, item: FlowItem): FlowItem => ({ receivedAt: at, item } as unknown as FlowItem);
const isReceived = (item: FlowItem): item is FlowItem & Received => 'receivedAt' in item;

const flows: Flow[] = [
  {
    name: 'M01 App Store grace, auto-renewal turned off then on again (UNCANCELLATION): in grace to its end, not renewing until a payment recovers',
    doc: `UNCANCELLATION: "A non-expired cancelled subscription has been re-enabled." (${DOC.types}); "Users will retain access to their subscriptions ... will not be considered expired until the end of their grace period." and "Once a user corrects their payment method, RevenueCat will send a renewal event. This will reset the grace_period_expires_date property" (${DOC.grace})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      billingIssue(u.alice, 30 + sec(4.211), 0, 30, 46),
      cancellation(u.alice, 'BILLING_ERROR', 30 + sec(4.214), 0, 30),
      cancellation(u.alice, 'UNSUBSCRIBE', 33, 0, 30),
      event('uncancellation', u.alice, 34, 0, 30),
    ],
    record: {
      of: 'alice', at: 35,
      customer: () => ({
        entitlements: { pro: ent(MONTHLY, { purchased: day(0), expires: day(30), grace: day(46) }) },
        subscriptions: { [MONTHLY]: sub({ purchased: day(0), expires: day(30), billingIssue: day(30 + sec(4.211)), grace: day(46), transactionId: '1000' }) },
      }),
    },
    expected: [
      { now: 35, state: { alice: { pro: { active: true, status: 'grace', willRenew: false, expiresAt: isoDay(30), graceExpiresAt: isoDay(46) } } } },
      { now: 47, state: { alice: { pro: { active: false, status: 'expired', willRenew: false } } } },
    ],
  },
  {
    name: 'M02 Stripe gives up after its retries (CANCELLATION BILLING_ERROR shortening the retry window, its EXPIRATION lost): no access from then',
    doc: `"If all payment retries fail, expires_date will be updated." (${DOC.grace}); expiration_at_ms: "Use this field to determine if a subscription is still active." (${DOC.types}); Stripe, "cancel the subscription: RevenueCat will revoke access and generate a CANCELLATION event with the reason set to BILLING_ERROR" (${DOC.grace})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, stripe('in_1PRO0001')),
      billingIssue(u.alice, 30 + sec(2.2), 0, 37, null, stripe('in_1PRO0001')),
      cancellation(u.alice, 'BILLING_ERROR', 34, 0, 34, stripe('in_1PRO0001')),
    ],
    record: {
      of: 'alice', at: 35,
      customer: () => ({
        entitlements: { pro: ent('prod_PRO', { purchased: day(0), expires: day(34) }) },
        subscriptions: { prod_PRO: sub({ purchased: day(0), expires: day(34), store: 'stripe', billingIssue: day(30), unsubscribed: day(34), transactionId: 'in_1PRO0001' }) },
      }),
    },
    expected: [
      { now: 33.9, state: { alice: { pro: { active: true, status: 'billing_issue', willRenew: false, expiresAt: isoDay(34) } } } },
      { now: 35, state: { alice: { pro: { active: false, status: 'expired', willRenew: false } } } },
    ],
  },
  {
    name: 'M03 two lifetimes of one entitlement (App Store, Play), v1 shows the Play one, which is refunded: the App Store lifetime still grants',
    doc: `v1 entitlement: "the product identifier that unlocked this entitlement" and the purchase with the latest expiration is shown (${DOC.v1}); "Granting a refund will immediately expire the subscription and remove any entitlement access." (${DOC.refunds})`,
    items: (u) => [
      ...twoLifetimes(u),
      refund(u.alice, 10, 2, 10, playLifetime),
    ],
    record: {
      of: 'alice', at: 11,
      customer: () => ({
        entitlements: { pro: ent(LIFETIME, { purchased: day(1), expires: null }) },
        non_subscriptions: { [LIFETIME]: [v1Purchase(1, 'app_store', appleLifetime.transaction_id)], [PLAY_LIFETIME]: [v1Purchase(2, 'play_store', playLifetime.transaction_id)] },
        productEntitlements: { [LIFETIME]: ['pro'], [PLAY_LIFETIME]: ['pro'] },
        refundedPurchases: [playLifetime.transaction_id],
      }),
    },
    expected: [{
      now: 11,
      state: { alice: { pro: {
        active: true, status: 'active', productId: LIFETIME, store: 'APP_STORE', expiresAt: null, willRenew: false,
        sources: [expect.objectContaining({ productId: LIFETIME, status: 'active' }), expect.objectContaining({ productId: PLAY_LIFETIME, status: 'refunded', active: false })],
      } } },
    }],
    withoutRecord: {
      v1: [{ now: 11, state: { alice: { pro: { active: true, productId: LIFETIME } } } }],
      v2: [{ now: 11, state: { alice: { pro: { active: true, productId: LIFETIME } } } }],
    },
  },
  {
    name: 'M04 the monthly\'s webhooks lost, a lifetime bought, a snapshot, the lifetime refunded: the monthly grants (v2 says so at once; v1 once it shows it)',
    doc: `v1 entitlements show, per entitlement, the purchase that lasts longest (${DOC.v1}); REST v2 lists each subscription "entitlements" it grants (RevenueCat API v2, list-subscriptions); a refund "will immediately expire the subscription and remove any entitlement access" (${DOC.refunds})`,
    items: (u) => [
      lifetimePurchase(u.alice, 5, appleLifetime),
      snapshot('alice', 6, {
        entitlements: { pro: ent(LIFETIME, { purchased: day(5), expires: null }) },
        subscriptions: { [MONTHLY]: sub({ purchased: day(0), expires: day(30), transactionId: '1000' }) },
        non_subscriptions: { [LIFETIME]: [v1Purchase(5, 'app_store', appleLifetime.transaction_id)] },
        productEntitlements: { [MONTHLY]: ['pro'], [LIFETIME]: ['pro'] },
      }),
      refund(u.alice, 10, 5, 10, appleLifetime),
    ],
    record: {
      of: 'alice', at: 11,
      customer: () => ({
        entitlements: { pro: ent(MONTHLY, { purchased: day(0), expires: day(30) }) },
        subscriptions: { [MONTHLY]: sub({ purchased: day(0), expires: day(30), transactionId: '1000' }) },
        non_subscriptions: { [LIFETIME]: [v1Purchase(5, 'app_store', appleLifetime.transaction_id)] },
        productEntitlements: { [MONTHLY]: ['pro'], [LIFETIME]: ['pro'] },
        refundedPurchases: [appleLifetime.transaction_id],
      }),
    },
    expected: [{ now: 12, state: { alice: { pro: { active: true, status: 'active', productId: MONTHLY, willRenew: true, expiresAt: isoDay(30) } } } }],
    // Webhooks alone never heard of the monthly.
    expectedIn: { webhooks: [{ now: 12, state: { alice: { pro: { active: false, status: 'refunded' } } } }] },
    withoutRecord: {
      // v1 at day 6 showed the lifetime only: which entitlement the monthly grants is not in it.
      v1: [{ now: 12, state: { alice: { pro: { active: false, status: 'refunded' } } } }],
      v2: [{ now: 12, state: { alice: { pro: { active: true, status: 'active', productId: MONTHLY, willRenew: true, expiresAt: isoDay(30) } } } }],
    },
  },
  {
    name: 'M05 Play pause scheduled, then the period renews: active and renewing',
    doc: `SUBSCRIPTION_PAUSED: "The subscription has set to be paused at the end of the period." and "You should not revoke access when receiving a SUBSCRIPTION_PAUSED event" (${DOC.types}); REST v2 auto_renewal_status keeps "will_pause" apart from "will_not_renew" (RevenueCat API v2, Subscription)`,
    items: (u) => {
      const p = play('GPA.5555-0000-0000-00001');
      return [
        purchase(u.alice, 0, 0, 30, p),
        event('subscription-paused', u.alice, 10, 0, 30, { ...p, auto_resume_at_ms: day(60) }),
        renewal(u.alice, 30 + sec(1), 30, 60, play('GPA.5555-0000-0000-00001..0')),
      ];
    },
    record: {
      of: 'alice', at: 31,
      customer: () => ({
        entitlements: { pro: { ...ent('pro_monthly', { purchased: day(30), expires: day(60) }), product_plan_identifier: 'monthly' } },
        subscriptions: { pro_monthly: { ...sub({ purchased: day(30), expires: day(60), store: 'play_store', transactionId: 'GPA.5555-0000-0000-00001..0' }), product_plan_identifier: 'monthly' } },
      }),
    },
    expected: [{ now: 31, state: { alice: { pro: { active: true, status: 'active', willRenew: true, expiresAt: isoDay(60) } } } }],
  },
  {
    name: 'M06 Play pause scheduled, nothing after it yet: active, still renewing (the same as a snapshot of that state says)',
    doc: `SUBSCRIPTION_PAUSED: "You should not revoke access when receiving a SUBSCRIPTION_PAUSED event, but only when receiving an EXPIRATION event" (${DOC.types})`,
    items: (u) => {
      const p = play('GPA.5555-0000-0000-00002');
      return [purchase(u.alice, 0, 0, 30, p), event('subscription-paused', u.alice, 10, 0, 30, { ...p, auto_resume_at_ms: day(60) })];
    },
    record: {
      of: 'alice', at: 11,
      customer: () => ({
        entitlements: { pro: { ...ent('pro_monthly', { purchased: day(0), expires: day(30) }), product_plan_identifier: 'monthly' } },
        subscriptions: { pro_monthly: { ...sub({ purchased: day(0), expires: day(30), store: 'play_store', transactionId: 'GPA.5555-0000-0000-00002' }), product_plan_identifier: 'monthly', auto_resume_date: new Date(day(60)).toISOString() } },
      }),
    },
    expected: [{ now: 11, state: { alice: { pro: { active: true, status: 'active', willRenew: true, expiresAt: isoDay(30) } } } }],
  },
  {
    name: 'M07 a promotional grant revoked early (CANCELLATION DEVELOPER_INITIATED ending it, its EXPIRATION lost): no access from then',
    doc: `DEVELOPER_INITIATED: "Developer cancelled the subscription." (${DOC.types}); expiration_at_ms: "Use this field to determine if a subscription is still active." (${DOC.types}); promotionals revoked from the dashboard (${DOC.promo})`,
    items: (u) => [
      event('non-renewing-purchase', u.alice, 0, 0, 30, promo),
      cancellation(u.alice, 'DEVELOPER_INITIATED', 10, 0, 10, promo),
    ],
    record: {
      of: 'alice', at: 11,
      customer: () => ({
        entitlements: { pro: ent(PROMO, { purchased: day(0), expires: day(10) }) },
        subscriptions: { [PROMO]: sub({ purchased: day(0), expires: day(10), store: 'promotional', transactionId: promo.transaction_id }) },
      }),
    },
    expected: [
      { now: 9.5, state: { alice: { pro: { active: true, willRenew: false, expiresAt: isoDay(10) } } } },
      { now: 11, state: { alice: { pro: { active: false, willRenew: false } } } },
    ],
  },
  {
    name: 'M08 a TRANSFER stamped in the year 4466, then a transfer back: the transfer back holds (an event\'s time is bounded by when it arrived)',
    doc: `event_timestamp_ms: "The time that the event was generated." (${DOC.types}); RevenueCat's sample TRANSFER carries event_timestamp_ms 78789789798798 (https://www.revenuecat.com/docs/integrations/webhooks/sample-events); "the entitlements will be removed from user 1 and added to user 2" (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 365, apple('1000', '1000', YEARLY)),
      arrivedAt(20, transfer([u.alice], [u.bob], 20, { event_timestamp_ms: YEAR_4466 })),
      arrivedAt(21, transfer([u.bob], [u.alice], 21)),
    ],
    record: {
      of: 'alice', at: 22,
      customer: () => ({
        entitlements: { pro: ent(YEARLY, { purchased: day(0), expires: day(365) }) },
        subscriptions: { [YEARLY]: sub({ purchased: day(0), expires: day(365), transactionId: '1000' }) },
      }),
    },
    expected: [{ now: 22, state: { alice: { pro: { active: true, productId: YEARLY, expiresAt: isoDay(365) } }, bob: { pro: { active: false } } } }],
  },
  {
    name: 'M09 a lifetime v1 lists in non_subscriptions but not under its entitlement: its source still reads active after a sync',
    doc: `v1 non_subscriptions: "Non-subscription purchases of the Customer" and the entitlement shows one purchase (${DOC.v1})`,
    items: twoLifetimes,
    expected: [{
      now: 6,
      state: { alice: { pro: {
        active: true, expiresAt: null,
        sources: expect.arrayContaining([expect.objectContaining({ productId: LIFETIME, status: 'active', active: true }), expect.objectContaining({ productId: PLAY_LIFETIME, status: 'active', active: true })]),
      } } },
    }],
  },
  {
    name: 'M10 a lifetime refunded, then the refund reversed (REFUND_REVERSED): active, like the purchase itself',
    doc: `REFUND_REVERSED: "A refund has been reversed." (${DOC.types}); NON_RENEWING_PURCHASE: "A customer has made a purchase that will not auto-renew." (${DOC.types})`,
    items: (u) => [
      lifetimePurchase(u.alice, 1, appleLifetime),
      refund(u.alice, 5, 1, 5, appleLifetime),
      event('refund-reversed', u.alice, 8, 1, null, appleLifetime),
    ],
    record: {
      of: 'alice', at: 9,
      customer: () => ({
        entitlements: { pro: ent(LIFETIME, { purchased: day(1), expires: null }) },
        non_subscriptions: { [LIFETIME]: [v1Purchase(1, 'app_store', appleLifetime.transaction_id)] },
      }),
    },
    expected: [{ now: 9, state: { alice: { pro: { active: true, status: 'active', willRenew: false, expiresAt: null, productId: LIFETIME } } } }],
  },
  {
    name: 'M11 Google Play immediate upgrade (PRODUCT_CHANGE without new_product_id, the new product under a new order id): the old stops at once',
    doc: `new_product_id: "Only available in PRODUCT_CHANGE events for Play Store subscriptions with the DEFERRED replacement mode and App Store subscriptions" (${DOC.types}); immediate replacement modes: "Old subscription is cancelled, and new subscription takes effect immediately." and the change arrives as "a INITIAL_PURCHASE event on Google Play" (${DOC.manage})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, playBasic('GPA.1000-0000-0000-00001')),
      event('product-change', u.alice, 10, 0, 30, { ...playBasic('GPA.1000-0000-0000-00001'), new_product_id: undefined }),
      purchase(u.alice, 10 + sec(1.5), 10, 45, playPremium('GPA.2000-0000-0000-00002')),
    ],
    record: {
      of: 'alice', at: 11,
      customer: () => ({
        entitlements: {
          basic: { ...ent('basic', { purchased: day(0), expires: day(10) }), product_plan_identifier: 'monthly' },
          premium: { ...ent('premium', { purchased: day(10), expires: day(45) }), product_plan_identifier: 'monthly' },
        },
        subscriptions: {
          basic: { ...sub({ purchased: day(0), expires: day(10), store: 'play_store', unsubscribed: day(10), transactionId: 'GPA.1000-0000-0000-00001' }), product_plan_identifier: 'monthly' },
          premium: { ...sub({ purchased: day(10), expires: day(45), store: 'play_store', transactionId: 'GPA.2000-0000-0000-00002' }), product_plan_identifier: 'monthly' },
        },
      }),
    },
    expected: [{ now: 11, state: { alice: { premium: { active: true, willRenew: true, expiresAt: isoDay(45) }, basic: { active: false, willRenew: false } } } }],
  },
  {
    name: 'M12 ... and when the new product\'s INITIAL_PURCHASE is lost: the old one is cancelled, granting at most to its own period\'s end',
    doc: `immediate replacement modes: "Old subscription is cancelled" (${DOC.manage}); a cancelled subscription keeps access to the end of its period (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, playBasic('GPA.1000-0000-0000-00003')),
      event('product-change', u.alice, 10, 0, 30, { ...playBasic('GPA.1000-0000-0000-00003'), new_product_id: undefined }),
    ],
    expected: [
      { now: 11, state: { alice: { basic: { active: true, status: 'cancelled_active', willRenew: false, expiresAt: isoDay(30) } } } },
      { now: 30.5, state: { alice: { basic: { active: false } } } },
    ],
  },
];

// ---------------------------------------------------------------------------------------------

/** Every order (or a sample) on Postgres; in order and reversed on PGlite (deliveryOrdersOn). */
const orders = (n: number, kind: DatabaseKind) => deliveryOrdersOn(kind, n, { everyOrderOn: 'postgres', sample: 3, seed: 2711 });
const newUsers = (): Users => ({ alice: randomUUID(), bob: randomUUID() });

let revenuecat: FakeRevenueCat;

/**
 * Deliver an item; a webhook that says when it arrived is delivered with the clock at that time. A
 * snapshot is the user's "Refresh purchases", which a user may do once per 5 s: a flow's second
 * one stands for a refresh made later (its user's last request is moved back out of the way).
 */
async function deliver(db: TestDatabase, item: FlowItem, users: Users): Promise<void> {
  if (isSnapshotItem(item)) {
    await db.sql(`update public.billing_sync_requests set requested_at = requested_at - interval '1 minute' where app_user_id = $1`, [users[item.snapshotOf as Role]]);
  }
  if (!isReceived(item)) return deliverFlowItem(item, users, revenuecat);
  await receivedAt(item.receivedAt, () => deliverFlowItem(item.item, users, revenuecat));
}

async function runFlow(db: TestDatabase, flow: Flow, run: Run, withRecord: boolean, expected: ExpectedState[]): Promise<void> {
  const itemsOf = (users: Users): FlowItem[] => {
    const items = flow.items(users).filter((item) => run !== 'webhooks' || !isSnapshotItem(item));
    if (run !== 'webhooks' && withRecord && flow.record) items.push(snapshot(flow.record.of, flow.record.at, flow.record.customer(users)));
    return items;
  };
  for (const order of orders(itemsOf(newUsers()).length, db.kind)) {
    const users = newUsers();
    const items = itemsOf(users);
    for (const index of order) await deliver(db, items[index]!, users);
    for (const state of expected) {
      // The record is RevenueCat's word as of its time: what the state was before it is not asked.
      if (items.length > flow.items(users).length && state.now < flow.record!.at) continue;
      await expectEntitlementState(db, users, state, `${flow.name.slice(0, 3)} ${run} order ${order.join(',')}, day ${state.now}`);
    }
  }
}

beforeAll(async () => {
  revenuecat = await startFakeRevenueCat();
});
afterAll(async () => {
  await revenuecat.close();
});

/** The flow suites' settings, with REST v2 beside v1 or not. */
const settings = (run: Run) => readerSettings(revenuecat, run === 'v2' ? 'both' : 'v1');

describe.each(DATABASE_KINDS)('billing model: RevenueCat\'s flows in every delivery order, on %s', (kind) => {
  const db = suiteDatabase(kind);
  afterAll(() => revenuecat.setClock(undefined));

  for (const run of ['webhooks', 'v1', 'v2'] as const) {
    describe(run === 'webhooks' ? 'webhooks alone' : `webhooks and syncs (REST ${run === 'v1' ? 'v1' : 'v1 + v2'})`, () => {
      let restoreEnv: () => void;
      beforeAll(() => {
        restoreEnv = setEnv(settings(run));
      });
      afterAll(() => restoreEnv());

      for (const flow of flows) {
        if (run !== 'webhooks' && !flow.record && !flow.items(newUsers()).some(isSnapshotItem)) continue;
        it(flow.name, () => runFlow(db, flow, run, true, flow.expectedIn?.[run] ?? flow.expected), 240_000);
        const without = run === 'webhooks' ? undefined : flow.withoutRecord?.[run];
        if (without) it(`${flow.name} [the flow's own snapshots only]`, () => runFlow(db, flow, run, false, without), 240_000);
      }
    });
  }
});
