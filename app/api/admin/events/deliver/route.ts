import { authenticateOperator } from '#lib/auth/operator-secret.ts';
import { moveOutboxNow } from '#lib/events/delivery.ts';
import { defineRoute, json } from '#lib/http/route.ts';

// POST /api/admin/events/deliver - one outbox run now, as /api/cron/events does, asked by an operator
// (`npm run events:deliver` while the local service holds the embedded database, or `--url`).
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  POST: async (request, { annotate }) => {
    authenticateOperator(request, 'admin');
    const report = await moveOutboxNow();
    annotate({ events: report });
    return json(report);
  },
});
