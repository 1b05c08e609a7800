import { setTimeout as sleep } from 'node:timers/promises';
import { getConfig } from '../config.ts';
import { callDb } from '../db/index.ts';
import { log } from '../log.ts';
import { planStoredEvents } from './record-event.ts';

/**
 * The billing part of maintenance (supabase/migrations/*_billing_log_bounds.sql, billing_maintain):
 * month partitions made ahead; a checkpoint for every customer group whose events after its last
 * checkpoint include one received in a month that leaves the retention (BILLING_EVENTS_RETENTION_MONTHS);
 * then that month dropped with its dedupe keys. Webhooks take most checkpoints as events arrive,
 * so what is left here is mostly customers who went quiet: a copy of their rows each.
 *
 * Each group is checkpointed in a subtransaction of its own: one that fails (a webhook holding its
 * lock, an error) is logged here, counted in `failed` and tried again by the next call or run, and
 * the month goes anyway, its events kept aside until then. A call is one transaction that holds
 * the groups it checkpointed until it commits, so the work goes in short calls (`callBudgetMs`,
 * well under the 5 s a webhook waits for a lock) until it is done or `budgetMs` is spent. Folding
 * needs each event's plan: events stored by a version that kept none get theirs computed here (the
 * decision code is TypeScript), once per run.
 */
export interface BillingMaintenance {
  /** Every month before the cutoff is gone and no group waits for a checkpoint (false: the next run goes on). */
  done: boolean;
  /** Another run held the billing maintenance lock. */
  skipped?: boolean;
  partitionsMade: number;
  checkpoints: number;
  partitionsDropped: string[];
  /** Events of groups whose checkpoint failed, kept aside when their month was dropped. */
  heldEvents: number;
  dedupeKeysPruned: number;
  /** Content digests of events without an id, past the window in which a redelivery is recognised. */
  contentKeysPruned: number;
  /** Groups left for the next run because webhooks held them (lock timeout). */
  busy: number;
  /** Groups whose checkpoint failed in this run (busy ones included): logged, tried again by the next run. */
  failed: number;
  /** Calls that stopped early because another client of the database was at work (maintenance_should_give_way). */
  gaveWay: number;
  /** Subscribers whose stored events still lack a plan. */
  plansMissing: string[];
  cutoff: string;
  /** The database's time in the call(s), in ms. */
  ms: number;
  calls: number;
}

type MaintainCall = Omit<BillingMaintenance, 'calls' | 'failed' | 'gaveWay'> & { failedGroups?: { groupId: string; error: string }[]; gaveWay?: boolean };

/**
 * Maintenance (billing's step here, the other rules in lib/maintenance.ts) shares the database with
 * live webhooks: after a call that had more to do than its budget allowed, the job rests as long
 * as the call took before the next one. So it uses at most about half of one connection's time and
 * never runs calls back to back, and a backlog takes about twice as long as it would flat out. A
 * call that finished its work does not rest.
 */
export async function restAfterBusyCall(callMs: number, callBudgetMs: number): Promise<void> {
  if (callMs >= callBudgetMs / 2) await sleep(callMs);
}

/**
 * A call that gave way to live traffic (it saw another client at work once it had taken a
 * checkpoint and worked a hundredth of its budget:
 * supabase/schemas/08_maintenance.sql) is followed by a rest of at least a
 * quarter of a second: long enough for a burst of webhooks or app reads to pass, short enough that
 * a backlog under steady traffic still moves (at least one checkpoint a call, a few a second).
 */
export const GIVE_WAY_REST_MS = 250;

export async function restAfterGivingWay(callMs: number): Promise<void> {
  await sleep(Math.max(GIVE_WAY_REST_MS, callMs));
}

export async function maintainBilling(options: { now: Date; budgetMs: number; callBudgetMs: number; onCall?: (call: BillingMaintenance) => void }): Promise<BillingMaintenance> {
  const started = performance.now();
  const config = getConfig();
  const planned = new Set<string>();
  const failed = new Set<string>();
  let total: BillingMaintenance | undefined;
  for (;;) {
    const remaining = options.budgetMs - (performance.now() - started);
    const callStarted = performance.now();
    const { failedGroups = [], gaveWay = false, ...result } = await callDb<MaintainCall>('billing_maintain', {
      p_now: options.now,
      p_budget_ms: Math.max(1, Math.min(options.callBudgetMs, Math.floor(remaining))),
      p_retention_months: config.billingEventsRetentionMonths,
    });
    const callMs = performance.now() - callStarted;
    for (const failure of failedGroups) {
      if (failed.has(failure.groupId)) continue;
      failed.add(failure.groupId);
      log.warn({ groupId: failure.groupId, error: failure.error }, 'billing maintenance: a checkpoint failed; the next run tries it again');
    }
    const call: BillingMaintenance = {
      ...result,
      partitionsMade: result.partitionsMade ?? 0, checkpoints: result.checkpoints ?? 0, partitionsDropped: result.partitionsDropped ?? [],
      heldEvents: result.heldEvents ?? 0, dedupeKeysPruned: result.dedupeKeysPruned ?? 0, contentKeysPruned: result.contentKeysPruned ?? 0,
      busy: result.busy ?? 0, failed: failed.size, gaveWay: gaveWay ? 1 : 0, plansMissing: result.plansMissing ?? [], ms: result.ms ?? 0, calls: 1,
    };
    total = total ? addUp(total, call) : call;
    options.onCall?.(call);
    if (result.skipped || result.done || performance.now() - started >= options.budgetMs) return total;
    const unplanned = call.plansMissing.filter((id) => !planned.has(id));
    if (unplanned.length > 0) {
      await planStoredEvents(unplanned, { ignoreSandbox: config.billingIgnoreSandbox });
      for (const id of unplanned) planned.add(id);
    } else if (gaveWay && call.checkpoints > 0) {
      // (A call gives way only after a checkpoint, so the backlog moves while traffic lasts.)
      await restAfterGivingWay(callMs);
      continue;
    } else if (call.checkpoints === 0 && call.partitionsDropped.length === 0 && call.dedupeKeysPruned === 0 && call.contentKeysPruned === 0) {
      return total; // nothing moved (what is left failed or webhooks hold it): the next run goes on
    }
    await restAfterBusyCall(callMs, options.callBudgetMs);
  }
}

/** Two calls as one: counts add up, months dropped gather, the rest is the later call's. */
function addUp(total: BillingMaintenance, call: BillingMaintenance): BillingMaintenance {
  return {
    ...call,
    partitionsMade: total.partitionsMade + call.partitionsMade,
    checkpoints: total.checkpoints + call.checkpoints,
    partitionsDropped: [...total.partitionsDropped, ...call.partitionsDropped],
    heldEvents: total.heldEvents + call.heldEvents,
    dedupeKeysPruned: total.dedupeKeysPruned + call.dedupeKeysPruned,
    contentKeysPruned: total.contentKeysPruned + call.contentKeysPruned,
    busy: total.busy + call.busy,
    gaveWay: total.gaveWay + call.gaveWay,
    ms: total.ms + call.ms,
    calls: total.calls + 1,
  };
}
