import type { BillingEvent } from './webhook-body.ts';

/**
 * What a RevenueCat event MEANS, per entitlement, decided without the database: a pure function of
 * the event (and of `now`, used only when the event carries no timestamp). The SQL function
 * `public.record_billing_event` merges this plan with the stored rows under a lock: the order
 * guards, the max of expiries and the moves between ids live there, once, for every event type.
 *
 * Products: the effects apply to the row of (owner, entitlement id, `environment`, `product_id`), never to what
 * another product grants the same entitlement (a lifetime purchase beside a subscription, two
 * subscriptions). The API shows, per entitlement, the product row that grants longest.
 *
 * | event                                                     | effect per entitlement id (on the product's row) |
 * |-----------------------------------------------------------|--------------------------------------------------|
 * | INITIAL_PURCHASE, RENEWAL, UNCANCELLATION,                | grant: active, will renew, until max(stored,     |
 * |   SUBSCRIPTION_EXTENDED, REFUND_REVERSED                  |   event); clears grace, billing, pending flags   |
 * | NON_RENEWING_PURCHASE                                     | grant: active, will not renew (null = lifetime)  |
 * | TEMPORARY_ENTITLEMENT_GRANT                               | temporary grant: only where no product grants    |
 * | CANCELLATION (UNSUBSCRIBE, PRICE_INCREASE, ...)           | flag: will not renew, active -> cancelled_active |
 * | CANCELLATION BILLING_ERROR                                | flag: will not renew, billing_issue unless grace |
 * | CANCELLATION CUSTOMER_SUPPORT                             | refund: until the event's expiry; refunded when  |
 * |                                                           |   that is not after the event                    |
 * | BILLING_ISSUE                                             | flag: grace until the grace expiry, else         |
 * |                                                           |   billing_issue; never revokes                   |
 * | SUBSCRIPTION_PAUSED                                       | flag: will not renew, auto-resume time kept      |
 * | EXPIRATION                                                | revoke: expired (paused when the reason is       |
 * |                                                           |   SUBSCRIPTION_PAUSED)                           |
 * | PRODUCT_CHANGE                                            | flag: pending product = new_product_id           |
 * | TRANSFER                                                  | move: rows of transferred_from -> the first      |
 * |                                                           |   non-anonymous transferred_to (only the rows of |
 * |                                                           |   `store` when the event names one)              |
 * | TEST, INVOICE_ISSUANCE, VIRTUAL_CURRENCY_TRANSACTION,     | recorded, no change (but anonymous aliases of a  |
 * |   EXPERIMENT_ENROLLMENT, SUBSCRIBER_ALIAS, unknown types  |   real id still merge into it, see Identity)     |
 *
 * Lineage: one subscription changing product (PRODUCT_CHANGE, upgrade, crossgrade) leaves a row per
 * product; the SQL merge lets only the latest-purchased product of one lineage (same original
 * transaction, or named as the other's pending product) grant, whatever the arrival order.
 *
 * Identity: the owner of the effects is `app_user_id`, or, when that is anonymous, the first
 * non-anonymous id among `aliases` / `original_app_user_id`; the anonymous ids the event names
 * (other than the owner) have their rows merged into the owner's.
 */

export const ENTITLEMENT_STATUSES = [
  'active', 'cancelled_active', 'temporary', 'grace', 'billing_issue', 'paused', 'expired', 'refunded', 'transferred',
] as const;
export type EntitlementStatus = (typeof ENTITLEMENT_STATUSES)[number];

/**
 * grant / temporary_grant: the merge takes the event when newer, the max of expiries, and lets a
 * stale grant only raise the expiry of a row that still grants. flag / refund / revoke: applied
 * only when newer than the row AND about its current period.
 */
export type EffectAction = 'grant' | 'temporary_grant' | 'flag' | 'refund' | 'revoke';

export interface EntitlementEffect {
  entitlementId: string;
  action: EffectAction;
  /** The status to set (null: unchanged); for flags only when the stored status is in `statusFrom`. */
  status: EntitlementStatus | null;
  /** The stored statuses `status` may replace (null: any). */
  statusFrom: EntitlementStatus[] | null;
  /** null: unchanged. */
  willRenew: boolean | null;
  /** How `expiresAt` merges with the stored expiry: the later of both (null = forever), or exactly this. */
  expiry: 'max' | 'set' | null;
  /** ISO 8601, null = never expires (only meaningful with `expiry`). */
  expiresAt: string | null;
  graceExpiresAt: string | null;
  /** Set when not null (cleared by a grant; dropped when it equals the current product). */
  pendingProductId: string | null;
  autoResumeAt: string | null;
  /** Whether a flag/refund/revoke for an entitlement with no stored row creates it from the event. */
  createsRow: boolean;
}

