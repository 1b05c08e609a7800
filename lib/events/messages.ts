import { toEntitlementView, type EntitlementRow, type EntitlementView } from '../billing/entitlement-view.ts';
import type { EventMessage } from './attempt.ts';
import type { StoredEvent } from './outbox.ts';

/**
 * What a receiver gets for an event of the outbox: Standard Webhooks' recommended body,
 * `{type, timestamp, data}`, with `data.userId` and `data.sequence`; entitlements and wallet links
 * as GET /api/me shows them. Made from the stored event alone, so every attempt, retry and replay
 * sends the same bytes under the same `webhook-id`.
 */
export function eventMessage(event: StoredEvent): EventMessage {
  const timestamp = new Date(event.created_at).toISOString();
  const body = { type: event.type, timestamp, data: { userId: event.user_id, sequence: Number(event.sequence), ...eventData(event) } };
  return { id: webhookId(event.event_id), type: event.type, timestamp, body: JSON.stringify(body) };
}

/** The receiver's idempotency key: the event's id, the same on every attempt. */
export function webhookId(eventId: string): string {
  return `evt_${eventId}`;
}

// What a receiver acts on; `syncedAt` and `sources` change without a change of access.
export const TOLD_FIELDS = ['status', 'active', 'willRenew', 'productId', 'store', 'environment', 'periodType', 'expiresAt', 'graceExpiresAt'] as const;

function eventData(event: StoredEvent): Record<string, unknown> {
  const data = event.data as { entitlement?: EntitlementRow; previous?: EntitlementRow; reason?: string; wallet?: unknown };
  switch (event.type) {
    case 'entitlement.granted':
      return { entitlement: toEntitlementView(data.entitlement!) };
    case 'entitlement.updated': {
      const entitlement = toEntitlementView(data.entitlement!);
      const previous = toEntitlementView(data.previous!);
      return { entitlement, previous, changed: changedFields(previous, entitlement) };
    }
    case 'entitlement.revoked':
      return { entitlement: toEntitlementView(data.entitlement!), reason: data.reason };
    case 'wallet.linked':
    case 'wallet.unlinked':
      return { wallet: data.wallet };
    default:
      return {};
  }
}

export function changedFields(before: EntitlementView, after: EntitlementView): string[] {
  return TOLD_FIELDS.filter((field) => before[field] !== after[field]);
}
