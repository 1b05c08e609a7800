import { createHash, randomUUID } from 'node:crypto';
import { z } from 'zod';

/** At most this many characters in `event.id` (RevenueCat's ids are UUIDs, but not always). */
export const MAX_EVENT_ID_LENGTH = 256;
/** The prefix of an id made from an event's content, for an event that came without one. */
export const CONTENT_ID_PREFIX = 'sha256:';
/**
 * Where the parsed body of an event that came without an id keeps the digest of its content: a
 * symbol, so nothing a sender writes can set it (JSON has no symbols) and the stored body never
 * carries it. An explicit id, even one shaped like a digest, is only ever an id.
 */
export const CONTENT_DIGEST: unique symbol = Symbol('billing.contentDigest');

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
 * `id` is taken too. It is recognised by a digest of its content (`body[CONTENT_DIGEST]`): the same
 * content again within RevenueCat's retry window is a redelivery (a duplicate), later it is a new
 * event (the database decides: record_billing_event). Its id, kept in the stored body, is the digest
 * and a random part (`sha256:<hex>:<uuid>`), so each one recorded is an event of its own that no
 * explicit id can claim beforehand. One without `type` is an unknown type: recorded, acknowledged,
 * no effect.
 */
export const billingWebhookBodySchema = z.looseObject({
  event: z.looseObject({
    id: z.string().min(1, 'must be a non-empty string').max(MAX_EVENT_ID_LENGTH, `must be at most ${MAX_EVENT_ID_LENGTH} characters`).nullish()
      .describe(`The event's id, the dedupe key (RevenueCat always sends one). Absent or null: the event is recognised by a digest of its content: the same content delivered again within RevenueCat's retry window (3 hours) is a duplicate, later it is a new event (stored as \`${CONTENT_ID_PREFIX}<hex>:<uuid>\`).`),
    type: optionalText('Kind of billing event (INITIAL_PURCHASE, RENEWAL, CANCELLATION, ...). Absent, null or unknown: recorded and acknowledged, no effect.'),
    app_user_id: optionalText('The app user the event concerns (absent in a TRANSFER, which names transferred_from and transferred_to).'),
    product_id: optionalText('The product the event concerns.'),
  }),
}).transform((body): BillingWebhookBody => {
  const type = body.event.type ?? '';
  if (body.event.id != null) return { ...body, event: { ...body.event, id: body.event.id, type } };
  const digest = contentDigest(body.event);
  return { ...body, event: { ...body.event, id: `${CONTENT_ID_PREFIX}${digest}:${randomUUID()}`, type }, [CONTENT_DIGEST]: digest };
});

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
  /** Set for an event that came without an id: the SHA-256 (hex) of its content. */
  [CONTENT_DIGEST]?: string;
  [field: string]: unknown;
}

/** A digest of the event's content: the same JSON value (whatever its key order or spacing) gives the same digest. */
export function contentDigest(event: Record<string, unknown>): string {
  const content = { ...event };
  delete content.id;
  return createHash('sha256').update(canonicalJson(content), 'utf8').digest('hex');
}

function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).filter(([, item]) => item !== undefined).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([key, item]) => `${JSON.stringify(key)}:${canonicalJson(item)}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}
