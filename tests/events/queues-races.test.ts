import { beforeEach, expect, it } from 'vitest';
import { describeOn, sessionBeside, suiteDatabase } from '../support/databases.ts';
import { clearOutbox } from '../support/outbox.ts';

/**
 * The queues' rows (public.outbound_queues) beside settles, emits and replays on other sessions:
 * none may leave a row later than its head is due, or in the wrong lane (head_attempted) so that a
 * due head waits behind the retries' share, nor make a lock cycle with a transaction that writes
 * events for two users. One side holds a transaction open on a client of its own (`other`), the
 * other runs beside it, as two requests at once would. Postgres only.
 */
describeOn('postgres')('the queues\' rows beside settles, emits and replays on other sessions, on postgres', () => {
  const db = suiteDatabase('postgres');
  const endpoint = 'queues';
  const user = 'queues-user';
  const other = sessionBeside(db);

  beforeEach(async () => {
    await clearOutbox(db);
    await db.sql('insert into public.outbound_endpoints (id) values ($1)', [endpoint]);
  });

  type Sql = (text: string, values?: unknown[]) => Promise<unknown>;
  const mine: Sql = (text, values) => db.sql(text, values);
  const theirs: Sql = (text, values) => other.query(text, values);
  const emit = (sql: Sql, who = user) => sql(`select public.outbound_emit($1, 'entitlement.updated', '{}')`, [who]);
  const claimOn = async (sql: Sql, retryLimit: number | null = null) => {
    const result = (await sql('select public.outbound_claim($1, 10, 60, $2) as claimed', [endpoint, retryLimit])) as { rows?: Array<{ claimed: unknown }> } | Array<{ claimed: unknown }>;
    const rows = Array.isArray(result) ? result : result.rows!;
    return (rows[0]!.claimed as Array<{ user_id: string; sequence: number }>).map((d) => `${d.user_id}#${Number(d.sequence)}`);
  };
  const claim = (retryLimit: number | null = null) => claimOn(mine, retryLimit);
  /** Settle every leased delivery at the endpoint (of `who` only, when named). */
  const settle = async (outcome: 'delivered' | 'retry', who?: string, retryAt?: string) => {
    const [{ ids }] = await db.sql<{ ids: string[] | null }>(
      "select array_agg(event_id) as ids from public.outbound_deliveries where endpoint_id = $1 and state = 'pending' and leased_until is not null and ($2::text is null or user_id = $2)",
      [endpoint, who ?? null]);
    await db.sql('select public.outbound_settle($1, $2)', [endpoint, JSON.stringify((ids ?? []).map((id) => ({ event_id: id, outcome, retry_at: retryAt })))]);
  };
  /** Run a settle while `other` holds a claim's transaction open, then commit it (the settle may wait for it). */
  const settleBesideOpenClaim = async (work: () => Promise<void>) => {
    let done = false;
    const settled = work().finally(() => { done = true; });
    await expect.poll(async () => done || Number((await db.sql<{ n: string }>(
      "select count(*) as n from pg_stat_activity where wait_event_type = 'Lock' and query like '%outbound_settle%'"))[0]!.n) > 0, { timeout: 10_000 }).toBe(true);
    await other.query('commit');
    await settled;
  };

  it('a settle beside a claim that holds the row (its head read as leased) waits for the claim, then makes the next event due at once', async () => {
    await emit(mine);
    expect(await claim()).toEqual([`${user}#1`]); // leased 60 s
    await emit(mine); // #2 behind it: the row is due now
    // A claim on another session (another server's run, after a write) looks at the row: its head #1 is
    // leased, so it sets the row to the lease's end; it holds the row to its commit.
    await other.query('begin');
    expect(await claimOn(theirs)).toEqual([]);
    // #1 delivered meanwhile (this server's run): the settle skips the row the claim holds.
    await settleBesideOpenClaim(() => settle('delivered'));
    // #2 is the head now, due, never attempted; the row says: a retry, in about a minute.
    expect(await db.sql("select sequence::int as s from public.outbound_deliveries where state = 'pending' and leased_until is null and next_attempt_at <= now()")).toEqual([{ s: 2 }]);
    expect(await claim()).toEqual([`${user}#2`]);
  });

  it('the same with a retry: the row says the time of the retry, not the end of the lease', async () => {
    await emit(mine);
    expect(await claim()).toEqual([`${user}#1`]);
    await emit(mine);
    await other.query('begin');
    expect(await claimOn(theirs)).toEqual([]);
    // The attempt failed: retry due at once (a past retry_at, as after the 30 s backoff).
    await settleBesideOpenClaim(() => settle('retry', undefined, new Date(Date.now() - 1000).toISOString()));
    expect(await claim()).toEqual([`${user}#1`]);
  });

  it('a settle beside an emit that holds the row: the first attempt behind it goes while retries are at their limit', async () => {
    await emit(mine);
    expect(await claim()).toEqual([`${user}#1`]);
    await other.query('begin');
    await emit(theirs); // #2: the row held to the commit
    await settle('delivered'); // #1 delivered: the row is skipped
    await other.query('commit');
    // The server passes retries = 0 once 50 retries are in flight (a receiver hanging for some users):
    // first attempts still go (docs/events.md, "In order per user, per endpoint").
    expect(await claim(0)).toEqual([`${user}#2`]);
  });

  it('...and with retries of other users due ahead of it, a claim with one retry place takes one retry and the first attempt', async () => {
    // Three other users' heads failed and are due again.
    for (const who of ['queues-r1', 'queues-r2', 'queues-r3']) await emit(mine, who);
    expect(await claim()).toHaveLength(3);
    await settle('retry', undefined, new Date(Date.now() - 60_000).toISOString());
    await emit(mine);
    expect(await claim(0)).toEqual([`${user}#1`]);
    await other.query('begin');
    await emit(theirs);
    await settle('delivered', user);
    await other.query('commit');
    const claimed = await claim(1);
    expect(claimed).toHaveLength(2);
    expect(claimed).toContain(`${user}#2`);
  });

  // An endpoint has at most one attempt of a user's under way (docs/events.md, "In order per user").
  const replay = (sequence: number) => db.sql(
    'select public.outbound_replay(p_event_id => (select id from public.outbound_events where user_id = $1 and sequence = $2), p_endpoint_id => $3)',
    [user, sequence, endpoint]);
  const delivery = async (sequence: number) => (await db.sql<{ next_attempt_at: Date; leased_until: Date | null }>(
    'select next_attempt_at, leased_until from public.outbound_deliveries where endpoint_id = $1 and user_id = $2 and sequence = $3', [endpoint, user, sequence]))[0]!;
  /** Time passes to the end of every lease at the endpoint (the attempts' timeouts ended them), and the rows' times with it. */
  const leasesEnd = async () => {
    await db.sql(`update public.outbound_deliveries set leased_until = now() - interval '1 second',
      next_attempt_at = least(next_attempt_at, now() - interval '1 second') where endpoint_id = $1`, [endpoint]);
    await db.sql("update public.outbound_queues set look_at = least(look_at, now() - interval '1 second') where endpoint_id = $1", [endpoint]);
  };

  it('a replay of a user\'s earlier event while a later one is under way waits for that attempt: never two of a user\'s at once', async () => {
    await emit(mine);
    expect(await claim()).toEqual([`${user}#1`]);
    await settle('delivered');
    await emit(mine);
    expect(await claim()).toEqual([`${user}#2`]); // under way, leased 60 s
    await replay(1);
    // #1 is the head again, due when #2's lease ends, not now beside it.
    expect((await delivery(1)).next_attempt_at).toEqual((await delivery(2)).leased_until);
    expect(await claim()).toEqual([]);
    await settle('delivered'); // #2 went
    await leasesEnd();
    expect(await claim()).toEqual([`${user}#1`]);
  });

  it('a replay of the event under way itself: sent again once that attempt\'s lease ends, not beside it', async () => {
    await emit(mine);
    expect(await claim()).toEqual([`${user}#1`]);
    await replay(1);
    expect(await claim()).toEqual([]);
    await leasesEnd();
    expect(await claim()).toEqual([`${user}#1`]);
  });

  it('a replay clicked twice, or of the event under way and then of an earlier one: neither is sent beside that attempt', async () => {
    await emit(mine);
    expect(await claim()).toEqual([`${user}#1`]);
    await settle('delivered');
    await emit(mine);
    expect(await claim()).toEqual([`${user}#2`]); // under way, leased 60 s
    await replay(2); // takes #2's own lease off: it waits for that lease's end
    await replay(2);
    await replay(1);
    expect(await claim()).toEqual([]);
    expect((await delivery(1)).next_attempt_at).toEqual((await delivery(2)).next_attempt_at);
    await leasesEnd();
    expect(await claim()).toEqual([`${user}#1`]);
  });

  it('a replay of an earlier event, then the later one under way fails: the row is due at once, not at that retry\'s time an hour away', async () => {
    await emit(mine);
    expect(await claim()).toEqual([`${user}#1`]);
    await settle('delivered');
    await emit(mine);
    expect(await claim()).toEqual([`${user}#2`]);
    await replay(1);
    await settle('retry', user, new Date(Date.now() + 3_600_000).toISOString());
    const [row] = await db.sql<{ due: boolean; head_attempted: boolean }>(
      'select look_at <= now() as due, head_attempted from public.outbound_queues where endpoint_id = $1 and user_id = $2', [endpoint, user]);
    expect(row).toEqual({ due: true, head_attempted: false });
    await leasesEnd(); // #2's old lease, which #1 waited for
    expect(await claim()).toEqual([`${user}#1`]);
  });
});

