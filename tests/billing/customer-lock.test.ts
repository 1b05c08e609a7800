import { afterAll, beforeAll, expect, it } from 'vitest';
import { databasePoolFor } from '../../lib/config.ts';
import { replaceDatabase } from '../../lib/db/index.ts';
import { openPostgres } from '../../lib/db/postgres.ts';
import { describeOn, suiteDatabase } from '../support/databases.ts';
import { countAdapterCalls, day, deliver, entitlementsOf, eventRow, holdSubscriberLock, purchase } from './support.ts';

// One customer's held lock (a slow refold, a checkpoint, an operator's explain) may delay that
// customer's webhooks, never another customer's: the held customer's calls wait for the lock on
// their own connections (one sent alone from a gathered call that found the lock held), and every
// other webhook takes a free connection or a gathered call. Through the route, over HTTP, on a real
// Postgres server, with the deployed pool.

describeOn('postgres')('a customer whose lock is held (postgres)', () => {
  const db = suiteDatabase('postgres');
  /** The deployed pool (lib/config.ts), and a lock wait far longer than the test: the held customer's calls wait until released. */
  const poolSize = databasePoolFor(true, undefined).max;
  let adapter: Awaited<ReturnType<typeof openPostgres>> | undefined;
  beforeAll(async () => {
    adapter = await openPostgres({ connectionString: db.url!, max: poolSize, migrate: false, waits: { lockMs: 600_000, callMs: 900_000 } });
    replaceDatabase(adapter);
  });
  afterAll(async () => {
    if (!adapter) return; // the postgres engine is off in this run (TEST_ENGINES)
    replaceDatabase(db.adapter);
    await adapter.close();
  });

  /** How many backends of this test's database wait for an advisory lock (other test files share the server). */
  async function backendsWaitingForLocks(): Promise<number> {
    const rows = await db.sql<{ n: string }>(`select count(*) as n from pg_locks where locktype = 'advisory' and not granted
      and database = (select oid from pg_database where datname = current_database())`);
    return Number(rows[0]!.n);
  }

  async function untilBackendsWaitForLocks(count: number): Promise<void> {
    while ((await backendsWaitingForLocks()) < count) await new Promise((resolve) => setTimeout(resolve, 10));
  }

  it('answers every other customer\'s webhook 200 while the lock is held, with no 503; the held customer\'s after the release', async () => {
    const held = `held-lock-${Date.now()}`;
    const others = Array.from({ length: 3 * poolSize * 4 }, (_, i) => purchase(`${held}-other-${i}`, 0.001, 0, 30));
    // Two of the held customer's events: one reaches the database alone and waits for the lock on a
    // connection; the other comes in the middle of the burst, so it waits for a connection with the
    // others and goes in a gathered call, which sends it alone again when it finds the lock held.
    const heldEvents = [purchase(held, 0.001, 0, 30), purchase(held, 0.002, 0, 30, { transaction_id: `${held}-second` })];
    expect(poolSize).toBeGreaterThan(heldEvents.length);
    const counts = countAdapterCalls(adapter!);
    const release = await holdSubscriberLock(db.url!, held);
    let heldAnswers: Promise<Awaited<ReturnType<typeof deliver>>[]> | undefined;
    let heldAnswered = false;
    try {
      const first = deliver(heldEvents[0]);
      await untilBackendsWaitForLocks(1);
      const half = others.length / 2;
      const otherAnswers = others.slice(0, half).map((body) => deliver(body));
      const second = deliver(heldEvents[1]);
      otherAnswers.push(...others.slice(half).map((body) => deliver(body)));
      heldAnswers = Promise.all([first, second]).finally(() => (heldAnswered = true));

      const answered = await Promise.all(otherAnswers);
      expect(answered.map((response) => response.status)).toEqual(others.map(() => 200));
      expect(answered.every((response) => response.body?.received === true)).toBe(true);
      expect(counts.gathered.length).toBeGreaterThan(0);
      // All of that while the held customer's two events still wait for the lock, each on a
      // connection of its own: the others went through the connections left.
      await untilBackendsWaitForLocks(2);
      expect(heldAnswered).toBe(false);
      expect(await backendsWaitingForLocks()).toBe(2);
      for (const body of others) expect((await eventRow(db, body.event.id))?.count).toBe(1);
      for (const body of heldEvents) expect(await eventRow(db, body.event.id)).toBeUndefined();
    } finally {
      await release();
    }
    // Released: the held customer's webhooks go on and are applied.
    expect((await heldAnswers)?.map((response) => response.status)).toEqual([200, 200]);
    for (const body of heldEvents) expect((await eventRow(db, body.event.id))?.count).toBe(1);
    expect((await entitlementsOf(db, held, new Date(day(1)))).map((view) => view.active)).toEqual([true]);
  });

});
