import { authenticateOperator } from '#lib/auth/operator-secret.ts';
import { defineRoute, json } from '#lib/http/route.ts';
import { readServiceStatus } from '#lib/operations/status.ts';

// GET /api/admin/status - the operator's view: webhooks, sync queue, maintenance, schema, optional parts
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  GET: async (request) => {
    authenticateOperator(request, 'admin');
    return json(await readServiceStatus());
  },
});
