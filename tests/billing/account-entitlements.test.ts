import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ENTITLEMENT_STATUSES } from '../../lib/billing/event-effects.ts';
import { isEntitlementActive, type EntitlementRow } from '../../lib/billing/entitlement-view.ts';
import { DATABASE_KINDS, suiteDatabase, type TestDatabase } from '../support/databases.ts';
import { day, entitlementsOf, isoDay } from './support.ts';

/**
 * account_entitlements shows ONE row per entitlement, chosen among the rows of its products
 * without a clock; `active` is computed by the reader at its own `now`. The rows are written here
 * directly, so any mix of statuses and expiries can be checked.
 */
interface SourceRow {
  product: string;
  status: string;
  /** Days after T0; null = never. */
  expires: number | null;
  grace: number | null;
  willRenew: boolean;
  lastEvent: number;
}

async function writeRows(db: TestDatabase, user: string, rows: SourceRow[]): Promise<void> {
  for (const row of rows) {
    await db.sql(
      `insert into public.entitlements (app_user_id, entitlement_id, product_id, product_key, status, will_renew, expires_at, grace_expires_at, last_event_id, last_event_at)
       values ($1, 'pro', $2, md5('PRODUCTION:' || $2), $3, $4, $5, $6, 'evt', $7)`,
      [user, row.product, row.status, row.willRenew, row.expires === null ? null : isoDay(row.expires), row.grace === null ? null : isoDay(row.grace), isoDay(row.lastEvent)],
    );
  }
}

const asStored = (row: SourceRow): Pick<EntitlementRow, 'status' | 'expires_at' | 'grace_expires_at'> => ({
  status: row.status, expires_at: row.expires === null ? null : isoDay(row.expires), grace_expires_at: row.grace === null ? null : isoDay(row.grace),
});

const row = (product: string, status: string, expires: number | null, fields: Partial<SourceRow> = {}): SourceRow =>
  ({ product, status, expires, grace: null, willRenew: false, lastEvent: 0, ...fields });

const cases: { name: string; rows: SourceRow[]; shown: string }[] = [
  { name: 'a lifetime beside a cancelled monthly: the lifetime', rows: [row('monthly', 'cancelled_active', 30, { lastEvent: 20 }), row('lifetime', 'active', null, { lastEvent: 5 })], shown: 'lifetime' },
  { name: 'an active monthly beside a refunded lifetime: the monthly', rows: [row('monthly', 'active', 60, { willRenew: true }), row('lifetime', 'refunded', 33, { lastEvent: 33 })], shown: 'monthly' },
  { name: 'a lapsed monthly (no EXPIRATION yet) beside a refunded lifetime: the monthly', rows: [row('monthly', 'active', 30), row('lifetime', 'refunded', 40, { lastEvent: 40 })], shown: 'monthly' },
  { name: 'in grace until day 46 beside a yearly until day 40: the grace', rows: [row('monthly', 'grace', 30, { grace: 46 }), row('yearly', 'cancelled_active', 40)], shown: 'monthly' },
  { name: 'nothing grants: the latest news', rows: [row('monthly', 'expired', 60, { lastEvent: 60 }), row('lifetime', 'refunded', null, { lastEvent: 33 })], shown: 'monthly' },
  { name: 'the same end: the one that renews', rows: [row('a', 'cancelled_active', 30), row('b', 'active', 30, { willRenew: true })], shown: 'b' },
];

describe.each(DATABASE_KINDS)('account_entitlements on %s', (kind) => {
  const db = suiteDatabase(kind);

  it.each(cases)('$name', async ({ rows, shown }) => {
    const user = `view-${randomUUID()}`;
    await writeRows(db, user, rows);
    const views = await entitlementsOf(db, user, new Date(day(1)));
    expect(views.map((view) => [view.id, view.productId])).toEqual([['pro', shown]]);
  });

  it('shows a row that grants at any `now` exactly when one of the products grants then', async () => {
    const someDay = fc.integer({ min: 0, max: 8 }).map((d) => d * 10);
    const source = fc.record({
      status: fc.constantFrom(...ENTITLEMENT_STATUSES),
      expires: fc.option(someDay, { nil: null }),
      grace: fc.option(someDay, { nil: null }),
      willRenew: fc.boolean(),
      lastEvent: someDay,
    });
    await fc.assert(
      fc.asyncProperty(fc.array(source, { minLength: 1, maxLength: 4 }), async (sources) => {
        const rows = sources.map((s, i): SourceRow => ({ ...s, product: `product-${i}` }));
        const user = `prop-${randomUUID()}`;
        await writeRows(db, user, rows);
        const shown = (await db.adapter.call('account_entitlements', { p_user_id: user })) as EntitlementRow[];
        expect(shown).toHaveLength(1);
        // At every boundary and between them (access ends AT its expiry).
        for (let now = -5; now <= 85; now += 5) {
          const at = new Date(day(now));
          expect({ now, active: isEntitlementActive(shown[0]!, at) }).toEqual({ now, active: rows.some((r) => isEntitlementActive(asStored(r), at)) });
        }
      }),
      { numRuns: 40 },
    );
  });
});
