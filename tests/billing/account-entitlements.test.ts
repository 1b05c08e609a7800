import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ENTITLEMENT_STATUSES } from '../../lib/billing/event-effects.ts';
import type { EntitlementRow } from '../../lib/billing/entitlement-view.ts';
import { DATABASE_KINDS, suiteDatabase, type TestDatabase } from '../support/databases.ts';
import { day, entitlementsOf, isoDay } from './support.ts';

/**
 * account_entitlements shows ONE item per entitlement at a given `now`, chosen among the rows of its
 * products, with `active` and the effective status from the rows' `grants_until` column: the one
 * rule for "grants", also read by every guard of the fold. The rows are written here directly, so
 * any mix of statuses and expiries can be checked against the rule as written below.
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
      `insert into public.entitlements (app_user_id, entitlement_id, product_id, source_key, status, will_renew, expires_at, grace_expires_at, last_event_id, last_event_at)
       values ($1, 'pro', $2, public.billing_source_key('PRODUCTION', 'APP_STORE', $2, null, null), $3, $4, $5, $6, 'evt', $7)`,
      [user, row.product, row.status, row.willRenew, row.expires === null ? null : isoDay(row.expires), row.grace === null ? null : isoDay(row.grace), isoDay(row.lastEvent)],
    );
  }
}

/** The rule, restated: until when a row grants (Infinity: forever; -Infinity: not at all). */
function grantsUntil(row: SourceRow): number {
  const expires = row.expires === null ? Infinity : day(row.expires);
  if (['active', 'cancelled_active', 'temporary', 'billing_issue'].includes(row.status)) return expires;
  if (row.status === 'grace') return row.expires === null && row.grace === null ? Infinity : Math.max(row.expires === null ? -Infinity : expires, row.grace === null ? -Infinity : day(row.grace));
  return -Infinity;
}
const GRANTING = ['active', 'cancelled_active', 'temporary', 'billing_issue', 'grace'];

const row = (product: string, status: string, expires: number | null, fields: Partial<SourceRow> = {}): SourceRow =>
  ({ product, status, expires, grace: null, willRenew: false, lastEvent: 0, ...fields });

const cases: { name: string; rows: SourceRow[]; shown: string; willRenew?: boolean }[] = [
  { name: 'a lifetime beside a cancelled monthly: the lifetime', rows: [row('monthly', 'cancelled_active', 30, { lastEvent: 20 }), row('lifetime', 'active', null, { lastEvent: 5 })], shown: 'lifetime' },
  { name: 'an active monthly beside a refunded lifetime: the monthly', rows: [row('monthly', 'active', 60, { willRenew: true }), row('lifetime', 'refunded', 33, { lastEvent: 33 })], shown: 'monthly' },
  { name: 'a lapsed monthly (no EXPIRATION yet) beside a refunded lifetime: the monthly', rows: [row('monthly', 'active', 30), row('lifetime', 'refunded', 40, { lastEvent: 40 })], shown: 'monthly' },
  { name: 'in grace until day 46 beside a yearly until day 40: the grace', rows: [row('monthly', 'grace', 30, { grace: 46 }), row('yearly', 'cancelled_active', 40)], shown: 'monthly' },
  { name: 'nothing grants: the latest news', rows: [row('monthly', 'expired', 60, { lastEvent: 60 }), row('lifetime', 'refunded', null, { lastEvent: 33 })], shown: 'monthly' },
  { name: 'the same end: the one that renews', rows: [row('a', 'cancelled_active', 30), row('b', 'active', 30, { willRenew: true })], shown: 'b' },
  // Class 10: a cancelled yearly shown (it grants longest) beside a renewing monthly: it will renew.
  { name: 'a cancelled yearly beside a renewing monthly: the yearly, and it will renew', rows: [row('yearly', 'cancelled_active', 300), row('monthly', 'active', 30, { willRenew: true })],
    shown: 'yearly', willRenew: true },
  { name: 'a renewing monthly that lapsed beside a cancelled yearly: will not renew', rows: [row('yearly', 'cancelled_active', 300), row('monthly', 'active', 0.5, { willRenew: true })],
    shown: 'yearly', willRenew: false },
];

