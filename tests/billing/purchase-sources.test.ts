import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { syncSubscriber } from '../../lib/billing/sync.ts';
import { getConfig } from '../../lib/config.ts';
import { startFakeRevenueCat, v1Entitlement, v1Subscription, type FakeCustomer, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { DATABASE_KINDS, suiteDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import {
  billingEvent, day, deliver, deliverFlowItem, deliveryOrdersOn, entitlementsOf, expectEntitlementState, flowSettings, isoDay, LIFETIME, MONTHLY,
  play, PLAY_MONTHLY, READER_NAMES, READERS, readerSettings, snapshot, type ExpectedState, type FlowItem, type Reader,
} from './support.ts';

/**
 * A source of an entitlement is a purchase, not a product: RevenueCat's own record is per purchase
 * (REST v1 lists each non-subscription purchase with its own `id` and `store_transaction_id`; REST
 * v2 lists subscriptions and purchases as items of their own), so two purchases of one product are
 * two rows, and the refund, cancellation or expiry of one never lands on the other. Each flow is
 * delivered in every order (webhooks through the route, snapshots through the user's refresh), on
 * both engines, and ends in one state.
 */
let revenuecat: FakeRevenueCat;
beforeAll(async () => {
  revenuecat = await startFakeRevenueCat();
});
afterAll(async () => {
  await revenuecat.close();
});

type Role = 'alice';
interface Flow {
  name: string;
  items: (u: Record<Role, string>) => FlowItem[];
  expected: ExpectedState[];
  /** The REST API(s) a sync reads (default: v1 alone). */
  reader?: Reader;
}

// One-time purchases: NON_RENEWING_PURCHASE names the purchase's transaction; its refund (a
// CANCELLATION) names it as the original transaction too.
const oneTime = (u: string, tx: string, at: number) =>
  billingEvent('non-renewing-purchase', u, { at, purchased: at, expires: null }, { product_id: LIFETIME, transaction_id: tx, original_transaction_id: tx });
const oneTimeRefund = (u: string, tx: string, at: number) =>
  billingEvent('cancellation-customer-support', u, { at, purchased: 0, expires: at }, { product_id: LIFETIME, transaction_id: tx, original_transaction_id: tx, price: -79.99 });
// Stripe: each subscription is its own original transaction.
const stripe = (sub: string) => ({ store: 'STRIPE', product_id: MONTHLY, transaction_id: sub, original_transaction_id: sub });
// Google Play: one product bought from two Google accounts (one app user signed in on both) is two
// purchase tokens, two subscriptions; each event names its order id (GPA.…, a renewal's with `..0`,
// `..1` after it) and, as the original transaction, the subscription's first order id (`play`).
const GOOGLE_A = 'GPA.3345-1182-9034-55101';
const GOOGLE_B = 'GPA.3371-4420-2286-73902';
/** The events of one subscription of a store (`of`: its facts from its transaction id; Stripe unless said). */
const subscribe = (u: string, sub: string, at: number, of = stripe) => billingEvent('initial-purchase', u, { at, purchased: at, expires: at + 30 }, of(sub));
const renew = (u: string, sub: string, at: number, of = stripe) => billingEvent('renewal', u, { at, purchased: at, expires: at + 30 }, of(sub));
const subscriptionRefund = (u: string, sub: string, at: number, purchased: number, of = stripe) =>
  billingEvent('cancellation-customer-support', u, { at, purchased, expires: at }, { ...of(sub), price: -9.99 });
const unsubscribe = (u: string, sub: string, at: number, purchased: number, of = stripe) =>
  billingEvent('cancellation-unsubscribe', u, { at, purchased, expires: purchased + 30 }, { ...of(sub), cancel_reason: 'UNSUBSCRIBE' });
/** A Play subscription's source as GET /api/me lists it. */
const playSource = (fields: Record<string, unknown>) => expect.objectContaining({ productId: PLAY_MONTHLY, store: 'PLAY_STORE', environment: 'PRODUCTION', ...fields });

const v1Time = (days: number | null) => (days === null ? null : new Date(day(days)).toISOString().replace(/\.\d{3}Z$/, 'Z'));
const v1Purchase = (id: string, tx: string, purchased: number) => ({ id, is_sandbox: false, purchase_date: v1Time(purchased), store: 'app_store', store_transaction_id: tx });

/** RevenueCat's record after two purchases of the lifetime product and the refund of the first (v1 still lists it; v2 says refunded). */
const twoLifetimes = (refunded: string[]): FakeCustomer => ({
  entitlements: { pro: v1Entitlement(LIFETIME, { purchased: day(1), expires: null }) },
  non_subscriptions: { [LIFETIME]: [v1Purchase('rc_1', 'L-1', 0), v1Purchase('rc_2', 'L-2', 1)] },
  refundedPurchases: refunded,
});
/** ... and after two Stripe subscriptions of one product, the first refunded: v1 keys subscriptions by product, and lists the refunded one. */
const twoSubscriptions = (listedTransaction: string): FakeCustomer => ({
  entitlements: { pro: v1Entitlement(MONTHLY, { purchased: day(1), expires: day(31) }) },
  subscriptions: { [MONTHLY]: v1Subscription({ purchased: day(0), expires: day(30), refunded: day(5), store: 'stripe', transactionId: listedTransaction }) },
});

/**
 * RevenueCat's record of two Google Play subscriptions of one product (two Google accounts), one
 * refunded (its webhook lost). REST v2 lists each as a Subscription of its own, named by its latest
 * order id (`store_subscription_identifier`), `gives_access` false for the refunded one; v1 keys
 * subscriptions by product and shows one of them. (The stand-in derives v2 from v1's keys: the
 * product key and its base-plan form are one product in v2 and one key in what the service reads
 * of v1, the later key; `listed` says which subscription that is, and v2 lists it second.)
 */
const twoPlaySubscriptions = (refunded: 'A' | 'B', listed: 'A' | 'B'): FakeCustomer => {
  const entries = {
    A: v1Subscription({ purchased: day(0), expires: day(30), store: 'play_store', transactionId: GOOGLE_A, refunded: refunded === 'A' ? day(5) : undefined }),
    B: v1Subscription({ purchased: day(1), expires: day(31), store: 'play_store', transactionId: GOOGLE_B, refunded: refunded === 'B' ? day(5) : undefined }),
  };
  const other = listed === 'A' ? 'B' : 'A';
  return {
    entitlements: { pro: v1Entitlement(PLAY_MONTHLY, { purchased: day(refunded === 'A' ? 1 : 0), expires: day(refunded === 'A' ? 31 : 30) }) },
    subscriptions: { 'pro_monthly': { ...entries[other], product_plan_identifier: 'monthly' }, [PLAY_MONTHLY]: entries[listed] },
  };
};

const flows: Flow[] = [
  {
    name: 'a one-time product bought twice: refunding the first leaves the entitlement granted forever',
    items: (u) => [oneTime(u.alice, 'L-1', 0), oneTime(u.alice, 'L-2', 1), oneTimeRefund(u.alice, 'L-1', 2)],
    expected: [{ now: 3, state: { alice: { pro: { active: true, status: 'active', expiresAt: null, productId: LIFETIME } } } }],
  },
  {
    name: 'a one-time product bought twice: refunding the second leaves it granted too',
    items: (u) => [oneTime(u.alice, 'L-1', 0), oneTime(u.alice, 'L-2', 1), oneTimeRefund(u.alice, 'L-2', 2)],
    expected: [{ now: 3, state: { alice: { pro: { active: true, status: 'active', expiresAt: null } } } }],
  },
  {
    name: 'a one-time product bought twice: refunding both ends it',
    items: (u) => [oneTime(u.alice, 'L-1', 0), oneTime(u.alice, 'L-2', 1), oneTimeRefund(u.alice, 'L-1', 2), oneTimeRefund(u.alice, 'L-2', 2.5)],
    expected: [{ now: 3, state: { alice: { pro: { active: false, status: 'refunded' } } } }],
  },
  {
    name: 'two Stripe subscriptions of one product: refunding one leaves the other renewing',
    items: (u) => [subscribe(u.alice, 'sub_A', 0), subscribe(u.alice, 'sub_B', 1), subscriptionRefund(u.alice, 'sub_A', 5, 0)],
    expected: [{ now: 6, state: { alice: { pro: { active: true, status: 'active', willRenew: true, expiresAt: isoDay(31) } } } }],
  },
  {
    name: 'two Stripe subscriptions of one product: the other renews after one was refunded',
    items: (u) => [subscribe(u.alice, 'sub_A', 0), subscribe(u.alice, 'sub_B', 1), subscriptionRefund(u.alice, 'sub_A', 5, 0), renew(u.alice, 'sub_B', 31)],
    expected: [{ now: 40, state: { alice: { pro: { active: true, status: 'active', willRenew: true, expiresAt: isoDay(61) } } } }],
  },
  {
    name: 'two Stripe subscriptions of one product: cancelling one leaves the other renewing',
    items: (u) => [subscribe(u.alice, 'sub_A', 0), subscribe(u.alice, 'sub_B', 1), unsubscribe(u.alice, 'sub_A', 3, 0), renew(u.alice, 'sub_B', 31)],
    expected: [{ now: 40, state: { alice: { pro: { active: true, status: 'active', willRenew: true, expiresAt: isoDay(61) } } } }],
  },
  {
    name: 'two Google Play subscriptions of one product (two Google accounts): refunding one leaves the other renewing',
    items: (u) => [subscribe(u.alice, GOOGLE_A, 0, play), subscribe(u.alice, GOOGLE_B, 1, play), subscriptionRefund(u.alice, GOOGLE_A, 5, 0, play)],
    expected: [{ now: 6, state: { alice: { pro: {
      active: true, status: 'active', willRenew: true, expiresAt: isoDay(31), productId: PLAY_MONTHLY, store: 'PLAY_STORE',
      sources: [playSource({ status: 'active', active: true, willRenew: true, expiresAt: isoDay(31) }), playSource({ status: 'refunded', active: false })],
    } } } }],
  },
  {
    name: 'two Google Play subscriptions of one product: the other renews after one was refunded',
    items: (u) => [
      subscribe(u.alice, GOOGLE_A, 0, play), subscribe(u.alice, GOOGLE_B, 1, play), subscriptionRefund(u.alice, GOOGLE_A, 5, 0, play),
      renew(u.alice, `${GOOGLE_B}..0`, 31, play),
    ],
    expected: [{ now: 40, state: { alice: { pro: {
      active: true, status: 'active', willRenew: true, expiresAt: isoDay(61), store: 'PLAY_STORE',
      sources: [playSource({ status: 'active', active: true, willRenew: true, expiresAt: isoDay(61) }), playSource({ status: 'refunded', active: false })],
    } } } }],
  },
  {
    name: 'two Google Play subscriptions of one product: cancelling one leaves the other renewing, the cancelled one granting to its period\'s end',
    items: (u) => [subscribe(u.alice, GOOGLE_A, 0, play), subscribe(u.alice, GOOGLE_B, 1, play), unsubscribe(u.alice, GOOGLE_A, 3, 0, play)],
    expected: [{ now: 6, state: { alice: { pro: {
      active: true, status: 'active', willRenew: true, expiresAt: isoDay(31), store: 'PLAY_STORE',
      sources: [
        playSource({ status: 'active', active: true, willRenew: true, expiresAt: isoDay(31) }),
        playSource({ status: 'cancelled_active', active: true, willRenew: false, expiresAt: isoDay(30) }),
      ],
    } } } }],
  },
  {
    name: 'two Google Play subscriptions of one product: after one was cancelled, the other renews',
    items: (u) => [
      subscribe(u.alice, GOOGLE_A, 0, play), subscribe(u.alice, GOOGLE_B, 1, play), unsubscribe(u.alice, GOOGLE_A, 3, 0, play),
      renew(u.alice, `${GOOGLE_B}..0`, 31, play),
    ],
    expected: [{ now: 40, state: { alice: { pro: {
      active: true, status: 'active', willRenew: true, expiresAt: isoDay(61), store: 'PLAY_STORE',
      sources: [playSource({ status: 'active', active: true, willRenew: true, expiresAt: isoDay(61) }), playSource({ status: 'expired', active: false, willRenew: false })],
    } } } }],
  },
  {
    name: 'a v1 sync listing the refunded subscription under the product key (its own transaction) keeps what v1 shows active',
    items: (u) => [subscribe(u.alice, 'sub_A', 0), subscribe(u.alice, 'sub_B', 1), snapshot('alice', 6, twoSubscriptions('sub_A'))],
    expected: [{ now: 7, state: { alice: { pro: { active: true, status: 'active', willRenew: true, expiresAt: isoDay(31) } } } }],
  },
  {
    name: 'a v1 sync listing the refunded subscription under a transaction no event named keeps what v1 shows active',
    items: (u) => [subscribe(u.alice, 'sub_A', 0), subscribe(u.alice, 'sub_B', 1), subscriptionRefund(u.alice, 'sub_A', 5, 0), snapshot('alice', 6, twoSubscriptions('in_unknown'))],
    expected: [{ now: 7, state: { alice: { pro: { active: true, status: 'active', willRenew: true, expiresAt: isoDay(31) } } } }],
  },
  {
    name: 'a v1 sync of two one-time purchases, one refunded by webhook, keeps the entitlement v1 shows',
    items: (u) => [oneTime(u.alice, 'L-1', 0), oneTime(u.alice, 'L-2', 1), oneTimeRefund(u.alice, 'L-1', 2), snapshot('alice', 3, twoLifetimes([]))],
    expected: [{ now: 4, state: { alice: { pro: { active: true, status: 'active', expiresAt: null } } } }],
  },
  {
    name: 'a v1 and v2 sync of two one-time purchases, the first refunded: granted by the second',
    reader: 'both',
    items: (u) => [oneTime(u.alice, 'L-1', 0), oneTime(u.alice, 'L-2', 1), snapshot('alice', 3, twoLifetimes(['L-1']))],
    expected: [{ now: 4, state: { alice: { pro: { active: true, status: 'active', expiresAt: null } } } }],
  },
  {
    name: 'a v1 and v2 sync of two one-time purchases, both refunded: ended',
    reader: 'both',
    items: (u) => [oneTime(u.alice, 'L-1', 0), oneTime(u.alice, 'L-2', 1), snapshot('alice', 3, twoLifetimes(['L-1', 'L-2']))],
    expected: [{ now: 4, state: { alice: { pro: { active: false } } } }],
  },
  // Two subscriptions of one product in RevenueCat's record, one refunded: each ends or grants on its own.
  ...(['v2', 'both'] as const).flatMap((reader) => (['A', 'B'] as const).flatMap((listed): Flow[] => [
    {
      name: `a ${READER_NAMES[reader]} sync of two Google Play subscriptions of one product (v1 showing ${listed}), the newer refunded (its webhook lost): it ends, the older grants to its end`,
      reader,
      items: (u) => [subscribe(u.alice, GOOGLE_A, 0, play), subscribe(u.alice, GOOGLE_B, 1, play), snapshot('alice', 6, twoPlaySubscriptions('B', listed))],
      expected: [
        { now: 7, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(30) } } } },
        { now: 30.5, state: { alice: { pro: { active: false } } } },
      ],
    },
    {
      name: `a ${READER_NAMES[reader]} sync of two Google Play subscriptions of one product (v1 showing ${listed}), the older refunded (its webhook lost): refunding the newer then ends access`,
      reader,
      items: (u) => [
        subscribe(u.alice, GOOGLE_A, 0, play), subscribe(u.alice, GOOGLE_B, 1, play), snapshot('alice', 6, twoPlaySubscriptions('A', listed)),
        subscriptionRefund(u.alice, GOOGLE_B, 8, 1, play),
      ],
      expected: [{ now: 9, state: { alice: { pro: { active: false } } } }],
    },
  ])),
];

