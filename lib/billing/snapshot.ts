import type { RevenueCatEntitlement, RevenueCatNonSubscription, RevenueCatSubscription, SubscriberResponse } from '../revenuecat/subscriber.ts';
import type { V2Customer, V2Item, V2Record } from '../revenuecat/v2.ts';
import { isAnonymousId, MAX_IDS_PER_EVENT, type BillingEventPlan, type EntitlementStatus } from './event-effects.ts';
import { outranks, v2SubscriptionState } from './snapshot-v2.ts';

/**
 * What a snapshot of RevenueCat's record MEANS (GET /v1/subscribers/{id}), decided without the
 * database, like describeEventEffects: a plan that the fold applies as one more entry of the
 * customer's log, at the snapshot's `request_date_ms`. It is authoritative as of then: each product
 * it shows is written as it says (with the entitlements it maps to it), rows of products it no
 * longer shows stop granting, and so do rows of entitlements it does not list (v1 lists every
 * entitlement of the customer, expired ones included); webhook events after it still apply on top.
 *
 * Per product (a subscription, or a non-subscription purchase), at the snapshot's time:
 *
 * | RevenueCat says                                                  | status            | renews |
 * |------------------------------------------------------------------|-------------------|--------|
 * | refunded_at                                                      | refunded          | as ** |
 * | expires_date passed, grace_period_expires_date not yet           | grace             | no     |
 * | expires_date passed, auto_resume_date ahead                      | paused            | no     |
 * | expires_date passed                                              | expired           | no     |
 * | billing_issues_detected_at (grace ahead: grace)                  | billing_issue     | no     |
 * | unsubscribe_detected_at                                          | cancelled_active  | no     |
 * | otherwise (a non-subscription: lifetime unless its entitlement   | active            | yes    |
 * |   says an expiry; a prepaid plan; a promotional grant)           |                   | (no)   |
 * | a non-subscription no entitlement points to                      | as events said *  |        |
 *
 * (**) A refund leaves auto-renewal as the record says it (not unsubscribed, no billing issue: yes),
 * as the refund's events leave it: refunds "can be given without cancelling a subscription" (event
 * types and fields), so a REFUND_REVERSED after a refresh is renewing again, as after the events alone.
 *
 * (*) v1 shows, per entitlement, only the purchase that lasts longest: a purchase no entitlement
 * points to may grant (a second lifetime beside the one shown), or have been refunded (v1 still
 * lists it), or unlock nothing. Its rows keep what the events said, except where the record proves
 * they cannot grant: the entitlement shows a purchase that ends sooner than the row would.
 *
 * Which entitlements a product grants: v1 says it only for the purchase each entitlement shows;
 * the rows earlier events made say it for the rest (a snapshot writes every row of a product it
 * shows). REST v2, when configured, lists every subscription and purchase with every entitlement it
 * grants (mapping `complete`: its rows of other entitlements stop granting), and a one-time
 * purchase's `owned` / `refunded`. Without v2 a subscription no entitlement points to and no event
 * told of grants nothing here until an entitlement shows it (the next sync after the purchase
 * shown instead ends: a refund marks its customer for one).
 *
 * And per entitlement: a row of one RevenueCat does not list at all (v1 lists expired ones too) is
 * expired, whatever product grants it here (the dashboard mapping changed, or it was revoked).
 */
