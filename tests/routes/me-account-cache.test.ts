import { describe, expect, it } from 'vitest';
import pg from 'pg';
import * as meRoute from '../../app/api/me/route.ts';
import * as leaguesRoute from '../../app/api/webhooks/leagues-sync/route.ts';
import { DEV_WEBHOOK_SECRETS } from '../../lib/config.ts';
import { at, delivery, freshSource, league } from '../leagues/fixtures.ts';
import { DATABASE_KINDS, suiteDatabase, untilASessionWaitsForALock, type TestDatabase } from '../support/databases.ts';
import { getMe, linkWallet, unlinkWallet } from '../support/account-actions.ts';
import { callRoute } from '../support/http.ts';
import { testUser } from '../support/tokens.ts';
import { evmWallet, solanaWallet } from '../wallets/wallets.ts';

// GET /api/me keeps a user's wallets and leagues between reads (account_cache, 07_account.sql). What
// it answers must be what it would answer without the cache: every write that changes a user's
// wallets or leagues shows on the next read, and a read racing a write never keeps what it built
// before it.

type User = Awaited<ReturnType<typeof testUser>>;

async function leaguesOf(user: User): Promise<Array<Record<string, unknown>>> {
  const response = await callRoute(meRoute, { headers: { authorization: user.authorization } });
  expect(response.status).toBe(200);
  return response.body.leagues;
}

async function sync(body: unknown): Promise<void> {
  const response = await callRoute(leaguesRoute, { method: 'POST', headers: { 'x-webhook-secret': DEV_WEBHOOK_SECRETS.leagues }, body });
  expect(response.status).toBe(200);
}

const memberOf = (user: User, role = 'member') => ({ externalUserId: `ext-${user.userId.slice(0, 8)}`, displayName: 'Ana', role, appUserId: user.userId });

async function cachedRow(db: TestDatabase, user: User) {
  const [row] = await db.sql<{ wallets: string | null; leagues: string | null; version: string }>(
    'select wallets, leagues, version from public.account_cache where user_id = $1', [user.userId]);
  return row;
}

describe.each(DATABASE_KINDS)('GET /api/me\'s wallets and leagues between reads, on %s', (kind) => {
  const db = suiteDatabase(kind);

  it('shows every change a leagues sync makes on the next read: a new league, a rename, a role, a member removed, a league deleted', async () => {
    const user = await testUser();
    const other = await testUser();
    const source = freshSource('cache');
    expect(await leaguesOf(user)).toEqual([]);

    await sync(delivery(source, { leagues: [league('A', at(1), { name: 'Alpha', members: [memberOf(user)] })] }));
    expect((await leaguesOf(user)).map((item) => [item.externalId, item.name, item.role])).toEqual([['A', 'Alpha', 'member']]);
    expect((await cachedRow(db, user))?.leagues).not.toBeNull(); // read twice: the second from the cache
    expect((await leaguesOf(user)).map((item) => item.name)).toEqual(['Alpha']);

    await sync(delivery(source, { leagues: [league('A', at(2), { name: 'Alpha Renamed', members: [memberOf(user, 'commissioner')] })] }));
    expect((await leaguesOf(user)).map((item) => [item.name, item.role])).toEqual([['Alpha Renamed', 'commissioner']]);

    await sync(delivery(source, { leagues: [league('B', at(3), { name: 'Beta', members: [memberOf(user), memberOf(other)] })] }));
    expect((await leaguesOf(user)).map((item) => item.name)).toEqual(['Beta', 'Alpha Renamed']);
    expect((await leaguesOf(other)).map((item) => item.name)).toEqual(['Beta']);

    // Removed from Beta's members; the other member reads Beta still.
    await sync(delivery(source, { leagues: [league('B', at(4), { name: 'Beta', members: [memberOf(other)] })] }));
    expect((await leaguesOf(user)).map((item) => item.name)).toEqual(['Alpha Renamed']);
    expect((await leaguesOf(other)).map((item) => item.name)).toEqual(['Beta']);

    // A deleted league leaves its members' lists.
    await sync(delivery(source, { deleted: [{ externalId: 'B', deletedAt: at(5) }] }));
    expect(await leaguesOf(other)).toEqual([]);
    expect((await leaguesOf(user)).map((item) => item.name)).toEqual(['Alpha Renamed']);
  });

  it('shows every wallet linked or unlinked on the next read, beside the leagues kept', async () => {
    const user = await testUser();
    await sync(delivery(freshSource('cache-wallets'), { leagues: [league('A', at(1), { name: 'Alpha', members: [memberOf(user)] })] }));
    expect((await getMe(user)).wallets).toEqual([]);
    const evm = await linkWallet(user, evmWallet());
    expect((await getMe(user)).wallets).toEqual([evm]);
    expect((await cachedRow(db, user))?.wallets).not.toBeNull(); // read twice: the second from the cache
    const solana = await linkWallet(user, solanaWallet());
    const both = await getMe(user);
    expect({ wallets: both.wallets, leagues: both.leagues.map((item) => item.name) }).toEqual({ wallets: [evm, solana], leagues: ['Alpha'] });
    await unlinkWallet(user, evm.id);
    expect((await getMe(user)).wallets).toEqual([solana]);
    // A write by hand (an operator's) empties the row as the routes' writes do.
    await db.sql('delete from public.wallet_links where user_id = $1', [user.userId]);
    expect((await getMe(user)).wallets).toEqual([]);
  });

  it('empties every kept row when a table is truncated by hand', async () => {
    const user = await testUser();
    await linkWallet(user, evmWallet());
    expect((await getMe(user)).wallets).toHaveLength(1);
    expect(await cachedRow(db, user)).toBeDefined();
    await db.sql('truncate public.wallet_links');
    expect(await cachedRow(db, user)).toBeUndefined();
    expect((await getMe(user)).wallets).toEqual([]);
  });

  it('answers through get_account, as the code before get_account_json read it, what GET /api/me shows', async () => {
    const user = await testUser();
    const link = await linkWallet(user, evmWallet());
    await sync(delivery(freshSource('cache-compat'), { leagues: [league('A', at(1), { name: 'Alpha', members: [memberOf(user)] })] }));
    const me = await getMe(user);
    const [{ account }] = await db.sql<{ account: { wallets: unknown[]; entitlements: unknown[]; leagues: unknown[] } }>(
      'select public.get_account($1, now()) as account', [user.userId]);
    expect(account).toEqual({ wallets: [link], entitlements: [], leagues: me.leagues });
  });

  it('keeps a row for a user with wallets and in no league, and none for a user with neither', async () => {
    const user = await testUser();
    expect(await getMe(user)).toMatchObject({ wallets: [], leagues: [] });
    expect(await cachedRow(db, user)).toBeUndefined();
    const link = await linkWallet(user, evmWallet());
    expect(await getMe(user)).toMatchObject({ wallets: [link], leagues: [] });
    expect(await cachedRow(db, user)).toMatchObject({ leagues: '[]' });
    await unlinkWallet(user, link.id);
    expect(await getMe(user)).toMatchObject({ wallets: [], leagues: [] });
    expect(await cachedRow(db, user)).toBeUndefined();
  });

  it('keeps nothing of an erased user: forgetting them removes the kept wallets and leagues too', async () => {
    const user = await testUser();
    await sync(delivery(freshSource('cache-forget'), { leagues: [league('A', at(1), { name: 'Alpha', members: [memberOf(user)] })] }));
    await linkWallet(user, evmWallet());
    expect((await leaguesOf(user)).map((item) => item.name)).toEqual(['Alpha']);
    expect(await cachedRow(db, user)).toBeDefined();
    await db.sql('select public.forget_user($1)', [user.userId]);
    expect(await cachedRow(db, user)).toBeUndefined();
    // A read with the erased user's token, still valid for a while, keeps nothing either.
    expect(await getMe(user)).toMatchObject({ wallets: [], leagues: [] });
    expect(await cachedRow(db, user)).toBeUndefined();
  });
});

