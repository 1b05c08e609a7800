import { describe, expect, it } from 'vitest';
import { toEntitlementView, toEntitlementViews, type EntitlementRow } from '../../lib/billing/entitlement-view.ts';

// The API shape of what `account_entitlements` returns. Whether a row grants, and its effective
// status, are decided in SQL (the `grants_until` column): tests/billing/account-entitlements.test.ts.
const row: EntitlementRow = {
  entitlement_id: 'pro', active: true, status: 'grace', will_renew: false, expires_at: '2026-04-30T10:00:00+00:00', grace_expires_at: '2026-05-16T10:00:00+00:00',
  product_id: 'pro_monthly', store: 'APP_STORE', environment: 'PRODUCTION', period_type: 'NORMAL', synced_at: '2026-04-29T00:00:00+00:00',
  sources: [
    { product_id: 'pro_monthly', store: 'APP_STORE', environment: 'PRODUCTION', status: 'grace', active: true, expires_at: '2026-04-30T10:00:00+00:00',
      grace_expires_at: '2026-05-16T10:00:00+00:00', will_renew: false },
    { product_id: 'pro_lifetime', store: 'PLAY_STORE', environment: 'PRODUCTION', status: 'refunded', active: false, expires_at: '2026-04-01T00:00:00+00:00',
      grace_expires_at: null, will_renew: false },
  ],
};

describe('toEntitlementView', () => {
  it('maps a row and its sources to the API shape, times in ISO 8601', () => {
    expect(toEntitlementView(row)).toEqual({
      id: 'pro', active: true, status: 'grace', productId: 'pro_monthly', expiresAt: '2026-04-30T10:00:00.000Z', willRenew: false,
      graceExpiresAt: '2026-05-16T10:00:00.000Z', store: 'APP_STORE', environment: 'PRODUCTION', periodType: 'NORMAL', syncedAt: '2026-04-29T00:00:00.000Z',
      sources: [
        { productId: 'pro_monthly', store: 'APP_STORE', environment: 'PRODUCTION', status: 'grace', active: true, expiresAt: '2026-04-30T10:00:00.000Z',
          graceExpiresAt: '2026-05-16T10:00:00.000Z', willRenew: false },
        { productId: 'pro_lifetime', store: 'PLAY_STORE', environment: 'PRODUCTION', status: 'refunded', active: false, expiresAt: '2026-04-01T00:00:00.000Z',
          graceExpiresAt: null, willRenew: false },
      ],
    });
  });

  it('keeps null expiries null (lifetime) and maps a whole list, or none', () => {
    expect(toEntitlementViews([{ ...row, status: 'active', expires_at: null, grace_expires_at: null }])).toMatchObject([{ active: true, expiresAt: null, graceExpiresAt: null }]);
    expect(toEntitlementViews(null)).toEqual([]);
  });
});
