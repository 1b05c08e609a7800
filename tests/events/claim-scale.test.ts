import { expect, it } from 'vitest';
import { describeOn, suiteDatabase } from '../support/databases.ts';

/**
 * The claim's work does not grow with the deliveries behind it. Before Postgres first analyzes the
 * deliveries table (it grows by hundreds a second; autovacuum analyzes it when it comes round),
 * every plan looks as cheap as another, and a claim once read the endpoint's whole queue for each
 * delivery it looked at: 45 ms a claim after 14,000 deliveries. Counted in index entries read
 * (this transaction's own count), not in time. Postgres only: the plan and its
 * statistics are the server's.
 */
type Sql = (text: string, params?: unknown[]) => Promise<unknown[]>;

/**
 * Index entries read so far in this transaction, every index of the deliveries and of the queues'
 * rows (idx_tup_read's count). Taken before and after a claim: the count also holds what the
 * connection read before that the statistics have not taken in yet.
 */
async function indexEntriesRead(sql: Sql): Promise<number> {
  const [{ read }] = (await sql(`select coalesce(sum(pg_stat_get_xact_tuples_returned(i.indexrelid)), 0)::int as read
    from pg_index i where i.indrelid in ('public.outbound_deliveries'::regclass, 'public.outbound_queues'::regclass)`)) as [{ read: number }];
  return read;
}

describeOn('postgres')('claiming deliveries with many behind, before the table is analyzed, on postgres', () => {
  const db = suiteDatabase('postgres');

  it('reads a few hundred index entries for 20 deliveries, with 6,000 delivered and 4,000 waiting behind them, before and after the table is analyzed, and when all 4,000 are due retries', async () => {
    await db.sql(`insert into public.outbound_endpoints (id) values ('claim-scale')`);
    // 1,000 users, each with 6 events delivered and 4 waiting.
    await db.sql(`insert into public.outbound_events (user_id, sequence, type, data)
      select 'claim-scale-' || (i % 1000), i / 1000 + 1, 'entitlement.updated', '{}' from generate_series(0, 9999) i`);
    await db.sql(`insert into public.outbound_deliveries (endpoint_id, event_id, user_id, sequence, state, delivered_at)
      select 'claim-scale', id, user_id, sequence, case when sequence <= 6 then 'delivered' else 'pending' end, case when sequence <= 6 then now() end
      from public.outbound_events where user_id like 'claim-scale-%'`);
    // Written here without their queues' rows: put back as a server opening the database does.
    await db.sql('select public.outbound_mend_queues()');

    // Each time as the server claims: for the places free, at most half of them retries.
    const claimOnce = (endpoint = 'claim-scale', places = 20) => db.connection(async (sql) => {
      await sql('begin');
      try {
        const before = await indexEntriesRead(sql);
        const [{ claimed }] = (await sql(`select public.outbound_claim($1, $2, 60, $3) as claimed`, [endpoint, places, Math.ceil(places / 2)])) as [{ claimed: Array<{ user_id: string; sequence: number }> }];
        return { claimed, read: (await indexEntriesRead(sql)) - before };
      } finally {
        await sql('rollback');
      }
    });
    // Before the table is analyzed, then after (the claim rolled back each time).
    for (const when of ['before analyze', 'after analyze']) {
      if (when === 'after analyze') await db.sql('analyze public.outbound_deliveries');
      const seen = await claimOnce();
      // Twenty users' heads (their 7th event), one each.
      expect({ when, claimed: seen.claimed.length, users: new Set(seen.claimed.map((d) => d.user_id)).size }).toEqual({ when, claimed: 20, users: 20 });
      expect(seen.claimed.every((d) => Number(d.sequence) === 7)).toBe(true);
      // About two index entries per delivery looked at (the due index, the head's), not the queue per delivery.
      expect(seen.read, when).toBeLessThan(500);
    }

    // After a receiver was down: every delivery waiting is a retry, all of them due. The claim for
    // first attempts finds none without reading them; the one for retries reads from its start.
    await db.sql(`insert into public.outbound_endpoints (id) values ('claim-scale-retries')`);
    await db.sql(`insert into public.outbound_deliveries (endpoint_id, event_id, user_id, sequence, state, delivered_at, attempts, first_attempt_at, next_attempt_at)
      select 'claim-scale-retries', event_id, user_id, sequence, state, delivered_at,
             case when state = 'pending' then 1 else 0 end, case when state = 'pending' then now() - interval '1 hour' end, now() - interval '1 minute'
      from public.outbound_deliveries where endpoint_id = 'claim-scale'`);
    await db.sql('select public.outbound_mend_queues()');
    await db.sql('analyze public.outbound_deliveries');
    for (const places of [1, 100]) {
      const seen = await claimOnce('claim-scale-retries', places);
      expect({ places, claimed: seen.claimed.length }).toEqual({ places, claimed: Math.ceil(places / 2) });
      expect(seen.read, `${places} places`).toBeLessThan(500);
    }
  });
});

