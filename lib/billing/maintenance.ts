import { getConfig } from '../config.ts';
import { callDb } from '../db/index.ts';
import { planStoredEvents } from './record-event.ts';

/**
 * The billing part of maintenance (supabase/migrations/*_billing_retention.sql, billing_maintain):
 * month partitions made ahead, a checkpoint for every customer group with events in a month that
 * leaves the retention (BILLING_EVENTS_RETENTION_MONTHS), then that month dropped with its dedupe
 * keys. Checkpointing folds a group's history under the group's lock, which a call holds until it
 * commits, so the work goes in short calls (`callBudgetMs`, well under the 5 s a webhook waits for
 * a lock) until it is done or `budgetMs` is spent. Folding needs each event's plan: events stored by
 * a version that kept none get theirs computed here (the decision code is TypeScript), once per run.
 */
export interface BillingMaintenance {
  /** Every month before the cutoff is gone (false: the next run goes on). */
  done: boolean;
  /** Another run held the billing maintenance lock. */
  skipped?: boolean;
  partitionsMade: number;
  checkpoints: number;
  partitionsDropped: string[];
  dedupeKeysPruned: number;
  /** Groups left for the next run because webhooks held them (lock timeout). */
  busy: number;
  /** Subscribers whose stored events still lack a plan. */
  plansMissing: string[];
  cutoff: string;
  calls: number;
}

export async function maintainBilling(options: { now: Date; budgetMs: number; callBudgetMs: number }): Promise<BillingMaintenance> {
  const started = performance.now();
  const config = getConfig();
  const planned = new Set<string>();
  let total: BillingMaintenance | undefined;
  for (;;) {
    const remaining = options.budgetMs - (performance.now() - started);
    const result = await callDb<Omit<BillingMaintenance, 'calls'>>('billing_maintain', {
      p_now: options.now,
      p_budget_ms: Math.max(1, Math.min(options.callBudgetMs, Math.floor(remaining))),
      p_retention_months: config.billingEventsRetentionMonths,
    });
    total = total
      ? {
        ...result,
        partitionsMade: total.partitionsMade + result.partitionsMade,
        checkpoints: total.checkpoints + result.checkpoints,
        partitionsDropped: [...total.partitionsDropped, ...result.partitionsDropped],
        dedupeKeysPruned: total.dedupeKeysPruned + result.dedupeKeysPruned,
        calls: total.calls + 1,
      }
      : { ...result, calls: 1 };
    if (result.skipped || result.done || performance.now() - started >= options.budgetMs) return total;
    const unplanned = (result.plansMissing ?? []).filter((id) => !planned.has(id));
    if (unplanned.length > 0) {
      await planStoredEvents(unplanned, { ignoreSandbox: config.billingIgnoreSandbox });
      for (const id of unplanned) planned.add(id);
    } else if (result.checkpoints === 0 && result.partitionsDropped.length === 0 && result.dedupeKeysPruned === 0) {
      return total; // nothing moved (webhooks hold what is left): the next run goes on
    }
  }
}
