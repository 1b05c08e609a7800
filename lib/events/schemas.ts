import { z } from 'zod';
import { entitlementSchema, walletLinkSchema } from '../openapi/responses.ts';

/**
 * The bodies of the outbound lifecycle events (Standard Webhooks' recommended shape: `type`,
 * `timestamp`, `data`), as zod schemas: the OpenAPI document's `webhooks` are generated from them,
 * and the client package's event types from that document. The entitlement and the wallet link are
 * the API's own schemas (what GET /api/me shows), so a receiver reads one shape in both places.
 */

export const EVENT_TYPES = [
  'entitlement.granted',
  'entitlement.updated',
  'entitlement.revoked',
  'wallet.linked',
  'wallet.unlinked',
  'customer.deleted',
] as const;
export type EventType = (typeof EVENT_TYPES)[number];

/** Why an entitlement stopped granting; receivers must accept values not listed here (new ones may come). */
export const REVOKE_REASONS = ['expired', 'refunded', 'transferred', 'paused', 'billing_issue', 'removed'] as const;

/** The names `entitlement.updated` lists in `changed`: the fields of an entitlement as GET /api/me shows it. */
export const ENTITLEMENT_FIELDS = Object.keys(entitlementSchema.shape) as [keyof typeof entitlementSchema.shape, ...(keyof typeof entitlementSchema.shape)[]];

const isoTime = z.iso.datetime({ offset: true });

const eventData = {
  userId: z.string().meta({ description: 'The user the event is about' }),
  sequence: z.int().nonnegative().meta({
    description: "The user's event counter: one more than the user's previous event. A user's events are delivered at least once and in this order, so a sequence already seen is a repeat (also recognisable by its `webhook-id`).",
  }),
};

function eventSchema<T extends EventType, D extends z.ZodRawShape>(type: T, id: string, description: string, data: D) {
  return z
    .object({
      type: z.literal(type),
      timestamp: isoTime.meta({ description: 'When the change committed (not when this attempt was sent: that is the `webhook-timestamp` header)' }),
      data: z.object({ ...eventData, ...data }),
    })
    .meta({ id, description });
}

export const entitlementGrantedEventSchema = eventSchema('entitlement.granted', 'EntitlementGrantedEvent', 'An entitlement started granting access', {
  entitlement: entitlementSchema,
});

export const entitlementUpdatedEventSchema = eventSchema('entitlement.updated', 'EntitlementUpdatedEvent', 'An entitlement that grants changed (its expiry, renewal, product, ...) and still grants: `entitlement` is it now, `previous` as the previous event told it, `changed` the fields that differ', {
  // `entitlement` is the entitlement now, `previous` as the previous event told it. (No .meta here:
  // a copy of a schema with an id would be a second component of the same name.)
  entitlement: entitlementSchema,
  previous: entitlementSchema,
  changed: z.array(z.enum(ENTITLEMENT_FIELDS)).meta({ description: 'The fields of `entitlement` that differ from `previous`' }),
});

export const entitlementRevokedEventSchema = eventSchema('entitlement.revoked', 'EntitlementRevokedEvent', 'An entitlement stopped granting access (`entitlement.active` is false)', {
  entitlement: entitlementSchema,
  reason: z.string().meta({
    description: `Why it stopped granting: ${REVOKE_REASONS.map((reason) => `\`${reason}\``).join(', ')}. Other values may be added: treat an unknown one as a revocation without a known cause.`,
    examples: [...REVOKE_REASONS],
  }),
});

export const walletLinkedEventSchema = eventSchema('wallet.linked', 'WalletLinkedEvent', 'A wallet was linked to the user', {
  wallet: walletLinkSchema,
});

export const walletUnlinkedEventSchema = eventSchema('wallet.unlinked', 'WalletUnlinkedEvent', 'A wallet link of the user was removed (`wallet` is the link as it was)', {
  wallet: walletLinkSchema,
});

export const customerDeletedEventSchema = eventSchema('customer.deleted', 'CustomerDeletedEvent', "The user was erased: delete what you keep about them. Their last event", {});

/** Each event type's body schema. */
export const EVENT_SCHEMAS = {
  'entitlement.granted': entitlementGrantedEventSchema,
  'entitlement.updated': entitlementUpdatedEventSchema,
  'entitlement.revoked': entitlementRevokedEventSchema,
  'wallet.linked': walletLinkedEventSchema,
  'wallet.unlinked': walletUnlinkedEventSchema,
  'customer.deleted': customerDeletedEventSchema,
} as const satisfies Record<EventType, z.ZodType>;

export type AccountEvent = z.output<(typeof EVENT_SCHEMAS)[EventType]>;
