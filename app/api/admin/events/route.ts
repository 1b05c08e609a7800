import { authenticateOperator } from '#lib/auth/operator-secret.ts';
import { eventsQuerySchema, listEventsSince } from '#lib/events/operate.ts';
import { readQueryWith } from '#lib/http/query.ts';
import { defineRoute, json } from '#lib/http/route.ts';

// GET /api/admin/events?since=<ISO>&limit=<n> - the events written since a time, oldest first, each with the exact body a receiver gets (`npm run events:listen` follows them)
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  GET: async (request) => {
    authenticateOperator(request, 'admin');
    const query = readQueryWith(request, eventsQuerySchema);
    return json(await listEventsSince(query));
  },
}, { polled: true });
