import { authenticateWebhook } from '#lib/auth/webhook-secret.ts';
import { recordBillingEvent } from '#lib/billing/record-event.ts';
import { billingWebhookBodySchema } from '#lib/billing/webhook-body.ts';
import { getConfig } from '#lib/config.ts';
import { crashAfterCommitIfAsked } from '#lib/faults.ts';
import { readJsonWith } from '#lib/http/body.ts';
import { defineRoute, json } from '#lib/http/route.ts';

// POST /api/webhooks/subscription-billing - record a RevenueCat event and apply it to entitlements
// RevenueCat counts only a 200 as delivered, so every authenticated, well-formed delivery gets
// exactly 200 { received: true }: new, duplicate, TEST, unknown type, no app_user_id alike.
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  POST: async (request, { annotate }) => {
    authenticateWebhook(request, 'subscription');
    const body = await readJsonWith(request, billingWebhookBodySchema);
    annotate({ eventId: body.event.id, type: body.event.type });
    const { duplicate, outcome, ownerId, plan } = await recordBillingEvent(body, { now: new Date(), ignoreSandbox: getConfig().billingIgnoreSandbox });
    crashAfterCommitIfAsked(plan.eventId); // reliability suite only; inert unless FAULT_CRASH_AFTER_COMMIT is set (lib/faults.ts)
    annotate({ ownerId, duplicate, outcome, reason: plan.ignoredReason });
    return json({ received: true });
  },
});
