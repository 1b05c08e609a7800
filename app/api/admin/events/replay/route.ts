import { authenticateOperator } from '#lib/auth/operator-secret.ts';
import { replay, replayBodySchema } from '#lib/events/operate.ts';
import { readJsonWith } from '#lib/http/body.ts';
import { moveOutboxAfterResponse } from '#lib/http/outbox-after-response.ts';
import { defineRoute, json } from '#lib/http/route.ts';

// POST /api/admin/events/replay - send one event, or those written in a time range, again (to one endpoint or all), under the same webhook-id
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  POST: async (request, { annotate }) => {
    authenticateOperator(request, 'admin');
    const target = await readJsonWith(request, replayBodySchema);
    const result = await replay(target);
    annotate({ replay: { ...target, ...result } });
    moveOutboxAfterResponse(); // sent once the response is out, and by the next cron run
    return json(result);
  },
});
