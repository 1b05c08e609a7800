import pg from 'pg';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { GIVE_WAY_REST_MS, maintainBilling, type BillingMaintenance } from '../../lib/billing/maintenance.ts';
import { DATABASE_KINDS, describeOn, suiteDatabase } from '../support/databases.ts';
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
      // (process.hrtime: a monotonic clock nothing in the process patches.)
      onCall: (call) => calls.push({ at: Number(process.hrtime.bigint()) / 1e6, call }),
    });
    expect(result.checkpoints).toBeGreaterThanOrEqual(users.length);
    expect(result.done).toBe(true);
    expect(result.gaveWay).toBe(0); // nobody else was at work
    const busy = calls.slice(0, -1).flatMap(({ at, call }, index) => (call.ms >= callBudgetMs / 2 ? [{ at, call, next: calls[index + 1]! }] : []));
    expect(busy.length).toBeGreaterThan(0);
    // Between the end of a busy call and the end of the next lie the rest (at least the busy call's
    // time in the database) and the next call (at least its own time there).
    const timings = calls.map(({ at, call }) => `${at.toFixed(1)}: ${call.ms} ms`).join(', ');
    for (const { at, call, next } of busy) {
      expect(next.at - at, `calls (ended at: database ms): ${timings}`).toBeGreaterThanOrEqual(call.ms + next.call.ms - 2);
    }
  });

  it('moves the backlog by a group in a call whose budget is spent before its first group', async () => {
    // (A slow or busy database can spend a call's budget on its partitions alone: the job, which
    // ends a run on a call that moved nothing, would then never get through a backlog.)
    await customersWaitingInAnOldMonth(db, 'first-group', 3);
    const [{ result }] = await db.sql<{ result: { checkpoints: number; done: boolean } }>('select public.billing_maintain(now(), 0) as result');
    expect(result).toMatchObject({ checkpoints: 1, done: false });
  });
});

/**
 * Maintenance gives way to live traffic (public.maintenance_should_give_way): once a call has
 * taken a checkpoint and worked a hundredth of its budget, another client of the database running a statement it began in
 * the last second stops it, and the job rests before the next call. Only a Postgres server has
 * other clients.
 */
