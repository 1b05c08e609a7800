import { expect, it } from 'vitest';
import { describeOn, suiteDatabase, type TestDatabase } from '../support/databases.ts';

/**
 * An event behind an earlier one of its user still pending at an endpoint waits parked (not due)
 * until that one is settled, so a claim never reads the backlog behind users whose events are being
 * retried: with a receiver down, that backlog grows with every write, and each claim read all of it
 * (about 280 ms a claim with 50,000 waiting behind 1,000 users). The settle that ends a user's head
 * makes their next event due, also when an event is written at the same moment. Postgres only: the
 * claim's plan and the row locks are the server's.
 */
describeOn('postgres')('deliveries parked behind their user\'s earlier event, on postgres', () => {
  const db = suiteDatabase('postgres');

  type Claimed = { event_id: string; user_id: string; sequence: number; attempts: number };
  const claim = async (endpoint: string, sql: TestDatabase['sql'] = db.sql) =>
    ((await sql(`select public.outbound_claim($1, 100, 60, 50) as claimed`, [endpoint])) as [{ claimed: Claimed[] }])[0].claimed;
  const settle = (endpoint: string, results: object[], sql: TestDatabase['sql'] = db.sql) =>
    sql(`select public.outbound_settle($1, $2::jsonb)`, [endpoint, JSON.stringify(results)]);
  const emit = (user: string, sql: TestDatabase['sql'] = db.sql) =>
    sql(`select public.outbound_lock_user($1), public.outbound_emit($1, 'entitlement.updated', '{}')`, [user]);
  const delivery = async (endpoint: string, user: string, sequence: number) =>
    ((await db.sql(`select next_attempt_at <= now() as due, state from public.outbound_deliveries d join public.outbound_events e on e.id = d.event_id
      where d.endpoint_id = $1 and e.user_id = $2 and e.sequence = $3`, [endpoint, user, sequence])) as [{ due: boolean; state: string }])[0];

  it('reads none of a backlog behind users whose heads wait for a retry, and sends each user\'s next event once their head is delivered', async () => {
    await db.sql(`insert into public.outbound_endpoints (id) values ('parked')`);
    // 200 users' first events, attempted and failed: due again in an hour (a receiver that is down).
    await db.sql(`select public.outbound_emit('parked-' || i, 'entitlement.updated', '{}') from generate_series(1, 400) i`);
    const heads: Claimed[] = [];
    for (let claimed = await claim('parked'); claimed.length > 0; claimed = await claim('parked')) heads.push(...claimed);
    expect(heads.length).toBe(400);
    const inAnHour = new Date(Date.now() + 3_600_000).toISOString();
    await settle('parked', heads.map((d) => ({ event_id: d.event_id, outcome: 'retry', retry_at: inAnHour, error: 'down' })));
    // 20 more events each, written meanwhile: 4,000 behind the heads.
    await db.sql(`select public.outbound_emit('parked-' || (i % 400 + 1), 'entitlement.updated', '{}') from generate_series(0, 3999) i`);

    // (The claims and settles above left dead index entries, which the first scan over them reads once.)
    await db.sql('vacuum public.outbound_deliveries');
    const seen = await db.connection(async (sql) => {
      // Index entries read, every index of the table (idx_tup_read's count as this backend has it
      // so far, not yet reported: the difference around the claim).
      const indexReads = async () => ((await sql(`select coalesce(sum(pg_stat_get_xact_tuples_returned(i.indexrelid)), 0)::int as read
        from pg_index i where i.indrelid = 'public.outbound_deliveries'::regclass`)) as [{ read: number }])[0].read;
      await sql('begin');
      try {
        const before = await indexReads();
        const claimed = await claim('parked', sql);
        return { claimed: claimed.length, read: (await indexReads()) - before };
      } finally {
        await sql('rollback');
      }
    });
    // Nothing is due, and the claim found that out without reading the 4,000 (it read them all before).
    expect(seen.claimed).toBe(0);
    expect(seen.read).toBeLessThan(100);

    // The receiver is back: user 1's head is retried and delivered; their second event is due at once.
    await db.sql(`update public.outbound_deliveries set next_attempt_at = now() where endpoint_id = 'parked' and user_id = 'parked-1' and sequence = 1`);
    const [retried] = await claim('parked');
    expect(retried).toMatchObject({ user_id: 'parked-1', sequence: 1, attempts: 2 });
    await settle('parked', [{ event_id: retried.event_id, outcome: 'delivered' }]);
    expect(await delivery('parked', 'parked-1', 2)).toEqual({ due: true, state: 'pending' });
    expect(await delivery('parked', 'parked-1', 3)).toEqual({ due: false, state: 'pending' });
    const next = await claim('parked');
    expect(next.map((d) => [d.user_id, Number(d.sequence)])).toEqual([['parked-1', 2]]);
    // Dead-lettered, the same: the one after it goes.
    await settle('parked', [{ event_id: next[0].event_id, outcome: 'dead', error: 'gave up' }]);
    expect((await claim('parked')).map((d) => [d.user_id, Number(d.sequence)])).toEqual([['parked-1', 3]]);
  });

  /** Run `blocked` while `holder` holds its transaction open, wait until it waits on a lock (or ends), then commit the holder. */
  async function whileHeld(holder: (sql: TestDatabase['sql']) => Promise<unknown>, blocked: (sql: TestDatabase['sql']) => Promise<unknown>) {
    await db.connection(async (held) => {
      await held('begin');
      await holder(held);
      await db.connection(async (other) => {
        const [{ pid }] = (await other('select pg_backend_pid() as pid')) as [{ pid: number }];
        let ended = false;
        const running = blocked(other).finally(() => { ended = true; });
        // Until the other statement waits for the held transaction's row (or ended without waiting).
        for (;;) {
          const [{ waiting }] = (await db.sql(`select exists (select 1 from pg_locks where pid = $1 and not granted) as waiting`, [pid])) as [{ waiting: boolean }];
          if (waiting || ended) break;
          await new Promise((resolve) => setImmediate(resolve));
        }
        await held('commit');
        await running;
      });
    });
  }

  for (const order of ['an event written while its user\'s head is settled', 'a head settled while its user\'s next event is written']) {
    it(`makes the next event due when ${order}`, async () => {
      const endpoint = order.startsWith('an event') ? 'race-emit-first' : 'race-settle-first';
      const user = `${endpoint}-user`;
      await db.sql(`insert into public.outbound_endpoints (id) values ($1)`, [endpoint]);
      await emit(user);
      const [head] = await claim(endpoint);
      expect(head).toMatchObject({ user_id: user, sequence: 1 });
      if (endpoint === 'race-emit-first') {
        // The event is written (parked behind the head) and not yet committed when the head is settled.
        await whileHeld((sql) => emit(user, sql), (sql) => settle(endpoint, [{ event_id: head.event_id, outcome: 'delivered' }], sql));
      } else {
        // The head is settled and not yet committed when the event is written.
        await whileHeld((sql) => settle(endpoint, [{ event_id: head.event_id, outcome: 'delivered' }], sql), (sql) => emit(user, sql));
      }
      expect(await delivery(endpoint, user, 1)).toEqual({ due: expect.any(Boolean) as boolean, state: 'delivered' });
      expect(await delivery(endpoint, user, 2)).toEqual({ due: true, state: 'pending' });
      expect((await claim(endpoint)).map((d) => Number(d.sequence))).toEqual([2]);
    });
  }

  it('makes a parked event due whichever way its head goes: deleted (retention of a retired endpoint\'s backlog), or dead-lettered outside a settle', async () => {
    await db.sql(`insert into public.outbound_endpoints (id) values ('parked-other')`);
    for (let i = 0; i < 3; i++) await emit('other-user');
    expect(await delivery('parked-other', 'other-user', 2)).toEqual({ due: false, state: 'pending' });
    await db.sql(`delete from public.outbound_deliveries d using public.outbound_events e
      where e.id = d.event_id and d.endpoint_id = 'parked-other' and e.user_id = 'other-user' and e.sequence = 1`);
    expect(await delivery('parked-other', 'other-user', 2)).toEqual({ due: true, state: 'pending' });
    expect(await delivery('parked-other', 'other-user', 3)).toEqual({ due: false, state: 'pending' });
    await db.sql(`update public.outbound_deliveries d set state = 'dead' from public.outbound_events e
      where e.id = d.event_id and d.endpoint_id = 'parked-other' and e.user_id = 'other-user' and e.sequence = 2`);
    expect(await delivery('parked-other', 'other-user', 3)).toEqual({ due: true, state: 'pending' });
  });
});