describeOn('postgres')('a claim and a settle at once, one call each as the server makes them, on postgres', () => {
  const db = suiteDatabase('postgres');
  const endpoint = 'queues-race';
  const user = 'queues-race-user';
  const other = sessionBeside(db);


  it('a claim still reading other early rows never leaves a row late after a settle of its head', async () => {
    await db.sql('insert into public.outbound_endpoints (id) values ($1)', [endpoint]);
    // 3,000 other users whose head is leased and who have a newer event: their rows are due (early).
    await db.sql(`insert into public.outbound_events (user_id, sequence, type, data)
      select 'queues-race-' || i, s, 'entitlement.updated', '{}' from generate_series(1, 3000) i, generate_series(1, 2) s`);
    await db.sql(`insert into public.outbound_deliveries (endpoint_id, event_id, user_id, sequence, attempts, first_attempt_at, leased_until)
      select $1, id, user_id, sequence, case when sequence = 1 then 1 else 0 end, case when sequence = 1 then now() end, case when sequence = 1 then now() + interval '1 minute' end
      from public.outbound_events where user_id like 'queues-race-%'`, [endpoint]);
    await db.sql('select public.outbound_mend_queues()');
    await db.sql("update public.outbound_queues set look_at = now() - interval '1 second' where endpoint_id = $1", [endpoint]);
    await db.sql('analyze public.outbound_queues, public.outbound_deliveries');
    let lateRuns = 0;
    const runs = 5;
    for (let run = 0; run < runs; run++) {
      await db.sql("delete from public.outbound_events where user_id = $1", [user]);
      await db.sql("delete from public.outbound_user_sequences where user_id = $1", [user]);
      await db.sql(`select public.outbound_emit($1, 'entitlement.updated', '{}')`, [user]);
      await db.sql("update public.outbound_queues set look_at = '-infinity' where endpoint_id = $1 and user_id = $2", [endpoint, user]);
      // #1 leased (its row first in the claim's order), #2 behind it.
      await db.sql(`update public.outbound_deliveries set attempts = 1, first_attempt_at = now(), leased_until = now() + interval '1 minute' where user_id = $1`, [user]);
      await db.sql("update public.outbound_queues set head_attempted = true where user_id = $1", [user]);
      await db.sql(`select public.outbound_emit($1, 'entitlement.updated', '{}')`, [user]);
      // Another server's claim (autocommit), and this server's settle of #1 as soon as the claim runs.
      const claimed = other.query('select public.outbound_claim($1, 100, 60, 50) as claimed', [endpoint]);
      await expect.poll(async () => Number((await db.sql<{ n: string }>(
        "select count(*) as n from pg_stat_activity where state = 'active' and query like 'select public.outbound_claim%'"))[0]!.n), { timeout: 10_000, interval: 1 }).toBe(1);
      const [{ id }] = await db.sql<{ id: string }>("select event_id as id from public.outbound_deliveries where user_id = $1 and sequence = 1", [user]);
      await db.sql('select public.outbound_settle($1, $2)', [endpoint, JSON.stringify([{ event_id: id, outcome: 'delivered' }])]);
      await claimed;
      const [{ late }] = await db.sql<{ late: boolean }>("select look_at > now() + interval '30 seconds' as late from public.outbound_queues where user_id = $1", [user]);
      if (late) lateRuns++;
      // Put the other users' rows back to due for the next run.
      await db.sql("update public.outbound_queues set look_at = now() - interval '1 second' where endpoint_id = $1 and user_id <> $2", [endpoint, user]);
    }
    expect(lateRuns).toBe(0);
  });
});

