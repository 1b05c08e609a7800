import { authenticateOperator } from '#lib/auth/operator-secret.ts';
import { sweepBillingSync } from '#lib/billing/sync.ts';
import { defineRoute, json } from '#lib/http/route.ts';

// GET /api/cron/billing-sync - the sweep: sync marked and due subscribers from RevenueCat (Vercel Cron)
// Bounded to 20 s of work (the function may run 30 s); what is left is due in the next run.
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  GET: async (request, { annotate }) => {
    authenticateOperator(request, 'cron');
    const result = await sweepBillingSync(20_000);
    annotate({ ...result });
    return json(result);
  },
});
