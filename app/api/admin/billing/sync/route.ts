import { authenticateOperator } from '#lib/auth/operator-secret.ts';
import { adminSyncBodySchema, syncKnownSubscriber } from '#lib/billing/sync.ts';
import { readJsonWith } from '#lib/http/body.ts';
import { defineRoute, json } from '#lib/http/route.ts';
import { moveOutboxAfterResponse } from '#lib/http/outbox-after-response.ts';

// POST /api/admin/billing/sync - an operator syncs one subscriber from RevenueCat
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  POST: async (request, { annotate }) => {
    authenticateOperator(request, 'admin');
    const { app_user_id: appUserId } = await readJsonWith(request, adminSyncBodySchema);
    const { entitlements, outcome } = await syncKnownSubscriber(appUserId, 'admin');
    annotate({ appUserId, outcome });
    moveOutboxAfterResponse(); // the events it caused, and lapses come due (lib/events/delivery.ts)
    return json({ appUserId, outcome, entitlements });
  },
});