export interface SnapshotSource {
  /** As webhooks name it: Google Play base plans as `<subscription id>:<base plan id>`. */
  productId: string;
  environment: 'PRODUCTION' | 'SANDBOX';
  store: string | null;
  status: EntitlementStatus;
  willRenew: boolean;
  /** ISO 8601; null = never expires. */
  expiresAt: string | null;
  graceExpiresAt: string | null;
  purchasedAt: string | null;
  transactionId: string | null;
  periodType: string | null;
  autoResumeAt: string | null;
  /** The entitlements RevenueCat shows this product granting (v1: where it is the purchase that lasts longest; v2: all). */
  entitlementIds: string[];
  /** complete: REST v2 listed every entitlement it grants (its rows of any other stop granting); partial: v1's. */
  mapping: 'complete' | 'partial';
  /** Its rows stay as the events left them, unless an entitlement shows a purchase that ends sooner (see the table). */
  asEventsSaid: boolean;
  /**
   * A one-time purchase (REST v1 lists each purchase): it describes that purchase, known by its
   * transaction id, and never another purchase of its product. A subscription (v1 keys them by
   * product, and knows only the latest transaction) that matches no row by transaction id stands
   * for the purchase of its product it renews (its period ends where the shown one begins),
   * else the latest the customer holds.
   */
  purchaseOnly?: boolean;
  /**
   * Another subscription of a product the record lists more than once (REST v2 lists each
   * subscription with its own `store_subscription_identifier`): it writes only the row its
   * transaction id names, and nothing when no row has it (the product's other item, which grants
   * or ends last, is the one that stands for a purchase not known here).
   */
  matchOnly?: boolean;
  /**
   * A subscription that does not grant, while an entitlement v1 shows it for does: another purchase
   * of the product grants it (a second subscription of the product; v1 lists the refunded one
   * under the product key). Where the customer holds several purchases of the product and none has
   * its transaction id, it cannot tell which one it is: it writes none of them.
   */
  grantedElsewhere?: boolean;
  /**
   * The record names no product for it (REST v2's promotional grants: `product_id` "Exists for all
   * store types except for promotional"), so `productId` is a stand-in: the row its transaction
   * id names is its row whatever product that row has (the grant's webhooks name the product).
   */
  productUnnamed?: boolean;
}

export interface SnapshotPlan extends BillingEventPlan {
  snapshot: {
    sources: SnapshotSource[];
    /**
     * Every entitlement id RevenueCat lists for the customer (v1 lists expired ones too, and sandbox
     * ones even when their purchases are left out): a row of an entitlement not among them stops granting.
     * null: the record could not list them all (v2 alone, an item's entitlements paged past what was read).
     */
    entitlementIds: string[] | null;
    /** Per entitlement v1 lists: until when the purchase it shows grants (ISO 8601; null = forever). */
    entitlementExpiries: Record<string, string | null>;
    /**
     * Sources the record showed that were left out (sandbox ones, where sandbox grants nothing):
     * explain names them; and the fold keeps rows of their products as the events left them (v1
     * keys subscriptions by product, so a sandbox purchase may be what hides a production purchase
     * of the same product). Absent: none.
     */
    leftOut?: { productId: string; environment: 'SANDBOX'; entitlementIds: string[] }[];
  };
}

export interface DescribeSnapshotOptions {
  /** The snapshot's own id in the log (`sync:<uuid>`). */
  eventId: string;
  /** Sandbox purchases are left out, as their events would change nothing (config.billingIgnoreSandbox). */
  ignoreSandbox?: boolean;
  /** The customer as REST v2 lists it (null: v2 not configured, or it failed). */
  v2?: V2Customer | null;
}