// Status and expiry -> what the API shows at NOW (day 1): access ends AT its expiry.
const statusCases: { status: string; expires: number | null; grace?: number | null; active: boolean; shown: string }[] = [
  { status: 'active', expires: 1.001, active: true, shown: 'active' },
  { status: 'active', expires: 1, active: false, shown: 'expired' },
  { status: 'active', expires: 0.999, active: false, shown: 'expired' },
  { status: 'active', expires: null, active: true, shown: 'active' },
  { status: 'cancelled_active', expires: 1.001, active: true, shown: 'cancelled_active' },
  { status: 'cancelled_active', expires: 0.999, active: false, shown: 'expired' },
  { status: 'temporary', expires: 1.001, active: true, shown: 'temporary' },
  { status: 'temporary', expires: 0.999, active: false, shown: 'expired' },
  { status: 'billing_issue', expires: 1.001, active: true, shown: 'billing_issue' },
  { status: 'billing_issue', expires: 0.999, active: false, shown: 'expired' },
  { status: 'grace', expires: 0.999, grace: 1.001, active: true, shown: 'grace' },
  { status: 'grace', expires: 0.999, grace: 0.999, active: false, shown: 'expired' },
  { status: 'grace', expires: 1.001, grace: null, active: true, shown: 'grace' },
  { status: 'paused', expires: 1.001, active: false, shown: 'paused' },
  { status: 'expired', expires: 1.001, active: false, shown: 'expired' },
  { status: 'expired', expires: null, active: false, shown: 'expired' },
  { status: 'refunded', expires: 1.001, active: false, shown: 'refunded' },
  { status: 'transferred', expires: null, active: false, shown: 'transferred' },
];

describe.each(DATABASE_KINDS)('account_entitlements on %s', (kind) => {
  const db = suiteDatabase(kind);

  it.each(cases)('$name', async ({ rows, shown, willRenew }) => {
    const user = `view-${randomUUID()}`;
    await writeRows(db, user, rows);
    const views = await entitlementsOf(db, user, new Date(day(1)));
    expect(views.map((view) => [view.id, view.productId])).toEqual([['pro', shown]]);
    expect(views[0]!.sources.map((source) => source.productId).sort()).toEqual(rows.map((r) => r.product).sort());
    if (willRenew !== undefined) expect(views[0]!.willRenew).toBe(willRenew);
  });

  it.each(statusCases)('$status until day $expires (grace $grace) at day 1: active $active, shown as $shown', async ({ status, expires, grace, active, shown }) => {
    const user = `status-${randomUUID()}`;
    await writeRows(db, user, [row('monthly', status, expires, { grace: grace ?? null, willRenew: true })]);
    const [view] = await entitlementsOf(db, user, new Date(day(1)));
    // A lapsed period reads as expired and will not renew, from the same column as `active`.
    expect({ active: view!.active, status: view!.status, willRenew: view!.willRenew }).toEqual({ active, status: shown, willRenew: active });
  });

  it('shows a row that grants at any `now` exactly when one of the products grants then, with the rule\'s status', async () => {
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
        // At every boundary and between them (access ends AT its expiry).
        for (let now = -5; now <= 85; now += 5) {
          const at = day(now);
          const shown = (await db.adapter.call('account_entitlements', { p_user_id: user, p_now: new Date(at) })) as EntitlementRow[];
          expect(shown).toHaveLength(1);
          const granting = rows.filter((r) => grantsUntil(r) > at);
          expect({ now, active: shown[0]!.active, willRenew: shown[0]!.will_renew })
            .toEqual({ now, active: granting.length > 0, willRenew: granting.some((r) => r.willRenew) });
          const shownRow = rows.find((r) => r.product === shown[0]!.product_id)!;
          expect({ now, status: shown[0]!.status })
            .toEqual({ now, status: GRANTING.includes(shownRow.status) && grantsUntil(shownRow) <= at ? 'expired' : shownRow.status });
        }
      }),
      { numRuns: 40 },
    );
  });
});