/** The subscription period the event speaks of: the facts a grant stores and the guards compare. */
export interface PeriodFacts {
  /** Whose row the effects change: each product has its own row per entitlement (null: the unknown product's). */
  productId: string | null;
  purchasedAt: string | null;
  expiresAt: string | null;
  transactionId: string | null;
  /** The subscription lineage (null for one-time purchases): rows sharing it are one subscription. */
  originalTransactionId: string | null;
  store: string | null;
  periodType: string | null;
}

export interface BillingEventPlan {
  eventId: string;
  type: string;
  /** `event.app_user_id` as sent (stored on the event row; may be anonymous; null when absent or too long). */
  appUserId: string | null;
  /** `event_timestamp_ms` (ISO 8601): the order of events. The receive time when it is missing. */
  eventAt: string;
  environment: string | null;
  /** Whose entitlements change (for TRANSFER: the destination). */
  ownerId: string | null;
  /** Ids whose rows move to `ownerId`: anonymous aliases (merge) or transferred_from (transfer). */
  movedIds: string[];
  move: 'merge' | 'transfer' | null;
  period: PeriodFacts;
  effects: EntitlementEffect[];
  /** Why the event is record-only (null when it has effects or moves). */
  ignoredReason: string | null;
}

export const ANONYMOUS_ID_PREFIX = '$RCAnonymousID:';
/**
 * Ids longer than this are not used as keys: a btree entry holds at most ~2.7 kB, and a key is
 * (app_user_id, entitlement_id, md5 of environment and product_id) of up to 4 bytes a character. Real ids are far
 * shorter.
 */
export const MAX_ID_LENGTH = 256;
/** At most this many entitlement ids and aliases are used from one event (bounds locks and work). */
export const MAX_IDS_PER_EVENT = 100;

const GRANT_TYPES = new Set(['INITIAL_PURCHASE', 'RENEWAL', 'UNCANCELLATION', 'SUBSCRIPTION_EXTENDED', 'REFUND_REVERSED']);
const EFFECT_TYPES = new Set([
  ...GRANT_TYPES, 'NON_RENEWING_PURCHASE', 'TEMPORARY_ENTITLEMENT_GRANT', 'CANCELLATION', 'BILLING_ISSUE',
  'SUBSCRIPTION_PAUSED', 'EXPIRATION', 'PRODUCT_CHANGE', 'TRANSFER',
]);
/** Known types that change nothing (anything unknown is treated the same way). */
export const RECORD_ONLY_TYPES = ['TEST', 'INVOICE_ISSUANCE', 'VIRTUAL_CURRENCY_TRANSACTION', 'EXPERIMENT_ENROLLMENT', 'SUBSCRIBER_ALIAS'] as const;

const STILL_GRANTING: EntitlementStatus[] = ['active', 'cancelled_active', 'billing_issue'];

export function isAnonymousId(id: string): boolean {
  return id.startsWith(ANONYMOUS_ID_PREFIX);
}