export function describeSnapshot(response: SubscriberResponse, appUserId: string, options: DescribeSnapshotOptions): SnapshotPlan {
  const at = response.request_date_ms;
  const sources = new Map<string, SnapshotSource>();

  for (const [key, subscription] of Object.entries(response.subscriber.subscriptions)) {
    const source = subscriptionSource(productIdOf(key, subscription.product_plan_identifier), subscription, at);
    sources.set(source.productId, source);
  }
  const oneTime = new Set<string>();
  // v1 lists each purchase of a one-time product: one source each. The one an entitlement shows
  // (the same purchase date; else the latest) stands for the product; the others are purchases no
  // entitlement points to (see the table).
  const otherPurchases: SnapshotSource[] = [];
  const shownDates = new Map<string, Set<number>>();
  for (const entitlement of Object.values(response.subscriber.entitlements)) {
    const date = time(entitlement.purchase_date);
    if (date !== null) shownDates.set(entitlement.product_identifier, (shownDates.get(entitlement.product_identifier) ?? new Set()).add(date));
  }
  for (const [productId, purchases] of Object.entries(response.subscriber.non_subscriptions)) {
    const latest = latestPurchase(purchases);
    if (!latest || sources.has(productId)) continue;
    const shown = purchases.find((purchase) => shownDates.get(productId)?.has(time(purchase.purchase_date) ?? NaN)) ?? latest;
    sources.set(productId, nonSubscriptionSource(productId, shown));
    oneTime.add(productId);
    for (const purchase of purchases) {
      if (purchase !== shown) otherPurchases.push({ ...nonSubscriptionSource(productId, purchase), asEventsSaid: true });
    }
  }
  for (const [entitlementId, entitlement] of Object.entries(response.subscriber.entitlements)) {
    const productId = productIdOf(entitlement.product_identifier, entitlement.product_plan_identifier);
    // A grant RevenueCat made itself (a promotional entitlement) may name no purchase.
    const source = sources.get(productId) ?? sources.get(entitlement.product_identifier) ?? entitlementOnlySource(productId, entitlement, at);
    sources.set(source.productId, source);
    // A one-time purchase that grants for a while: its entitlement says until when.
    const until = time(entitlement.expires_date);
    if (oneTime.has(source.productId) && until !== null) {
      source.expiresAt = iso(entitlement.expires_date);
      if (until <= at) source.status = 'expired';
    }
    if (!source.entitlementIds.includes(entitlementId)) source.entitlementIds.push(entitlementId);
  }
  // A one-time purchase no entitlement points to: v1 cannot say whether it grants (see the table).
  for (const productId of oneTime) {
    const source = sources.get(productId)!;
    if (source.entitlementIds.length === 0) source.asEventsSaid = true;
  }
  const entitlementExpiries = Object.fromEntries(Object.entries(response.subscriber.entitlements).map(([id, entitlement]) => {
    const ends = [time(entitlement.expires_date), time(entitlement.grace_period_expires_date)];
    return [id, ends[0] === null ? null : new Date(Math.max(ends[0], ends[1] ?? ends[0])).toISOString()];
  }));
  // A subscription that no longer grants while an entitlement v1 shows it for still does (see grantedElsewhere).
  for (const source of sources.values()) {
    if (oneTime.has(source.productId) || GRANTING.includes(source.status)) continue;
    if (source.entitlementIds.some((id) => entitlementExpiries[id] === null || Date.parse(entitlementExpiries[id] ?? '') > at)) source.grantedElsewhere = true;
  }
  if (options.v2) completeFromV2(sources, otherPurchases, options.v2, at);

  return snapshotPlan(appUserId, at, response.subscriber.original_app_user_id ?? null, options, {
    sources: [...sources.values(), ...otherPurchases],
    entitlementIds: Object.keys(response.subscriber.entitlements),
    entitlementExpiries,
  });
}

/**
 * The plan of a snapshot of the customer at `at` (epoch ms), whichever reader made it: named under
 * the synced id and the customer's first id (v1's original_app_user_id, v2's earliest alias).
 */
export function snapshotPlan(appUserId: string, at: number, original: string | null, options: { eventId: string; ignoreSandbox?: boolean }, snapshot: SnapshotPlan['snapshot']): SnapshotPlan {
  const named = [...new Set([appUserId, ...(original ? [original] : [])])].slice(0, MAX_IDS_PER_EVENT);
  const real = named.filter((id) => !isAnonymousId(id));
  const leftOut = (source: SnapshotSource) => options.ignoreSandbox === true && source.environment === 'SANDBOX';
  return {
    eventId: options.eventId,
    type: 'SYNC',
    appUserId,
    eventAt: new Date(at).toISOString(),
    // After every event of its instant: it already says what they did.
    rank: 3,
    environment: null,
    subjectId: appUserId,
    linkedIds: named,
    ownerCandidates: real.length > 0 ? real : [appUserId],
    movedIds: named.length > 1 ? named : [],
    move: named.length > 1 ? 'merge' : null,
    period: { productId: null, purchasedAt: null, expiresAt: null, transactionId: null, originalTransactionId: null, store: null, periodType: null },
    effects: [],
    ignoredReason: null,
    syncReason: null,
    snapshot: {
      ...snapshot,
      sources: snapshot.sources.filter((source) => !leftOut(source)),
      ...(snapshot.sources.some(leftOut)
        ? { leftOut: snapshot.sources.filter(leftOut).map((source) => ({ productId: source.productId, environment: 'SANDBOX' as const, entitlementIds: source.entitlementIds })) }
        : {}),
    },
  };
}

/**
 * The snapshot as stored beside the events: customer attributes (personal, and unbounded) left out;
 * what REST v2 said (trimmed) under `v2`, so a rebuild computes the same plan.
 */
export function trimSnapshot(response: SubscriberResponse, appUserId: string, v2: V2Customer | null = null): Record<string, unknown> {
  const subscriber: Record<string, unknown> = { ...response.subscriber };
  delete subscriber.subscriber_attributes;
  return { app_user_id: appUserId, request_date: response.request_date ?? null, request_date_ms: response.request_date_ms, subscriber, ...(v2 ? { v2 } : {}) };
}

