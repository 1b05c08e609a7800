import type { V2Item, V2Record } from '../revenuecat/v2.ts';
import type { EntitlementStatus } from './event-effects.ts';
import { snapshotPlan, type SnapshotPlan, type SnapshotSource } from './snapshot.ts';

/**
 * What REST v2's record MEANS when v2 alone reads it (no v1 key; lib/revenuecat/v2.ts
 * fetchV2Record): the same kind of plan describeSnapshot makes from v1's record, so the fold, the
 * rebuild and explain treat both alike. docs/sync.md ("Which record a sync reads") has the table.
 *
 * Per subscription item (v2 lists each, expired ones too):
 *
 * | v2 says                                                    | status            | renews |
 * |------------------------------------------------------------|-------------------|--------|
 * | gives_access, ends_at ahead                                | active            | yes *  |
 * |   ... auto_renewal_status will_not_renew / price consent   | cancelled_active  | no     |
 * | gives_access, ends_at passed (in_grace_period, unknown)    | grace, until the  | no     |
 * |                                                            | entitlement's end |        |
 * | no access, status paused                                   | paused            | no     |
 * | no access otherwise (expired, in_billing_retry, ...)       | expired           | no     |
 *
 * Per one-time purchase (per product, owned while any purchase of it is): `refunded` -> refunded;
 * `owned` -> active with no end, unless its entitlements are active only until a time (a pass that
 * grants for a while: until then) or not active at all (that time has passed: expired).
 *
 * Which entitlements an item grants is v2's own list (mapping `complete`). The customer's
 * entitlements (a row of one not among them stops granting) are every one an item names and every
 * active one; when an item's list was paged past what was read, none is claimed (the rule is off).
 * The customer's first id is its earliest alias (v1's original_app_user_id). The snapshot's time is
 * get-customer's Date header (RevenueCat's clock, as v1's request_date_ms).
 *
 * Products stay keyed as webhooks name them (the item's product `store_identifier`); a subscription
 * v2 names no product for (a promotional grant) is the row its store_subscription_identifier names
 * as a transaction, whatever that row's product (productUnnamed), else keyed by that identifier.
 */
export function describeV2Snapshot(record: V2Record, appUserId: string, options: { eventId: string; ignoreSandbox?: boolean }): SnapshotPlan {
  const at = record.requestDateMs;
  const activeUntil = new Map(record.activeEntitlements.map((entitlement) => [entitlement.lookupKey, entitlement.expiresAt]));
  const sources = new Map<string, SnapshotSource>();
  const otherSubscriptions: SnapshotSource[] = [];

  for (const item of record.subscriptions) {
    const productId = item.productId ?? item.storeIdentifier ?? `promotional:${item.itemId ?? 'unnamed'}`;
    const state = v2SubscriptionState(item, at, latestActive(item.entitlementIds, activeUntil));
    const source: SnapshotSource = {
      productId,
      environment: item.environment,
      store: item.store,
      ...state,
      purchasedAt: item.startsAt === null ? null : new Date(item.startsAt).toISOString(),
      transactionId: item.storeIdentifier,
      periodType: item.status === 'trialing' ? 'TRIAL' : null,
      autoResumeAt: null,
      entitlementIds: [...item.entitlementIds],
      mapping: item.entitlementsComplete ? 'complete' : 'partial',
      asEventsSaid: false,
      ...(item.productId === null ? { productUnnamed: true } : {}),
    };
    // One item a product stands for a subscription of it not known here by its transaction (a
    // renewal whose webhook has not come): the item that grants, then the one ending last. Every
    // other item of the product is written to the row its own transaction id names, if any (a
    // second subscription of the product that v2 says no longer gives access ends there).
    const kept = sources.get(productId);
    if (!kept || outranks(source, kept)) {
      if (kept) otherSubscriptions.push({ ...kept, matchOnly: true });
      sources.set(productId, source);
    } else {
      otherSubscriptions.push({ ...source, matchOnly: true });
    }
  }

  // One-time purchases, each its own source (an entitlement's source is a purchase: v2 lists each
  // with its own store_purchase_identifier, owned or refunded), so refunding one of two purchases
  // of a product leaves the other granting. A product v2 also lists as a subscription stays that.
  const oneTime: SnapshotSource[] = [];
  for (const item of record.purchases) {
    if (item.productId === null || sources.has(item.productId)) continue;
    const owned = item.status !== 'refunded';
    const until = owned ? purchaseEnd(item.entitlementIds, activeUntil, at) : at;
    const status: EntitlementStatus = !owned ? 'refunded' : until !== null && until <= at ? 'expired' : 'active';
    oneTime.push({
      productId: item.productId,
      environment: item.environment,
      store: item.store,
      status,
      willRenew: false,
      expiresAt: until === null ? null : new Date(until).toISOString(),
      graceExpiresAt: null,
      purchasedAt: item.startsAt === null ? null : new Date(item.startsAt).toISOString(),
      transactionId: item.storeIdentifier,
      periodType: 'NORMAL',
      autoResumeAt: null,
      entitlementIds: [...item.entitlementIds],
      mapping: item.entitlementsComplete ? 'complete' : 'partial',
      asEventsSaid: false,
      purchaseOnly: true,
    });
  }

  const items = [...record.subscriptions, ...record.purchases];
  const complete = items.every((item) => item.entitlementsComplete);
  const listed = [...new Set([...items.flatMap((item) => item.entitlementIds), ...activeUntil.keys()])].sort();
  const entitlementExpiries = Object.fromEntries(listed.map((id) => {
    const until = activeUntil.has(id) ? activeUntil.get(id)! : at;
    return [id, until === null ? null : new Date(until).toISOString()];
  }));
  return snapshotPlan(appUserId, at, record.originalCustomerId, options, {
    sources: [...sources.values(), ...otherSubscriptions, ...oneTime],
    entitlementIds: complete ? listed : null,
    entitlementExpiries,
  });
}

