import type { z } from 'zod';
import { EVENT_SCHEMAS, EVENT_TYPES, type EventType } from '../events/schemas.ts';
import { DEAD_LETTER_AFTER_MS, FIRST_RETRY_DELAY_MS, MAX_RETRY_DELAY_MS } from '../events/retry.ts';
import { DELIVERY_TIMEOUT_MS } from '../events/attempt.ts';

/**
 * The OpenAPI 3.1 `webhooks` of the document: the events this service sends to the receivers its
 * operator configured (EVENTS_WEBHOOK_URL / EVENTS_WEBHOOK_ENDPOINTS), one entry an event type,
 * each a POST whose body is the event (lib/events/schemas.ts, registered as components) and whose
 * headers are Standard Webhooks' three. They are not operations a client calls, so they are not
 * under `paths`; a client generator types them apart (openapi-typescript: `webhooks`).
 */

const HOURS = 60 * 60_000;

export const EVENT_DELIVERY_RULES = 'Signed as Standard Webhooks (https://www.standardwebhooks.com/): verify `webhook-signature` over `{webhook-id}.{webhook-timestamp}.{body}` with your endpoint secret before trusting the body ' +
  '(the client package\'s `verifyWebhook` does, and so does any Standard Webhooks library), and refuse a `webhook-timestamp` more than 5 minutes from your clock. ' +
  `Answer any 2xx within ${DELIVERY_TIMEOUT_MS / 1000} s to acknowledge; anything else (another status, a redirect, no complete answer in time) is retried, ` +
  `first after about ${FIRST_RETRY_DELAY_MS / 1000} s, then ever longer apart (at most ${MAX_RETRY_DELAY_MS / HOURS} h), for ${DEAD_LETTER_AFTER_MS / (24 * HOURS)} days from the first attempt. ` +
  'Delivery is at least once and in order per user: the same event may come twice (same `webhook-id`, same `data.sequence`), so apply each once. New event types may be added: acknowledge a type you do not know.';

const HEADERS = [
  { name: 'webhook-id', description: 'The event\'s id, `evt_<uuid>`: the same on every attempt of the event (deduplicate by it)', schema: { type: 'string', pattern: '^evt_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' } },
  { name: 'webhook-timestamp', description: 'When this attempt was sent, in Unix seconds (refuse one far from your clock: a replay)', schema: { type: 'string', pattern: '^[0-9]+$' } },
  { name: 'webhook-signature', description: 'Space-separated `v1,<base64 HMAC-SHA256>` signatures, one per secret of the endpoint (two while a secret is rotated): any one that verifies is enough', schema: { type: 'string', pattern: '^v1,[A-Za-z0-9+/]+={0,2}( v1,[A-Za-z0-9+/]+={0,2})*$' } },
];

const SUMMARIES: Record<EventType, string> = {
  'entitlement.granted': 'An entitlement started granting access',
  'entitlement.updated': 'An entitlement that grants changed',
  'entitlement.revoked': 'An entitlement stopped granting access',
  'wallet.linked': 'A wallet was linked',
  'wallet.unlinked': 'A wallet link was removed',
  'customer.deleted': 'A user was erased',
};

/** "entitlement.granted" -> "entitlementGrantedEvent" */
function webhookOperationId(type: string): string {
  return `${type.split(/[._]/).map((part, index) => (index === 0 ? part : part.charAt(0).toUpperCase() + part.slice(1))).join('')}Event`;
}

/** The document's `webhooks`; `schemaId` names a schema's component. */
export function eventWebhooks(schemaId: (schema: z.ZodType) => string): Record<string, unknown> {
  return Object.fromEntries(EVENT_TYPES.map((type) => [type, {
    post: {
      operationId: webhookOperationId(type),
      summary: SUMMARIES[type],
      description: EVENT_DELIVERY_RULES,
      tags: ['Events'],
      security: [],
      parameters: HEADERS.map((header) => ({ ...header, in: 'header', required: true })),
      requestBody: {
        required: true,
        content: { 'application/json': { schema: { $ref: `#/components/schemas/${schemaId(EVENT_SCHEMAS[type])}` } } },
      },
      responses: {
        '2XX': { description: 'Received: the event is acknowledged and not sent again (the body of the answer is ignored)' },
        default: { description: 'Not received: the event is sent again later (see the retry rule above)' },
      },
    },
  }]));
}
