import { authenticateOperator } from '#lib/auth/operator-secret.ts';
import { defineRoute, json, type RouteHandler } from '#lib/http/route.ts';
import { MAINTENANCE_RUN_BUDGET_MS, runMaintenance } from '#lib/maintenance.ts';
import { recordedRun } from '#lib/operations/runs.ts';
import { moveOutboxAfterResponse } from '#lib/http/outbox-after-response.ts';

// GET or POST /api/cron/maintenance - apply every retention rule (Vercel Cron sends GET, daily; a
// scheduler that POSTs, such as Supabase Cron's net.http_post, is answered the same; `npm run
// db:maintain` runs the same work). Bounded to MAINTENANCE_RUN_BUDGET_MS of work (the function may
// run 30 s); `done: false` means the next run goes on. Idempotent, and two runs at once share the work.
const maintain: RouteHandler = async (request, { annotate }) => {
  authenticateOperator(request, 'cron');
  const report = await recordedRun('maintenance', () => runMaintenance({ budgetMs: MAINTENANCE_RUN_BUDGET_MS }));
  annotate({ maintenance: report });
  moveOutboxAfterResponse(); // the events it caused, and lapses come due (lib/events/delivery.ts)
  return json(report);
};

export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({ GET: maintain, POST: maintain });
