import { getConfig } from '../config.ts';
import { callDb } from '../db/index.ts';
import { planStoredEvents } from './record-event.ts';

/**
 * The billing part of maintenance (supabase/migrations/*_billing_retention.sql, billing_maintain):
 * month partitions made ahead, a checkpoint for every customer group with events in a month that
 * leaves the retention (BILLING_EVENTS_RETENTION_MONTHS), then that month dropped with its dedupe
 * keys. Checkpointing folds a group's history, which needs each event's plan: events recorded by a
 * version that stored none get theirs computed here (the decision code is TypeScript) and the run
 * goes on. Bounded by `budgetMs`; what is left is done by the next run.
 */
export interface BillingMaintenance {
  /** Another run held the maintenance lock; this one did nothing. */
  skipped?: boolean;
  partitionsMade: number;
  checkpoints: number;
  partitionsDropped: string[];
  dedupeKeysPruned: number;
  /** Groups left for the next run because webhooks held them (lock timeout). */
  busy: number;
  /** Subscriber groups whose stored events still lack a plan after this run. */
  plansMissing: string[];
  cutoff: string;
}

export async function maintainBilling(now: Date, budgetMs: number): Promise<BillingMaintenance> {
  const started = Date.now();
  const retentionMonths = getConfig().billingEventsRetentionMonths;
  const run = (budget: number) => callDb<BillingMaintenance>('billing_maintain', { p_now: now, p_budget_ms: Math.max(0, Math.round(budget)), p_retention_months: retentionMonths });
  let result = await run(budgetMs);
  // Once per run: plan what an older version stored without plans, then checkpoint those groups.
  if (!result.skipped && result.plansMissing.length > 0) {
    await planStoredEvents(result.plansMissing, { ignoreSandbox: getConfig().billingIgnoreSandbox });
    const again = await run(budgetMs - (Date.now() - started));
    result = {
      ...again,
      partitionsMade: result.partitionsMade + again.partitionsMade,
      checkpoints: result.checkpoints + again.checkpoints,
      partitionsDropped: [...result.partitionsDropped, ...again.partitionsDropped],
      dedupeKeysPruned: result.dedupeKeysPruned + again.dedupeKeysPruned,
      busy: again.busy,
    };
  }
  return result;
}