describeOn('postgres')('the claim after new events of users whose heads retry, on postgres', () => {
  const db = suiteDatabase('postgres');
  const endpoint = 'q2';
  const user = 'q2-user';
  const other = sessionBeside(db);

  beforeEach(async () => {
    await clearOutbox(db);
    await db.sql('insert into public.outbound_endpoints (id) values ($1)', [endpoint]);
  });

  const emit = (who = user) => db.sql(`select public.outbound_emit($1, 'entitlement.updated', '{}')`, [who]);
  /** As the server claims (lib/events/delivery.ts): 100 places, at most 50 retries. */
  const claim = async (limit = 100, retries: number | null = 50) =>
    (await db.sql<{ claimed: Array<{ user_id: string; sequence: number }> }>('select public.outbound_claim($1, $2, 60, $3) as claimed', [endpoint, limit, retries]))[0]!
      .claimed.map((d) => `${d.user_id}#${Number(d.sequence)}`);
  const settleLeased = async (outcome: 'delivered' | 'retry', retryAt?: string) => {
    const [{ ids }] = await db.sql<{ ids: string[] | null }>(
      "select array_agg(event_id) as ids from public.outbound_deliveries where endpoint_id = $1 and state = 'pending' and leased_until is not null", [endpoint]);
    await db.sql('select public.outbound_settle($1, $2)', [endpoint, JSON.stringify((ids ?? []).map((id) => ({ event_id: id, outcome, retry_at: retryAt })))]);
  };

  it('a new event of a user whose retry is due: the claim after the write sends the retry (not [] and the run over)', async () => {
    await emit();
    expect(await claim()).toEqual([`${user}#1`]);
    // The attempt failed; its retry came due (a past retry_at, as after the backoff).
    await settleLeased('retry', new Date(Date.now() - 1000).toISOString());
    // The user's next event: the write's run claims (the event marks the queue in the first attempts' lane).
    await emit();
    // A claim answering [] with nothing in flight ends the run (delivery.ts): #1 waits for another write or the cron.
    expect(await claim()).toEqual([`${user}#1`]);
  });

  it('a claim answers the first-attempt head that is due even behind 1,000 early rows (a bulk write for users whose heads retry later)', async () => {
    // 1,000 users' first events (one transaction), attempted, failed: retries in an hour.
    await db.sql(`select public.outbound_emit('q2-bulk-' || lpad(i::text, 4, '0'), 'entitlement.updated', '{}') from generate_series(1, 1000) i`);
    expect(await claim(1000, null)).toHaveLength(1000);
    await settleLeased('retry', new Date(Date.now() + 3_600_000).toISOString());
    // A bulk write (a billing rebuild, a lapse scan) tells each of them something new: their rows
    // are due in the first attempts' lane (early: the head retries in an hour).
    await db.sql(`select public.outbound_emit('q2-bulk-' || lpad(i::text, 4, '0'), 'entitlement.updated', '{}') from generate_series(1, 1000) i`);
    // Then a new user's first event.
    await emit();
    // The write's run claims once: [] with nothing in flight ends it, and the due event waits.
    expect(await claim()).toEqual([`${user}#1`]);
  });
});

