import type { RevenueCatEntitlement, RevenueCatNonSubscription, RevenueCatSubscription, SubscriberResponse } from '../revenuecat/subscriber.ts';
import { isAnonymousId, MAX_IDS_PER_EVENT, type BillingEventPlan, type EntitlementStatus } from './event-effects.ts';

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
 * | refunded_at                                                      | refunded          | no     |
 * | expires_date passed, grace_period_expires_date not yet           | grace             | no     |
 * | expires_date passed, auto_resume_date ahead                      | paused            | no     |
 * | expires_date passed                                              | expired           | no     |
 * | billing_issues_detected_at (grace ahead: grace)                  | billing_issue     | no     |
 * | unsubscribe_detected_at                                          | cancelled_active  | no     |
 * | otherwise (a non-subscription: lifetime unless its entitlement   | active            | yes    |
 * |   says an expiry; a prepaid plan; a promotional grant)           |                   | (no)   |
 * | a non-subscription no entitlement points to (refunded, unmapped) | expired           | no     |
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
  /** The entitlements RevenueCat shows this product granting (the one that expires furthest per entitlement). */
  entitlementIds: string[];
}

export interface SnapshotPlan extends BillingEventPlan {
  snapshot: {
    sources: SnapshotSource[];
    /**
     * Every entitlement id RevenueCat lists for the customer (v1 lists expired ones too, and sandbox
     * ones even when their purchases are left out): a row of an entitlement not among them stops granting.
     */
    entitlementIds: string[];
  };
}

export interface DescribeSnapshotOptions {
  /** The snapshot's own id in the log (`sync:<uuid>`). */
  eventId: string;
  /** Sandbox purchases are left out, as their events would change nothing (config.billingIgnoreSandbox). */
  ignoreSandbox?: boolean;
}

export function describeSnapshot(response: SubscriberResponse, appUserId: string, options: DescribeSnapshotOptions): SnapshotPlan {
  const at = response.request_date_ms;
  const sources = new Map<string, SnapshotSource>();

  for (const [key, subscription] of Object.entries(response.subscriber.subscriptions)) {
    const source = subscriptionSource(productIdOf(key, subscription.product_plan_identifier), subscription, at);
    sources.set(source.productId, source);
  }
  const oneTime = new Set<string>();
  for (const [productId, purchases] of Object.entries(response.subscriber.non_subscriptions)) {
    const latest = latestPurchase(purchases);
    if (!latest || sources.has(productId)) continue;
    sources.set(productId, nonSubscriptionSource(productId, latest));
    oneTime.add(productId);
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
  // A one-time purchase no entitlement points to grants nothing: v1 shows, per entitlement, the
  // purchase that lasts longest, and a lifetime one always would. It was refunded, or its product
  // no longer unlocks anything (the dashboard mapping changed).
  for (const productId of oneTime) {
    const source = sources.get(productId)!;
    if (source.entitlementIds.length === 0) Object.assign(source, { status: 'expired', expiresAt: new Date(at).toISOString() });
  }

  const original = response.subscriber.original_app_user_id ?? null;
  const named = [...new Set([appUserId, ...(original ? [original] : [])])].slice(0, MAX_IDS_PER_EVENT);
  const real = named.filter((id) => !isAnonymousId(id));
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
      sources: [...sources.values()].filter((source) => !(options.ignoreSandbox && source.environment === 'SANDBOX')),
      entitlementIds: Object.keys(response.subscriber.entitlements),
    },
  };
}

/** The snapshot as stored beside the events: customer attributes (personal, and unbounded) left out. */
export function trimSnapshot(response: SubscriberResponse, appUserId: string): Record<string, unknown> {
  const subscriber: Record<string, unknown> = { ...response.subscriber };
  delete subscriber.subscriber_attributes;
  return { app_user_id: appUserId, request_date: response.request_date ?? null, request_date_ms: response.request_date_ms, subscriber };
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
    willRenew: status === 'active' && subscription.period_type?.toLowerCase() !== 'prepaid' && subscription.store?.toLowerCase() !== 'promotional',
    // A refund ends access when it happened.
    expiresAt: refunded !== null ? new Date(Math.min(refunded, expires ?? refunded)).toISOString() : iso(subscription.expires_date),
    graceExpiresAt: status === 'grace' ? iso(subscription.grace_period_expires_date) : null,
    purchasedAt: iso(subscription.purchase_date),
    transactionId: subscription.store_transaction_id ?? null,
    periodType: upper(subscription.period_type),
    autoResumeAt: iso(subscription.auto_resume_date),
    entitlementIds: [],
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
