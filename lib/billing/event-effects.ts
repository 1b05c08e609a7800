import type { BillingEvent } from './webhook-body.ts';

/**
 * What a RevenueCat event MEANS, per entitlement, decided without the database: a pure function of
 * the event (and of `now`, used only when the event carries no timestamp). The stored state is the
 * FOLD of each subscriber's events in event order (supabase/schemas/03_billing_fold.sql):
 * `public.billing_apply_event` applies one plan to the stored rows, and an event that arrives after
 * newer ones makes its subscriber's history be folded again with it in its place, so the state never
 * depends on the order of delivery. What needs the stored rows (whether a row still grants, the
 * later of two expiries, who owns the effects, lineage, moves) is decided there, once.
 *
 * Rows: one per (owner, entitlement id, source), a source being the environment, the store and
 * `product_id` (or, for an event without a product, its original transaction). An event changes
 * only its own source's rows, never what another product (or the same product id on another store)
 * grants the same entitlement.
 *
 * | event                                                 | effect on the source's row of each entitlement id                       |
 * |-------------------------------------------------------|--------------------------------------------------------------------------|
 * | INITIAL_PURCHASE                                      | grant, renewing: active until the later expiry of the two (the event's   |
 * |                                                       |   own when the row no longer grants as the new period begins); a Play    |
 * |                                                       |   prepaid plan (period_type PREPAID) never renews                        |
 * | UNCANCELLATION                                        | the same, but on a row in grace / billing_issue it only re-enables       |
 * |                                                       |   renewal: the billing issue stands (grace end, not renewing) until a    |
 * |                                                       |   payment recovers it                                                    |
 * | RENEWAL                                               | grant, renewal as it was (on again after a lapse or a billing issue, and |
 * |                                                       |   past a cancelled period's end: charged again), but an App Store        |
 * |                                                       |   subscription cancelled in its period's last 24 hours stays             |
 * |                                                       |   cancelled_active                                                       |
 * | SUBSCRIPTION_EXTENDED                                 | grant, renewal as it was (on again after a lapse or a billing issue)     |
 * | REFUND_REVERSED                                       | grant, renewal as it was (a lifetime: never renewing, active)            |
 * | NON_RENEWING_PURCHASE                                 | grant, never renewing (null expiry = lifetime)                           |
 * | TEMPORARY_ENTITLEMENT_GRANT                           | temporary until its expiry, unless its own source's real row grants when |
 * |                                                       |   it begins (beside another source's it stands); grants without an       |
 * |                                                       |   environment (not among its guaranteed fields)                          |
 * | CANCELLATION (UNSUBSCRIBE, PRICE_INCREASE, ...)       | flag: will not renew, active -> cancelled_active (an App Store one in    |
 * |                                                       |   the period's last 24 hours: also the next period, charged anyway)      |
 * | CANCELLATION BILLING_ERROR                            | flag: will not renew, billing_issue unless in grace                      |
 * | CANCELLATION whose expiration is not after it         | also ends the row's current period there (the same transaction), sooner |
 * |                                                       |   than stored: Stripe gave up retrying, a promotional grant revoked      |
 * | CANCELLATION CUSTOMER_SUPPORT                         | refund: until the event's expiry; refunded when that is not after it     |
 * | BILLING_ISSUE                                         | flag: will not renew; grace until the later grace expiry, else           |
 * |                                                       |   billing_issue; never revokes                                           |
 * | SUBSCRIPTION_PAUSED                                   | flag: auto-resume time kept; renewal unchanged (a scheduled pause is not |
 * |                                                       |   an unsubscribe; its EXPIRATION ends access)                            |
 * | PRODUCT_CHANGE                                        | flag: pending product = new_product_id                                   |
 * | PRODUCT_CHANGE, Google Play, no new_product_id        | flag: an immediate replacement: will not renew, cancelled_active, and    |
 * |                                                       |   the next Play subscription of the customer supersedes it               |
 * | EXPIRATION                                            | revoke: expired (paused when the reason is SUBSCRIPTION_PAUSED;          |
 * |                                                       |   refunded, renewal kept, when it is CUSTOMER_SUPPORT: a refund)         |
 * | TRANSFER                                              | move: the rows of transferred_from (of the event's environment, and      |
 * |                                                       |   store when named) -> the first non-anonymous transferred_to; the       |
 * |                                                       |   other transferred_to ids are that customer's: merged into it           |
 * | TEST, INVOICE_ISSUANCE, SUBSCRIBER_ALIAS, unknown ... | recorded, no change (the ids it names still merge, see Identity)         |
 *
 * Every event is ordered at its event_timestamp_ms; one stamped more than MAX_EVENT_AHEAD_MS past its
 * receive time, at its receive time.
 *
 * Flags, refunds and revocations apply to the row's current period or a later one; a flag extends
 * the expiry to the later of the two (Stripe's retry window; a CANCELLATION whose RENEWAL is still
 * on its way). One with `entitlement_ids` null (the product maps to no entitlement) applies to every
 * row its source already has, and there only takes away (public.billing_apply_event).
 *
 * Identity: the event names one RevenueCat customer (app_user_id, original_app_user_id, aliases).
 * Its real (non-anonymous) ids are the owner candidates, app_user_id first; the database stands each
 * for the id it was already merged into (if any), takes the first that already holds rows, else the
 * first, and merges the rows of every other named id into it. Only anonymous ids named: app_user_id
 * owns. A TRANSFER names two customers: it moves, never merges.
 */

