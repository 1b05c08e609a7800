import type { EntitlementStatus } from './event-effects.ts';

/** One source of an entitlement (a product's row) as `public.account_entitlements` returns it. */
export interface EntitlementSourceRow {
  product_id: string | null;
  store: string | null;
  environment: string | null;
  /** The effective status at the time asked: a granting status whose access has ended reads `expired`. */
  status: EntitlementStatus | string;
  active: boolean;
  expires_at: string | null;
  grace_expires_at: string | null;
  will_renew: boolean;
}

/**
 * One entitlement as `public.account_entitlements(p_user_id, p_now)` returns it (a JSON array of
 * these, snake_case, times as timestamptz JSON strings): the source that grants longest, with its
 * effective status and `active` at p_now, computed in SQL from the rows' `grants_until` column (the
 * one rule for "grants"), `will_renew` true when any source that grants then renews, and every source.
 */
export interface EntitlementRow {
  entitlement_id: string;
  active: boolean;
  status: EntitlementStatus | string;
  will_renew: boolean;
  expires_at: string | null;
  grace_expires_at: string | null;
  product_id: string | null;
  store: string | null;
  environment: string | null;
  period_type: string | null;
  /** When a snapshot of RevenueCat's record last confirmed the row shown (null: never). */
  synced_at: string | null;
  sources: EntitlementSourceRow[];
}

/** A source of an entitlement as GET /api/me shows it. */
export interface EntitlementSourceView {
  productId: string | null;
  store: string | null;
  environment: string | null;
  status: string;
  active: boolean;
  /** ISO 8601; null = never expires. */
  expiresAt: string | null;
  graceExpiresAt: string | null;
  willRenew: boolean;
}

/** An entitlement as GET /api/me shows it. */
export interface EntitlementView {
  id: string;
  /** Whether it grants access at the time of the request. */
  active: boolean;
  /** The effective state at the time of the request (`expired` once a period lapsed, even without its EXPIRATION). */
  status: string;
  productId: string | null;
  /** ISO 8601; null = never expires. */
  expiresAt: string | null;
  /** Whether any source that grants now will renew. */
  willRenew: boolean;
  graceExpiresAt: string | null;
  store: string | null;
  environment: string | null;
  periodType: string | null;
  /** When RevenueCat's own record last confirmed it (a sync); null: known from webhooks only. */
  syncedAt: string | null;
  /** Every product that grants or granted it, the one shown first. */
  sources: EntitlementSourceView[];
}

/** Map one row of `account_entitlements` to the API shape (times in ISO 8601). */
export function toEntitlementView(row: EntitlementRow): EntitlementView {
  return {
    id: row.entitlement_id,
    active: row.active,
    status: row.status,
    productId: row.product_id,
    expiresAt: toIso(row.expires_at),
    willRenew: row.will_renew,
    graceExpiresAt: toIso(row.grace_expires_at),
    store: row.store,
    environment: row.environment,
    periodType: row.period_type,
    syncedAt: toIso(row.synced_at ?? null),
    sources: (row.sources ?? []).map((source) => ({
      productId: source.product_id,
      store: source.store,
      environment: source.environment,
      status: source.status,
      active: source.active,
      expiresAt: toIso(source.expires_at),
      graceExpiresAt: toIso(source.grace_expires_at),
      willRenew: source.will_renew,
    })),
  };
}

/** Map what `account_entitlements` returned (an array, or null) to the API list. */
export function toEntitlementViews(rows: EntitlementRow[] | null | undefined): EntitlementView[] {
  return (rows ?? []).map(toEntitlementView);
}

function toIso(value: string | null): string | null {
  return value === null ? null : new Date(value).toISOString();
}
