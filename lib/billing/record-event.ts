import { publishAccountChange } from '../account-changes.ts';
import { getConfig } from '../config.ts';
import { callDbGathered, type GatheredFunction } from '../db/gathered-calls.ts';
import { callDb, DbError } from '../db/index.ts';
import { describeEventEffects, type BillingEventPlan } from './event-effects.ts';
import { CONTENT_DIGEST, type BillingEvent, type BillingWebhookBody } from './webhook-body.ts';

export type BillingEventOutcome = 'applied' | 'stale' | 'ignored';

export interface RecordBillingEventResult {
  /** The event id was already recorded: nothing was done again; `outcome` is the first delivery's. */
  duplicate: boolean;
  /** applied: some entitlement changed; stale: nothing changed (newer events already say more); ignored: nothing to apply. */
  outcome: BillingEventOutcome;
  /** Whose entitlements it changed (the database picks among the plan's candidates). */
  ownerId: string | null;
  /** Subscribers it marked for a sync from RevenueCat (to run after the response). */
  syncIds: string[];
  /**
   * Whether the outbox may have something to send because of it: it changed what a Supabase user
   * reads (its commit may have written outbound events), or it is a duplicate (the first delivery's
   * events may be waiting still). Otherwise nothing was written for a receiver.
   */
  usersNoted: boolean;
  plan: BillingEventPlan;
}

export interface RecordBillingEventOptions {
  now: Date;
  /** Record sandbox events without applying them (config.billingIgnoreSandbox: BILLING_SANDBOX_GRANTS and the mode). */
  ignoreSandbox: boolean;
  /** Which events mark their subscribers for a sync (BILLING_SYNC_AFTER); 'none' without a RevenueCat key. */
  syncAfter: 'gaps' | 'all' | 'none';
}

/** The options the configuration gives: sandbox handling, and syncs only with a RevenueCat key. */
export function configuredRecordOptions(now: Date): RecordBillingEventOptions {
  const config = getConfig();
  return { now, ignoreSandbox: config.billingIgnoreSandbox, syncAfter: config.revenuecat ? config.billingSyncAfter : 'none' };
}

/** Events that would wait for a pooled connection go together, each still its own transaction (lib/db/gathered-calls.ts). */
export const RECORD_BILLING_EVENT: GatheredFunction = { fn: 'record_billing_event', procedure: 'record_billing_events' };

/**
 * Record a RevenueCat event and apply its effects: ONE transaction of `public.record_billing_event`,
 * so the event row and the entitlement changes commit together or not at all, and a repeated event
 * id changes nothing. Safe to call again after any failure (RevenueCat retries with the same id); a
 * DbError from an unavailable database becomes 503 + Retry-After in the route. At most one database
 * call per event: under load, events that would wait for a connection share one
 * (RECORD_BILLING_EVENT), and a customer's held lock still delays no other customer's event
 * (docs/decisions/gathered-calls.md).
 *
 * An event that came without an id is recognised by the digest of its content instead (the same
 * content within RevenueCat's retry window is a duplicate; see webhook-body.ts).
 *
 * Once per subscriber after an upgrade, an out-of-order event meets stored events that have no plan
 * yet (recorded before plans were stored): their plans are computed here and the call is repeated.
 */
export async function recordBillingEvent(body: BillingWebhookBody, options: RecordBillingEventOptions): Promise<RecordBillingEventResult> {
  const plan = describeEventEffects(body.event, options.now, { ignoreSandbox: options.ignoreSandbox });
  const record = () => callDbGathered<Omit<RecordBillingEventResult, 'plan'>>(RECORD_BILLING_EVENT, {
    p_body: body, p_plan: plan, p_sync_after: options.syncAfter, p_content_digest: body[CONTENT_DIGEST] ?? null,
  });
  let result;
  try {
    result = await record();
  } catch (error) {
    const ids = plansMissingFor(error);
    if (!ids) throw error;
    await planStoredEvents(ids, options);
    result = await record();
  }
  // Committed: the owner's open pages (and those of ids a transfer took it from) read it again.
  if (!result.duplicate && result.outcome === 'applied') publishAccountChange([result.ownerId, ...plan.movedIds, ...(plan.joinedIds ?? [])], 'entitlements', options.now);
  return {
    duplicate: result.duplicate, outcome: result.outcome, ownerId: result.ownerId ?? null, syncIds: result.syncIds ?? [],
    usersNoted: result.duplicate || result.usersNoted === true, plan,
  };
}

/** The subscriber ids whose stored events lack plans, when that is why the database refused. */
function plansMissingFor(error: unknown): string[] | null {
  if (!(error instanceof DbError) || error.reason !== 'billing_plans_missing' || !error.detail) return null;
  const ids: unknown = JSON.parse(error.detail);
  return Array.isArray(ids) ? ids.filter((id): id is string => typeof id === 'string') : null;
}

/** Compute and store the plans of the stored events of these subscribers that have none. */
export async function planStoredEvents(subscriberIds: string[], options: Pick<RecordBillingEventOptions, 'ignoreSandbox'>): Promise<number> {
  let stored = 0;
  for (;;) {
    const events = await callDb<{ event_id: string; event_at: string; body: { event: BillingEvent } }[]>('billing_events_without_plan', { p_ids: subscriberIds });
    if (events.length === 0) return stored;
    const plans = events.map((row) => ({
      eventId: row.event_id,
      // An event stored without a usable timestamp was ordered at its receive time, kept in event_at.
      plan: describeEventEffects(row.body.event, new Date(row.event_at), options),
    }));
    const updated = await callDb<number>('billing_store_plans', { p_plans: plans });
    stored += updated;
    if (updated < events.length) throw new Error(`billing_store_plans stored ${updated} of ${events.length} plans`);
  }
}
