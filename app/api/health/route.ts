import { getConfig } from '#lib/config.ts';
import { checkDatabase } from '#lib/health.ts';
import { defineRoute, json } from '#lib/http/route.ts';

// GET /api/health - liveness and database reachability (200, or 503 when the database does not answer)
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  GET: async () => {
    const mode = getConfig().databaseMode;
    const database = await checkDatabase();
    return json({ status: database === 'ok' ? 'ok' : 'degraded', database, mode }, { status: database === 'ok' ? 200 : 503, headers: database === 'ok' ? {} : { 'retry-after': '5' } });
  },
});