export const ENTITLEMENT_STATUSES = [
  'active', 'cancelled_active', 'temporary', 'grace', 'billing_issue', 'paused', 'expired', 'refunded', 'transferred',
] as const;
export type EntitlementStatus = (typeof ENTITLEMENT_STATUSES)[number];

/**
 * grant / temporary_grant: sets the row (continuing the stored period when that still grants as
 * this one begins). flag / refund / revoke: applied only to the row's current period or a later one.
 */
export type EffectAction = 'grant' | 'temporary_grant' | 'flag' | 'refund' | 'revoke';

/**
 * What the event says of auto-renewal. on / off: set it. keep: leave it. continue (a grant that
 * continues a period: RENEWAL, SUBSCRIPTION_EXTENDED): leave it, unless the period it continues had
 * lapsed or was failing to charge, where it is on again. A new row starts renewing unless `off`.
 */
export type Renewal = 'on' | 'off' | 'keep' | 'continue';

export interface EntitlementEffect {
  /** null: every row the event's source already has (its entitlement_ids were null); never for grants. */
  entitlementId: string | null;
  action: EffectAction;
  /** The status to set (null: unchanged); for flags only when the stored status is in `statusFrom`. */
  status: EntitlementStatus | null;
  /** The stored statuses `status` may replace (null: any). */
  statusFrom: EntitlementStatus[] | null;
  renewal: Renewal;
  /**
   * How `expiresAt` merges with the stored expiry. max (grants): the later of both, null = forever.
   * extend (flags): the later of both; an event without one leaves it. set: exactly this.
   * period (a CANCELLATION saying the period already ended): exactly this when the event is about
   * the row's current period (the same transaction; without transaction ids, the same purchase
   * time), else like extend: where RevenueCat says the period ended sooner (Stripe gave up
   * retrying, a promotional grant revoked), it did.
   */
  expiry: 'max' | 'extend' | 'set' | 'period' | null;
  /** ISO 8601, null = never expires (only meaningful with `expiry`). */
  expiresAt: string | null;
  graceExpiresAt: string | null;
  /** Set when not null (cleared by a grant that starts a new period; dropped when it equals the row's product). */
  pendingProductId: string | null;
  autoResumeAt: string | null;
  /** Whether a flag/refund/revoke for an entitlement with no stored row creates it from the event. */
  createsRow: boolean;
  /**
   * A grant that only re-enables renewal (UNCANCELLATION): on a row in `grace` or `billing_issue`
   * the billing issue stands (status, grace end, and not renewing until a payment recovers it).
   */
  keepsBillingIssue?: boolean;
  /**
   * A RENEWAL: a charge for a period past the stored one's end, which a cancelled subscription gets
   * only when renewal was turned on again (Stripe never sends UNCANCELLATION; Apple's can be lost),
   * so renewal is on again; except the charge right after an App Store cancellation less than 24
   * hours before the period's end (Apple charges the next period anyway, still cancelled:
   * public.billing_cancelled_in_charge_window).
   */
  resumesRenewal?: boolean;
  /**
   * A REFUND_REVERSED: the period it grants again began when it was first granted (the row keeps
   * that time), so it is not the newer product of a subscription that moved on meanwhile.
   */
  reinstates?: boolean;
  /**
   * A CANCELLATION of an App Store subscription less than 24 hours before its period ends: Apple
   * charges the next period anyway ("a CANCELLATION event followed by a RENEWAL event"), and the
   * cancellation holds for that period too, even where it is folded after the RENEWAL (one instant:
   * grants first). Never a PRICE_INCREASE's: a price increase the customer declined is not charged.
   * (Plans stored before this named it `cancelsTrialLate`, for trials only.)
   */
  cancelsWithinChargeWindow?: boolean;
  /**
   * A Stripe RENEWAL at price 0: RevenueCat goes on sending these for an open invoice ("mark the
   * subscription as unpaid: RevenueCat will revoke access but continues generating RENEWAL events
   * with a zero price", How grace periods work, Stripe). On an expired row it grants nothing,
   * unless a product change ended that row (entitlements.replaced_at: the change back at once);
   * elsewhere (a past-due subscription, which keeps access; a 100%-off coupon) it renews.
   */
  zeroPriceStripeRenewal?: boolean;
}