describeOn('postgres')('claiming retries and first attempts together, on postgres', () => {
  const db = suiteDatabase('postgres');

  it('takes the due retries first, up to their share, and first attempts in the places left: a stream of new events never keeps the retries waiting', async () => {
    await db.sql(`insert into public.outbound_endpoints (id) values ('claim-share')`);
    // 200 users with a first attempt due (a bulk replay, say), 80 others with a retry due.
    await db.sql(`insert into public.outbound_events (user_id, sequence, type, data)
      select 'claim-share-' || i, 1, 'entitlement.updated', '{}' from generate_series(1, 280) i`);
    await db.sql(`insert into public.outbound_deliveries (endpoint_id, event_id, user_id, sequence, attempts, first_attempt_at, next_attempt_at)
      select 'claim-share', id, user_id, sequence,
             case when substr(user_id, 13)::int > 200 then 1 else 0 end,
             case when substr(user_id, 13)::int > 200 then now() - interval '1 hour' end,
             now() - interval '1 minute'
      from public.outbound_events where user_id like 'claim-share-%'`);
    await db.sql('select public.outbound_mend_queues()');
    const claim = (retryLimit: number | null) => db.connection(async (sql) => {
      await sql('begin');
      try {
        const [{ claimed }] = (await sql(`select public.outbound_claim('claim-share', 100, 60, $1) as claimed`, [retryLimit])) as [{ claimed: Array<{ attempts: number }> }];
        return { retries: claimed.filter((d) => d.attempts > 1).length, firstAttempts: claimed.filter((d) => d.attempts === 1).length };
      } finally {
        await sql('rollback');
      }
    });
    // The server's claim with no retry in flight: 50 places for retries, the other 50 for new events.
    expect(await claim(50)).toEqual({ retries: 50, firstAttempts: 50 });
    // With 40 retries in flight it may start 10 more; new events take the rest.
    expect(await claim(10)).toEqual({ retries: 10, firstAttempts: 90 });
    // No retry limit named (a caller from before it existed): half the places at most.
    expect(await claim(null)).toEqual({ retries: 50, firstAttempts: 50 });
  });
});

describeOn('postgres')('claiming behind a receiver that is down, on postgres', () => {
  const db = suiteDatabase('postgres');

  it('reads none of the backlog behind heads that retry later: 1,000 users with 50 events waiting each, beside 20 new users, and again after new events of 10 of them', async () => {
    await db.sql(`insert into public.outbound_endpoints (id) values ('claim-down')`);
    // 1,000 users whose first event failed and retries in an hour, 49 more behind it; 20 users with one new event.
    await db.sql(`insert into public.outbound_events (user_id, sequence, type, data)
      select 'claim-down-' || (i % 1000), i / 1000 + 1, 'entitlement.updated', '{}' from generate_series(0, 49999) i
      union all select 'claim-new-' || i, 1, 'entitlement.updated', '{}'::jsonb from generate_series(1, 20) i`);
    await db.sql(`insert into public.outbound_deliveries (endpoint_id, event_id, user_id, sequence, attempts, first_attempt_at, next_attempt_at)
      select 'claim-down', id, user_id, sequence,
             case when sequence = 1 and user_id like 'claim-down-%' then 1 else 0 end,
             case when sequence = 1 and user_id like 'claim-down-%' then now() - interval '1 hour' end,
             case when sequence = 1 and user_id like 'claim-down-%' then now() + interval '1 hour' else now() - interval '1 minute' end
      from public.outbound_events where user_id like 'claim-down-%' or user_id like 'claim-new-%'`);
    await db.sql('select public.outbound_mend_queues()');
    await db.sql('analyze public.outbound_deliveries, public.outbound_queues');

    const claimOnce = () => db.connection(async (sql) => {
      await sql('begin');
      try {
        const before = await indexEntriesRead(sql);
        const [{ claimed }] = (await sql(`select public.outbound_claim('claim-down', 100, 60, 50) as claimed`)) as [{ claimed: Array<{ user_id: string }> }];
        return { users: claimed.map((d) => d.user_id).sort(), read: (await indexEntriesRead(sql)) - before };
      } finally {
        await sql('rollback');
      }
    });
    const newUsers = Array.from({ length: 20 }, (_, i) => `claim-new-${i + 1}`).sort();
    const first = await claimOnce();
    expect(first.users).toEqual(newUsers);
    // The 20 queues and their heads (the claim read the deliveries behind the retrying heads before: 98,000 entries).
    expect(first.read).toBeLessThan(200);

    // A new event for 10 of the waiting users makes their queues due: each is looked at once, and set
    // back to its head's retry.
    for (let i = 0; i < 10; i++) await db.sql(`select public.outbound_emit('claim-down-${i}', 'entitlement.updated', '{}')`);
    const [{ claimed }] = await db.sql<{ claimed: Array<{ user_id: string }> }>(`select public.outbound_claim('claim-down', 100, 60, 50) as claimed`);
    expect(claimed.map((d) => d.user_id).sort()).toEqual(newUsers);
    const rows = await db.sql<{ later: boolean; head_attempted: boolean }>(
      `select look_at > now() + interval '50 minutes' as later, head_attempted from public.outbound_queues
       where endpoint_id = 'claim-down' and user_id in (select 'claim-down-' || i from generate_series(0, 9) i)`);
    expect(rows).toEqual(Array.from({ length: 10 }, () => ({ later: true, head_attempted: true })));
    const again = await claimOnce();
    expect(again.users).toEqual([]);
    expect(again.read).toBeLessThan(50);
  });
});
