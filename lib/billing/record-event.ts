import { callDb } from '../db/index.ts';
import { describeEventEffects, type BillingEventPlan } from './event-effects.ts';
import type { BillingWebhookBody } from './webhook-body.ts';

export type BillingEventOutcome = 'applied' | 'stale' | 'ignored';

export interface RecordBillingEventResult {
  /** The event id was already recorded: nothing was done again; `outcome` is the first delivery's. */
  duplicate: boolean;
  /** applied: some entitlement changed; stale: every effect was older than the stored state; ignored: record-only. */
  outcome: BillingEventOutcome;
  plan: BillingEventPlan;
}

export interface RecordBillingEventOptions {
  now: Date;
  /** BILLING_IGNORE_SANDBOX: record sandbox events without applying them. */
  ignoreSandbox: boolean;
}

/**
 * Record a RevenueCat event and apply its effects: ONE call of `public.record_billing_event`, so
 * the event row and the entitlement changes commit together or not at all, and a repeated event id
 * changes nothing. Safe to call again after any failure (RevenueCat retries with the same id); a
 * DbError from an unavailable database becomes 503 + Retry-After in the route.
 */
export async function recordBillingEvent(body: BillingWebhookBody, options: RecordBillingEventOptions): Promise<RecordBillingEventResult> {
  const plan = describeEventEffects(body.event, options.now);
  const result = await callDb<{ duplicate: boolean; outcome: BillingEventOutcome }>('record_billing_event', {
    p_body: body,
    p_plan: plan,
    p_ignore_sandbox: options.ignoreSandbox,
  });
  return { duplicate: result.duplicate, outcome: result.outcome, plan };
}