/** A snapshot v2 alone read, as stored: RevenueCat's record under `v2` (no `subscriber`: v1 was not asked), so a rebuild computes the same plan. */
export function trimV2Snapshot(record: V2Record, appUserId: string): Record<string, unknown> {
  return { app_user_id: appUserId, request_date: new Date(record.requestDateMs).toISOString(), request_date_ms: record.requestDateMs, v2: record };
}

/**
 * What REST v2 adds: each product's every entitlement (v1 shows a product only where it is the
 * purchase an entitlement shows), and whether a one-time purchase is still owned or was refunded.
 * And where the two records differ on a subscription both show, v2's per-item record wins: they
 * differ when one says it grants at the snapshot's time and the other not, or, both granting, on
 * when its period ends (to the second) or whether it renews. Then its status, end and renewal are
 * v2's (v2SubscriptionState); where they agree v1's finer words stay (grace date, billing issue,
 * pause, period type), and what neither grants keeps v1's (a refund's time).
 */
function completeFromV2(sources: Map<string, SnapshotSource>, otherPurchases: SnapshotSource[], v2: V2Customer, at: number): void {
  const sameSubscription = subscriptionsV1Shows(sources, v2.subscriptions, at);
  for (const item of v2.subscriptions) {
    if (item.productId === null) continue;
    const source = findSource(sources, item);
    if (!sameSubscription.has(item)) {
      // Another subscription of the product (v1 keys subscriptions by product and shows one): what
      // v2 says of it is written to the row of its own transaction, if the service has one.
      otherPurchases.push({ ...v2SubscriptionSource(item.productId, item, at), matchOnly: true });
      continue;
    }
    if (source) {
      grantsFromV2(source, item.entitlementIds, item.entitlementsComplete);
      // (An item that says nothing of access, gives_access absent, differs in nothing.)
      const said = v2SubscriptionState(item, at, undefined);
      if (item.givesAccess !== null && differ(source, said, at)) {
        Object.assign(source, said, {
          // v2 gives no grace date: v1's stands while v2 too says the item is in its grace period.
          graceExpiresAt: said.status === 'grace' ? said.graceExpiresAt ?? source.graceExpiresAt : null,
          autoResumeAt: said.status === 'paused' ? source.autoResumeAt : null,
        });
      }
      continue;
    }
    // Only v2 shows it (v1 keyed it otherwise): what v2 says of access.
    sources.set(item.productId, v2SubscriptionSource(item.productId, item, at));
  }
  // One-time purchases: each as its own purchase where v1 lists it with the same store identifier
  // (REST v2's `store_purchase_identifier`, v1's `store_transaction_id`): owned, or refunded.
  const oneTimeSources = [...sources.values(), ...otherPurchases].filter((source) => source.purchaseOnly);
  const unmatched: V2Item[] = [];
  for (const item of v2.purchases) {
    const source = item.productId === null || item.storeIdentifier === null ? undefined : oneTimeSources.find((candidate) =>
      candidate.transactionId === item.storeIdentifier && candidate.environment === item.environment && candidate.productId === item.productId);
    if (!source) {
      unmatched.push(item);
    } else if (item.status !== 'refunded') {
      grantsFromV2(source, item.entitlementIds, item.entitlementsComplete);
      source.asEventsSaid = false;
    } else {
      Object.assign(source, { status: 'refunded', willRenew: false, expiresAt: new Date(at).toISOString(), graceExpiresAt: null, asEventsSaid: false });
    }
  }
  // The others, per product: owned while any purchase of it is.
  const purchases = new Map<string, V2Item[]>();
  for (const item of unmatched) {
    if (item.productId !== null) purchases.set(`${item.environment}\n${item.productId}`, [...(purchases.get(`${item.environment}\n${item.productId}`) ?? []), item]);
  }
  for (const items of purchases.values()) {
    const source = findSource(sources, items[0]!);
    if (!source) continue;
    const owned = items.filter((item) => item.status !== 'refunded');
    if (owned.length > 0) {
      grantsFromV2(source, [...new Set(owned.flatMap((item) => item.entitlementIds))], owned.every((item) => item.entitlementsComplete));
    } else {
      Object.assign(source, { status: 'refunded', willRenew: false, expiresAt: new Date(at).toISOString(), graceExpiresAt: null, asEventsSaid: false });
    }
  }
}

