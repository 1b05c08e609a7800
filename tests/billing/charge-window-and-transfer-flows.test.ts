import { randomBytes, randomUUID } from 'node:crypto';
import type { DatabaseKind } from '../support/databases.ts';
import {
  apple, cancellation, deliveryOrdersOn, describeFlows, DOC, event, isoDay, purchase, renewal, transfer, type Flow as SuiteFlow,
} from './support.ts';

/**
 * The App Store's charge window (a cancellation less than 24 hours before a period ends holds for
 * the next period, which Apple charges anyway; only that cancellation, only Apple's stores, not a
 * price increase the customer did not accept) and a TRANSFER's other receiving ids (joined to the
 * receiver when they stand alone; one that is another user's alias stays with that user). In every
 * delivery order on Postgres, in order and reversed on PGlite; read after all of a flow's events.
 */
type Role = 'alice' | 'bob' | 'carol' | 'anon';
type Flow = SuiteFlow<Role>;
const newUsers = (): Record<Role, string> => ({ alice: randomUUID(), bob: randomUUID(), carol: randomUUID(), anon: `$RCAnonymousID:${randomBytes(16).toString('hex')}` });
const customer = (original: string, ...aliases: string[]) => ({ original_app_user_id: original, aliases: [original, ...aliases] });
const bought = (store: string, tx: string, otx: string, product: string, entitlements: string[] | null = ['pro'], extra: Record<string, unknown> = {}) =>
  ({ store, product_id: product, transaction_id: tx, original_transaction_id: otx, entitlement_ids: entitlements, ...extra });
const BASIC = 'com.example.basic.monthly';
const PRICE = 'https://www.revenuecat.com/docs/subscription-guidance/price-changes';
const noAccess = { active: false };

