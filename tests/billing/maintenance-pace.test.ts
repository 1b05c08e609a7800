import { describe, expect, it } from 'vitest';
import { maintainBilling, type BillingMaintenance } from '../../lib/billing/maintenance.ts';
import { DATABASE_KINDS, suiteDatabase } from '../support/databases.ts';
import { customersWaitingInAnOldMonth } from './support.ts';

/**
 * Maintenance beside live webhooks: with more to do than a call's budget, it rests as long as a
 * call took before the next one, so it never holds the database in back-to-back calls.
 */
describe.each(DATABASE_KINDS)('billing maintenance with a backlog, on %s', (kind) => {
  const db = suiteDatabase(kind);

  it('rests between busy calls as long as each took, and still finishes the backlog', async () => {
    // Work for several calls however fast the machine: 300 checkpoints take well over 10 ms (about
    // 0.1 ms each on Postgres, more on PGlite), so the first call ends on its budget and is busy.
    const { users } = await customersWaitingInAnOldMonth(db, 'pace', 300);
    const calls: { at: number; call: BillingMaintenance }[] = [];
    const callBudgetMs = 10;
    const result = await maintainBilling({
      now: new Date(), budgetMs: 60_000, callBudgetMs,
      onCall: (call) => calls.push({ at: performance.now(), call }),
    });
    expect(result.checkpoints).toBeGreaterThanOrEqual(users.length);
    expect(result.done).toBe(true);
    const busy = calls.slice(0, -1).filter(({ call }) => call.ms >= callBudgetMs / 2);
    expect(busy.length).toBeGreaterThan(0);
    // Between the end of a busy call and the end of the next lie the rest (at least the busy call's
    // time in the database) and the next call (at least its own time there).
    for (const { at, call } of busy) {
      const next = calls[calls.findIndex((entry) => entry.at === at) + 1]!;
      expect(next.at - at).toBeGreaterThanOrEqual(call.ms + next.call.ms - 2);
    }
  });
});