/** A v2 subscription item as a source of its own: what v2 says of access. */
function v2SubscriptionSource(productId: string, item: V2Item, at: number): SnapshotSource {
  return {
    ...blankSource(productId, item),
    ...v2SubscriptionState(item, at, undefined),
    purchasedAt: item.startsAt === null ? null : new Date(item.startsAt).toISOString(),
    entitlementIds: [...item.entitlementIds],
    mapping: item.entitlementsComplete ? 'complete' : 'partial',
  };
}

/**
 * The v2 subscription items that stand for their product: the only item of the product, or, where
 * v2 lists several (two Google accounts or Apple IDs), the one whose latest transaction is v1's
 * (`store_subscription_identifier`, v1's `store_transaction_id`), else the one that grants, then
 * ends last (what v1's record of the product shows). Items of a product v1 does not show are
 * grouped by product the same way.
 */
function subscriptionsV1Shows(sources: Map<string, SnapshotSource>, items: V2Item[], at: number): Set<V2Item> {
  const bySource = new Map<SnapshotSource | string, V2Item[]>();
  for (const item of items) {
    if (item.productId === null) continue;
    const key = findSource(sources, item) ?? item.productId;
    bySource.set(key, [...(bySource.get(key) ?? []), item]);
  }
  const shown = new Set<V2Item>();
  for (const [source, candidates] of bySource) {
    const sameTransaction = typeof source === 'string' ? undefined
      : candidates.find((item) => item.storeIdentifier !== null && item.storeIdentifier === source.transactionId);
    shown.add(sameTransaction ?? candidates.reduce((best, item) =>
      (outranks(v2SubscriptionSource(item.productId!, item, at), v2SubscriptionSource(best.productId!, best, at)) ? item : best)));
  }
  return shown;
}

/** The v1 source of the product v2 names: the same store identifier (or Play subscription id), store and environment. */
function findSource(sources: Map<string, SnapshotSource>, item: V2Item): SnapshotSource | undefined {
  const fits = (source: SnapshotSource) => source.environment === item.environment && (source.store === null || source.store === item.store);
  const exact = sources.get(item.productId!);
  if (exact && fits(exact)) return exact;
  // Google Play: v1 keys a base plan `<subscription id>:<base plan id>`; v2 may name either.
  const subscriptionId = item.productId!.split(':')[0];
  const candidates = [...sources.values()].filter((source) => fits(source) && source.productId.split(':')[0] === subscriptionId);
  return candidates.length === 1 ? candidates[0] : undefined;
}

const GRANTING: EntitlementStatus[] = ['active', 'cancelled_active', 'temporary', 'billing_issue', 'grace'];

/** Whether v1's source and v2's item, at the snapshot's time, differ (see completeFromV2). */
function differ(v1: SnapshotSource, v2: Pick<SnapshotSource, 'status' | 'willRenew' | 'expiresAt' | 'graceExpiresAt'>, at: number): boolean {
  const until = (state: Pick<SnapshotSource, 'expiresAt' | 'graceExpiresAt'>) => Math.max(time(state.expiresAt) ?? Infinity, time(state.graceExpiresAt) ?? -Infinity);
  const grants = (state: Pick<SnapshotSource, 'status' | 'expiresAt' | 'graceExpiresAt'>) => GRANTING.includes(state.status) && until(state) > at;
  if (grants(v1) !== grants(v2)) return true;
  if (!grants(v1)) return false;
  const seconds = (value: string | null) => (value === null ? null : Math.floor(Date.parse(value) / 1000));
  return seconds(v1.expiresAt) !== seconds(v2.expiresAt) || v1.willRenew !== v2.willRenew;
}

function grantsFromV2(source: SnapshotSource, entitlementIds: string[], complete: boolean): void {
  source.entitlementIds = [...new Set([...source.entitlementIds, ...entitlementIds])];
  source.mapping = complete ? 'complete' : 'partial';
}

function blankSource(productId: string, item: V2Item): SnapshotSource {
  return {
    productId, environment: item.environment, store: item.store, status: 'expired', willRenew: false, expiresAt: null, graceExpiresAt: null,
    purchasedAt: null, transactionId: item.storeIdentifier, periodType: null, autoResumeAt: null, entitlementIds: [], mapping: 'partial', asEventsSaid: false,
  };
}

