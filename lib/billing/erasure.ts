import { getConfig } from '../config.ts';
import { callDb } from '../db/index.ts';
import { log } from '../log.ts';
import { deleteV2Customer } from '../revenuecat/v2.ts';

/** At most this many customers are deleted at RevenueCat per sweep (the rest wait for the next). */
export const DELETIONS_PER_SWEEP = 10;

export interface RevenueCatDeletionsResult {
  /** Customers RevenueCat deleted (or had no record of). */
  deleted: number;
  /** Deletions that failed; tried again by a later sweep. */
  failed: number;
  /** Erased ids dropped without asking RevenueCat (REVENUECAT_DELETE_ON_ERASE off). */
  dropped: number;
}

/**
 * After a user is erased (public.billing_forget_user queues their id), delete their customer at
 * RevenueCat too when the operator opted in (REVENUECAT_DELETE_ON_ERASE=1, with the REST v2
 * settings): REST v2 `DELETE /v2/projects/{project_id}/customers/{id}`. Not opted in, the queued ids
 * are dropped unsent, so the id is not kept. Run by the billing sweep (GET /api/cron/billing-sync)
 * before it syncs. Deleting the customer at RevenueCat cancels no store subscription: the erasure
 * list (billing_erased_ids) is what keeps later events from bringing anything back.
 */
export async function processRevenueCatDeletions(limit = DELETIONS_PER_SWEEP): Promise<RevenueCatDeletionsResult> {
  const revenuecat = getConfig().revenuecat;
  const v2 = revenuecat?.v2;
  const ids = await callDb<string[]>('billing_revenuecat_deletions_claim', { p_limit: limit });
  if (ids.length === 0) return { deleted: 0, failed: 0, dropped: 0 };
  if (!revenuecat || !v2?.deleteOnErase) {
    return { deleted: 0, failed: 0, dropped: await callDb<number>('billing_revenuecat_deletions_done', { p_ids: ids }) };
  }
  const done: string[] = [];
  let failed = 0;
  for (const id of ids) {
    try {
      await deleteV2Customer(id, { apiUrl: revenuecat.apiUrl, apiKey: v2.apiKey, projectId: v2.projectId, timeoutMs: revenuecat.timeoutMs });
      done.push(id);
    } catch (error) {
      failed++;
      // The id itself is not logged: it belongs to an erased user.
      log.warn({ err: { message: (error as Error).message } }, 'billing erasure: RevenueCat customer deletion failed; tried again later');
    }
  }
  if (done.length > 0) await callDb('billing_revenuecat_deletions_done', { p_ids: done });
  return { deleted: done.length, failed, dropped: 0 };
}
