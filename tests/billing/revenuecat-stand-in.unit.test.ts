import { describe, expect, it } from 'vitest';
import type { StoredRow } from '../../lib/billing/explain.ts';
import { recordOf } from '../../lib/billing/revenuecat-stand-in.ts';

/** A stored row of the monthly product: `purchased` and `expires` as ISO times. */
const row = (source: string, transaction: string, purchased: string, expires: string, status = 'active'): StoredRow => ({
  app_user_id: 'ana', entitlement_id: 'pro', product_id: 'com.example.pro.monthly', source_key: source, status, will_renew: status === 'active',
  expires_at: expires, grace_expires_at: null, pending_product_id: null, store: 'APP_STORE', environment: 'PRODUCTION', period_type: 'NORMAL',
  original_transaction_id: transaction, transaction_id: transaction, period_purchased_at: purchased, auto_resume_at: null,
  last_event_id: `evt-${transaction}`, last_event_at: purchased, granted_at: purchased, origin: 'webhook', synced_at: null,
  grants_until: status === 'active' ? expires : '-infinity',
});

describe('the stand-in\'s v1 record', () => {
  const expired = row('a-first-key', '3000', '2026-10-01T00:00:00.000Z', '2026-10-31T00:00:00.000Z', 'expired');
  const bought = row('z-second-key', '3100', '2026-11-28T00:00:00.000Z', '2026-12-28T00:00:00.000Z');

  // v1 keys subscriptions by product: it shows the latest purchase, whatever order the rows come in
  // (their source keys, digests); showing the first, a refresh confirmed nothing.
  it.each([['older row first', [expired, bought]], ['newer row first', [bought, expired]]])('shows a product bought again after it expired as its latest purchase (%s)', (_name, rows) => {
    const record = recordOf(rows);
    expect(record.subscriptions?.['com.example.pro.monthly']).toMatchObject({
      store_transaction_id: '3100', purchase_date: '2026-11-28T00:00:00.000Z', original_purchase_date: '2026-11-28T00:00:00.000Z', expires_date: '2026-12-28T00:00:00.000Z',
    });
    expect(record.entitlements?.pro).toMatchObject({ expires_date: '2026-12-28T00:00:00.000Z' });
  });

  it('never dates original_purchase_date after purchase_date (a row granted after its period began)', () => {
    const grantedLate = { ...bought, granted_at: '2026-12-01T00:00:00.000Z' };
    expect(recordOf([grantedLate]).subscriptions?.['com.example.pro.monthly']).toMatchObject({ original_purchase_date: '2026-11-28T00:00:00.000Z', purchase_date: '2026-11-28T00:00:00.000Z' });
  });
});
