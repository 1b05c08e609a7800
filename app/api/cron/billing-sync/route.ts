import { authenticateOperator } from '#lib/auth/operator-secret.ts';
import { processRevenueCatDeletions } from '#lib/billing/erasure.ts';
import { SWEEP_BUDGET_MS, sweepBillingSync } from '#lib/billing/sync.ts';
import { defineRoute, json, type RouteHandler } from '#lib/http/route.ts';
import { recordedRun } from '#lib/operations/runs.ts';
import { moveOutboxAfterResponse } from '#lib/http/outbox-after-response.ts';

// GET or POST /api/cron/billing-sync - the sweep: sync marked and due subscribers from RevenueCat
// Vercel Cron sends GET; a scheduler that POSTs (Supabase Cron's net.http_post) is answered the same.
// Bounded to SWEEP_BUDGET_MS of work (the function may run 30 s); what is left is due in the next run.
// First, erased users' RevenueCat customers are deleted (REVENUECAT_DELETE_ON_ERASE) or their ids dropped.
// Without a RevenueCat REST key: 200, nothing to do, and the answer says why.
const sweep: RouteHandler = async (request, { annotate }) => {
  authenticateOperator(request, 'cron');
  const deletions = await processRevenueCatDeletions();
  annotate({ revenuecatDeletions: deletions.deleted, revenuecatDeletionsFailed: deletions.failed, erasedIdsDropped: deletions.dropped });
  const result = await recordedRun('billing_sweep', () => sweepBillingSync(SWEEP_BUDGET_MS));
  annotate({ ...result });
  moveOutboxAfterResponse(); // the events it caused, and lapses come due (lib/events/delivery.ts)
  return json(result);
};

export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({ GET: sweep, POST: sweep });