function subscriptionSource(productId: string, subscription: RevenueCatSubscription, at: number): SnapshotSource {
  const expires = time(subscription.expires_date);
  const grace = time(subscription.grace_period_expires_date);
  const autoResume = time(subscription.auto_resume_date);
  const refunded = time(subscription.refunded_at);
  const inGrace = grace !== null && grace > at;
  const lapsed = expires !== null && expires <= at;
  const status: EntitlementStatus = refunded !== null
    ? 'refunded'
    : lapsed
      ? inGrace ? 'grace' : autoResume !== null && autoResume > at ? 'paused' : 'expired'
      : subscription.billing_issues_detected_at
        ? inGrace ? 'grace' : 'billing_issue'
        : subscription.unsubscribe_detected_at ? 'cancelled_active' : 'active';
  return {
    productId,
    environment: subscription.is_sandbox ? 'SANDBOX' : 'PRODUCTION',
    store: upper(subscription.store),
    status,
    // Prepaid plans are topped up, never renewed; a promotional grant never converts to a paid one.
    // A refund leaves renewal as RevenueCat's record has it (**).
    willRenew: (status === 'active' || (status === 'refunded' && !subscription.unsubscribe_detected_at && !subscription.billing_issues_detected_at))
      && subscription.period_type?.toLowerCase() !== 'prepaid' && subscription.store?.toLowerCase() !== 'promotional',
    // A refund ends access when it happened.
    expiresAt: refunded !== null ? new Date(Math.min(refunded, expires ?? refunded)).toISOString() : iso(subscription.expires_date),
    graceExpiresAt: status === 'grace' ? iso(subscription.grace_period_expires_date) : null,
    purchasedAt: iso(subscription.purchase_date),
    transactionId: subscription.store_transaction_id ?? null,
    periodType: upper(subscription.period_type),
    autoResumeAt: iso(subscription.auto_resume_date),
    entitlementIds: [],
    mapping: 'partial',
    asEventsSaid: false,
  };
}

function nonSubscriptionSource(productId: string, purchase: RevenueCatNonSubscription): SnapshotSource {
  return {
    productId,
    environment: purchase.is_sandbox ? 'SANDBOX' : 'PRODUCTION',
    store: upper(purchase.store),
    status: 'active',
    willRenew: false,
    expiresAt: null,
    graceExpiresAt: null,
    purchasedAt: iso(purchase.purchase_date),
    transactionId: purchase.store_transaction_id ?? purchase.id ?? null,
    periodType: 'NORMAL',
    autoResumeAt: null,
    entitlementIds: [],
    mapping: 'partial',
    asEventsSaid: false,
    purchaseOnly: true,
  };
}

function entitlementOnlySource(productId: string, entitlement: RevenueCatEntitlement, at: number): SnapshotSource {
  const expires = time(entitlement.expires_date);
  const grace = time(entitlement.grace_period_expires_date);
  const grants = expires === null || expires > at || (grace !== null && grace > at);
  return {
    productId,
    environment: 'PRODUCTION',
    store: null,
    status: grants ? (expires !== null && expires <= at ? 'grace' : 'active') : 'expired',
    willRenew: false,
    expiresAt: iso(entitlement.expires_date),
    graceExpiresAt: grace !== null && grace > at ? iso(entitlement.grace_period_expires_date) : null,
    purchasedAt: iso(entitlement.purchase_date),
    transactionId: null,
    periodType: null,
    autoResumeAt: null,
    entitlementIds: [],
    mapping: 'partial',
    asEventsSaid: false,
  };
}

function latestPurchase(purchases: RevenueCatNonSubscription[]): RevenueCatNonSubscription | undefined {
  return [...purchases].sort((a, b) => (time(b.purchase_date) ?? 0) - (time(a.purchase_date) ?? 0))[0];
}

/** v1 keys a Google Play base plan by subscription id with the plan beside it; webhooks join them. */
function productIdOf(productIdentifier: string, planIdentifier: string | null | undefined): string {
  return planIdentifier && !productIdentifier.includes(':') ? `${productIdentifier}:${planIdentifier}` : productIdentifier;
}

const time = (value: string | null | undefined): number | null => (value ? Date.parse(value) : null);
const iso = (value: string | null | undefined): string | null => (value ? new Date(value).toISOString() : null);
const upper = (value: string | null | undefined): string | null => (value ? value.toUpperCase() : null);
