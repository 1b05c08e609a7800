import type { EntitlementStatus } from '#lib/billing/event-effects.ts';

/**
 * How the account page says an entitlement's status beside its active/inactive badge: words a
 * subscriber reads, never the API's value with its underscores ("active cancelled active"). Null:
 * the badge says it all. A status this table does not know reads as its value, spaced.
 */
export const ENTITLEMENT_STATUS_WORDS: Record<EntitlementStatus, string | null> = {
  active: null,
  cancelled_active: 'cancelled: access until the period ends',
  temporary: 'temporary access',
  grace: 'payment failed: grace period',
  billing_issue: 'payment failed',
  paused: 'paused',
  expired: 'expired',
  refunded: 'refunded',
  transferred: 'moved to another account',
};

export function describeEntitlementStatus(status: string): string | null {
  return Object.hasOwn(ENTITLEMENT_STATUS_WORDS, status) ? ENTITLEMENT_STATUS_WORDS[status as EntitlementStatus] : status.replace(/_/g, ' ');
}
