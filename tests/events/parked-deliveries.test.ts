import { expect, it } from 'vitest';
import { readOutboxStatus } from '../../lib/events/outbox.ts';
import { outboxOverview } from '../../lib/events/operate.ts';
import { describeOn, suiteDatabase, untilASessionWaitsForALock, type TestDatabase } from '../support/databases.ts';

/**
 * An event behind an earlier one of its user still pending at an endpoint waits parked (not due)
 * until that one is settled, so a claim never reads the backlog behind users whose events are being
 * retried: with a receiver down, that backlog grows with every write, and each claim read all of it
 * (about 280 ms a claim with 50,000 waiting behind 1,000 users). The settle that ends a user's head
 * makes their next event due, also when an event is written at the same moment; what a rarer race
 * leaves parked at a queue's head, a claim's sweep a minute later sends. No step waits on another to
 * park or wake (no deadlock with a settle, an erasure or maintenance). Postgres only: the claim's
 * plan and the row locks are the server's.
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

  const deliveries = async (endpoint: string, user: string) =>
    (await db.sql(`select sequence::int as sequence, state, next_attempt_at = 'infinity' as parked from public.outbound_deliveries
      where endpoint_id = $1 and user_id = $2 order by sequence`, [endpoint, user])) as Array<{ sequence: number; state: string; parked: boolean }>;
  const eventId = async (user: string, sequence: number) =>
    ((await db.sql(`select id from public.outbound_events where user_id = $1 and sequence = $2`, [user, sequence])) as [{ id: string }])[0].id;

  /** As if the minute since the claims' last sweep of `endpoint`'s parked queue heads had passed. */
  const sweepIsDue = (endpoint: string) =>
    db.sql(`update public.outbound_parked_sweeps set swept_at = now() - interval '2 minutes' where endpoint_id = $1`, [endpoint]);

  /** Until `count` sessions of this database wait for a lock (or `orUntil`). */
  const untilWaiting = async (count: number, orUntil: () => boolean = () => false) => {
    for (;;) {
      if (orUntil()) return;
      const [{ waiting }] = await db.sql<{ waiting: string }>(
        `select count(*) as waiting from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`);
      if (Number(waiting) >= count) return;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  };
  // Only the endpoints a test names are active while it runs (emit writes to every active endpoint).
  const onlyEndpoints = async (...endpoints: Array<{ id: string; types?: string[] }>) => {
    await db.sql(`update public.outbound_endpoints set retired_at = now() where retired_at is null`);
    for (const e of endpoints) {
      await db.sql(`insert into public.outbound_endpoints (id, types) values ($1, $2) on conflict (id) do update set retired_at = null, types = excluded.types`,
        [e.id, e.types ?? null]);
    }
  };

  it('sends, at a claim a minute later at most, an event two settles at once left parked at its queue\'s head (a replay put two in flight); the status meanwhile shows no next attempt rather than failing', async () => {
    const endpoint = 'skew';
    const user = 'skew-user';
    await db.sql(`insert into public.outbound_endpoints (id) values ($1)`, [endpoint]);
    // Event 1 delivered; events 2 (head) and 3 (parked behind it) written.
    await emit(user);
    const [first] = await claim(endpoint);
    await settle(endpoint, [{ event_id: first.event_id, outcome: 'delivered' }]);
    await emit(user);
    await emit(user);
    const [second] = await claim(endpoint);
    expect(Number(second.sequence)).toBe(2);
    // While event 2's attempt is under way, an operator replays event 1 (POST /api/admin/events/replay):
    // it is the user's head again, and the next claim (another run) takes it.
    await db.sql(`select public.outbound_replay(p_event_id => $1)`, [await eventId(user, 1)]);
    const [replayed] = await claim(endpoint);
    expect(Number(replayed.sequence)).toBe(1);
    // The two attempts end at the same moment in two runs (two instances, or the cron beside an
    // after-write run): each settles its own, in its own transaction, and neither sees the other's.
    await db.connection(async (a) => db.connection(async (b) => {
      await a('begin');
      await b('begin');
      await settle(endpoint, [{ event_id: replayed.event_id, outcome: 'delivered' }], a);
      await settle(endpoint, [{ event_id: second.event_id, outcome: 'delivered' }], b);
      await a('commit');
      await b('commit');
    }));
    expect(await deliveries(endpoint, user)).toEqual([
      { sequence: 1, state: 'delivered', parked: false },
      { sequence: 2, state: 'delivered', parked: false },
      { sequence: 3, state: 'pending', parked: true },
    ]);
    // Meanwhile GET /api/admin/status and `npm run status` (outboxOverview) render the endpoint.
    const [skew] = (await readOutboxStatus()).endpoints.filter((e) => e.id === endpoint);
    expect(outboxOverview({ endpoints: [skew], events: 0, last_event_at: null, lapses_due: 0 }, null).endpoints[0]).toMatchObject({ nextAttemptAt: null });
    // The claims sweep an endpoint's parked heads once a minute: the next claim after that sends it.
    expect(await claim(endpoint)).toEqual([]);
    await sweepIsDue(endpoint);
    expect((await claim(endpoint)).map((d) => Number(d.sequence))).toEqual([3]);
    // And the user's next event waits behind it again.
    await emit(user);
    expect((await deliveries(endpoint, user)).slice(2)).toEqual([
      { sequence: 3, state: 'pending', parked: false },
      { sequence: 4, state: 'pending', parked: true },
    ]);
  });

  it('does not deadlock a transaction that writes events for two users (a TRANSFER, a merged customer) with a settle of both users\' heads', async () => {
    const endpoint = 'deadlock';
    await db.sql(`insert into public.outbound_endpoints (id) values ($1)`, [endpoint]);
    await emit('deadlock-u1');
    await emit('deadlock-u2');
    // Both users' first events are being attempted (one run, one claim).
    const heads = await claim(endpoint);
    expect(heads.map((d) => d.user_id)).toEqual(['deadlock-u1', 'deadlock-u2']);
    const errors: string[] = [];
    await db.connection(async (writer) => db.connection(async (settler) => {
      // The billing webhook's commit: events for user 2, then for user 1 (each behind its head).
      await writer('begin');
      await emit('deadlock-u2', writer);
      // Meanwhile both attempts end in the same turn: one settle for both (lib/events/delivery.ts, settleEnded).
      let settled = false;
      const settling = settle(endpoint, heads.map((d) => ({ event_id: d.event_id, outcome: 'delivered' })), settler)
        .catch((error: Error) => void errors.push(`settle: ${error.message}`)).finally(() => { settled = true; });
      await untilASessionWaitsForALock(db, () => settled);
      try {
        await emit('deadlock-u1', writer);
        await writer('commit');
      } catch (error) {
        errors.push(`emit: ${(error as Error).message}`);
        await writer('rollback');
      }
      await settling;
    }));
    expect(errors).toEqual([]);
  });

  it('keeps a replayed backlog set aside as an emitted one is ("a backlog costs nothing while it waits"): the events of the last day sent again behind a receiver that is down', async () => {
    const endpoint = 'replayed';
    await db.sql(`insert into public.outbound_endpoints (id) values ($1)`, [endpoint]);
    // A receiver down: 400 users' first events (written two days ago) failed, due again in an hour;
    // 10 more each written since, parked behind them.
    await db.sql(`select public.outbound_emit('replayed-' || i, 'entitlement.updated', '{}') from generate_series(1, 400) i`);
    await db.sql(`update public.outbound_events set created_at = now() - interval '2 days' where user_id like 'replayed-%'`);
    const heads: Claimed[] = [];
    for (let claimed = await claim(endpoint); claimed.length > 0; claimed = await claim(endpoint)) heads.push(...claimed);
    const inAnHour = new Date(Date.now() + 3_600_000).toISOString();
    await settle(endpoint, heads.map((d) => ({ event_id: d.event_id, outcome: 'retry', retry_at: inAnHour, error: 'down' })));
    await db.sql(`select public.outbound_emit('replayed-' || (i % 400 + 1), 'entitlement.updated', '{}') from generate_series(0, 3999) i`);
    // The operator sends the last day again (POST /api/admin/events/replay, `npm run events:replay -- --from ...`).
    await db.sql(`select public.outbound_replay(p_from => now() - interval '1 day', p_to => now() + interval '1 second', p_endpoint_id => $1)`, [endpoint]);
    await db.sql('vacuum public.outbound_deliveries');
    const seen = await db.connection(async (sql) => {
      const indexReads = async () => ((await sql(`select coalesce(sum(pg_stat_get_xact_tuples_returned(i.indexrelid)), 0)::int as read
        from pg_index i where i.indrelid = 'public.outbound_deliveries'::regclass`)) as [{ read: number }])[0].read;
      await sql('begin');
      try {
        const before = await indexReads();
        const claimed = await claim(endpoint, sql);
        return { claimed: claimed.filter((d) => d.user_id.startsWith('replayed-')).length, read: (await indexReads()) - before };
      } finally {
        await sql('rollback');
      }
    });
    // (Other tests' users in the day replayed are claimed too; not these.)
    // Nothing of these users is due (every head waits for its retry): found out without reading the 4,000 behind.
    expect(seen.claimed).toBe(0);
    expect(seen.read).toBeLessThan(500);
  });

  it('parks what a replay sends again behind the first of it: delivered events replayed go one at a time', async () => {
    await db.sql(`insert into public.outbound_endpoints (id) values ('replay-delivered')`);
    for (let i = 0; i < 3; i++) {
      await emit('replay-user');
      const [head] = await claim('replay-delivered');
      await settle('replay-delivered', [{ event_id: head.event_id, outcome: 'delivered' }]);
    }
    // (Written, as far as the replay's range goes, ten days ago: no other test's events in it.)
    await db.sql(`update public.outbound_events set created_at = now() - interval '10 days' + sequence * interval '1 second' where user_id = 'replay-user'`);
    await db.sql(`select public.outbound_replay(p_from => now() - interval '10 days', p_to => now() - interval '9 days', p_endpoint_id => 'replay-delivered')`);
    expect(await deliveries('replay-delivered', 'replay-user')).toEqual([
      { sequence: 1, state: 'pending', parked: false },
      { sequence: 2, state: 'pending', parked: true },
      { sequence: 3, state: 'pending', parked: true },
    ]);
    const [first] = await claim('replay-delivered');
    expect(Number(first.sequence)).toBe(1);
    await settle('replay-delivered', [{ event_id: first.event_id, outcome: 'delivered' }]);
    expect((await claim('replay-delivered')).map((d) => Number(d.sequence))).toEqual([2]);
  });

  /** Run `blocked` while `holder` holds its transaction open, wait until it waits on a lock (or ends), then commit the holder. */
  async function whileHeld(holder: (sql: TestDatabase['sql']) => Promise<unknown>, blocked: (sql: TestDatabase['sql']) => Promise<unknown>) {
    await db.connection(async (held) => {
      await held('begin');
      await holder(held);
      await db.connection(async (other) => {
        let ended = false;
        const running = blocked(other).finally(() => { ended = true; });
        // Until the other statement waits for the held transaction (or ended without waiting).
        await untilASessionWaitsForALock(db, () => ended);
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

  it('makes due, at each maintenance, a parked event that heads its queue however it came to (nothing known leaves one)', async () => {
    await db.sql(`insert into public.outbound_endpoints (id) values ('parked-swept')`);
    await emit('swept-user');
    await emit('swept-user');
    // As if some way a head goes had not woken the next: the head parked itself.
    await db.sql(`update public.outbound_deliveries d set next_attempt_at = 'infinity' from public.outbound_events e
      where e.id = d.event_id and d.endpoint_id = 'parked-swept' and e.user_id = 'swept-user' and e.sequence = 1`);
    expect(await delivery('parked-swept', 'swept-user', 1)).toEqual({ due: false, state: 'pending' });
    await db.sql(`select public.outbound_maintain(now(), now() + interval '10 seconds')`);
    expect(await delivery('parked-swept', 'swept-user', 1)).toEqual({ due: true, state: 'pending' });
    expect(await delivery('parked-swept', 'swept-user', 2)).toEqual({ due: false, state: 'pending' });
  });

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

  it('does not deadlock an erasure with a settle of the erased user\'s in-flight head at an endpoint that takes no customer.deleted', async () => {
    // An endpoint for entitlements only (EVENTS_WEBHOOK_ENDPOINTS with types): an erasure deletes what
    // the user still waits for there.
    await onlyEndpoints({ id: 'erase-ent', types: ['entitlement.*'] });
    const a = '00000000-0000-4000-8000-00000000000a';
    const b = '00000000-0000-4000-8000-00000000000b';
    await emit(a);
    await emit(b);
    const heads = await claim('erase-ent');
    expect(heads.map((d) => d.user_id)).toEqual([a, b]);
    const errors: string[] = [];
    await db.connection(async (billing) => db.connection(async (settler) => db.connection(async (eraser) => {
      // The billing webhook's commit: an event for user b, parked behind b's head (which it holds FOR SHARE).
      await billing('begin');
      await emit(b, billing);
      // Both attempts end in the same turn: one settle (lib/events/delivery.ts, settleEnded). It
      // settles a's head, then waits for b's.
      let settled = false;
      const settling = settle('erase-ent', heads.map((d) => ({ event_id: d.event_id, outcome: 'delivered' })), settler)
        .catch((error: Error) => void (errors.push(`settle: ${error.message}`))).finally(() => { settled = true; });
      await untilWaiting(1, () => settled);
      // User a is deleted (auth.users' trigger: forget_user): their delivery at the endpoint goes.
      let erased = false;
      const erasing = (async () => {
        await eraser('begin');
        try {
          await eraser(`select public.forget_user($1)`, [a]);
          await eraser('commit');
        } catch (error) {
          errors.push(`erasure: ${(error as Error).message}`);
          await eraser('rollback');
        }
      })().finally(() => { erased = true; });
      await untilWaiting(2, () => erased);
      await billing('commit');
      await Promise.all([settling, erasing]);
    })));
    expect(errors).toEqual([]);
  });
  it('sends, at the claims\' sweep a minute later at most, an event whose wake skipped it because a replay held it, when that replay fails', async () => {
    await onlyEndpoints({ id: 'skipped' });
    const u = 'skipped-u';
    const v = 'skipped-v';
    await emit(u);
    await emit(u); // event 2, parked behind event 1
    await emit(v);
    const heads = await claim('skipped');
    expect(heads.map((d) => [d.user_id, Number(d.sequence)])).toEqual([['skipped-u', 1], ['skipped-v', 1]]);
    expect(await deliveries('skipped', u)).toEqual([
      { sequence: 1, state: 'pending', parked: false },
      { sequence: 2, state: 'pending', parked: true },
    ]);
    await db.connection(async (billing) => db.connection(async (settler) => db.connection(async (replayer) => {
      // A billing transaction holds user v's head (its emit parks behind it) for a moment.
      await billing('begin');
      await emit(v, billing);
      // Both heads delivered, one settle: it settles u's and waits for v's.
      let settled = false;
      const settling = settle('skipped', heads.map((d) => ({ event_id: d.event_id, outcome: 'delivered' })), settler)
        .finally(() => { settled = true; });
      await untilWaiting(1, () => settled);
      // Meanwhile an operator replays u's event 2 (POST /api/admin/events/replay): its insert holds
      // the row (due now). The call then fails before it commits (its lock_timeout of 5 s or query
      // timeout of 20 s on a wide range, a dropped connection): here, rolled back.
      await replayer('begin');
      await replayer(`select public.outbound_replay(p_event_id => $1)`, [await eventId(u, 2)]);
      await billing('commit');
      await settling; // its wake found event 2 locked by the replay, and skipped it
      await replayer('rollback');
    })));
    // Event 1 is delivered; event 2, u's only pending delivery, went back to parked with the
    // rollback: the claims' sweep of a minute later sends it.
    expect(await deliveries('skipped', u)).toEqual([
      { sequence: 1, state: 'delivered', parked: false },
      { sequence: 2, state: 'pending', parked: true },
    ]);
    await sweepIsDue('skipped');
    expect((await claim('skipped')).filter((d) => d.user_id === u).map((d) => Number(d.sequence))).toEqual([2]);
  });

  it('does not deadlock the retention of a retired endpoint\'s backlog (maintenance) with a settle of the same users\' heads', async () => {
    const a = 'ret-a';
    const b = 'ret-b';
    // A receiver retired weeks ago with a backlog: b's and a's events of 40 days ago still pending there.
    await onlyEndpoints({ id: 'ret-old' });
    await emit(b);
    await emit(a);
    await db.sql(`update public.outbound_events set created_at = now() - interval '40 days' where user_id = $1`, [b]);
    await db.sql(`update public.outbound_events set created_at = now() - interval '39 days' where user_id = $1`, [a]);
    // The receivers of now: the same users' new events, attempted.
    await onlyEndpoints({ id: 'ret-now' });
    await emit(a);
    await emit(b);
    const heads = await claim('ret-now');
    expect(heads.map((d) => d.user_id)).toEqual([a, b]);
    const errors: string[] = [];
    await db.connection(async (billing) => db.connection(async (settler) => db.connection(async (maintainer) => {
      // A billing transaction holds b's head (its emit parks behind it) for a moment.
      await billing('begin');
      await emit(b, billing);
      // The daily maintenance: the 40-day-old events go, their pending deliveries at the retired
      // endpoint with them (each delete wakes what waits behind it).
      let maintained = false;
      const maintaining = maintainer(`select public.outbound_maintain(now(), now() + interval '30 seconds')`)
        .catch((error: Error) => void errors.push(`maintain: ${error.message}`)).finally(() => { maintained = true; });
      await untilWaiting(1, () => maintained);
      // Both heads delivered, one settle: a's, then it waits for b's.
      let settled = false;
      const settling = settle('ret-now', heads.map((d) => ({ event_id: d.event_id, outcome: 'delivered' })), settler)
        .catch((error: Error) => void (errors.push(`settle: ${error.message}`))).finally(() => { settled = true; });
      await untilWaiting(2, () => settled || maintained);
      await billing('commit');
      await Promise.all([maintaining, settling]);
    })));
    expect(errors).toEqual([]);
  });
});