/** The subscription period the event speaks of: the facts a grant stores and the guards compare. */
export interface PeriodFacts {
  /** Whose row the effects change: each product has its own row per entitlement (null: keyed by the original transaction). */
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
  /** Order among events of one instant: grants 0, flags and moves 1, refunds and revocations 2, a snapshot of RevenueCat's record 3. */
  rank: 0 | 1 | 2 | 3;
  environment: string | null;
  /** The id the event is filed under (app_user_id, or a TRANSFER's destination); null: it takes no part in folds. */
  subjectId: string | null;
  /** Every id the event names; their histories are folded together (one customer, or a TRANSFER's two sides). */
  linkedIds: string[];
  /** Who may own the effects, best first: the database takes the first that already holds rows, else the first. */
  ownerCandidates: string[];
  /** The ids whose rows move to the owner (the owner itself, when among them, stays): named ids (merge) or transferred_from. */
  movedIds: string[];
  move: 'merge' | 'transfer' | null;
  /**
   * A TRANSFER's other transferred_to ids: "App User ID(s) that are receiving the transactions",
   * the receiving customer's other ids (its anonymous id beside the signed-in one, as RevenueCat's
   * sample has it). They are that customer: their rows and ids merge into the owner, as a merge's,
   * where they stand alone (another user's alias stays theirs: public.billing_apply_event).
   */
  joinedIds?: string[];
  period: PeriodFacts;
  effects: EntitlementEffect[];
  /** Why the event changes nothing (null when it has effects or moves). */
  ignoredReason: string | null;
  /**
   * Why the subscriber should be fetched from RevenueCat after this event, which cannot say
   * everything: a TRANSFER names ids but no products; a refund may change more than one period.
   */
  syncReason: 'transfer' | 'refund' | null;
  /**
   * A grant naming no entitlement (`entitlement_ids` null or empty) that still merges the ids it
   * names: it changes no row, and where its purchase still grants, the product's entitlements
   * changed in the dashboard (public.billing_mapping_changed asks RevenueCat's record). One that
   * merges nothing says so by its ignoredReason, `no_entitlements`.
   */
  namesNoEntitlement?: true;
}