/** What v2 says of a subscription item at `at`: whether and until when it grants, and whether it renews. */
export function v2SubscriptionState(item: V2Item, at: number, entitlementsUntil: number | null | undefined): Pick<SnapshotSource, 'status' | 'willRenew' | 'expiresAt' | 'graceExpiresAt'> {
  const renews = item.autoRenewalStatus !== 'will_not_renew' && item.autoRenewalStatus !== 'requires_price_increase_consent';
  const ended = item.endsAt !== null && item.endsAt <= at;
  const iso = (ms: number) => new Date(ms).toISOString();
  if (item.givesAccess === true && !ended) {
    return { status: renews ? 'active' : 'cancelled_active', willRenew: renews, expiresAt: item.endsAt === null ? null : iso(item.endsAt), graceExpiresAt: null };
  }
  if (item.givesAccess === true) {
    // Past its period and still granting: a grace period, until its entitlements' end (v2 gives no grace date of its own).
    return { status: 'grace', willRenew: false, expiresAt: iso(item.endsAt!), graceExpiresAt: entitlementsUntil !== undefined && entitlementsUntil !== null && entitlementsUntil > at ? iso(entitlementsUntil) : null };
  }
  return {
    status: item.status === 'paused' ? 'paused' : 'expired',
    willRenew: false,
    expiresAt: iso(item.endsAt === null ? at : Math.min(item.endsAt, at)),
    graceExpiresAt: null,
  };
}

/** Until when the active entitlements among `ids` grant, at the latest (null: one has no end; undefined: none is active). */
function latestActive(ids: string[], activeUntil: Map<string, number | null>): number | null | undefined {
  const ends = ids.filter((id) => activeUntil.has(id)).map((id) => activeUntil.get(id)!);
  if (ends.length === 0) return undefined;
  return ends.some((end) => end === null) ? null : Math.max(...(ends as number[]));
}

/** An owned one-time purchase: no end, or until its entitlements' end (a pass), or over (none of them is active). */
function purchaseEnd(ids: string[], activeUntil: Map<string, number | null>, at: number): number | null {
  if (ids.length === 0) return null;
  const until = latestActive(ids, activeUntil);
  return until === undefined ? at : until;
}

/** Whether `a` says more of the product than `b`: it grants and `b` does not, or it ends later. */
export function outranks(a: SnapshotSource, b: SnapshotSource): boolean {
  const grants = (source: SnapshotSource) => ['active', 'cancelled_active', 'grace'].includes(source.status);
  const ends = (source: SnapshotSource) => (source.expiresAt === null ? Infinity : Date.parse(source.graceExpiresAt ?? source.expiresAt));
  return grants(a) !== grants(b) ? grants(a) : ends(a) > ends(b);
}