describeOn('postgres')('billing maintenance beside other clients (real Postgres server)', () => {
  const db = suiteDatabase('postgres');

  async function otherClient() {
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    const { rows: [{ pid }] } = await client.query<{ pid: number }>('select pg_backend_pid() as pid');
    return { client, pid };
  }

  /** Live traffic: short statements one after another on a client of its own, each begun just now. */
  async function startTraffic() {
    const { client, pid } = await otherClient();
    let on = true;
    const running = (async () => {
      while (on) await client.query('select pg_sleep(0.05)');
    })();
    while ((await db.sql(`select 1 from pg_stat_activity where pid = $1 and state = 'active'`, [pid])).length === 0) await sleep(5);
    return {
      /** Ends it after the statement under way (callable more than once). */
      stop: () => { on = false; },
      async close() {
        on = false;
        await running;
        await client.end();
      },
    };
  }

  it('stops a call for a client at work, rests at least a quarter second, and finishes the backlog once it is gone', async () => {
    const { users } = await customersWaitingInAnOldMonth(db, 'give-way', 300);
    const traffic = await startTraffic();
    const calls: { at: number; call: BillingMaintenance }[] = [];
    // A budget no call reaches before it looks for traffic, even on a loaded machine (a call that
    // ran out of budget first ends on its deadline, not by giving way); it looks after a hundredth
    // of it (2 ms), long before 300 checkpoints are done.
    const callBudgetMs = 200;
    try {
      const result = await maintainBilling({
        now: new Date(), budgetMs: 60_000, callBudgetMs,
        onCall: (call) => {
          calls.push({ at: performance.now(), call });
          if (calls.filter((entry) => entry.call.gaveWay).length === 3) traffic.stop();
        },
      });
      const gaveWay = calls.filter((entry) => entry.call.gaveWay === 1);
      expect(gaveWay.length).toBeGreaterThanOrEqual(3);
      for (const { at, call } of gaveWay.slice(0, 3)) {
        // It checkpointed first, and stopped short of the backlog; the next call came after the rest.
        expect(call.checkpoints).toBeGreaterThan(0);
        expect(call.done).toBe(false);
        const next = calls[calls.findIndex((entry) => entry.at === at) + 1]!;
        expect(next.at - at).toBeGreaterThanOrEqual(GIVE_WAY_REST_MS + next.call.ms - 2);
      }
      expect(result.gaveWay).toBe(gaveWay.length);
      expect(result.checkpoints).toBeGreaterThanOrEqual(users.length);
      expect(result.done).toBe(true);
    } finally {
      await traffic.close();
    }
  });

  it('gives way only after a checkpoint: a first customer a webhook holds is tried, and the call goes on to one it can take', async () => {
    const { users } = await customersWaitingInAnOldMonth(db, 'held-first', 40);
    // The customer maintenance tries first, held as a webhook holds it (its group's lock, in a transaction).
    const [{ group_id: first }] = await db.sql<{ group_id: string }>(
      'select app_user_id as group_id from public.billing_subscribers where pending_since is not null order by pending_since, app_user_id limit 1');
    const holder = await otherClient();
    await holder.client.query('begin');
    await holder.client.query(`select pg_advisory_xact_lock(hashtextextended('billing_group:' || $1, 0))`, [first]);
    const traffic = await startTraffic();
    const calls: BillingMaintenance[] = [];
    // The holder's rollback, awaited before its client ends (ended first, the query under way fails
    // with "Connection terminated", unhandled).
    let released: Promise<unknown> | undefined;
    try {
      const result = await maintainBilling({
        // A call's budget far past the 200 ms a checkpoint waits for a customer's lock, so that a
        // loaded machine's slow checkpoint after it does not end the call on its deadline before it
        // looks for traffic (after a hundredth of the budget, already passed in the lock wait).
        now: new Date(), budgetMs: 60_000, callBudgetMs: 5_000,
        onCall: (call) => {
          calls.push(call);
          if (calls.filter((c) => c.gaveWay).length === 3) {
            traffic.stop();
            released ??= holder.client.query('rollback');
          }
        },
      });
      const gaveWay = calls.filter((call) => call.gaveWay === 1);
      expect(gaveWay.length).toBeGreaterThanOrEqual(3);
      // Each call waited for the held customer first (busy), and still took one before giving way.
      for (const call of gaveWay.slice(0, 3)) {
        expect(call.busy).toBe(1);
        expect(call.checkpoints).toBeGreaterThan(0);
      }
      expect(result.checkpoints).toBeGreaterThanOrEqual(users.length);
      expect(result.done).toBe(true);
    } finally {
      await traffic.close();
      await released;
      await holder.client.end();
    }
  });

  it('does not stop for a statement that has run over a second (a report, not live traffic)', async () => {
    const { users } = await customersWaitingInAnOldMonth(db, 'long-statement', 100);
    const { client, pid } = await otherClient();
    const long = client.query('select pg_sleep(60)').catch(() => undefined);
    try {
      while ((await db.sql(`select 1 from pg_stat_activity where pid = $1 and state = 'active' and query_start < clock_timestamp() - interval '1 second'`, [pid])).length === 0) await sleep(20);
      const result = await maintainBilling({ now: new Date(), budgetMs: 60_000, callBudgetMs: 5 });
      expect(result.gaveWay).toBe(0);
      expect(result.checkpoints).toBeGreaterThanOrEqual(users.length);
      expect(result.done).toBe(true);
    } finally {
      await db.sql('select pg_cancel_backend($1)', [pid]);
      await long;
      await client.end();
    }
  });
});