/** Describe one event's effects. `now` is used only when the event has no usable timestamp. */
export function describeEventEffects(event: BillingEvent, now: Date): BillingEventPlan {
  const type = event.type;
  const eventTime = readTime(event.event_timestamp_ms);
  const eventAt = typeof eventTime === 'string' ? eventTime : now.toISOString();
  const period: PeriodFacts = {
    productId: readText(event.product_id),
    purchasedAt: validTime(readTime(event.purchased_at_ms)),
    expiresAt: validTime(readTime(event.expiration_at_ms)),
    transactionId: readText(event.transaction_id),
    // A one-time purchase continues no subscription: its original transaction (stores may reuse a
    // subscription's) must not tie it to a subscription lineage that could supersede it.
    originalTransactionId: type === 'NON_RENEWING_PURCHASE' ? null : readText(event.original_transaction_id),
    store: readText(event.store),
    periodType: readText(event.period_type),
  };
  const plan: BillingEventPlan = {
    eventId: event.id,
    type,
    appUserId: readId(event.app_user_id),
    eventAt,
    environment: readText(event.environment),
    ownerId: null,
    movedIds: [],
    move: null,
    period,
    effects: [],
    ignoredReason: null,
  };

  if (!EFFECT_TYPES.has(type)) {
    const identity = ownerOf(event);
    const recordOnly = { ...plan, ownerId: identity.ownerId, ignoredReason: (RECORD_ONLY_TYPES as readonly string[]).includes(type) ? 'record_only_type' : 'unknown_type' };
    // No entitlement changes, but the identity it states still holds (SUBSCRIBER_ALIAS exists for
    // this): a purchase made before sign-in must reach the real id even if nothing else follows.
    // An unreadable timestamp moves nothing (the move is remembered at that time).
    if (identity.movedIds.length === 0 || !identity.ownerId || isAnonymousId(identity.ownerId) || typeof eventTime !== 'string') return recordOnly;
    return { ...recordOnly, movedIds: identity.movedIds, move: 'merge', ignoredReason: null };
  }

  if (type === 'TRANSFER') {
    const from = readIds(event.transferred_from);
    const to = readIds(event.transferred_to);
    const target = to.find((id) => !isAnonymousId(id)) ?? to[0] ?? null;
    const movedIds = from.filter((id) => id !== target);
    if (!target || movedIds.length === 0) return { ...plan, ownerId: target, ignoredReason: 'nothing_to_transfer' };
    return { ...plan, ownerId: target, movedIds, move: 'transfer' };
  }

  const identity = ownerOf(event);
  if (!identity.ownerId) return { ...plan, ignoredReason: 'no_app_user_id' };
  const withIdentity: BillingEventPlan = { ...plan, ...identity, move: identity.movedIds.length > 0 ? 'merge' : null };

  const invalid = (['event_timestamp_ms', 'purchased_at_ms', 'expiration_at_ms', 'grace_period_expiration_at_ms', 'auto_resume_at_ms'] as const)
    .find((field) => readTime(event[field]) === INVALID);
  // A time we cannot read must not become "never expires": record the event, change nothing.
  if (invalid) return { ...withIdentity, movedIds: [], move: null, ignoredReason: `invalid_${invalid}` };

  const entitlementIds = readEntitlementIds(event);
  const effect = effectFor(event, type, eventAt, period);
  if (!effect) return { ...withIdentity, ignoredReason: withIdentity.move ? null : 'no_effect' };
  if (entitlementIds.length === 0) return { ...withIdentity, ignoredReason: withIdentity.move ? null : 'no_entitlements' };
  return { ...withIdentity, effects: entitlementIds.map((entitlementId) => ({ entitlementId, ...effect })) };
}

type Effect = Omit<EntitlementEffect, 'entitlementId'>;

const NO_CHANGE: Effect = {
  action: 'flag', status: null, statusFrom: null, willRenew: null, expiry: null, expiresAt: null,
  graceExpiresAt: null, pendingProductId: null, autoResumeAt: null, createsRow: false,
};

