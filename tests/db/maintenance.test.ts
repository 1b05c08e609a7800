import { randomUUID } from 'node:crypto';
import { beforeEach, describe, expect, it } from 'vitest';
import { DbError } from '../../lib/db/errors.ts';
import { DATABASE_KINDS, suiteDatabase } from '../support/databases.ts';

/**
 * public.run_maintenance (20261124000100_maintenance.sql) on PGlite and on the real Postgres server:
 * each retention rule deletes what it says and nothing else, a run is bounded by its budget, a
 * second run finds nothing, and two runs at once share the work. (Billing's own step, run first
 * by lib/maintenance.ts, is tested in tests/billing/retention.test.ts and tests/routes/maintenance.test.ts.)
 */

interface MaintenanceResult {
  wallets: { challengesDeleted: number; done: boolean };
  leagues: { deliveriesDeleted: number; done: boolean };
  billingSync: { refreshRequestsDeleted: number; done: boolean };
  done: boolean;
  ms: number;
}

describe.each(DATABASE_KINDS)('retention and maintenance on %s', (kind) => {
  const db = suiteDatabase(kind);
  const run = (args: { p_now?: Date | null; p_budget_ms?: number } = {}) =>
    db.adapter.call('run_maintenance', { p_now: null, p_budget_ms: 10_000, ...args }) as Promise<MaintenanceResult>;

  /** Challenges of one user whose expiry is `offset` from now (an SQL interval, e.g. '-25 hours'). */
  const challenges = (count: number, offset: string, user = randomUUID()) => db.sql(`
    insert into public.wallet_challenges (id, user_id, chain, address, address_key, chain_id, nonce, message, issued_at, expires_at)
    select gen_random_uuid(), $1, 'evm', '0xabc', '0xabc', 1, md5(random()::text), 'message', now() + $2::interval - interval '10 minutes', now() + $2::interval
    from generate_series(1, $3)`, [user, offset, count]);
  const deliveries = (count: number, age: string, source = 'maint') => db.sql(`
    insert into public.league_sync_deliveries (source, delivery_id, sent_at, received_at)
    select $1, md5(random()::text), now() - $2::interval, now() - $2::interval from generate_series(1, $3)`, [source, age, count]);
  const refreshes = (count: number, age: string) => db.sql(`
    insert into public.billing_sync_requests (app_user_id, requested_at)
    select 'user-' || md5(random()::text), now() - $1::interval from generate_series(1, $2)`, [age, count]);
  const counts = async () => (await db.sql<{ challenges: number; deliveries: number; refreshes: number }>(`select
    (select count(*)::int from public.wallet_challenges) as challenges,
    (select count(*)::int from public.league_sync_deliveries) as deliveries,
    (select count(*)::int from public.billing_sync_requests) as refreshes`))[0];

  beforeEach(async () => {
    await db.sql('delete from public.wallet_challenges');
    await db.sql('delete from public.league_sync_deliveries');
    await db.sql('delete from public.billing_sync_requests');
  });

  it('deletes what each rule says and nothing else; a second run does nothing', async () => {
    await challenges(3, '-25 hours'); // expired more than a day ago: due
    await challenges(2, '-23 hours'); // expired, but less than a day ago
    await challenges(2, '5 minutes'); // still open
    await deliveries(3, '8 days');
    await deliveries(2, '6 days');
    await refreshes(3, '11 minutes');
    await refreshes(2, '9 minutes');

    expect(await run()).toMatchObject({
      wallets: { challengesDeleted: 3, done: true },
      leagues: { deliveriesDeleted: 3, done: true },
      billingSync: { refreshRequestsDeleted: 3, done: true },
      done: true,
      ms: expect.any(Number),
    });
    expect(await counts()).toEqual({ challenges: 4, deliveries: 2, refreshes: 2 });
    expect(await run()).toMatchObject({
      wallets: { challengesDeleted: 0 }, leagues: { deliveriesDeleted: 0 }, billingSync: { refreshRequestsDeleted: 0 }, done: true,
    });
    expect(await counts()).toEqual({ challenges: 4, deliveries: 2, refreshes: 2 });
  });

  it('keeps a refresh row while its day\'s count still limits the user (BILLING_USER_REFRESHES_PER_DAY), and drops it after', async () => {
    await db.sql(`insert into public.billing_sync_requests (app_user_id, requested_at, day_started_at, day_count) values
      ('counting', now() - interval '3 hours', now() - interval '20 hours', 20),
      ('day-over', now() - interval '3 hours', now() - interval '25 hours', 20)`);
    expect(await run()).toMatchObject({ billingSync: { refreshRequestsDeleted: 1 } });
    expect(await db.sql('select app_user_id from public.billing_sync_requests')).toEqual([{ app_user_id: 'counting' }]);
    expect(await run({ p_now: new Date(Date.now() + 5 * 3_600_000) })).toMatchObject({ billingSync: { refreshRequestsDeleted: 1 } });
  });

  it('counts from p_now: a week later the same rows are due', async () => {
    await challenges(2, '-1 hour');
    await deliveries(2, '1 day');
    await refreshes(2, '1 minute');
    expect(await run()).toMatchObject({ wallets: { challengesDeleted: 0 }, leagues: { deliveriesDeleted: 0 }, billingSync: { refreshRequestsDeleted: 0 } });
    expect(await run({ p_now: new Date(Date.now() + 7 * 86_400_000) })).toMatchObject({
      wallets: { challengesDeleted: 2 }, leagues: { deliveriesDeleted: 2 }, billingSync: { refreshRequestsDeleted: 2 }, done: true,
    });
  });

  it('keeps recognising a repeated leagues delivery for 7 days, then applies a copy again without changing anything', async () => {
    const source = `maint-${randomUUID().slice(0, 8)}`;
    const apply = (id: string) => db.adapter.call('apply_leagues_sync', {
      p_source: source, p_sent_at: new Date('2025-06-01T12:00:00Z'), p_delivery_id: id,
      p_leagues: [{ externalId: 'L1', name: 'League', sport: 'nfl', season: '2025', status: 'in_season', updatedAt: '2025-06-01T11:00:00Z', members: [] }],
    });
    expect(await apply('recent')).toEqual({ upserted: 1, unchanged: 0, stale: 0, deleted: 0, previousMemberUserIds: [] });
    expect(await apply('old')).toEqual({ upserted: 0, unchanged: 1, stale: 0, deleted: 0, previousMemberUserIds: [] });
    await db.sql(`update public.league_sync_deliveries set received_at = now() - interval '8 days' where source = $1 and delivery_id = 'old'`, [source]);
    await db.sql(`update public.league_sync_deliveries set received_at = now() - interval '6 days' where source = $1 and delivery_id = 'recent'`, [source]);

    expect(await run()).toMatchObject({ leagues: { deliveriesDeleted: 1 } });
    expect(await apply('recent')).toEqual({ upserted: 1, unchanged: 0, stale: 0, deleted: 0, duplicate: true });
    expect(await apply('old')).toEqual({ upserted: 0, unchanged: 1, stale: 0, deleted: 0, previousMemberUserIds: [] });
  });

  it('is bounded by its budget: one batch per rule at least, done: false, and the next runs finish', async () => {
    await challenges(2_500, '-2 days');
    await deliveries(1_200, '30 days');
    const first = await run({ p_budget_ms: 1 });
    expect(first).toMatchObject({ wallets: { challengesDeleted: 1_000, done: false }, leagues: { deliveriesDeleted: 1_000, done: false }, done: false });
    let total = { challenges: first.wallets.challengesDeleted, deliveries: first.leagues.deliveriesDeleted };
    let runs = 1;
    for (let last = first; !last.done; runs++) {
      last = await run({ p_budget_ms: 1 });
      total = { challenges: total.challenges + last.wallets.challengesDeleted, deliveries: total.deliveries + last.leagues.deliveriesDeleted };
    }
    expect(total).toEqual({ challenges: 2_500, deliveries: 1_200 });
    expect(runs).toBe(3);
    expect(await counts()).toEqual({ challenges: 0, deliveries: 0, refreshes: 0 });
  });

  it('shares the work between two runs at once: every due row deleted once, nothing else, no error', async () => {
    await challenges(3_000, '-2 days');
    await challenges(10, '-1 hour');
    await deliveries(3_000, '8 days');
    await deliveries(10, '1 day');
    await refreshes(2_000, '1 hour');
    await refreshes(10, '1 minute');
    if (kind === 'postgres') {
      // Test-only: each batch of challenges takes a while, so the second run starts while the first
      // holds its batch (PGlite has one connection: there the runs take turns).
      await db.sql(`create or replace function public.test_slow_batch() returns trigger language plpgsql as $$ begin perform pg_sleep(0.3); return null; end $$`);
      await db.sql('create trigger test_slow_batch after delete on public.wallet_challenges for each statement execute function public.test_slow_batch()');
    }
    let a: MaintenanceResult;
    let b: MaintenanceResult;
    try {
      const first = run();
      await new Promise((resolve) => setTimeout(resolve, 100));
      [a, b] = await Promise.all([first, run()]);
    } finally {
      if (kind === 'postgres') await db.sql('drop trigger test_slow_batch on public.wallet_challenges');
    }
    if (kind === 'postgres') {
      expect(a.wallets.challengesDeleted).toBeGreaterThan(0);
      expect(b.wallets.challengesDeleted).toBeGreaterThan(0);
    }
    expect({
      challenges: a.wallets.challengesDeleted + b.wallets.challengesDeleted,
      deliveries: a.leagues.deliveriesDeleted + b.leagues.deliveriesDeleted,
      refreshes: a.billingSync.refreshRequestsDeleted + b.billingSync.refreshRequestsDeleted,
    }).toEqual({ challenges: 3_000, deliveries: 3_000, refreshes: 2_000 });
    expect(await counts()).toEqual({ challenges: 10, deliveries: 10, refreshes: 10 });
  });

  it('refuses a budget outside 1 ms to 60 s', async () => {
    for (const budget of [0, 60_001]) {
      const error = await run({ p_budget_ms: budget }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(DbError);
      expect(error).toMatchObject({ kind: 'invalid', reason: 'invalid_request' });
    }
  });
});