describe('GET /api/me\'s kept wallets and leagues and a write still open (postgres)', () => {
  const db = suiteDatabase('postgres');

  /** The user in league A of a fresh source; with `start`, no row kept yet or a row an earlier write emptied. */
  async function userInALeague(start: string) {
    const user = await testUser();
    const source = freshSource('cache-race');
    await sync(delivery(source, { leagues: [league('A', at(1), { name: 'Before', members: [memberOf(user)] })] }));
    if (start === 'no row kept yet') {
      await db.sql('delete from public.account_cache where user_id = $1', [user.userId]);
    } else {
      expect((await leaguesOf(user)).map((item) => item.name)).toEqual(['Before']);
      await sync(delivery(source, { leagues: [league('A', at(2), { name: 'Before', members: [memberOf(user)] })] }));
      expect(await cachedRow(db, user)).toMatchObject({ leagues: null });
    }
    return { user, source };
  }

  /** Run `write` in a transaction held open while GET /api/me reads, and commit it once the read waits for it. */
  async function readDuring(user: User, write: (writer: pg.Client) => Promise<unknown>) {
    const writer = new pg.Client({ connectionString: db.url });
    await writer.connect();
    try {
      await writer.query('begin');
      await write(writer);
      const reading = leaguesOf(user);
      await untilASessionWaitsForALock(db);
      await writer.query('commit');
      return (await reading).map((item) => item.name);
    } finally {
      await writer.end();
    }
  }

  it.for(['no row kept yet', 'a row an earlier write emptied'])('a read racing a rename keeps nothing older than the rename (%s)', async (start) => {
    const { user, source } = await userInALeague(start);
    const read = await readDuring(user, (writer) => writer.query(
      `update public.leagues set name = 'After', updated_at = updated_at + interval '1 second' where source = $1 and external_id = 'A'`, [source]));
    // A first read waits for the write before it builds, so it answers the new name; a read of an
    // emptied row built from what was committed before, and answers the old one: both are what the
    // database held at some instant of the read. Neither keeps the old name.
    expect(read).toEqual(start === 'no row kept yet' ? ['After'] : ['Before']);
    expect((await cachedRow(db, user))?.leagues ?? null).toEqual(start === 'no row kept yet' ? (await db.sql<{ leagues: string }>('select public.account_leagues($1)::text as leagues', [user.userId]))[0]!.leagues : null);
    expect((await leaguesOf(user)).map((item) => item.name)).toEqual(['After']);
  });

  it.for(['no row kept yet', 'a row an earlier write emptied'])('a read racing an erasure keeps no row of the erased user (%s)', async (start) => {
    const { user } = await userInALeague(start);
    const read = await readDuring(user, (writer) => writer.query('select public.forget_user($1)', [user.userId]));
    expect(read).toEqual(start === 'no row kept yet' ? [] : ['Before']);
    expect(await cachedRow(db, user)).toBeUndefined();
    expect(await leaguesOf(user)).toEqual([]);
    expect(await cachedRow(db, user)).toBeUndefined();
  });
});
