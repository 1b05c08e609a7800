import { authenticateOperator } from '#lib/auth/operator-secret.ts';
import { explainSubscriber } from '#lib/billing/explain.ts';
import { defineRoute, json } from '#lib/http/route.ts';

// GET /api/admin/billing/subscribers/{appUserId} - why a subscriber has (or lacks) each entitlement, from the stored log
// Reads only: the history is replayed inside a transaction that is rolled back.
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  GET: async (request, { params, annotate }) => {
    authenticateOperator(request, 'admin');
    const appUserId = params.appUserId ?? '';
    annotate({ appUserId });
    return json(await explainSubscriber(appUserId));
  },
});
