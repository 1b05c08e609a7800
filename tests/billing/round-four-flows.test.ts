import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeRevenueCat, v1Entitlement as ent, v1Subscription as sub, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { DATABASE_KINDS, suiteDatabase, type DatabaseKind } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import {
  apple, billingEvent, billingIssue, cancellation, deliveryOrdersOn, DOC, event, isoDay, isSnapshotItem, MONTHLY, play, purchase, READER_NAMES, READERS,
  expiration, readerSettings, refund, renewal, runFlowInOrders, snapshot, transfer, day, YEARLY, type Flow as SuiteFlow,
} from './support.ts';

/**
 * Billing flows about where an event's effect lands: a purchase whose product the dashboard moved
 * to another entitlement; a TRANSFER that names an anonymous id RevenueCat had already merged into
 * a signed-in customer; a temporary grant validated by a purchase that names the same transaction
 * under an original transaction of its own (its refund, cancellation and expiry must reach the row
 * the grant began); and an upgrade during a Mac App Store free trial (the offer's product stays). Each runs through the real route and
 * SQL, on both engines, in every delivery order on Postgres (in order and reversed on PGlite); a flow with syncs (the user's refresh) runs once per
 * record a sync may read (REST v1, v2 alone, v1 + v2), as the model flows do, to the same end state.
 */
type Role = 'alice' | 'bob' | 'anon';
type Users = Record<Role, string>;
type Flow = SuiteFlow<Role>;
const newUsers = (): Users => ({ alice: randomUUID(), bob: randomUUID(), anon: `$RCAnonymousID:${randomBytes(16).toString('hex')}` });
const customer = (original: string, ...aliases: string[]) => ({ original_app_user_id: original, aliases: [original, ...aliases] });

/** A purchase's store, product, transactions and entitlements. */
const bought = (store: string, transaction: string, original: string, product: string, entitlements = ['pro']) =>
  ({ store, product_id: product, transaction_id: transaction, original_transaction_id: original, entitlement_ids: entitlements });
/** Stripe: the transaction is the invoice, the original transaction the subscription. */
const stripe = (invoice: string) => bought('STRIPE', invoice, 'sub_1PRO', 'prod_PRO');
const temporaryGrant = (u: string, store: string, product: string, transaction: string) =>
  billingEvent('temporary-entitlement-grant', u, { at: 0.001, purchased: 0, expires: 1 }, { store, product_id: product, transaction_id: transaction });
const VALIDATED = `TEMPORARY_ENTITLEMENT_GRANT: "a regular INITIAL_PURCHASE event will be sent" once the purchase is validated, and its "transaction_id might be different" (${DOC.types})`;
const BASIC = 'com.example.basic.monthly';
const PROMO = 'rc_promo_pro_monthly';
const promotional = { store: 'PROMOTIONAL', product_id: PROMO, transaction_id: 'promo_1', original_transaction_id: 'promo_1', period_type: 'PROMOTIONAL', entitlement_ids: ['pro'] };
const PROFILE = 'https://www.revenuecat.com/docs/dashboard-and-metrics/customer-profile';
const PLAY_PLAN_CHANGES = 'https://www.revenuecat.com/guides/google-play-billing/subscription-upgrades-downgrades-and-plan-changes';
const PREMIUM = 'com.example.premium.monthly';