function effectFor(event: BillingEvent, type: string, eventAt: string, period: PeriodFacts): Effect | null {
  // A flag on an entitlement we have no row for creates one from the event only when the event
  // says how long access lasts (RevenueCat sends these for live subscriptions).
  const createsRow = period.expiresAt !== null;
  if (GRANT_TYPES.has(type)) {
    return { ...NO_CHANGE, action: 'grant', status: 'active', willRenew: true, expiry: 'max', expiresAt: period.expiresAt };
  }
  switch (type) {
    case 'NON_RENEWING_PURCHASE':
      return { ...NO_CHANGE, action: 'grant', status: 'active', willRenew: false, expiry: 'max', expiresAt: period.expiresAt };
    case 'TEMPORARY_ENTITLEMENT_GRANT':
      return { ...NO_CHANGE, action: 'temporary_grant', status: 'temporary', willRenew: false, expiry: 'set', expiresAt: period.expiresAt };
    case 'CANCELLATION': {
      const reason = readText(event.cancel_reason)?.toUpperCase();
      if (reason === 'CUSTOMER_SUPPORT') {
        // A refund ends access at the event's expiry (the refund time); without one, at the event.
        const expiresAt = period.expiresAt ?? eventAt;
        const refunded = Date.parse(expiresAt) <= Date.parse(eventAt);
        return { ...NO_CHANGE, action: 'refund', status: refunded ? 'refunded' : null, expiry: 'set', expiresAt, createsRow: true };
      }
      if (reason === 'BILLING_ERROR') {
        return { ...NO_CHANGE, status: 'billing_issue', statusFrom: STILL_GRANTING, willRenew: false, createsRow };
      }
      return { ...NO_CHANGE, status: 'cancelled_active', statusFrom: ['active'], willRenew: false, createsRow };
    }
    case 'BILLING_ISSUE': {
      const graceExpiresAt = validTime(readTime(event.grace_period_expiration_at_ms));
      return {
        ...NO_CHANGE,
        status: graceExpiresAt ? 'grace' : 'billing_issue',
        statusFrom: [...STILL_GRANTING, 'grace'],
        graceExpiresAt,
        createsRow,
      };
    }
    case 'SUBSCRIPTION_PAUSED':
      return { ...NO_CHANGE, willRenew: false, autoResumeAt: validTime(readTime(event.auto_resume_at_ms)), createsRow };
    case 'EXPIRATION': {
      const paused = readText(event.expiration_reason)?.toUpperCase() === 'SUBSCRIPTION_PAUSED';
      return {
        ...NO_CHANGE,
        action: 'revoke',
        status: paused ? 'paused' : 'expired',
        willRenew: false,
        expiry: period.expiresAt ? 'set' : null,
        expiresAt: period.expiresAt,
        createsRow: true,
      };
    }
    case 'PRODUCT_CHANGE': {
      const pendingProductId = readText(event.new_product_id);
      return pendingProductId ? { ...NO_CHANGE, pendingProductId } : null;
    }
  }
  return null;
}

/** The owner of an event's effects and the anonymous ids whose rows merge into the owner's. */
function ownerOf(event: BillingEvent): { ownerId: string | null; movedIds: string[] } {
  const appUserId = readId(event.app_user_id);
  const named = unique([appUserId, readId(event.original_app_user_id), ...readIds(event.aliases)].filter((id): id is string => id !== null));
  const ownerId = appUserId && !isAnonymousId(appUserId) ? appUserId : (named.find((id) => !isAnonymousId(id)) ?? appUserId);
  return { ownerId, movedIds: named.filter((id) => isAnonymousId(id) && id !== ownerId).slice(0, MAX_IDS_PER_EVENT) };
}

function readEntitlementIds(event: BillingEvent): string[] {
  // `entitlement_id` is deprecated; used only by senders that do not send `entitlement_ids` at all.
  if (event.entitlement_ids === undefined && readId(event.entitlement_id)) return [readId(event.entitlement_id)!];
  return readIds(event.entitlement_ids).slice(0, MAX_IDS_PER_EVENT);
}

const INVALID = Symbol('invalid');
/** The latest instant both JavaScript and Postgres store (9999-12-31T23:59:59.999Z). */
const MAX_TIME_MS = 253_402_300_799_999;

/** Milliseconds since the epoch (a number, or digits in a string) -> ISO 8601; absent -> null. */
function readTime(value: unknown): string | null | typeof INVALID {
  if (value === undefined || value === null) return null;
  const ms = typeof value === 'number' ? value : typeof value === 'string' && /^\d{1,16}$/.test(value) ? Number(value) : NaN;
  if (!Number.isFinite(ms) || ms < 0 || ms > MAX_TIME_MS) return INVALID;
  return new Date(Math.trunc(ms)).toISOString();
}

const validTime = (value: string | null | typeof INVALID): string | null => (typeof value === 'string' ? value : null);

function readText(value: unknown): string | null {
  return typeof value === 'string' && value !== '' ? value : null;
}

function readId(value: unknown): string | null {
  const text = readText(value);
  // Characters as Postgres counts them (code points), like the table's check and zod's max.
  return text !== null && (text.length <= MAX_ID_LENGTH || [...text].length <= MAX_ID_LENGTH) ? text : null;
}

function readIds(value: unknown): string[] {
  if (!Array.isArray(value)) return [];
  return unique(value.map(readId).filter((id): id is string => id !== null));
}

const unique = <T>(values: T[]): T[] => [...new Set(values)];
