import { authenticateOperator } from '#lib/auth/operator-secret.ts';
import { deadLettersQuerySchema, listDeadLetters } from '#lib/events/operate.ts';
import { readQueryWith } from '#lib/http/query.ts';
import { defineRoute, json } from '#lib/http/route.ts';

// GET /api/admin/events/dead-letters?endpoint=<id>&limit=<n> - deliveries whose retries ran out, newest first
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  GET: async (request) => {
    authenticateOperator(request, 'admin');
    const query = readQueryWith(request, deadLettersQuerySchema);
    return json(await listDeadLetters(query));
  },
});
