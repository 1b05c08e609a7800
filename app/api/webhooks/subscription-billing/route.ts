import { authenticateWebhook } from '#lib/auth/webhook-secret.ts';
import { configuredRecordOptions, recordBillingEvent } from '#lib/billing/record-event.ts';
import { syncMarkedAfterWebhook } from '#lib/billing/sync.ts';
import { billingWebhookBodySchema } from '#lib/billing/webhook-body.ts';
import { crashAfterCommitIfAsked } from '#lib/faults.ts';
import { afterResponse } from '#lib/http/after-response.ts';
import { readJsonWith } from '#lib/http/body.ts';
import { defineRoute, json } from '#lib/http/route.ts';
import { moveOutboxAfterResponse } from '#lib/http/outbox-after-response.ts';

// POST /api/webhooks/subscription-billing - record a RevenueCat event and apply it to entitlements
// RevenueCat counts only a 200 as delivered, so every authenticated, well-formed delivery gets
// exactly 200 { received: true }: new, duplicate, TEST, unknown type, no app_user_id alike. An event
// that cannot say everything (a TRANSFER, a refund, a new product) marks its subscribers in the
// same transaction; the sync from RevenueCat runs after the response, so it never delays the 200.
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  POST: async (request, { annotate }) => {
    authenticateWebhook(request, 'subscription');
    const body = await readJsonWith(request, billingWebhookBodySchema);
    annotate({ eventId: body.event.id, type: body.event.type });
    const { duplicate, outcome, ownerId, syncIds, usersNoted, plan } = await recordBillingEvent(body, configuredRecordOptions(new Date()));
    crashAfterCommitIfAsked(plan.eventId); // reliability suite only; inert unless FAULT_CRASH_AFTER_COMMIT is set (lib/faults.ts)
    annotate({ ownerId, duplicate, outcome, reason: plan.ignoredReason, syncIds: syncIds.length });
    if (syncIds.length > 0) afterResponse(() => syncMarkedAfterWebhook(syncIds, plan.eventId));
    moveOutboxAfterResponse({ usersNoted }); // the events it caused, and lapses come due (lib/events/delivery.ts)
    return json({ received: true });
  },
});
