import { authenticateOperator } from '#lib/auth/operator-secret.ts';
import { getConfig } from '#lib/config.ts';
import { endpointSettings } from '#lib/events/endpoints.ts';
import { readOutboxOverview } from '#lib/events/operate.ts';
import { defineRoute, json } from '#lib/http/route.ts';

// GET /api/admin/events/endpoints - each event endpoint with its backlog, dead letters, last delivery and last failure
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  GET: async (request) => {
    authenticateOperator(request, 'admin');
    // Settings the service refuses are shown with why (the setting to fix, never a secret), not answered as 503.
    return json(await readOutboxOverview(endpointSettings(getConfig())));
  },
});