const flows: Flow[] = [
  {
    name: 'R4-promotional: a promotional grant, a refresh of RevenueCat\'s record while it runs, then the grant removed early: no access',
    doc: `Removing a granted entitlement early (${PROFILE}); EXPIRATION: access "should be removed" (${DOC.types}); REST v2's product_id "Exists for all store types except for promotional" (https://www.revenuecat.com/docs/api-v2)`,
    items: (u) => [
      event('non-renewing-purchase', u.alice, 1, 1, 60, promotional),
      snapshot('alice', 2, {
        subscriptions: { [PROMO]: sub({ purchased: day(1), expires: day(60), store: 'promotional', transactionId: 'promo_1' }) },
        entitlements: { pro: ent(PROMO, { purchased: day(1), expires: day(60) }) },
      }),
      cancellation(u.alice, 'DEVELOPER_INITIATED', 5, 1, 5, promotional),
      expiration(u.alice, 'DEVELOPER_INITIATED', 5.0001, 1, 5, promotional),
    ],
    expected: [{ now: 6, state: { alice: { pro: { active: false } } } }],
  },
  {
    name: 'R4-promotional: a promotional grant seen first through a refresh (its webhook lost), then removed early: no access',
    doc: `Removing a granted entitlement early (${PROFILE}); EXPIRATION: access "should be removed" (${DOC.types})`,
    items: (u) => [
      snapshot('alice', 2, {
        subscriptions: { [PROMO]: sub({ purchased: day(1), expires: day(60), store: 'promotional', transactionId: 'promo_1' }) },
        entitlements: { pro: ent(PROMO, { purchased: day(1), expires: day(60) }) },
      }),
      cancellation(u.alice, 'DEVELOPER_INITIATED', 5, 1, 5, promotional),
      expiration(u.alice, 'DEVELOPER_INITIATED', 5.0001, 1, 5, promotional),
    ],
    expected: [{ now: 6, state: { alice: { pro: { active: false } } } }],
  },
  {
    name: 'R4-replaced: a Google Play replacement by another offer of the same base plan (the same product id), the new purchase then refunded: no access',
    doc: `Play's replacement modes: "Old subscription is cancelled, and new subscription takes effect immediately" (${DOC.manage}); a plan change gives a new purchase token and "the old purchase token becomes inactive" (${PLAY_PLAN_CHANGES}); a refund removes access (${DOC.refunds})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, play('GPA.5555-5555-5555-55555')),
      event('product-change', u.alice, 10, 0, 30, { ...play('GPA.5555-5555-5555-55555'), new_product_id: undefined }),
      purchase(u.alice, 10.0001, 10, 40, play('GPA.6666-6666-6666-66666')),
      refund(u.alice, 15, 10, 15, play('GPA.6666-6666-6666-66666')),
    ],
    expected: [{ now: 16, state: { alice: { pro: { active: false } } } }],
  },
  {
    name: 'R4-replaced: the same replacement, nothing after it: the new purchase shown, renewing; the replaced one no longer grants',
    doc: `as above (${DOC.manage}, ${PLAY_PLAN_CHANGES})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, play('GPA.5555-5555-5555-55555')),
      event('product-change', u.alice, 10, 0, 30, { ...play('GPA.5555-5555-5555-55555'), new_product_id: undefined }),
      purchase(u.alice, 10.0001, 10, 40, play('GPA.6666-6666-6666-66666')),
    ],
    expected: [{ now: 11, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(40), sources: [
      expect.objectContaining({ active: true, expiresAt: isoDay(40) }), expect.objectContaining({ active: false, status: 'expired', willRenew: false }),
    ] } } } }],
  },
  {
    name: 'R4-replaced: a second Play subscription of the same product bought before the change is not its replacement: the first grants to its end',
    doc: `PRODUCT_CHANGE without new_product_id: Play replaced the subscription at once (${DOC.types}); a purchase begun before the change is another subscription`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, play('GPA.5555-5555-5555-55555')),
      purchase(u.alice, 5, 5, 35, play('GPA.7777-7777-7777-77777')),
      event('product-change', u.alice, 10, 0, 30, { ...play('GPA.5555-5555-5555-55555'), new_product_id: undefined }),
      refund(u.alice, 15, 5, 15, play('GPA.7777-7777-7777-77777')),
    ],
    expected: [{ now: 16, state: { alice: { pro: { active: true, expiresAt: isoDay(30) } } } }],
  },
  {
    name: 'R4-validated: a Stripe purchase validating a temporary grant (the same invoice), refunded and expired: no access',
    doc: `${VALIDATED}; "Granting a refund will immediately expire the subscription and remove any entitlement access." (${DOC.refunds})`,
    items: (u) => [
      temporaryGrant(u.alice, 'STRIPE', 'prod_PRO', 'in_1PRO'),
      purchase(u.alice, 0.5, 0, 30, stripe('in_1PRO')),
      refund(u.alice, 5, 0, 5, stripe('in_1PRO')),
      event('expiration', u.alice, 5.0001, 0, 5, { ...stripe('in_1PRO'), expiration_reason: 'CUSTOMER_SUPPORT' }),
    ],
    expected: [{ now: 6, state: { alice: { pro: { active: false } } } }],
  },
  {
    name: 'R4-validated: the same purchase cancelled: access to the period\'s end, not renewing',
    doc: `${VALIDATED}; CANCELLATION: "A subscription or non-renewing purchase has been cancelled." (${DOC.types})`,
    items: (u) => [
      temporaryGrant(u.alice, 'STRIPE', 'prod_PRO', 'in_1PRO'),
      purchase(u.alice, 0.5, 0, 30, stripe('in_1PRO')),
      cancellation(u.alice, 'UNSUBSCRIBE', 5, 0, 30, stripe('in_1PRO')),
    ],
    expected: [{ now: 6, state: { alice: { pro: { active: true, status: 'cancelled_active', willRenew: false, expiresAt: isoDay(30) } } } }],
  },
  {
    name: 'R4-validated: an App Store resubscription validating a temporary grant as a RENEWAL of an older original transaction, refunded: no access',
    doc: `${VALIDATED}; "Granting a refund will immediately expire the subscription and remove any entitlement access." (${DOC.refunds})`,
    items: (u) => [
      temporaryGrant(u.alice, 'APP_STORE', YEARLY, 'T5'),
      renewal(u.alice, 0.5, 0, 365, bought('APP_STORE', 'T5', 'T0', YEARLY)),
      refund(u.alice, 5, 0, 5, bought('APP_STORE', 'T5', 'T0', YEARLY)),
    ],
    expected: [{ now: 6, state: { alice: { pro: { active: false } } } }],
  },
  {
    name: 'R4-validated: an App Store upgrade validating a temporary grant, refunded: no access',
    doc: `${VALIDATED}; "Granting a refund will immediately expire the subscription and remove any entitlement access." (${DOC.refunds})`,
    items: (u) => [
      purchase(u.alice, -10, -10, 20, bought('APP_STORE', 'T0', 'T0', BASIC)),
      temporaryGrant(u.alice, 'APP_STORE', PREMIUM, 'T7'),
      renewal(u.alice, 0.5, 0, 30, bought('APP_STORE', 'T7', 'T0', PREMIUM)),
      refund(u.alice, 5, 0, 5, bought('APP_STORE', 'T7', 'T0', PREMIUM)),
    ],
    expected: [{ now: 6, state: { alice: { pro: { active: false } } } }],
  },
  {
    name: 'R4-reversed: a refund reversed after the subscription group moved on to another product: that product still grants, renewing',
    doc: `REFUND_REVERSED: "A refund has been reversed." and RENEWAL: "An existing subscription has been renewed or a lapsed user has resubscribed." (${DOC.types}): the reinstated period (its end long past) ends nothing paid for now`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'T0', 'T0', PREMIUM)),
      refund(u.alice, 5, 0, 5, bought('APP_STORE', 'T0', 'T0', PREMIUM)),
      renewal(u.alice, 10, 10, 40, bought('APP_STORE', 'T1', 'T0', BASIC)),
      billingEvent('refund-reversed', u.alice, { at: 35, purchased: 0, expires: 30 }, bought('APP_STORE', 'T0', 'T0', PREMIUM)),
    ],
    expected: [{ now: 36, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(40), productId: BASIC } } } }],
  },
  {
    name: 'R4-reversed: a yearly refund reversed while its year still runs, after the subscription moved on to monthly: the monthly still grants, renewing',
    doc: `REFUND_REVERSED: "A refund has been reversed." (${DOC.types}): the reinstated year began before the product the customer pays for now`,
    items: (u) => [
      purchase(u.alice, 0, 0, 365, bought('APP_STORE', 'T0', 'T0', YEARLY)),
      refund(u.alice, 5, 0, 5, bought('APP_STORE', 'T0', 'T0', YEARLY)),
      renewal(u.alice, 10, 10, 40, bought('APP_STORE', 'T1', 'T0', BASIC)),
      billingEvent('refund-reversed', u.alice, { at: 35, purchased: 0, expires: 365 }, bought('APP_STORE', 'T0', 'T0', YEARLY)),
    ],
    expected: [{ now: 36, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(40), productId: BASIC } } } }],
  },
  {
    name: 'R4-lineage: an upgrade known only by its EXPIRATION still ends the product it replaced',
    doc: `"the one whose current period began later supersedes the older" (docs/billing.md, from ${DOC.manage})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'T0', 'T0', BASIC)),
      event('expiration', u.alice, 40, 10, 40, { ...bought('APP_STORE', 'T1', 'T0', PREMIUM), expiration_reason: 'UNSUBSCRIBE' }),
    ],
    expected: [{ now: 20, state: { alice: { pro: { active: false } } } }],
  },
  {
    name: 'R4-reversed: the same with an entitlement per product: the current product\'s stays, the reinstated one has ended',
    doc: `REFUND_REVERSED: "A refund has been reversed." (${DOC.types})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, bought('APP_STORE', 'T0', 'T0', PREMIUM, ['premium'])),
      refund(u.alice, 5, 0, 5, bought('APP_STORE', 'T0', 'T0', PREMIUM, ['premium'])),
      renewal(u.alice, 10, 10, 40, bought('APP_STORE', 'T1', 'T0', BASIC, ['basic'])),
      billingEvent('refund-reversed', u.alice, { at: 35, purchased: 0, expires: 30 }, bought('APP_STORE', 'T0', 'T0', PREMIUM, ['premium'])),
    ],
    expected: [{ now: 36, state: { alice: { basic: { active: true, willRenew: true, expiresAt: isoDay(40) }, premium: { active: false } } } }],
  },
  {
    name: 'R4-paused: a Play pause in effect, then the charge at its resume fails into a grace period: access in grace',
    doc: `grace_period_expiration_at_ms: "Use this field to determine if the user is currently in a grace period" (${DOC.types}); in a grace period "Users will retain access to their subscriptions" (${DOC.grace})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, play('GPA.4444-4444-4444-44444')),
      event('subscription-paused', u.alice, 10, 0, 30, { ...play('GPA.4444-4444-4444-44444'), auto_resume_at_ms: Date.parse(isoDay(60)) }),
      event('expiration-paused', u.alice, 30, 0, 30, play('GPA.4444-4444-4444-44444')),
      billingIssue(u.alice, 60, 60, 60, 67, play('GPA.4444-4444-4444-44444..0')),
    ],
    expected: [{ now: 62, state: { alice: { pro: { active: true, status: 'grace' } } } }, { now: 68, state: { alice: { pro: { active: false } } } }],
  },
  ...['APP_STORE', 'MAC_APP_STORE'].map((store): Flow => ({
    name: `R4-offer: an upgrade during a free trial on ${store}: the trial's product stays active beside the new one`,
    doc: `Apple "does not cancel the introductory offer but instead keeps the introductory offer active in addition to the upgraded product" (${DOC.manage}); MAC_APP_STORE is one of the event's store values (${DOC.types})`,
    items: (u) => [
      billingEvent('initial-purchase-trial', u.alice, { at: 0, purchased: 0, expires: 7 }, { ...bought(store, 't1', 't1', BASIC, ['basic']), period_type: 'TRIAL' }),
      billingEvent('product-change', u.alice, { at: 2, purchased: 0, expires: 7 }, { ...bought(store, 't1', 't1', BASIC, ['basic']), period_type: 'TRIAL', new_product_id: PREMIUM }),
      renewal(u.alice, 2.0001, 2, 32, { ...bought(store, 't2', 't1', PREMIUM, ['premium']), period_type: 'NORMAL' }),
    ],
    expected: [{ now: 3, state: { alice: { basic: { active: true, expiresAt: isoDay(7) }, premium: { active: true } } } }],
  })),
  {
    name: 'R4-moved: a refund naming the product\'s new entitlement also ends what the purchase granted under the old one',
    doc: `"If you change the products attached to an entitlement, existing purchases are affected" and entitlement_ids: "Entitlement identifiers of the product" at the time of the event (${DOC.types}); "Granting a refund will immediately expire the subscription and remove any entitlement access." (${DOC.refunds})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { entitlement_ids: ['pro'] }),
      refund(u.alice, 10, 0, 10, { entitlement_ids: ['premium'] }),
    ],
    expected: [{ now: 11, state: { alice: { pro: { active: false, status: 'refunded' } } } }],
  },
  {
    name: 'R4-moved: a cancellation naming the new entitlement flags the old one\'s row of the same purchase',
    doc: `CANCELLATION: "A subscription or non-renewing purchase has been cancelled." (${DOC.types}); "When a customer cancels their subscription, a CANCELLATION webhook is sent." (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { entitlement_ids: ['pro'] }),
      cancellation(u.alice, 'UNSUBSCRIBE', 10, 0, 30, { entitlement_ids: ['premium'] }),
    ],
    expected: [{ now: 11, state: { alice: { pro: { active: true, willRenew: false, expiresAt: isoDay(30) } } } }],
  },
  {
    name: 'R4-transfer: a TRANSFER from an anonymous id RevenueCat merged into a signed-in customer moves that customer\'s purchase',
    doc: `"you'll receive a TRANSFER event and the entitlements will be removed from user 1 and added to user 2." (${DOC.flows}); aliases: "All app user ids ever used by the subscriber." (${DOC.types}); transferred_from may name an anonymous id (https://www.revenuecat.com/docs/customers/identifying-customers)`,
    items: (u) => [
      purchase(u.anon, 0, 0, 30, customer(u.anon)),
      renewal(u.alice, 1, 0, 30, { ...apple('1000'), ...customer(u.anon, u.alice) }),
      transfer([u.anon], [u.bob], 5),
    ],
    expected: [{ now: 6, state: { alice: { pro: { active: false } }, bob: { pro: { active: true, expiresAt: isoDay(30) } } } }],
  },
  {
    name: 'R4-transfer: after the syncs the transfer asks for, the source still keeps nothing',
    doc: `"the entitlements will be removed from user 1 and added to user 2" (${DOC.flows}); the v1 record of the source shows no subscription afterwards (${DOC.v1})`,
    items: (u) => [
      purchase(u.anon, 0, 0, 30, customer(u.anon)),
      renewal(u.alice, 1, 0, 30, { ...apple('1000'), ...customer(u.anon, u.alice) }),
      transfer([u.anon], [u.bob], 5),
      snapshot('alice', 6, { subscriptions: {}, entitlements: {} }),
      snapshot('bob', 6, {
        subscriptions: { [MONTHLY]: sub({ purchased: day(0), expires: day(30) }) },
        entitlements: { pro: ent(MONTHLY, { purchased: day(0), expires: day(30) }) },
      }),
    ],
    expected: [{ now: 7, state: { alice: { pro: { active: false } }, bob: { pro: { active: true, expiresAt: isoDay(30) } } } }],
  },
];

