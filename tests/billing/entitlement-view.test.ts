import { describe, expect, it } from 'vitest';
import { isEntitlementActive, toEntitlementView, toEntitlementViews, type EntitlementRow } from '../../lib/billing/entitlement-view.ts';

// Access is computed when read, at an injected `now`; an entitlement lapses on time even when
// the EXPIRATION event never arrives.
const NOW = new Date('2026-05-01T12:00:00Z');
const BEFORE = '2026-05-01T11:59:59.999+00:00';
const AFTER = '2026-05-01T12:00:00.001+00:00';
const AT_NOW = '2026-05-01T12:00:00+00:00';

const cases: { status: string; expires: string | null; grace?: string | null; active: boolean }[] = [
  { status: 'active', expires: AFTER, active: true },
  { status: 'active', expires: AT_NOW, active: false },
  { status: 'active', expires: BEFORE, active: false },
  { status: 'active', expires: null, active: true },
  { status: 'cancelled_active', expires: AFTER, active: true },
  { status: 'cancelled_active', expires: BEFORE, active: false },
  { status: 'temporary', expires: AFTER, active: true },
  { status: 'temporary', expires: BEFORE, active: false },
  { status: 'billing_issue', expires: AFTER, active: true },
  { status: 'billing_issue', expires: BEFORE, active: false },
  { status: 'grace', expires: BEFORE, grace: AFTER, active: true },
  { status: 'grace', expires: BEFORE, grace: BEFORE, active: false },
  { status: 'grace', expires: AFTER, grace: null, active: true },
  { status: 'paused', expires: AFTER, active: false },
  { status: 'expired', expires: AFTER, active: false },
  { status: 'expired', expires: null, active: false },
  { status: 'refunded', expires: AFTER, active: false },
  { status: 'transferred', expires: null, active: false },
  { status: 'some_future_status', expires: null, active: false },
];

describe('isEntitlementActive', () => {
  it.each(cases)('$status until $expires (grace $grace): active = $active', ({ status, expires, grace, active }) => {
    expect(isEntitlementActive({ status, expires_at: expires, grace_expires_at: grace ?? null }, NOW)).toBe(active);
  });
});

describe('toEntitlementView', () => {
  const row: EntitlementRow = {
    entitlement_id: 'pro', status: 'grace', will_renew: false, expires_at: '2026-04-30T10:00:00+00:00', grace_expires_at: '2026-05-16T10:00:00+00:00',
    product_id: 'pro_monthly', store: 'APP_STORE', environment: 'PRODUCTION', period_type: 'NORMAL',
  };

  it('maps a stored row to the API shape, times in ISO 8601, active computed at now', () => {
    expect(toEntitlementView(row, NOW)).toEqual({
      id: 'pro', active: true, status: 'grace', productId: 'pro_monthly', expiresAt: '2026-04-30T10:00:00.000Z', willRenew: false,
      graceExpiresAt: '2026-05-16T10:00:00.000Z', store: 'APP_STORE', environment: 'PRODUCTION', periodType: 'NORMAL',
    });
    expect(toEntitlementView(row, new Date('2026-05-17T00:00:00Z')).active).toBe(false);
  });

  it('keeps null expiries null (lifetime) and maps a whole list, or none', () => {
    expect(toEntitlementViews([{ ...row, status: 'active', expires_at: null, grace_expires_at: null }], NOW)).toMatchObject([{ active: true, expiresAt: null, graceExpiresAt: null }]);
    expect(toEntitlementViews(null, NOW)).toEqual([]);
  });
});
