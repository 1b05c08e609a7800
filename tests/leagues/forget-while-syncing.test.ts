import { randomUUID } from 'node:crypto';
import { expect, it } from 'vitest';
import { toApplyLeaguesSyncArgs } from '../../lib/leagues/sync.ts';
import { leaguesSyncBodySchema } from '../../lib/leagues/sync-schema.ts';
import { describeOn, suiteDatabase, untilASessionWaitsForALock, type TestDatabase } from '../support/databases.ts';
import { at, delivery, freshSource, league, member } from './fixtures.ts';

/**
 * A leagues delivery marks its accounts (account_cache rows, public.account_changed) before it
 * touches league_members; deleting a user (public.forget_user -> leagues_forget_user) marks the
 * user's account first too. In the other order a delivery that replaced a league of the user's
 * while the user was deleted waited for the deletion and the deletion for it: a deadlock, and one
 * of them failed.
 */
describeOn('postgres')('a leagues delivery and a user deletion at once, on postgres', () => {
  const db = suiteDatabase('postgres');
  const applySql = (sql: TestDatabase['sql'], body: unknown) => {
    const args = toApplyLeaguesSyncArgs(leaguesSyncBodySchema.parse(body));
    return sql(`select public.apply_leagues_sync(p_source => $1, p_sent_at => $2, p_leagues => $3::jsonb, p_deleted => $4::jsonb, p_delivery_id => $5)`,
      [args.p_source, args.p_sent_at, JSON.stringify(args.p_leagues), JSON.stringify(args.p_deleted), args.p_delivery_id]);
  };

  it.each([1, 2, 3, 4, 5, 6])('neither fails: the delivery replaces the league\'s members while the member\'s account is deleted (round %i: which of the two takes the account first after the holder commits varies)', async () => {
    const user = randomUUID();
    const source = freshSource('forget');
    // The user (no wallets) is a member of league L.
    await applySql(db.sql, delivery(source, { leagues: [league('L', at(1), { members: [member(1, { appUserId: user })] })] }));
    const errors: string[] = [];
    await db.connection(async (other) => db.connection(async (sync) => db.connection(async (eraser) => {
      // Anything else that marks the user's account at that moment (a wallet link of theirs, another
      // delivery): held open, so that the two below meet in the order they do when they race.
      await other('begin');
      await other(`select public.account_changed(array[$1::uuid])`, [user]);
      let synced = false;
      const syncing = applySql(sync, delivery(source, { leagues: [league('L', at(2), { members: [member(2)] })] }))
        .catch((error: Error) => void errors.push(`delivery: ${error.message}`)).finally(() => { synced = true; });
      await untilASessionWaitsForALock(db, () => synced); // the delivery holds L and waits to mark the user
      let erased = false;
      const erasing = eraser(`select public.forget_user($1)`, [user])
        .catch((error: Error) => void errors.push(`erasure: ${error.message}`)).finally(() => { erased = true; });
      // The erasure has updated the user's member row and waits to mark the user too.
      for (let i = 0; i < 200 && !erased; i++) {
        const [{ n }] = await db.sql<{ n: number }>(`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`);
        if (n >= 2) break;
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      await other('commit');
      await Promise.all([syncing, erasing]);
    })));
    expect(errors).toEqual([]);
  });
});
