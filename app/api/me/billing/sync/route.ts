import { authenticate } from '#lib/auth/session.ts';
import { syncSubscriber } from '#lib/billing/sync.ts';
import { defineRoute, json } from '#lib/http/route.ts';
import { moveOutboxAfterResponse } from '#lib/http/outbox-after-response.ts';

// POST /api/me/billing/sync - refresh the caller's purchases from RevenueCat ("Refresh purchases")
// The caller's app user id is their user id; at most one refresh per 5 s (429 + Retry-After).
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  POST: async (request, { annotate }) => {
    const user = await authenticate(request, { requireLiveSession: true });
    const { entitlements, outcome } = await syncSubscriber(user.userId, { reason: 'user', maxSlotWaitMs: 3000 });
    annotate({ outcome });
    moveOutboxAfterResponse(); // the events it caused, and lapses come due (lib/events/delivery.ts)
    return json({ userId: user.userId, entitlements });
  },
});