describeOn('postgres')('a bulk replay beside a transaction that writes events for two users, on postgres', () => {
  const db = suiteDatabase('postgres');
  const wallets = 'queues-a'; // takes wallet.* only
  const all = 'queues-b';
  const [u1, u2] = ['queues-u1', 'queues-u2'];
  const other = sessionBeside(db);

  beforeEach(async () => {
    await clearOutbox(db);
    await db.sql(`insert into public.outbound_endpoints (id, types) values ($1, '{wallet.*}'), ($2, null)`, [wallets, all]);
  });

  const replayTheHour = () => db.sql("select public.outbound_replay(p_from => now() - interval '2 hours', p_to => now() - interval '30 minutes')")
    .then(() => ({ ok: true as const }), (error: { code?: string }) => ({ ok: false as const, code: error.code }));

  // The replay takes the queues' rows user by user, so writers in that order never meet it in a lock
  // cycle; no order serves every writer (an erasure tells its customer.deleted first), and in the
  // other order the replay, which waited first, is the one Postgres stops (40P01): the service calls
  // a deadlocked call again (lib/db/index.ts), as here.
  it.each([[u1, u2], [u2, u1]])('a transaction writing events for %s then %s goes in, and the replay is done', async (first, second) => {
    // An hour ago: u1's entitlement event (to `all` only), u2's wallet event (to both).
    await db.sql(`select public.outbound_emit($1, 'entitlement.updated', '{}')`, [u1]);
    await db.sql(`select public.outbound_emit($1, 'wallet.linked', '{}')`, [u2]);
    await db.sql("update public.outbound_events set created_at = now() - interval '1 hour'");
    await other.query('begin');
    await other.query(`select public.outbound_emit($1, 'wallet.linked', '{}')`, [first]);
    // The operator replays that hour, until it is done or waits on a lock.
    let replayDone = false;
    const replay = replayTheHour().finally(() => { replayDone = true; });
    await expect.poll(async () => replayDone || Number((await db.sql<{ n: string }>(
      "select count(*) as n from pg_stat_activity where wait_event_type = 'Lock' and query like '%outbound_replay%'"))[0]!.n) > 0, { timeout: 10_000 }).toBe(true);
    // ...then the second user's event in the same transaction.
    const written = await other.query(`select public.outbound_emit($1, 'wallet.linked', '{}')`, [second])
      .then(() => ({ ok: true as const }), (error: { code?: string }) => ({ ok: false as const, code: error.code }));
    await other.query(written.ok ? 'commit' : 'rollback');
    let replayed = await replay;
    if (!replayed.ok && replayed.code === '40P01') replayed = await replayTheHour();
    expect({ replay: replayed, written }).toEqual({ replay: { ok: true }, written: { ok: true } });
  });
});