describe.each(DATABASE_KINDS)('a source is a purchase, on %s', (kind) => {
  const db = suiteDatabase(kind);

  it.each(flows)('$name, in its delivery orders', async (flow) => {
    const restore = setEnv(readerSettings(revenuecat, flow.reader ?? 'v1'));
    try {
      const count = flow.items({ alice: 'x' }).length;
      for (const order of deliveryOrdersOn(kind, count, { everyOrderOn: 'postgres', sample: 5, seed: 5 })) {
        // (A Supabase user: the snapshots are the user's own refresh.)
        const users = { alice: randomUUID() };
        const items = flow.items(users);
        for (const index of order) await deliverFlowItem(items[index]!, users, revenuecat);
        for (const state of flow.expected) await expectEntitlementState(db, users, state, `order ${order.join(',')}, day ${state.now}`);
      }
    } finally {
      revenuecat.setClock(undefined);
      restore();
    }
  });

  it('keeps one row per purchase: two purchases of one product are two sources of the entitlement', async () => {
    const restore = setEnv(flowSettings(revenuecat));
    try {
      const user = `alice-${randomUUID()}`;
      for (const body of [subscribe(user, 'sub_A', 0), subscribe(user, 'sub_B', 1), subscriptionRefund(user, 'sub_A', 5, 0)]) expect((await deliver(body)).status).toBe(200);
      const rows = await db.sql<{ original_transaction_id: string; status: string }>(
        'select original_transaction_id, status from public.entitlements where app_user_id = $1 order by original_transaction_id', [user]);
      expect(rows).toEqual([{ original_transaction_id: 'sub_A', status: 'refunded' }, { original_transaction_id: 'sub_B', status: 'active' }]);
    } finally {
      restore();
    }
  });
});