const flows: Flow[] = [
  // ---- Apple charge window
  {
    name: 'App Store: cancelled 10 days early, turned back on (UNCANCELLATION lost), RevenueCat extends while Apple is late (SUBSCRIPTION_EXTENDED), then RENEWAL: renewing',
    doc: `a cancelled subscription charged again was turned back on (its UNCANCELLATION lost); SUBSCRIPTION_EXTENDED "followed by either a RENEWAL or BILLING_ISSUE webhook within the next 24 hours" (${DOC.types})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      cancellation(u.alice, 'UNSUBSCRIBE', 20, 0, 30),
      event('subscription-extended', u.alice, 30.01, 0, 31),
      renewal(u.alice, 30.5, 30.5, 60.5),
    ],
    expected: [{ now: 31, state: { alice: { pro: { active: true, expiresAt: isoDay(60.5), willRenew: true } } } }],
  },
  {
    name: 'App Store: cancelled 10 days early, a PRODUCT_CHANGE in the last 24 hours, then RENEWAL of the same product: renewing',
    doc: `a cancelled subscription charged again was turned back on (its UNCANCELLATION lost): the charge window holds only for a cancellation in it (${DOC.manage})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      cancellation(u.alice, 'UNSUBSCRIBE', 20, 0, 30),
      event('product-change', u.alice, 29.5, 0, 30, { new_product_id: 'com.example.pro.yearly' }),
      renewal(u.alice, 30, 30, 60),
    ],
    expected: [{ now: 31, state: { alice: { pro: { active: true, expiresAt: isoDay(60), willRenew: true } } } }],
  },
  {
    name: 'App Store: cancelled exactly 24 hours before the end, then RENEWAL: renewing (cancelled "at least 24 hours before")',
    doc: `"Subscription automatically renews unless it is canceled at least 24 hours before the end of the current period" (the App Store's auto-renewal terms, ${DOC.manage})`,
    items: (u) => [purchase(u.alice, 0, 0, 30), cancellation(u.alice, 'UNSUBSCRIBE', 29, 0, 30), renewal(u.alice, 30, 30, 60)],
    expected: [{ now: 31, state: { alice: { pro: { active: true, expiresAt: isoDay(60), willRenew: true } } } }],
  },
  {
    name: 'App Store: Mac App Store cancelled 12 h before, RENEWAL: not renewing',
    doc: `"The Apple subscription terms require users to cancel subscriptions at least 24 hours before the next renewal" (${DOC.manage}): the Mac App Store's alike`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { store: 'MAC_APP_STORE' }), cancellation(u.alice, 'UNSUBSCRIBE', 29.5, 0, 30, { store: 'MAC_APP_STORE' }),
      renewal(u.alice, 30, 30, 60, { store: 'MAC_APP_STORE' }),
    ],
    expected: [{ now: 31, state: { alice: { pro: { active: true, expiresAt: isoDay(60), willRenew: false } } } }],
  },
  {
    name: 'App Store: cancelled 12 h before, UNCANCELLATION 6 h before, RENEWAL: renewing',
    doc: `UNCANCELLATION: "A non-expired cancelled subscription has been re-enabled." (${DOC.types})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30), cancellation(u.alice, 'UNSUBSCRIBE', 29.5, 0, 30), event('uncancellation', u.alice, 29.75, 0, 30), renewal(u.alice, 30, 30, 60),
    ],
    expected: [{ now: 31, state: { alice: { pro: { active: true, expiresAt: isoDay(60), willRenew: true } } } }],
  },
  {
    name: 'Play: monthly cancelled 12 h before, then RENEWAL: renewing (the App Store\'s charge window is Apple\'s alone)',
    doc: 'RENEWAL: "An existing subscription has been renewed" (${DOC.types}); the 24 hours are the App Store\'s auto-renewal terms',
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { store: 'PLAY_STORE', transaction_id: 'GPA.1', original_transaction_id: 'GPA.1' }),
      cancellation(u.alice, 'UNSUBSCRIBE', 29.5, 0, 30, { store: 'PLAY_STORE', transaction_id: 'GPA.1', original_transaction_id: 'GPA.1' }),
      renewal(u.alice, 30, 30, 60, { store: 'PLAY_STORE', transaction_id: 'GPA.1..0', original_transaction_id: 'GPA.1' }),
    ],
    expected: [{ now: 31, state: { alice: { pro: { active: true, expiresAt: isoDay(60), willRenew: true } } } }],
  },
  // ---- A price increase the customer did not accept is not charged
  {
    name: 'App Store price increase: CANCELLATION PRICE_INCREASE in the last day, then the RENEWAL charged at the new price (its UNCANCELLATION lost): renewing',
    doc: `PRICE_INCREASE: "Subscriber did not agree to a price increase." (${DOC.types}); "If opt-in to the price change is required and they do not agree, their subscription expires at the end of their current billing cycle." (${PRICE}): a charged RENEWAL is the customer's consent`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      event('cancellation-price-increase', u.alice, 29.5, 0, 30, apple('1000')),
      renewal(u.alice, 30, 30, 60, apple('1001')),
    ],
    expected: [{ now: 31, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(60) } } } }],
  },
  {
    name: 'App Store price increase: CANCELLATION PRICE_INCREASE in the last day, the customer agrees (UNCANCELLATION), renewed: renewing',
    doc: `UNCANCELLATION: "A non-expired cancelled subscription has been re-enabled." (${DOC.types}); (${PRICE})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      event('cancellation-price-increase', u.alice, 29.5, 0, 30, apple('1000')),
      event('uncancellation', u.alice, 29.8, 0, 30, apple('1000')),
      renewal(u.alice, 30, 30, 60, apple('1001')),
    ],
    expected: [{ now: 31, state: { alice: { pro: { active: true, willRenew: true, expiresAt: isoDay(60) } } } }],
  },
  // ---- TRANSFER joins
  {
    name: 'TRANSFER: the joined anonymous id\'s subscription renews later (naming the anonymous id): bob has it to the new end',
    doc: `transferred_to: "App User ID(s) that are receiving the transactions and entitlements" (${DOC.types})`,
    items: (u) => [
      purchase(u.anon, 0, 0, 30, { ...bought('APP_STORE', 'N1', 'N1', BASIC, ['basic']), ...customer(u.anon) }),
      purchase(u.alice, 1, 1, 366, { ...bought('APP_STORE', 'Y1', 'Y1', 'com.example.pro.yearly', ['pro']), ...customer(u.alice) }),
      transfer([u.alice], [u.anon, u.bob], 5),
      renewal(u.anon, 30, 30, 60, { ...bought('APP_STORE', 'N2', 'N1', BASIC, ['basic']), ...customer(u.anon) }),
    ],
    expected: [{ now: 31, state: {
      alice: { pro: noAccess },
      bob: { pro: { active: true, expiresAt: isoDay(366) }, basic: { active: true, expiresAt: isoDay(60) } },
    } }],
  },
  {
    name: 'TRANSFER: the joined anonymous id was an alias of carol (another real user, with her own purchase): carol keeps her own, and does not get alice\'s',
    doc: `transferred_to: "App User ID(s) that are receiving the transactions" (${DOC.types}): carol, whose alias it was here, is not named`,
    items: (u) => [
      purchase(u.carol, 0, 0, 30, { ...bought('APP_STORE', 'C1', 'C1', BASIC, ['basic']), ...customer(u.carol, u.anon) }),
      purchase(u.alice, 1, 1, 366, { ...bought('APP_STORE', 'Y1', 'Y1', 'com.example.pro.yearly', ['pro']), ...customer(u.alice) }),
      transfer([u.alice], [u.anon, u.bob], 5),
    ],
    expected: [{ now: 6, state: {
      alice: { pro: noAccess },
      bob: { pro: { active: true, expiresAt: isoDay(366) } },
      carol: { basic: { active: true, expiresAt: isoDay(30) }, pro: null },
    } }],
  },
  {
    name: 'TRANSFER: transfer into [anon, bob], then back from bob to alice: alice has her yearly again, bob not',
    doc: `TRANSFER: "Transfer of transactions and entitlements" (${DOC.types})`,
    items: (u) => [
      purchase(u.anon, 0, 0, 30, { ...bought('APP_STORE', 'N1', 'N1', BASIC, ['basic']), ...customer(u.anon) }),
      purchase(u.alice, 1, 1, 366, { ...bought('APP_STORE', 'Y1', 'Y1', 'com.example.pro.yearly', ['pro']), ...customer(u.alice) }),
      transfer([u.alice], [u.anon, u.bob], 5),
      transfer([u.bob], [u.alice], 10),
    ],
    expected: [{ now: 11, state: { alice: { pro: { active: true, expiresAt: isoDay(366) } }, bob: { pro: noAccess } } }],
  },
];

const orders = (n: number, kind: DatabaseKind) => deliveryOrdersOn(kind, n, { everyOrderOn: 'postgres', sample: 6, seed: 1414 });
describeFlows('the App Store\'s charge window and a TRANSFER\'s receiving ids, in every delivery order', flows, newUsers, orders);
