import { createHash } from 'node:crypto';
import { z } from 'zod';

/** At most this many characters in `event.id` (RevenueCat's ids are UUIDs, but not always). */
export const MAX_EVENT_ID_LENGTH = 256;
/** The prefix of an id made from an event's content, for an event that came without one. */
export const CONTENT_ID_PREFIX = 'sha256:';

const optionalText = (description: string) => z.string().nullish().describe(description);

/**
 * The body RevenueCat POSTs to the subscription webhook: `{ api_version, event: { id, type, ... } }`.
 *
 * Only the envelope is validated: `event` must be an object; `id`, `type`, `app_user_id` and
 * `product_id`, when present, strings. Everything else is optional, may be null, and is kept as
 * sent (passthrough), because RevenueCat adds event types and fields without notice and a delivery
 * we refuse is a delivery it retries five times and then drops. What the other fields mean is read
 * defensively by `describeEventEffects`, never trusted to have a shape.
 *
 * The published contract names `type`, `app_user_id` and `product_id` and no id, so an event without
 * `id` is taken too: it is identified by a digest of its content (`sha256:<hex>`, kept in the stored
 * body), so its redelivery is a duplicate like any other. One without `type` is an unknown type:
 * recorded, acknowledged, no effect.
 */
export const billingWebhookBodySchema = z.looseObject({
  event: z.looseObject({
    id: z.string().min(1, 'must be a non-empty string').max(MAX_EVENT_ID_LENGTH, `must be at most ${MAX_EVENT_ID_LENGTH} characters`).nullish()
      .describe(`The event's id, the dedupe key (RevenueCat always sends one). Absent or null: the event is identified by a digest of its content (\`${CONTENT_ID_PREFIX}<hex>\`), so the same content delivered again is a duplicate.`),
    type: optionalText('Kind of billing event (INITIAL_PURCHASE, RENEWAL, CANCELLATION, ...). Absent, null or unknown: recorded and acknowledged, no effect.'),
    app_user_id: optionalText('The app user the event concerns (absent in a TRANSFER, which names transferred_from and transferred_to).'),
    product_id: optionalText('The product the event concerns.'),
  }),
}).transform((body): BillingWebhookBody => ({
  ...body,
  event: { ...body.event, id: body.event.id ?? contentId(body.event), type: body.event.type ?? '' },
}));

/** One RevenueCat event: `id` and `type` settled, every other field unknown until read. */
export interface BillingEvent {
  id: string;
  type: string;
  app_user_id?: string | null;
  product_id?: string | null;
  [field: string]: unknown;
}
export interface BillingWebhookBody {
  event: BillingEvent;
  [field: string]: unknown;
}

/** A digest of the event's content: the same JSON value (whatever its key order or spacing) gives the same id. */
function contentId(event: Record<string, unknown>): string {
  const { id: _absent, ...content } = event;
  return `${CONTENT_ID_PREFIX}${createHash('sha256').update(canonicalJson(content), 'utf8').digest('hex')}`;
}

function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).filter(([, item]) => item !== undefined).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([key, item]) => `${JSON.stringify(key)}:${canonicalJson(item)}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}