/** Every order (or a sample) on Postgres; in order and reversed on PGlite (deliveryOrdersOn). */
const orders = (n: number, kind: DatabaseKind) => deliveryOrdersOn(kind, n, { everyOrderOn: 'postgres', sample: 6, seed: 4004 });


let revenuecat: FakeRevenueCat;
beforeAll(async () => {
  revenuecat = await startFakeRevenueCat();
});
afterAll(async () => {
  await revenuecat.close();
});

describe.each(DATABASE_KINDS)('billing round four: where an effect lands, in every delivery order, on %s', (kind) => {
  const db = suiteDatabase(kind);
  afterAll(() => revenuecat.setClock(undefined));

  for (const reader of READERS) {
    describe(reader === 'v1' ? 'webhooks, and syncs reading REST v1' : `syncs reading ${READER_NAMES[reader]}`, () => {
      let restoreEnv: () => void;
      beforeAll(() => {
        restoreEnv = setEnv(readerSettings(revenuecat, reader));
      });
      afterAll(() => restoreEnv());

      for (const flow of flows) {
        // A flow without a sync reads no record: it runs once.
        const syncs = flow.items(newUsers()).some(isSnapshotItem);
        if (reader !== 'v1' && !syncs) continue;
        it(flow.name, async () => {
          const [v1Before, v2Before] = [revenuecat.requests.length, revenuecat.v2Requests.length];
          await runFlowInOrders(db, flow, newUsers, orders, revenuecat);
          // The syncs read the configured record(s), and only those.
          if (syncs) expect({ v1: revenuecat.requests.length > v1Before, v2: revenuecat.v2Requests.length > v2Before }).toEqual({ v1: reader !== 'v2', v2: reader !== 'v1' });
        }, 240_000);
      }
    });
  }
});
