import { maintainBilling, restAfterBusyCall, type BillingMaintenance } from './billing/maintenance.ts';
import { callDb } from './db/index.ts';

/**
 * Retention and maintenance, one job: billing's event log first (lib/billing/maintenance.ts:
 * partitions made ahead keep its inserts working; checkpoints, then old months dropped), with at
 * most half the budget; then every other rule, SQL behind one entry point
 * (supabase/schemas/08_maintenance.sql, `public.run_maintenance(p_now, p_budget_ms)`),
 * called again while it reports work left and time remains. GET /api/cron/maintenance (Vercel
 * Cron) and `npm run db:maintain` both run it.
 */

/**
 * Work per database call. A call is one transaction and holds what it locked (the rows it deletes,
 * each customer it checkpoints) until it commits: a webhook for one of those customers waits for
 * it. Kept short, so that wait is at most about half a second, far under the 5 s a request waits
 * for a lock (lib/db/postgres.ts).
 */
export const MAINTENANCE_CALL_BUDGET_MS = 500;

/** Work per cron run; the function may run 30 s (vercel.json), and a call can overrun its budget by one batch. */
export const MAINTENANCE_RUN_BUDGET_MS = 20_000;

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type MaintenanceCounts = { [key: string]: Json };

export interface MaintenanceReport extends MaintenanceCounts {
  /** Everything due was done; false: the next run goes on where this one stopped. */
  done: boolean;
  /** Calls of run_maintenance this run made (billing's own are in `billing.calls`). */
  calls: number;
}

export interface RunMaintenanceOptions {
  /** How long to keep calling (a call started before the end finishes its own budget). */
  budgetMs: number;
  callBudgetMs?: number;
  /** The time the rules count from; default the database's clock. */
  now?: Date;
  /** Told after each call of the other rules (the CLI prints progress). */
  onCall?: (result: MaintenanceCounts) => void;
  /** Told after each call of billing's step, with what that call did. */
  onBillingCall?: (call: BillingMaintenance) => void;
}

export async function runMaintenance(options: RunMaintenanceOptions): Promise<MaintenanceReport> {
  const started = performance.now();
  const callBudgetMs = options.callBudgetMs ?? MAINTENANCE_CALL_BUDGET_MS;
  const billing = await maintainBilling({ now: options.now ?? new Date(), budgetMs: Math.max(1, options.budgetMs / 2), callBudgetMs, onCall: options.onBillingCall });
  let total: MaintenanceCounts = {};
  let calls = 0;
  let done = false;
  do {
    const remaining = options.budgetMs - (performance.now() - started);
    const callStarted = performance.now();
    const result = await callDb<MaintenanceCounts>('run_maintenance', {
      p_now: options.now ?? null,
      p_budget_ms: Math.max(1, Math.min(callBudgetMs, Math.floor(remaining))),
    });
    calls++;
    options.onCall?.(result);
    total = addMaintenanceCounts(total, result);
    done = result.done === true;
    // Rests only before another call (not after the last one, nor past the run's budget).
    if (!done && performance.now() - started < options.budgetMs) await restAfterBusyCall(performance.now() - callStarted, callBudgetMs);
  } while (!done && performance.now() - started < options.budgetMs);
  return { ...total, billing: billing as unknown as MaintenanceCounts, done: done && billing.done, calls };
}

/**
 * Two calls' results as one: numbers (counts, milliseconds) add up, anything else (done, flags)
 * is the later call's, nested objects alike, so a part this module does not know (billing's own
 * step) adds up too.
 */
export function addMaintenanceCounts(total: MaintenanceCounts, next: MaintenanceCounts): MaintenanceCounts {
  const sum: MaintenanceCounts = { ...total };
  for (const [key, value] of Object.entries(next)) {
    const before = total[key];
    if (typeof value === 'number' && typeof before === 'number') sum[key] = before + value;
    else if (isObject(value) && isObject(before)) sum[key] = addMaintenanceCounts(before, value);
    else sum[key] = value;
  }
  return sum;
}

function isObject(value: Json | undefined): value is MaintenanceCounts {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
