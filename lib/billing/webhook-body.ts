import { z } from 'zod';

/** At most this many characters in `event.id` (RevenueCat's ids are UUIDs, but not always). */
export const MAX_EVENT_ID_LENGTH = 256;

/**
 * The body RevenueCat POSTs to the subscription webhook: `{ api_version, event: { id, type, ... } }`.
 *
 * Only the envelope is validated: `event` must be an object with a non-empty string `id` (the
 * dedupe key) and a string `type`. Everything else is optional, may be null, and is kept as sent
 * (passthrough), because RevenueCat adds event types and fields without notice and a delivery we
 * refuse is a delivery it retries five times and then drops. What the other fields mean is read
 * defensively by `describeEventEffects`, never trusted to have a shape.
 */
export const billingWebhookBodySchema = z.looseObject({
  event: z.looseObject({
    id: z.string().min(1, 'must be a non-empty string').max(MAX_EVENT_ID_LENGTH, `must be at most ${MAX_EVENT_ID_LENGTH} characters`),
    type: z.string(),
  }),
});

export type BillingWebhookBody = z.output<typeof billingWebhookBodySchema>;
/** One RevenueCat event: `id` and `type` checked, every other field unknown until read. */
export type BillingEvent = BillingWebhookBody['event'];
