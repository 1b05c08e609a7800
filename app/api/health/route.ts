import { getConfig } from '#lib/config.ts';
import { checkDatabase } from '#lib/health.ts';
import { RETRY_AFTER_SECONDS } from '#lib/http/problem.ts';
import { defineRoute, json } from '#lib/http/route.ts';

// GET /api/health - liveness and database reachability (200, or 503 when the database does not answer)
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  GET: async () => {
    const mode = getConfig().databaseMode;
    const database = await checkDatabase();
    if (database === 'ok') return json({ status: 'ok', database, mode });
    return json({ status: 'degraded', database, mode }, { status: 503, headers: { 'retry-after': String(RETRY_AFTER_SECONDS) } });
  },
});
