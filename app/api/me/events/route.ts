import { ACCOUNT_EVENTS_TIMING, requireAccountEventsServed, requireAccountStreamSlot, subscribeAccountChanges } from '#lib/account-changes.ts';
import { eventStreamResponse } from '#lib/http/event-stream.ts';
import { defineRoute } from '#lib/http/route.ts';
import { authenticateBearerOrPageSession } from '#lib/web/session-cookie.ts';

// GET /api/me/events - server-sent events: `account_changed` each time the caller's account changes.
// Local mode only (a deployment broadcasts through Supabase Realtime). A Bearer token, or the account
// page's session cookie, since a browser's EventSource sends no headers.
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  GET: async (request) => {
    requireAccountEventsServed();
    const { userId } = await authenticateBearerOrPageSession(request);
    requireAccountStreamSlot(userId);
    return eventStreamResponse(request, {
      ...ACCOUNT_EVENTS_TIMING,
      start: (send) => subscribeAccountChanges(userId, (change) => send('account_changed', change)),
    });
  },
});