export interface DescribeOptions {
  /**
   * Sandbox events are recorded but change nothing (config.billingIgnoreSandbox: deployed, unless
   * BILLING_SANDBOX_GRANTS=true); so are subscription events that name no environment, or one but
   * PRODUCTION, except what RevenueCat sends without one (a temporary grant, its bare EXPIRATION).
   */
  ignoreSandbox?: boolean;
  /**
   * The event was recorded already and `now` is the time it was ordered at (its stored `event_at`,
   * which holds the bound below): its plan is computed again exactly as it was (a rebuild, plans
   * computed for events stored without one).
   */
  recorded?: boolean;
}

/**
 * The furthest past its receive time an event's stamp may lie and still be taken as when it was
 * generated (the two clocks' skew). RevenueCat stamps an event when it generates it and sends it
 * within seconds (a retry keeps the stamp, so it is older, never newer); a stamp further ahead is
 * not skew but wrong (RevenueCat's own sample TRANSFER carries the year 4466) and says nothing of
 * when the event happened. Such an event is ordered at its receive time, the latest it can have
 * been generated: not after every later event forever, and not after an event generated after it
 * arrived (a transfer back made a minute later), as a time pushed ahead by the skew allowance would be.
 */
export const MAX_EVENT_AHEAD_MS = 5 * 60_000;

/**
 * The time an event is ordered at: its stamp, or, for a stamp beyond MAX_EVENT_AHEAD_MS past when
 * it was received (or none), its receive time. A recorded event's `now` is its stored time, which
 * its stamp then never precedes unless it was replaced: the same time again.
 */
function boundedEventTime(stamp: string | null, now: Date, recorded: boolean): string {
  const bound = now.getTime() + (recorded ? 0 : MAX_EVENT_AHEAD_MS);
  if (stamp === null || Date.parse(stamp) > bound) return now.toISOString();
  return stamp;
}

export const ANONYMOUS_ID_PREFIX = '$RCAnonymousID:';
/**
 * Ids longer than this are not used as keys: a btree entry holds at most ~2.7 kB, and a key is
 * (app_user_id, entitlement_id, md5 of the source) of up to 4 bytes a character. Real ids are far shorter.
 */
export const MAX_ID_LENGTH = 256;
/**
 * At most this many entitlement ids, aliases and transferred ids are used from one event: each id
 * takes a lock and a lookup, and a body of thousands held the database until it gave up, on every
 * retry (the event would never be stored). Real events name a handful.
 */
export const MAX_IDS_PER_EVENT = 100;

const EFFECT_TYPES = new Set([
  'INITIAL_PURCHASE', 'RENEWAL', 'UNCANCELLATION', 'SUBSCRIPTION_EXTENDED', 'REFUND_REVERSED', 'NON_RENEWING_PURCHASE', 'TEMPORARY_ENTITLEMENT_GRANT', 'CANCELLATION', 'BILLING_ISSUE',
  'SUBSCRIPTION_PAUSED', 'EXPIRATION', 'PRODUCT_CHANGE', 'TRANSFER',
]);
/** Known types that change nothing (anything unknown is treated the same way). */
export const RECORD_ONLY_TYPES = ['TEST', 'INVOICE_ISSUANCE', 'VIRTUAL_CURRENCY_TRANSACTION', 'EXPERIMENT_ENROLLMENT', 'SUBSCRIBER_ALIAS'] as const;

const STILL_GRANTING: EntitlementStatus[] = ['active', 'cancelled_active', 'billing_issue'];

/**
 * The pending product of a Google Play subscription replaced at once by an unnamed product (a
 * PRODUCT_CHANGE without new_product_id): the next Play subscription of the customer supersedes it.
 */
export const REPLACED_ON_PLAY = '*';