/**
 * Sandbox beside production: in a deployment (sandbox purchases ignored), v1 keys subscriptions by
 * product, so a sandbox (TestFlight) purchase of the product a production purchase is of may be
 * the one it lists (and v2 lists it as a subscription of the sandbox environment); the snapshot
 * leaves it out, and that never ends the production purchase. The deployment's rule is asked of
 * local mode (BILLING_SANDBOX_GRANTS=false), whose dev-key session tokens the user's refresh route
 * takes, so the refresh goes through POST /api/me/billing/sync as a user's does.
 */
const productionPurchase = (user: string) =>
  billingEvent('initial-purchase', user, { at: 0, purchased: 0, expires: 30 }, { store: 'APP_STORE', product_id: MONTHLY, transaction_id: 'P-1', original_transaction_id: 'P-1' });
/** RevenueCat's record at day 2: under the product, a sandbox purchase of it that ran from day 1 to 1.5. */
const sandboxListed: FakeCustomer = {
  entitlements: { pro: v1Entitlement(MONTHLY, { purchased: day(1), expires: day(1.5) }) },
  subscriptions: { [MONTHLY]: v1Subscription({ purchased: day(1), expires: day(1.5), sandbox: true, transactionId: 'S-1' }) },
};
const productionView = { id: 'pro', active: true, status: 'active', expiresAt: isoDay(30), environment: 'PRODUCTION', store: 'APP_STORE' };

