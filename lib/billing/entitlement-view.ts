import type { EntitlementStatus } from './event-effects.ts';

/**
 * One entitlement as `public.account_entitlements(p_user_id)` returns it (a JSON array of these,
 * snake_case, times as timestamptz JSON strings): of the rows of the products that grant it, the
 * one that grants longest, so it grants whenever any of them does.
 */
export interface EntitlementRow {
  entitlement_id: string;
  status: EntitlementStatus | string;
  will_renew: boolean;
  expires_at: string | null;
  grace_expires_at: string | null;
  product_id: string | null;
  store: string | null;
  environment: string | null;
  period_type: string | null;
}

/** An entitlement as GET /api/me shows it. */
export interface EntitlementView {
  id: string;
  /** Whether it grants access at the time of the request. */
  active: boolean;
  status: string;
  productId: string | null;
  /** ISO 8601; null = never expires. */
  expiresAt: string | null;
  willRenew: boolean;
  graceExpiresAt: string | null;
  store: string | null;
  environment: string | null;
  periodType: string | null;
}

/**
 * Access is computed when read, never stored, so an entitlement lapses on time even when the
 * EXPIRATION event never arrives: `active`, `cancelled_active`, `temporary` and `billing_issue`
 * grant until `expires_at` (null = forever); `grace` until `grace_expires_at`; the rest
 * (`paused`, `expired`, `refunded`, `transferred`, anything unknown) grant nothing.
 * `public.account_entitlements` ranks the rows of one entitlement by the same rule: keep both in step.
 */
export function isEntitlementActive(row: Pick<EntitlementRow, 'status' | 'expires_at' | 'grace_expires_at'>, now: Date): boolean {
  switch (row.status) {
    case 'active':
    case 'cancelled_active':
    case 'temporary':
    case 'billing_issue':
      return row.expires_at === null || now.getTime() < Date.parse(row.expires_at);
    case 'grace': {
      // A grace row always has its grace expiry; should one lack it, fall back to the period's end.
      const until = row.grace_expires_at ?? row.expires_at;
      return until === null || now.getTime() < Date.parse(until);
    }
    default:
      return false;
  }
}

/** Map one stored row to the API shape, with `active` computed at `now`. */
export function toEntitlementView(row: EntitlementRow, now: Date): EntitlementView {
  return {
    id: row.entitlement_id,
    active: isEntitlementActive(row, now),
    status: row.status,
    productId: row.product_id,
    expiresAt: toIso(row.expires_at),
    willRenew: row.will_renew,
    graceExpiresAt: toIso(row.grace_expires_at),
    store: row.store,
    environment: row.environment,
    periodType: row.period_type,
  };
}

/** Map what `account_entitlements` returned (an array, or null) to the API list. */
export function toEntitlementViews(rows: EntitlementRow[] | null | undefined, now: Date): EntitlementView[] {
  return (rows ?? []).map((row) => toEntitlementView(row, now));
}

function toIso(value: string | null): string | null {
  return value === null ? null : new Date(value).toISOString();
}
