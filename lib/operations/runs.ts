import { callDb } from '../db/index.ts';
import { log } from '../log.ts';

/**
 * The last run of each background job, kept for the status (lib/operations/status.ts): the sweep
 * (GET /api/cron/billing-sync) and maintenance (GET /api/cron/maintenance, `npm run db:maintain`)
 * each record when they started and what they did, replacing their previous run. Their callers
 * (the cron routes, `npm run db:maintain`) record it through recordedRun: the jobs themselves live
 * in the domains, which the operator layer reads and which never import it.
 */
export type OperatorRunName = 'billing_sweep' | 'maintenance';

/** Never throws: the run did its work, and its caller still gets its answer when the record fails (logged). */
export async function recordRun(name: OperatorRunName, startedAt: Date, result: object): Promise<void> {
  try {
    await callDb('operator_record_run', { p_name: name, p_started_at: startedAt, p_result: result });
  } catch (error) {
    log.warn({ run: name, err: { message: (error as Error).message } }, 'could not record the run for the status');
  }
}

/** Run a background job and record its run (when it started, what it returned) for the status. */
export async function recordedRun<T extends object>(name: OperatorRunName, job: () => Promise<T>): Promise<T> {
  const startedAt = new Date();
  const result = await job();
  await recordRun(name, startedAt, result);
  return result;
}
