import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DATABASE_KINDS, openTestDatabase, type TestDatabase } from '../support/databases.ts';

/**
 * Deleting a user (a row leaving auth.users, as Supabase Auth's account deletion does) makes the
 * service forget them in one transaction: their wallet links and challenges are deleted, their
 * league memberships are unlinked (the roster row stays, app_user_id becomes null), and the
 * billing module's public.billing_forget_user(uuid) runs (tests/billing/forget-user.test.ts). Other users are untouched.
 */
describe.each(DATABASE_KINDS)('deleting a user on %s', (kind) => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await openTestDatabase(kind);
  });
  afterAll(() => db.close());

  /** A user with an auth.users row, a wallet link, an open challenge and a league membership. */
  async function userWithData(league: string) {
    const id = randomUUID();
    const challengeId = randomUUID();
    const address = `0x${randomUUID().replace(/-/g, '').padEnd(40, '0').slice(0, 40)}`;
    await db.sql('insert into auth.users (id, email) values ($1, $2)', [id, `${id.slice(0, 8)}@example.test`]);
    await db.sql(`insert into public.wallet_challenges (id, user_id, chain, address, address_key, chain_id, nonce, message, issued_at, expires_at)
                  values ($1, $2, 'evm', $3, $3, 1, 'n', 'm', now(), now() + interval '10 minutes')`, [challengeId, id, address]);
    await db.sql(`insert into public.wallet_links (user_id, chain, address, address_key, chain_id, challenge_id) values ($1, 'evm', $2, $2, 1, $3)`, [id, address, challengeId]);
    const [{ league_id }] = await db.sql<{ league_id: number }>(`
      insert into public.leagues (source, external_id, name, sport, season, status, updated_at)
      values ('deletion', $1, 'League', 'nfl', '2026', 'in_season', now())
      on conflict (source, external_id) do update set name = excluded.name
      returning id as league_id`, [league]) as [{ league_id: number }];
    await db.sql(`insert into public.league_members (league_id, external_user_id, display_name, role, app_user_id) values ($1, $2, 'Ana', 'member', $3)`, [league_id, `ext-${id}`, id]);
    return { id, leagueId: league_id };
  }

  const holdings = async (id: string) => {
    const [row] = await db.sql<{ links: number; challenges: number; memberships: number; roster: number }>(`
      select (select count(*)::int from public.wallet_links where user_id = $1) as links,
             (select count(*)::int from public.wallet_challenges where user_id = $1) as challenges,
             (select count(*)::int from public.league_members where app_user_id = $1) as memberships,
             (select count(*)::int from public.league_members where external_user_id = 'ext-' || $1::text) as roster`, [id]);
    return row;
  };

  it('deletes their wallets and challenges, unlinks their league memberships, and leaves other users alone', async () => {
    const gone = await userWithData('L-shared');
    const stays = await userWithData('L-shared');
    expect(await holdings(gone.id)).toEqual({ links: 1, challenges: 1, memberships: 1, roster: 1 });

    await db.sql('delete from auth.users where id = $1', [gone.id]);

    expect(await holdings(gone.id)).toEqual({ links: 0, challenges: 0, memberships: 0, roster: 1 });
    expect(await holdings(stays.id)).toEqual({ links: 1, challenges: 1, memberships: 1, roster: 1 });
    const [member] = await db.sql<{ app_user_id: string | null; display_name: string }>(`select app_user_id, display_name from public.league_members where external_user_id = $1`, [`ext-${gone.id}`]);
    expect(member).toEqual({ app_user_id: null, display_name: 'Ana' });
  });

  it('forget_user does the same for a user without an auth.users row, says what it did, and is idempotent', async () => {
    const user = await userWithData('L-solo');
    await db.sql('delete from auth.users where id = $1', [user.id]);
    const other = await userWithData('L-solo');
    await db.sql('delete from auth.users where id = $1', [other.id]); // the trigger forgot them already
    expect(await db.adapter.call('forget_user', { p_user_id: other.id })).toEqual({ walletLinks: 0, walletChallenges: 0, leagueMembersUnlinked: 0, billing: true });

    // Rows that arrived without any auth.users row (dev tokens, a sync after the deletion).
    const lateId = randomUUID();
    await db.sql(`insert into public.league_members (league_id, external_user_id, display_name, role, app_user_id) values ($1, 'late', 'Late', 'member', $2)`, [user.leagueId, lateId]);
    expect(await db.adapter.call('forget_user', { p_user_id: lateId })).toEqual({ walletLinks: 0, walletChallenges: 0, leagueMembersUnlinked: 1, billing: true });
    expect(await db.adapter.call('forget_user', { p_user_id: lateId })).toEqual({ walletLinks: 0, walletChallenges: 0, leagueMembersUnlinked: 0, billing: true });
  });
});