export function isAnonymousId(id: string): boolean {
  return id.startsWith(ANONYMOUS_ID_PREFIX);
}

/**
 * Describe one event's effects. `now` is when it was received: the time of an event without a
 * usable timestamp, and the bound of one stamped later (MAX_EVENT_AHEAD_MS).
 */
export function describeEventEffects(event: BillingEvent, now: Date, options: DescribeOptions = {}): BillingEventPlan {
  const type = event.type;
  const eventTime = readTime(event.event_timestamp_ms);
  const eventAt = boundedEventTime(typeof eventTime === 'string' ? eventTime : null, now, options.recorded ?? false);
  // A VIRTUAL_CURRENCY_TRANSACTION names its purchase's store environment `purchase_environment`.
  const environment = readText(event.environment) ?? (type === 'VIRTUAL_CURRENCY_TRANSACTION' ? readText(event.purchase_environment) : null);
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
    rank: 1,
    environment,
    subjectId: null,
    linkedIds: [],
    ownerCandidates: [],
    movedIds: [],
    move: null,
    period,
    effects: [],
    ignoredReason: null,
    syncReason: null,
  };
  const ignored = (reason: string): BillingEventPlan => ({ ...plan, ignoredReason: reason });

  // Where sandbox purchases grant nothing, an event that says SANDBOX changes nothing. RevenueCat
  // names the store environment in every subscription lifecycle event ("Event Types and Fields":
  // https://www.revenuecat.com/docs/integrations/webhooks/event-types-and-fields): one that names
  // none, or another one, is no more known to be a real purchase than a sandbox one, and grants
  // nothing either. Except where RevenueCat itself leaves it out: a TEMPORARY_ENTITLEMENT_GRANT
  // carries only its guaranteed fields, environment not among them ("it contains less information
  // than a regular purchase event"), and stands for a purchase made this minute, so it grants; its
  // failed validation, "an EXPIRATION event with the same transaction_id", may be as bare, and an
  // EXPIRATION never grants, so one that names no environment but a transaction ends what it names;
  // and an event that grants nothing (SUBSCRIBER_ALIAS, EXPERIMENT_ENROLLMENT, "not associated with
  // a store", VIRTUAL_CURRENCY_TRANSACTION, any unknown type) still merges the ids it names.
  // A TEST is no purchase in any environment: "Test event issued through the RevenueCat dashboard"
  // (same page). It says so, rather than "a sandbox purchase" where sandbox purchases grant nothing.
  if (type === 'TEST') return ignored('record_only_type');
  const environmentName = environment?.toUpperCase();
  if (options.ignoreSandbox && environmentName !== 'PRODUCTION') {
    if (environmentName === 'SANDBOX') return ignored('sandbox_ignored');
    const bare = environment === null && (type === 'TEMPORARY_ENTITLEMENT_GRANT' || (type === 'EXPIRATION' && period.transactionId !== null));
    if (EFFECT_TYPES.has(type) && !bare) return ignored('environment_unknown');
  }

  if (type === 'TRANSFER') {
    const from = unique(readIds(event.transferred_from)).slice(0, MAX_IDS_PER_EVENT);
    const to = unique(readIds(event.transferred_to)).slice(0, MAX_IDS_PER_EVENT);
    const target = to.find((id) => !isAnonymousId(id)) ?? to[0] ?? null;
    const movedIds = from.filter((id) => id !== target);
    if (!target || movedIds.length === 0) return { ...ignored('nothing_to_transfer'), ownerCandidates: target ? [target] : [] };
    const joinedIds = to.filter((id) => id !== target && !from.includes(id));
    return {
      ...plan, subjectId: target, linkedIds: unique([target, ...movedIds, ...joinedIds]), ownerCandidates: [target], movedIds,
      ...(joinedIds.length > 0 ? { joinedIds } : {}), move: 'transfer', syncReason: 'transfer',
    };
  }

  const identity = identityOf(event);
  const changes = EFFECT_TYPES.has(type);
  // The ids it names merge into the owner, even from a record-only type (SUBSCRIBER_ALIAS exists for
  // this) when a real id owns them. An unreadable timestamp moves nothing.
  const merges = identity.named.length > 1 && typeof eventTime === 'string' && (changes || identity.candidates.some((id) => !isAnonymousId(id)));
  const withIdentity: BillingEventPlan = {
    ...plan,
    subjectId: identity.candidates[0] ?? null,
    linkedIds: identity.named,
    ownerCandidates: identity.candidates,
    movedIds: merges ? identity.named : [],
    move: merges ? 'merge' : null,
  };
  const recordOnly = (reason: string): BillingEventPlan =>
    (merges ? { ...withIdentity, ...(reason === 'no_entitlements' ? { namesNoEntitlement: true as const } : {}) }
      : { ...withIdentity, subjectId: null, linkedIds: [], movedIds: [], move: null, ignoredReason: reason });

  if (!changes) return recordOnly((RECORD_ONLY_TYPES as readonly string[]).includes(type) ? 'record_only_type' : 'unknown_type');
  if (identity.candidates.length === 0) return ignored('no_app_user_id');

  const invalid = (['event_timestamp_ms', 'purchased_at_ms', 'expiration_at_ms', 'grace_period_expiration_at_ms', 'auto_resume_at_ms'] as const)
    .find((field) => readTime(event[field]) === INVALID);
  // A time we cannot read must not become "never expires": record the event, change nothing.
  if (invalid) return { ...withIdentity, subjectId: null, linkedIds: [], movedIds: [], move: null, ignoredReason: `invalid_${invalid}` };

  const effect = effectFor(event, type, eventAt, period);
  if (!effect) return recordOnly('no_effect');
  const entitlementIds = readEntitlementIds(event);
  // No entitlements named (null when the dashboard mapping changed): a grant gives nothing, but a
  // flag, refund or revocation still applies to the rows the event's source already has.
  const targets: (string | null)[] = entitlementIds.length > 0 ? entitlementIds : effect.action === 'grant' || effect.action === 'temporary_grant' ? [] : [null];
  if (targets.length === 0) return recordOnly('no_entitlements');
  return {
    ...withIdentity,
    rank: RANKS[effect.action],
    effects: targets.map((entitlementId) => ({ entitlementId, ...effect })),
    syncReason: effect.action === 'refund' ? 'refund' : null,
  };
}

