import { authenticateWebhook } from '#lib/auth/webhook-secret.ts';
import { readJsonWith } from '#lib/http/body.ts';
import { defineRoute, json } from '#lib/http/route.ts';
import { applyLeaguesSync } from '#lib/leagues/sync.ts';
import { LEAGUES_SYNC_LIMITS, leaguesSyncBodySchema } from '#lib/leagues/sync-schema.ts';
import { moveOutboxAfterResponse } from '#lib/http/outbox-after-response.ts';

// POST /api/webhooks/leagues-sync - apply a league snapshot batch
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  POST: async (request, { annotate }) => {
    authenticateWebhook(request, 'leagues');
    const body = await readJsonWith(request, leaguesSyncBodySchema, { maxBytes: LEAGUES_SYNC_LIMITS.maxBodyBytes });
    annotate({ source: body.source, deliveryId: body.id ?? null });
    const result = await applyLeaguesSync(body);
    annotate({ upserted: result.upserted, unchanged: result.unchanged, stale: result.stale, deleted: result.deleted, duplicate: result.duplicate ?? false });
    moveOutboxAfterResponse(); // the events it caused, and lapses come due (lib/events/delivery.ts)
    return json(result);
  },
});