describe.each(DATABASE_KINDS)('a deployment\'s refresh beside a sandbox purchase of the same product, on %s', (kind) => {
  const db = suiteDatabase(kind);

  it('never ends the production purchase, in either order', async () => {
    const restore = setEnv({ ...flowSettings(revenuecat), BILLING_SANDBOX_GRANTS: 'false' });
    try {
      for (const order of [[0, 1], [1, 0]]) {
        const user = `alice-${randomUUID()}`;
        const steps = [
          async () => expect((await deliver(productionPurchase(user))).status).toBe(200),
          async () => {
            revenuecat.setCustomer(user, sandboxListed);
            revenuecat.setClock(day(2));
            expect(await syncSubscriber(user, { reason: 'admin', maxSlotWaitMs: 10_000 })).toMatchObject({ outcome: expect.any(String) });
          },
        ];
        for (const index of order) await steps[index]!();
        const [view] = await entitlementsOf(db, user, new Date(day(3)));
        expect({ order, view }).toMatchObject({ order, view: { id: 'pro', active: true, status: 'active', expiresAt: isoDay(30), environment: 'PRODUCTION' } });
      }
    } finally {
      revenuecat.setClock(undefined);
      restore();
    }
  });

  it.each(READERS.map((reader) => ({ reader, name: READER_NAMES[reader] })))(
    'never ends the production purchase when the user refreshes through the route, reading $name, in either order', async ({ reader }) => {
      const restore = setEnv({ ...readerSettings(revenuecat, reader), BILLING_SANDBOX_GRANTS: 'false' });
      try {
        expect(getConfig().billingIgnoreSandbox).toBe(true);
        for (const order of [[0, 1], [1, 0]]) {
          const users = { alice: randomUUID() };
          const items: FlowItem[] = [productionPurchase(users.alice), snapshot('alice', 2, sandboxListed)];
          const [v1Before, v2Before] = [revenuecat.requests.length, revenuecat.v2Requests.length];
          for (const index of order) await deliverFlowItem(items[index]!, users, revenuecat);
          // The refresh read the configured record(s) and was filed.
          expect({ order, v1: revenuecat.requests.length > v1Before, v2: revenuecat.v2Requests.length > v2Before }).toEqual({ order, v1: reader !== 'v2', v2: reader !== 'v1' });
          expect(await db.sql(`select type from public.billing_events where app_user_id = $1 and type = 'SYNC'`, [users.alice])).toEqual([{ type: 'SYNC' }]);
          expect({ order, views: await entitlementsOf(db, users.alice, new Date(day(3))) }).toMatchObject({ order, views: [productionView] });
          // ... and it stays so to its own period's end.
          expect({ order, views: await entitlementsOf(db, users.alice, new Date(day(29))) }).toMatchObject({ order, views: [productionView] });
        }
      } finally {
        revenuecat.setClock(undefined);
        restore();
      }
    });
});