describeOn('postgres')('the claim\'s three passes (retries, first attempts, retries found among them), on postgres', () => {
  const db = suiteDatabase('postgres');
  const endpoint = 'q3';
  const other = sessionBeside(db);
  const claimer = sessionBeside(db);

  beforeEach(async () => {
    await clearOutbox(db);
    await db.sql('insert into public.outbound_endpoints (id) values ($1)', [endpoint]);
  });

  const emit = (who: string) => db.sql(`select public.outbound_emit($1, 'entitlement.updated', '{}')`, [who]);
  const claim = async (limit: number, retries: number | null) => {
    const [{ claimed }] = await db.sql<{ claimed: Array<{ user_id: string; sequence: number; attempts: number }> }>(
      'select public.outbound_claim($1, $2, 60, $3) as claimed', [endpoint, limit, retries]);
    return claimed;
  };
  const settle = async (outcome: 'delivered' | 'retry', who: string[]) => {
    const [{ ids }] = await db.sql<{ ids: string[] | null }>(
      "select array_agg(event_id) as ids from public.outbound_deliveries where endpoint_id = $1 and state = 'pending' and leased_until is not null and user_id = any($2)",
      [endpoint, who]);
    await db.sql('select public.outbound_settle($1, $2)', [endpoint, JSON.stringify((ids ?? []).map((id) => ({ event_id: id, outcome, retry_at: new Date(Date.now() - 60_000).toISOString() })))]);
  };

  it('never takes more retries than their share nor more than the places, with retries in both lanes and first attempts due', async () => {
    const inRetries = ['r1', 'r2'], amongFirst = ['h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'h7', 'h8'], first = ['f1', 'f2'];
    for (const user of [...inRetries, ...amongFirst]) await emit(user);
    expect(await claim(100, null)).toHaveLength(10);
    await settle('retry', [...inRetries, ...amongFirst]);
    // A new event behind a due retry marks its queue in the first attempts' lane.
    for (const user of [...amongFirst, ...first]) await emit(user);
    for (const [limit, retries, want] of [[10, 5, { r: 5, f: 2 }], [10, null, { r: 5, f: 2 }], [10, 0, { r: 0, f: 2 }], [3, null, { r: 2, f: 1 }], [6, 6, { r: 4, f: 2 }], [12, 20, { r: 10, f: 2 }]] as const) {
      const got = await db.connection(async (sql) => {
        await sql('begin');
        try {
          const [{ claimed }] = (await sql('select public.outbound_claim($1, $2, 60, $3) as claimed', [endpoint, limit, retries])) as [{ claimed: Array<{ attempts: number }> }];
          return claimed;
        } finally {
          await sql('rollback');
        }
      });
      const r = got.filter((d) => d.attempts > 1).length;
      expect({ limit, retries, r, f: got.length - r }).toEqual({ limit, retries, ...want });
    }
  });

  it('a late settle (its lease ended) passed by a claim that could not lease the head: the first attempt behind it goes while retries are at their limit', async () => {
    await emit('u');
    await emit('u');
    expect((await claim(10, null)).map((d) => Number(d.sequence))).toEqual([1]);
    // The lease ran out (a slow receiver); the queue came due in the retries' lane.
    await db.sql("update public.outbound_deliveries set leased_until = now() - interval '1 second' where user_id = 'u' and sequence = 1");
    await db.sql("update public.outbound_queues set look_at = now() - interval '1 second' where user_id = 'u'");
    // The slow attempt's settle holds #1 ...
    await other.query('begin');
    await other.query("select 1 from public.outbound_deliveries where user_id = 'u' and sequence = 1 for update");
    // ... when another claim locks the queue's row, reads #1 as a due retry, and cannot lease it.
    await claimer.query('begin');
    expect((await claimer.query<{ claimed: unknown[] }>('select public.outbound_claim($1, 10, 60, null) as claimed', [endpoint])).rows[0]!.claimed).toEqual([]);
    // The settle goes on, and passes by the row the claim holds.
    const [{ id }] = await db.sql<{ id: string }>("select event_id as id from public.outbound_deliveries where user_id = 'u' and sequence = 1");
    await other.query('select public.outbound_settle($1, $2)', [endpoint, JSON.stringify([{ event_id: id, outcome: 'delivered' }])]);
    await other.query('commit');
    await claimer.query('commit');
    // #2 is due, a first attempt; with 50 retries in flight the server asks for none.
    expect((await claim(10, 0)).map((d) => Number(d.sequence))).toEqual([2]);
  });
});