type Effect = Omit<EntitlementEffect, 'entitlementId'>;

const RANKS: Record<EffectAction, BillingEventPlan['rank']> = { grant: 0, temporary_grant: 0, flag: 1, refund: 2, revoke: 2 };

const FLAG: Effect = {
  action: 'flag', status: null, statusFrom: null, renewal: 'keep', expiry: 'extend', expiresAt: null,
  graceExpiresAt: null, pendingProductId: null, autoResumeAt: null, createsRow: false,
};

function effectFor(event: BillingEvent, type: string, eventAt: string, period: PeriodFacts): Effect | null {
  // A flag on an entitlement we have no row for creates one from the event only when the event
  // says how long access lasts (RevenueCat sends these for live subscriptions).
  const flag: Effect = { ...FLAG, expiresAt: period.expiresAt, createsRow: period.expiresAt !== null };
  const grant: Effect = { ...FLAG, action: 'grant', status: 'active', expiry: 'max', expiresAt: period.expiresAt };
  // A Google Play prepaid plan never renews by itself: the customer tops it up (a new purchase).
  const prepaid = period.periodType?.toUpperCase() === 'PREPAID';
  switch (type) {
    case 'INITIAL_PURCHASE':
      return { ...grant, renewal: prepaid ? 'off' : 'on' };
    case 'UNCANCELLATION':
      // Re-enables renewal; a billing issue (a grace period) stands until a payment recovers it.
      return { ...grant, renewal: prepaid ? 'off' : 'on', keepsBillingIssue: true };
    case 'RENEWAL': {
      // A charge for a new period: renewal is on again after a cancellation (see resumesRenewal).
      const renewal: Effect = prepaid ? { ...grant, renewal: 'off' } : { ...grant, renewal: 'continue', resumesRenewal: true };
      return readText(event.store)?.toUpperCase() === 'STRIPE' && event.price === 0 ? { ...renewal, zeroPriceStripeRenewal: true } : renewal;
    }
    case 'SUBSCRIPTION_EXTENDED':
      // The period pushed back, nothing charged: renewal stays as the subscriber left it.
      return { ...grant, renewal: prepaid ? 'off' : 'continue' };
    case 'REFUND_REVERSED':
      // Undoes a refund, which never changed auto-renewal: it stays as the subscriber left it. A
      // purchase without an expiry (a lifetime) never renews: active, like the purchase itself.
      // The period it reinstates began when it was first granted (reinstates): never newer than
      // a product the subscription moved on to meanwhile.
      return { ...grant, renewal: period.expiresAt === null ? 'off' : 'keep', reinstates: true };
    case 'NON_RENEWING_PURCHASE':
      return { ...grant, renewal: 'off' };
    case 'TEMPORARY_ENTITLEMENT_GRANT':
      return { ...grant, action: 'temporary_grant', status: 'temporary', renewal: 'off', expiry: 'set' };
    case 'CANCELLATION': {
      const reason = readText(event.cancel_reason)?.toUpperCase();
      if (reason === 'CUSTOMER_SUPPORT') {
        // A refund ends access at the event's expiry (the refund time); without one, at the event.
        const expiresAt = period.expiresAt ?? eventAt;
        const refunded = Date.parse(expiresAt) <= Date.parse(eventAt);
        return { ...FLAG, action: 'refund', status: refunded ? 'refunded' : null, expiry: 'set', expiresAt, createsRow: true };
      }
      // One whose expiration is not after it says the period already ended (Stripe gave up
      // retrying; a promotional grant was revoked early): it ends the current period there, even
      // sooner than stored. Otherwise it carries the period's end, and extends like any flag.
      const ended = period.expiresAt !== null && Date.parse(period.expiresAt) <= Date.parse(eventAt);
      const cancel: Effect = { ...flag, expiry: ended ? 'period' : 'extend', renewal: 'off' };
      if (reason === 'BILLING_ERROR') return { ...cancel, status: 'billing_issue', statusFrom: STILL_GRANTING };
      // (A price increase the customer did not accept is not charged: "their subscription expires at
      // the end of their current billing cycle", RevenueCat's Price changes page.)
      const charged = reason !== 'PRICE_INCREASE' && cancelsWithinChargeWindow(period, eventAt);
      return { ...cancel, status: 'cancelled_active', statusFrom: ['active'], ...(charged ? { cancelsWithinChargeWindow: true } : {}) };
    }
    case 'BILLING_ISSUE': {
      // A subscription failing to charge does not renew until a payment recovers it (RevenueCat's own
      // willRenew is false while billing_issues_detected_at is set): the CANCELLATION BILLING_ERROR
      // sent with it says the same, and one of the two may be lost. The recovering RENEWAL turns it on.
      // With a grace period it also ends a pause: the charge at a paused Play subscription's resume
      // failed, and "Users will retain access to their subscriptions" in grace (how grace periods
      // work); grace_period_expiration_at_ms is what to "use ... to determine if the user is
      // currently in a grace period" (event types and fields).
      const graceExpiresAt = validTime(readTime(event.grace_period_expiration_at_ms));
      return { ...flag, status: graceExpiresAt ? 'grace' : 'billing_issue', statusFrom: [...STILL_GRANTING, 'grace', ...(graceExpiresAt ? ['paused' as const] : [])], renewal: 'off', graceExpiresAt };
    }
    case 'SUBSCRIPTION_PAUSED':
      // A pause scheduled for the period's end is not a cancellation: the subscription still renews
      // unless the pause takes effect (its EXPIRATION); only an unsubscribe turns renewal off.
      return { ...flag, autoResumeAt: validTime(readTime(event.auto_resume_at_ms)) };
    case 'EXPIRATION': {
      const reason = readText(event.expiration_reason)?.toUpperCase();
      // Ended by a refund (CUSTOMER_SUPPORT): refunded, and auto-renewal as it was, as the refund's
      // own CANCELLATION leaves it ("this does not mean that a subscription's autorenewal
      // preference has been deactivated since refunds can be given without cancelling a
      // subscription", RevenueCat's cancellation and expiration reasons), so a REFUND_REVERSED
      // after it brings back a renewing subscription.
      const status: EntitlementStatus = reason === 'SUBSCRIPTION_PAUSED' ? 'paused' : reason === 'CUSTOMER_SUPPORT' ? 'refunded' : 'expired';
      return {
        ...FLAG, action: 'revoke', status, renewal: reason === 'CUSTOMER_SUPPORT' ? 'keep' : 'off',
        expiry: period.expiresAt ? 'set' : null, expiresAt: period.expiresAt, createsRow: true,
      };
    }
    case 'PRODUCT_CHANGE': {
      const pendingProductId = readText(event.new_product_id);
      if (pendingProductId) return { ...flag, pendingProductId, createsRow: false };
      // Google Play names the new product only for a DEFERRED change: without it the replacement was
      // immediate, the old subscription is cancelled, and whichever Play subscription begins after
      // it supersedes it (the new product's INITIAL_PURCHASE, under a new order id).
      if (period.store?.toUpperCase() === 'PLAY_STORE') {
        return { ...flag, status: 'cancelled_active', statusFrom: ['active'], renewal: 'off', pendingProductId: REPLACED_ON_PLAY, createsRow: false };
      }
      return null;
    }
  }
  return null;
}

