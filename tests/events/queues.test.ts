import { beforeEach, expect, it } from 'vitest';
import { describeOn, sessionBeside, suiteDatabase } from '../support/databases.ts';
import { clearOutbox, QUEUES_DUE_NOW } from '../support/outbox.ts';

/**
 * A claim finds each user's head at an endpoint from that queue's row (public.outbound_queues), and
 * deletes the row of a queue it finds empty. A row missing while its queue holds a delivery would
 * keep that delivery waiting for good, so the writer of a delivery holds its queue's row to its
 * commit, and a claim deletes only a row it holds. Each test holds one side open on a connection of
 * its own and runs the other beside it, as two requests at once would. Postgres only (two sessions).
 */
describeOn('postgres')('the queues a claim reads, beside writes that have not committed, on postgres', () => {
  const db = suiteDatabase('postgres');
  const endpoint = 'queues';
  const user = 'queues-user';
  const other = sessionBeside(db);

  beforeEach(async () => {
    await clearOutbox(db);
    await db.sql('insert into public.outbound_endpoints (id) values ($1)', [endpoint]);
  });

  const emit = (sql: (text: string, values?: unknown[]) => Promise<unknown>) => sql(`select public.outbound_emit($1, 'entitlement.updated', '{}')`, [user]);
  const claim = async () => (await db.sql<{ claimed: Array<{ sequence: number }> }>('select public.outbound_claim($1, 10, 60) as claimed', [endpoint]))[0]!.claimed.map((d) => Number(d.sequence));
  const settleDelivered = async () => {
    const [{ ids }] = await db.sql<{ ids: string[] }>("select array_agg(event_id) as ids from public.outbound_deliveries where endpoint_id = $1 and state = 'pending' and leased_until is not null", [endpoint]);
    await db.sql('select public.outbound_settle($1, $2)', [endpoint, JSON.stringify(ids.map((id) => ({ event_id: id, outcome: 'delivered' })))]);
  };
  const queueRows = async () => (await db.sql<{ n: number }>('select count(*)::int as n from public.outbound_queues where endpoint_id = $1 and user_id = $2', [endpoint, user]))[0]!.n;
  /**
   * A user whose one event went, but whose queue's row is still there and due: as a settle leaves it
   * when another transaction held the row (the event marked delivered by hand here).
   */
  async function emptiedQueue(): Promise<void> {
    await emit((text, values) => db.sql(text, values));
    expect(await claim()).toEqual([1]);
    await db.sql("update public.outbound_deliveries set state = 'delivered', delivered_at = now() where endpoint_id = $1", [endpoint]);
    await db.sql(QUEUES_DUE_NOW);
    expect(await queueRows()).toBe(1);
  }

  it('a settle beside an event not yet committed leaves the queue\'s row, and the event goes next', async () => {
    await emit((text, values) => db.sql(text, values));
    expect(await claim()).toEqual([1]);
    await other.query('begin');
    await emit((text, values) => other.query(text, values));
    // The first delivered: its queue looks empty to the settle, but the event's transaction holds the row.
    await settleDelivered();
    expect(await queueRows()).toBe(1);
    await other.query('commit');
    expect(await claim()).toEqual([2]);
    // Delivered too: nothing behind it, and the row goes.
    await settleDelivered();
    expect(await queueRows()).toBe(0);
  });

  it('a claim beside an event not yet committed leaves the queue\'s row, and the event goes at the next claim', async () => {
    await emptiedQueue();
    await other.query('begin');
    await emit((text, values) => other.query(text, values));
    // The event's transaction holds the row: the claim passes it by (it would see the queue empty).
    expect(await claim()).toEqual([]);
    expect(await queueRows()).toBe(1);
    await other.query('commit');
    expect(await claim()).toEqual([2]);
  });

  it('an event written while a claim holds the empty queue\'s row it is deleting waits for it, then puts the row back', async () => {
    await emptiedQueue();
    await other.query('begin');
    expect((await other.query<{ claimed: unknown[] }>('select public.outbound_claim($1, 10, 60) as claimed', [endpoint])).rows[0]!.claimed).toEqual([]);
    const written = emit((text, values) => db.sql(text, values));
    // The event's statement waits on the claim's deleted row (a lock wait, not a clock).
    await expect.poll(async () => (await db.sql<{ n: number }>(
      "select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and query like '%outbound_emit%'"))[0]!.n, { timeout: 10_000 }).toBe(1);
    await other.query('commit');
    await written;
    expect(await queueRows()).toBe(1);
    expect(await claim()).toEqual([2]);
  });

  it('a queue\'s row lost by hand is put back by outbound_mend_queues, as its head shows it', async () => {
    await emit((text, values) => db.sql(text, values));
    await db.sql('delete from public.outbound_queues');
    expect(await claim()).toEqual([]);
    expect((await db.sql<{ n: number }>('select public.outbound_mend_queues() as n'))[0]!.n).toBe(1);
    expect(await db.sql('select head_attempted, look_at <= now() as due from public.outbound_queues')).toEqual([{ head_attempted: false, due: true }]);
    expect(await claim()).toEqual([1]);
    // A second mend finds none missing.
    expect((await db.sql<{ n: number }>('select public.outbound_mend_queues() as n'))[0]!.n).toBe(0);
  });
});
