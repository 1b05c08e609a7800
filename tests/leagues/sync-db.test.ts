import { describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import type { AccountLeague } from '../../lib/leagues/account-leagues.ts';
import { callDb, dbCallCount, DbError } from '../../lib/db/index.ts';
import { applyLeaguesSync, toApplyLeaguesSyncArgs } from '../../lib/leagues/sync.ts';
import { leaguesSyncBodySchema } from '../../lib/leagues/sync-schema.ts';
import { DATABASE_KINDS, suiteDatabase } from '../support/databases.ts';
import { at, delivery, freshSource, league, member, members, storedLeagues, tableCounts } from './fixtures.ts';

/** Validate like the route does, then apply through the service's database port. */
const apply = (body: unknown) => applyLeaguesSync(leaguesSyncBodySchema.parse(body));
const counts = (upserted: number, unchanged: number, stale: number, deleted: number) => ({ received: true, upserted, unchanged, stale, deleted });

describe.each(DATABASE_KINDS)('apply_leagues_sync on %s', (kind) => {
  const db = suiteDatabase(kind);

  it('applies a repeated delivery once: the same delivery 3 times', async () => {
    const source = freshSource();
    const body = delivery(source, { id: 'delivery-1', leagues: [league('a', at(1)), league('b', at(1))], deleted: [{ externalId: 'c', deletedAt: at(1) }] });
    expect(await apply(body)).toEqual(counts(2, 0, 0, 1));
    const after = await storedLeagues(db, source);
    const callsBefore = dbCallCount();
    expect(await apply(body)).toEqual({ ...counts(2, 0, 0, 1), duplicate: true });
    expect(await apply(body)).toEqual({ ...counts(2, 0, 0, 1), duplicate: true });
    expect(dbCallCount() - callsBefore).toBe(2);
    expect(await storedLeagues(db, source)).toEqual(after);
    expect(await db.sql('select delivery_id, upserted, deleted from public.league_sync_deliveries where source = $1', [source]))
      .toEqual([{ delivery_id: 'delivery-1', upserted: 2, deleted: 1 }]);

    // Without an id a replay is not recognised, yet newest-wins makes it change nothing.
    const anonymous = { ...body, id: undefined };
    expect(await apply(anonymous)).toEqual(counts(0, 3, 0, 0));
    expect(await apply(anonymous)).toEqual(counts(0, 3, 0, 0));
    expect(await storedLeagues(db, source)).toEqual(after);
  });

  it('keeps delivery ids per source, and a repeated id answers the first counts even with another body', async () => {
    const [one, two] = [freshSource(), freshSource()];
    expect(await apply(delivery(one, { id: 'same', leagues: [league('a', at(1))] }))).toEqual(counts(1, 0, 0, 0));
    expect(await apply(delivery(two, { id: 'same', leagues: [league('a', at(1))] }))).toEqual(counts(1, 0, 0, 0));
    expect(await apply(delivery(one, { id: 'same', leagues: [league('a', at(9)), league('b', at(9))] })))
      .toEqual({ ...counts(1, 0, 0, 0), duplicate: true });
    expect((await storedLeagues(db, one)).map((l) => [l.external_id, l.updated_at])).toEqual([['a', at(1)]]);
  });

  // Snapshots of one league arriving in any order: the newest stays, whatever came after it.
  const orderCases = [
    { name: 'in order', times: [1, 2, 3], expected: ['upserted', 'upserted', 'upserted'] },
    { name: 'newest first', times: [3, 1, 2], expected: ['upserted', 'stale', 'stale'] },
    { name: 'middle first', times: [2, 1, 3, 3], expected: ['upserted', 'stale', 'upserted', 'unchanged'] },
    { name: 'repeated then older', times: [3, 3, 2, 1], expected: ['upserted', 'unchanged', 'stale', 'stale'] },
  ];
  it.each(orderCases)('out-of-order snapshots of one league: $name', async ({ times, expected }) => {
    const source = freshSource();
    const outcomes: string[] = [];
    for (const t of times) {
      const result = await apply(delivery(source, { leagues: [league('x', at(t), { name: `v${t}`, members: members(t) })] }));
      outcomes.push((['upserted', 'unchanged', 'stale', 'deleted'] as const).find((key) => result[key] === 1)!);
    }
    expect(outcomes).toEqual(expected);
    const newest = Math.max(...times);
    const [stored] = await storedLeagues(db, source);
    expect(stored).toMatchObject({ name: `v${newest}`, updated_at: at(newest), deleted_at: null });
    expect(stored!.members).toHaveLength(newest);
  });

  it('a deletion followed by an older and then a newer snapshot', async () => {
    const source = freshSource();
    const user = randomUUID();
    const live = league('x', at(10), { members: [member(1, { appUserId: user }), member(2)] });
    expect(await apply(delivery(source, { leagues: [live] }))).toEqual(counts(1, 0, 0, 0));
    expect(await callDb<AccountLeague[]>('account_leagues', { p_user_id: user })).toHaveLength(1);

    const steps = [
      { name: 'deletion older than the snapshot', body: { deleted: [{ externalId: 'x', deletedAt: at(5) }] }, result: counts(0, 0, 1, 0), deleted: null },
      { name: 'deletion', body: { deleted: [{ externalId: 'x', deletedAt: at(20) }] }, result: counts(0, 0, 0, 1), deleted: at(20) },
      { name: 'same deletion again', body: { deleted: [{ externalId: 'x', deletedAt: at(20) }] }, result: counts(0, 1, 0, 0), deleted: at(20) },
      { name: 'older snapshot', body: { leagues: [league('x', at(15))] }, result: counts(0, 0, 1, 0), deleted: at(20) },
      { name: 'snapshot at the deletion time (deletion wins ties)', body: { leagues: [league('x', at(20))] }, result: counts(0, 0, 1, 0), deleted: at(20) },
      { name: 'newer snapshot brings it back', body: { leagues: [league('x', at(30), { members: [member(1, { appUserId: user })] })] }, result: counts(1, 0, 0, 0), deleted: null },
      { name: 'deletion at the snapshot time (deletion wins ties)', body: { deleted: [{ externalId: 'x', deletedAt: at(30) }] }, result: counts(0, 0, 0, 1), deleted: at(30) },
      { name: 'later deletion moves the tombstone', body: { deleted: [{ externalId: 'x', deletedAt: at(40) }] }, result: counts(0, 0, 0, 1), deleted: at(40) },
    ];
    for (const step of steps) {
      expect({ step: step.name, result: await apply(delivery(source, step.body)) }).toEqual({ step: step.name, result: step.result });
      const [stored] = await storedLeagues(db, source);
      expect({ step: step.name, deleted_at: stored!.deleted_at }).toEqual({ step: step.name, deleted_at: step.deleted });
      // A deleted league keeps no members and is not among the user's leagues.
      if (step.deleted) {
        expect(stored!.members).toEqual([]);
        expect(await callDb('account_leagues', { p_user_id: user })).toEqual([]);
      } else {
        expect(await callDb<AccountLeague[]>('account_leagues', { p_user_id: user })).toHaveLength(1);
      }
    }
  });

  it('records a deletion of a league never seen, so a late older snapshot stays out', async () => {
    const source = freshSource();
    expect(await apply(delivery(source, { deleted: [{ externalId: 'ghost', deletedAt: at(10) }] }))).toEqual(counts(0, 0, 0, 1));
    expect(await apply(delivery(source, { leagues: [league('ghost', at(9))] }))).toEqual(counts(0, 0, 1, 0));
    expect(await storedLeagues(db, source)).toMatchObject([{ external_id: 'ghost', name: null, deleted_at: at(10) }]);
    expect(await apply(delivery(source, { leagues: [league('ghost', at(11))] }))).toEqual(counts(1, 0, 0, 0));
    expect(await storedLeagues(db, source)).toMatchObject([{ external_id: 'ghost', name: 'League ghost', updated_at: at(11), deleted_at: null }]);
  });

  it('replaces the member list: shrinking, growing, changing roles, emptying', async () => {
    const source = freshSource();
    const lists = [
      { list: members(3), expected: ['u1:commissioner', 'u2:member', 'u3:member'] },
      { list: [member(2)], expected: ['u2:member'] },
      { list: [member(2, { role: 'commissioner' }), member(4), member(5), member(6), member(7)], expected: ['u2:commissioner', 'u4:member', 'u5:member', 'u6:member', 'u7:member'] },
      { list: [], expected: [] },
      { list: members(2), expected: ['u1:commissioner', 'u2:member'] },
    ];
    for (const [i, { list, expected }] of lists.entries()) {
      expect(await apply(delivery(source, { leagues: [league('x', at(i + 1), { members: list })] }))).toEqual(counts(1, 0, 0, 0));
      expect((await storedLeagues(db, source))[0]!.members).toEqual(expected);
    }
  });

  it('applies a batch all or nothing: one bad league fails the whole delivery and changes nothing', async () => {
    const source = freshSource();
    await apply(delivery(source, { leagues: [league('keep', at(1))] }));
    const before = await storedLeagues(db, source);
    const total = await tableCounts(db);
    // Past the route's validation (called directly), the database's own checks still refuse it.
    const leagues = Array.from({ length: 300 }, (_, i) => league(`l${i}`, at(5)));
    leagues[250] = league('l250', at(5), { status: 'exploded' });
    leagues.push(league('keep', at(9), { name: 'changed' }));
    const args = toApplyLeaguesSyncArgs({ ...leaguesSyncBodySchema.parse(delivery(source, { id: 'bad' })), leagues } as never);
    const error = await callDb('apply_leagues_sync', args).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DbError);
    expect((error as DbError).kind).toBe('invalid');
    expect(await storedLeagues(db, source)).toEqual(before);
    expect(await tableCounts(db)).toEqual(total);
    // The failed delivery's id was not recorded: the corrected retry is applied.
    expect(await apply(delivery(source, { id: 'bad', leagues: [league('keep', at(9), { name: 'changed' })] }))).toEqual(counts(1, 0, 0, 0));
  });

  it('refuses a league twice in one delivery at the database too', async () => {
    const source = freshSource();
    const args = toApplyLeaguesSyncArgs({
      ...leaguesSyncBodySchema.parse(delivery(source)),
      leagues: [league('a', at(1)), league('a', at(2))],
    } as never);
    await expect(callDb('apply_leagues_sync', args)).rejects.toMatchObject({ kind: 'invalid', reason: 'invalid_request' });
    expect(await storedLeagues(db, source)).toEqual([]);
  });

  it('applies 500 leagues x 20 members in one delivery, in one database call', async () => {
    const source = freshSource();
    const leagues = Array.from({ length: 500 }, (_, i) => league(`big-${i}`, at(1), { members: members(20) }));
    const body = delivery(source, { id: 'big', leagues });
    const callsBefore = dbCallCount();
    expect(await apply(body)).toEqual(counts(500, 0, 0, 0));
    expect(dbCallCount() - callsBefore).toBe(1);
    const [row] = await db.sql<{ leagues: number; members: number }>(
      `select count(distinct l.id)::int as leagues, count(m.*)::int as members
       from public.leagues l left join public.league_members m on m.league_id = l.id where l.source = $1`,
      [source],
    );
    expect(row).toEqual({ leagues: 500, members: 10_000 });
    // The whole batch again, newer: every league replaced.
    expect(await apply({ ...body, id: 'big-2', leagues: leagues.map((l) => ({ ...l, updatedAt: at(2), members: members(19) })) })).toEqual(counts(500, 0, 0, 0));
    const [again] = await db.sql<{ members: number }>(
      'select count(*)::int as members from public.league_members m join public.leagues l on l.id = m.league_id where l.source = $1',
      [source],
    );
    expect(again!.members).toBe(9_500);
  });

  it('two deliveries for the same leagues at once: the newer updatedAt always ends up stored', async () => {
    // Each round races two deliveries twice: creating the leagues, then updating them. The
    // deliveries list the shared leagues in opposite orders (locks are taken in one fixed order,
    // so they wait for each other instead of deadlocking) and which one is newer alternates.
    const keys = Array.from({ length: 40 }, (_, i) => `race-${String(i).padStart(2, '0')}`);
    for (let round = 0; round < 6; round++) {
      const source = freshSource('race');
      for (const [older, newer] of [[1, 2], [3, 4]] as const) {
        const make = (t: number, order: string[]) =>
          leaguesSyncBodySchema.parse(delivery(source, { leagues: order.map((key) => league(key, at(t), { name: `t${t}`, members: members(t) })) }));
        const a = make(older, keys);
        const b = make(newer, [...keys].reverse());
        const results = await Promise.all(round % 2 === 0 ? [applyLeaguesSync(a), applyLeaguesSync(b)] : [applyLeaguesSync(b), applyLeaguesSync(a)]);
        // Every league was applied by exactly one of them when the older lost, or by both.
        for (const result of results) expect(result.upserted + result.stale).toBe(keys.length);
        const stored = await storedLeagues(db, source);
        expect(stored.map((l) => [l.updated_at, l.name, l.members.length])).toEqual(keys.map(() => [at(newer), `t${newer}`, newer]));
      }
    }
  });

  it('deliveries of different sources at once whose leagues share app users in crossing orders: each applied, none refused', async () => {
    // 20 sources, each with 10 leagues; league k of source i has one member, app user (k + i) % 10.
    // So two deliveries name the same users in other leagues, in other orders: marked changed league
    // by league, their accounts were locked in crossing orders, and Postgres failed some deliveries
    // with a deadlock (a 503 to the sync worker).
    const users = Array.from({ length: 10 }, () => randomUUID());
    const sources = Array.from({ length: 20 }, () => freshSource('cross'));
    const make = (t: number) => sources.map((source, i) => leaguesSyncBodySchema.parse(delivery(source, {
      leagues: Array.from({ length: 10 }, (_, k) => league(`L${k}`, at(t), { members: [member(1, { appUserId: users[(k + i) % 10]! })] })),
    })));
    for (const t of [1, 2, 3]) {
      const results = await Promise.allSettled(make(t).map((body) => applyLeaguesSync(body)));
      expect(results.map((r) => (r.status === 'fulfilled' ? r.value.upserted : (r.reason as Error).message))).toEqual(sources.map(() => 10));
    }
    // Every user is in one league of each source.
    const [{ n }] = await db.sql<{ n: number }>('select count(*)::int as n from public.league_members where app_user_id = $1', [users[0]]);
    expect(n).toBe(20);
  });

  it('the same delivery id twice at once: applied once, the other answers its counts as a duplicate', async () => {
    for (let round = 0; round < 3; round++) {
      const source = freshSource('dup');
      const body = leaguesSyncBodySchema.parse(delivery(source, { id: 'twice', leagues: [league('a', at(1)), league('b', at(1))] }));
      const results = await Promise.all([applyLeaguesSync(body), applyLeaguesSync(body)]);
      expect(results.map((r) => r.duplicate ?? false).sort()).toEqual([false, true]);
      for (const result of results) expect({ ...result, duplicate: undefined }).toEqual({ ...counts(2, 0, 0, 0), duplicate: undefined });
      expect(await db.sql('select count(*)::int as n from public.league_sync_deliveries where source = $1', [source])).toEqual([{ n: 1 }]);
    }
  });

  it('account_leagues lists the caller\'s live leagues with the caller\'s role, newest first', async () => {
    const source = freshSource();
    const [ana, bo] = [randomUUID(), randomUUID()];
    await apply(delivery(source, {
      leagues: [
        league('older', at(1), { members: [member(1, { appUserId: bo }), member(2, { appUserId: ana })] }),
        league('newer', at(2), { name: 'Sunday Funday', season: '2026', status: 'drafting', members: [member(1, { appUserId: ana.toUpperCase() })] }),
        // Two members linked to one account: listed once, as commissioner.
        league('twice', at(0), { members: [member(1, { appUserId: ana, role: 'member' }), member(2, { appUserId: ana, role: 'commissioner' })] }),
        league('gone', at(3), { members: [member(1, { appUserId: ana })] }),
        league('other', at(3), { members: [member(1, { appUserId: bo })] }),
      ],
    }));
    await apply(delivery(source, { deleted: [{ externalId: 'gone', deletedAt: at(4) }] }));

    expect(await callDb<AccountLeague[]>('account_leagues', { p_user_id: ana })).toEqual([
      { source, externalId: 'newer', name: 'Sunday Funday', sport: 'nfl', season: '2026', status: 'drafting', role: 'commissioner', updatedAt: at(2) },
      { source, externalId: 'older', name: 'League older', sport: 'nfl', season: '2025', status: 'in_season', role: 'member', updatedAt: at(1) },
      { source, externalId: 'twice', name: 'League twice', sport: 'nfl', season: '2025', status: 'in_season', role: 'commissioner', updatedAt: at(0) },
    ]);
    expect(await callDb<AccountLeague[]>('account_leagues', { p_user_id: randomUUID() })).toEqual([]);
  });

  it('keeps microseconds and compares at that precision', async () => {
    const source = freshSource();
    const user = randomUUID();
    const base = '2025-06-01T12:00:00.123456Z';
    await apply(delivery(source, { leagues: [league('p', base, { members: [member(1, { appUserId: user })] })] }));
    expect(await apply(delivery(source, { leagues: [league('p', '2025-06-01T12:00:00.123455Z')] }))).toEqual(counts(0, 0, 1, 0));
    expect(await apply(delivery(source, { leagues: [league('p', '2025-06-01T14:00:00.123456+02:00')] }))).toEqual(counts(0, 1, 0, 0));
    expect((await callDb<AccountLeague[]>('account_leagues', { p_user_id: user }))[0]!.updatedAt).toBe(base);
  });

  it.each([
    { sent: '2026-11-21T17:59:00.000000Z', shown: '2026-11-21T17:59:00Z' },
    { sent: '2026-11-21T17:50:00Z', shown: '2026-11-21T17:50:00Z' },
    { sent: '2026-11-21T17:59:10.120000Z', shown: '2026-11-21T17:59:10.12Z' },
    { sent: '2026-11-21T17:59:00.5+01:00', shown: '2026-11-21T16:59:00.5Z' },
    { sent: '2026-11-21T17:59:00.123456Z', shown: '2026-11-21T17:59:00.123456Z' },
  ])('shows updatedAt $sent in UTC as $shown (no trailing zero fractions)', async ({ sent, shown }) => {
    const source = freshSource();
    const user = randomUUID();
    await apply(delivery(source, { leagues: [league('t', sent, { members: [member(1, { appUserId: user })] })] }));
    expect((await callDb<AccountLeague[]>('account_leagues', { p_user_id: user })).map((shownLeague) => shownLeague.updatedAt)).toEqual([shown]);
  });
});