/** Apple's stores: a subscription cancelled less than 24 hours before its period ends is still charged for the next. */
const APPLE_STORES = new Set(['APP_STORE', 'MAC_APP_STORE']);
export const APPLE_CHARGE_WINDOW_MS = 24 * 3_600_000;

/**
 * Whether a cancellation is of an App Store subscription less than 24 hours before its period ends.
 * Apple charges the renewal in that window ("Subscription automatically renews unless it is canceled
 * at least 24 hours before the end of the current period. Your account will be charged for renewal
 * within 24 hours prior to the end of the current period": the App Store's auto-renewal terms, which
 * RevenueCat's Managing subscriptions page restates as "The Apple subscription terms require users to
 * cancel subscriptions at least 24 hours before the next renewal"), so "you may unexpectedly receive a
 * CANCELLATION event followed by a RENEWAL event" (https://www.revenuecat.com/docs/integrations/webhooks/event-flows,
 * of a trial, the same rule for every period).
 */
function cancelsWithinChargeWindow(period: PeriodFacts, eventAt: string): boolean {
  return APPLE_STORES.has(period.store?.toUpperCase() ?? '') && period.expiresAt !== null
    && Date.parse(period.expiresAt) - Date.parse(eventAt) < APPLE_CHARGE_WINDOW_MS;
}

/**
 * The customer the event names: every id (app_user_id, original_app_user_id, aliases), and the
 * owner candidates: its real ids, app_user_id first; only anonymous ones: app_user_id (or the first).
 */
function identityOf(event: BillingEvent): { named: string[]; candidates: string[] } {
  const appUserId = readId(event.app_user_id);
  const named = unique([appUserId, readId(event.original_app_user_id), ...readIds(event.aliases)].filter((id): id is string => id !== null))
    .slice(0, MAX_IDS_PER_EVENT);
  const real = named.filter((id) => !isAnonymousId(id));
  const candidates = real.length > 0 ? real : appUserId ? [appUserId] : [];
  return { named: appUserId || real.length > 0 ? named : [], candidates };
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
