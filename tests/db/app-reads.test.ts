import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ENTITLEMENT_STATUSES } from '../../lib/billing/event-effects.ts';
import { delivery, freshSource, league } from '../leagues/fixtures.ts';
import { deliverLeagues, deliverNow, getMe, linkWallet, type User } from '../support/account-actions.ts';
import { asRole, asUser, expectAppReadsMatchAccount, readAppViews, userClaims, withoutNulls } from '../support/app-reads.ts';
import { DATABASE_KINDS, suiteDatabase, type TestDatabase } from '../support/databases.ts';
import { testUser } from '../support/tokens.ts';
import { evmWallet, solanaWallet } from '../wallets/wallets.ts';

/**
 * What a signed-in app reads through Supabase itself (supabase-js: the anon key and the user's
 * session, i.e. role `authenticated` with the user's JWT claims, as PostgREST runs a request): the
 * views my_entitlements, my_wallet_links and my_leagues, the tables under their select-own policies,
 * has_entitlement() in the app's own policies, and the entitlements Supabase Auth puts in the access
 * token (custom_access_token_hook, as supabase_auth_admin). On both engines, through the real routes.
 * (The billing flows of tests/billing compare my_entitlements, has_entitlement and the hook with
 * GET /api/me in every state they reach: tests/support/app-reads.ts.)
 */

const HOUR_MS = 3_600_000;
const TABLES = ['billing_subscribers', 'entitlements', 'wallet_links', 'league_members', 'leagues'];
const VIEWS = ['my_entitlements', 'my_wallet_links', 'my_leagues'];
/** A column of each, to try to update. */
const COLUMN: Record<string, string> = {
  billing_subscribers: 'customer_id', entitlements: 'status', wallet_links: 'address', league_members: 'role', leagues: 'name',
  my_entitlements: 'status', my_wallet_links: 'address', my_leagues: 'name',
};

/** A user with two entitlements, two wallets (EVM, Solana) and three leagues (one of them deleted later). */
async function fullAccount(db: TestDatabase) {
  const user = await testUser();
  await deliverNow('initial-purchase', user.userId, { expiresInHours: 24 });
  await deliverNow('non-renewing-purchase', user.userId, { expiresInHours: null }, { entitlement_ids: ['lifetime'], product_id: 'com.example.lifetime', transaction_id: `tx-${randomUUID()}` });
  const wallets = [await linkWallet(user, evmWallet()), await linkWallet(user, solanaWallet())];
  const source = freshSource('reads');
  const me = { appUserId: user.userId };
  await deliverLeagues(delivery(source, {
    leagues: [
      // Commissioner through one member, member through another: one league, as commissioner.
      league('L1', '2026-11-20T10:00:00.5Z', { members: [{ externalUserId: 'a', displayName: 'A', role: 'member', ...me }, { externalUserId: 'b', displayName: 'B', role: 'commissioner', ...me }] }),
      league('L2', '2026-11-21T10:00:00Z', { members: [{ externalUserId: 'a', displayName: 'A', role: 'member', ...me }, { externalUserId: 'z', displayName: 'Z', role: 'commissioner' }] }),
      league('L3', '2026-11-19T10:00:00.123456Z', { members: [{ externalUserId: 'a', displayName: 'A', role: 'member', ...me }] }),
    ],
  }));
  await deliverLeagues(delivery(source, { leagues: [], deleted: [{ externalId: 'L3', deletedAt: '2026-11-22T10:00:00Z' }] }));
  return { user, wallets, source, db };
}

describe.each(DATABASE_KINDS)('reads through Supabase on %s', (kind) => {
  const db = suiteDatabase(kind);

  it('shows a user exactly what GET /api/me shows: the same items, fields and values, in its order', async () => {
    const { user } = await fullAccount(db);
    const me = await getMe(user);
    const read = await readAppViews(db, user.userId);
    expect(me.entitlements).toHaveLength(2);
    expect(me.leagues.map((l) => [l.externalId, l.role, l.updatedAt])).toEqual([['L2', 'member', '2026-11-21T10:00:00Z'], ['L1', 'commissioner', '2026-11-20T10:00:00.5Z']]);
    expect(read.entitlements).toEqual(me.entitlements);
    // A view row has every column; a field GET /api/me leaves out of an item (a Solana link's chainId) is null.
    expect(read.wallets.map(withoutNulls)).toEqual(me.wallets);
    expect(read.wallets.map((w) => [w.chain, w.chainId, w.cluster, w.scope])).toEqual([['evm', 1, null, 'evm'], ['solana', null, 'mainnet', null]]);
    expect(read.leagues).toEqual(me.leagues);
  });

  it('keeps each user to their own rows, in the views and in the tables under them; anon and a request without a user read nothing', async () => {
    const a = await fullAccount(db);
    const b = await fullAccount(db);
    const ownRows = (user: User) => asUser(db, user.userId, async (sql) => {
      const seen: Record<string, (string | number)[]> = {};
      for (const [name, query] of [
        ['billing_subscribers', `select app_user_id as owner from public.billing_subscribers`],
        ['entitlements', `select app_user_id as owner from public.entitlements`],
        ['wallet_links', `select user_id::text as owner from public.wallet_links`],
        ['league_members', `select app_user_id::text as owner from public.league_members`],
        ['leagues', `select l.id::text as owner from public.leagues l`],
        ...VIEWS.map((view) => [view, `select count(*)::int as owner from public.${view}`]),
      ] as const) seen[name] = [...new Set((await sql<{ owner: string | number }>(query)).map((row) => row.owner))];
      return seen;
    });
    const leagueIds = async (user: User) => (await db.sql<{ id: string }>('select distinct league_id::text as id from public.league_members where app_user_id = $1 order by 1', [user.userId])).map((r) => r.id);
    for (const user of [a.user, b.user]) {
      expect(await ownRows(user)).toEqual({
        billing_subscribers: [user.userId],
        entitlements: [user.userId],
        wallet_links: [user.userId],
        league_members: [user.userId],
        leagues: expect.arrayContaining(await leagueIds(user)),
        my_entitlements: [2], my_wallet_links: [2], my_leagues: [2],
      });
    }
    // A member sees the leagues they are in (a league deleted since: no members, not seen).
    expect((await asUser(db, a.user.userId, (sql) => sql<{ id: string }>('select id::text from public.leagues order by 1'))).map((r) => r.id).sort())
      .toEqual((await leagueIds(a.user)).sort());

    // The functions the views read through, asked by A about B: nothing of B's.
    expect(await asUser(db, a.user.userId, async (sql) => ({
      sources: await sql('select * from public.entitlement_sources(array[$1], now())', [b.user.userId]),
      ownerIds: (await sql<{ ids: string[] }>('select public.entitlement_owner_ids($1) as ids', [b.user.userId]))[0]!.ids,
      leagues: await sql('select * from public.member_leagues($1)', [b.user.userId]),
    }))).toEqual({ sources: [], ownerIds: [b.user.userId], leagues: [] });

    // Signed in but naming nobody (no sub): nothing.
    expect(await asRole(db, 'authenticated', { role: 'authenticated' }, (sql) => sql('select * from public.my_entitlements'))).toEqual([]);
    // anon: not even the right to ask.
    for (const relation of [...VIEWS, ...TABLES]) {
      await expect(asRole(db, 'anon', { role: 'anon' }, (sql) => sql(`select 1 from public.${relation}`)), relation).rejects.toMatchObject({ code: '42501' });
    }
    // Columns GET /api/me does not show are not granted.
    await expect(asUser(db, a.user.userId, (sql) => sql('select transaction_id from public.entitlements'))).rejects.toMatchObject({ code: '42501' });
    await expect(asUser(db, a.user.userId, (sql) => sql('select settings from public.leagues'))).rejects.toMatchObject({ code: '42501' });
  });

  it('lets no role but the service write: every insert, update, delete and truncate of anon, a user and Supabase Auth is refused, and nothing changes', async () => {
    const { user } = await fullAccount(db);
    const counts = async () => db.sql<{ relation: string; n: number }>(TABLES.map((t) => `select '${t}' as relation, count(*)::int as n from public.${t}`).join(' union all ') + ' order by 1');
    const before = await counts();
    const writes = (relation: string) => [
      `insert into public.${relation} default values`,
      `update public.${relation} set ${COLUMN[relation]} = ${COLUMN[relation]}`,
      `delete from public.${relation}`,
      ...(relation.startsWith('my_') ? [] : [`truncate public.${relation}`]),
    ];
    const refused: string[] = [];
    for (const [role, claims] of [['anon', { role: 'anon' }], ['authenticated', userClaims(user.userId)], ['supabase_auth_admin', null]] as const) {
      for (const relation of [...TABLES, ...VIEWS]) {
        for (const statement of writes(relation)) {
          const outcome = await asRole(db, role, claims, (sql) => sql(statement)).then(() => 'done', (error: { code?: string }) => error.code);
          // 42501: no privilege; 55000/0A000: a view that cannot be written through anyway.
          if (outcome === 'done') refused.push(`${role}: ${statement} was allowed`);
          else expect({ role, statement, refused: ['42501', '55000', '0A000'].includes(outcome!) }).toEqual({ role, statement, refused: true });
        }
      }
    }
    expect(refused).toEqual([]);
    expect(await counts()).toEqual(before);
  });

  it('reads a customer merged under another id as GET /api/me does: both ids see the owner\'s entitlements', async () => {
    const [owner, merged] = [await testUser(), await testUser()];
    await deliverNow('initial-purchase', owner.userId, { expiresInHours: 48 });
    // A renewal naming both ids of one customer (legacy aliasing): the second id reads the first's rows.
    await deliverNow('renewal', owner.userId, { expiresInHours: 72 }, { original_app_user_id: merged.userId, aliases: [merged.userId, owner.userId], transaction_id: `tx-${randomUUID()}` });
    expect(await db.sql('select customer_id from public.billing_subscribers where app_user_id = $1', [merged.userId])).toEqual([{ customer_id: owner.userId }]);
    for (const user of [owner, merged]) {
      const me = await getMe(user);
      expect(me.entitlements).toMatchObject([{ id: 'pro', active: true }]);
      expect((await readAppViews(db, user.userId)).entitlements).toEqual(me.entitlements);
      expect(await asUser(db, user.userId, (sql) => sql(`select public.has_entitlement('pro') as has`))).toEqual([{ has: true }]);
      await expectAppReadsMatchAccount(db, user.userId, new Date(), `merged: ${user === owner ? 'owner' : 'merged id'}`);
    }
  });

  it('matches GET /api/me for any mix of sources, at every instant around their ends (rows written directly)', async () => {
    const hours = fc.integer({ min: -4, max: 4 }).map((h) => h * 10);
    const source = fc.record({
      status: fc.constantFrom(...ENTITLEMENT_STATUSES),
      expires: fc.option(hours, { nil: null }),
      grace: fc.option(hours, { nil: null }),
      willRenew: fc.boolean(),
      lastEvent: hours,
      entitlement: fc.constantFrom('pro', 'plus'),
    });
    const base = Date.now();
    const at = (h: number | null) => (h === null ? null : new Date(base + h * HOUR_MS).toISOString());
    await fc.assert(fc.asyncProperty(fc.array(source, { minLength: 1, maxLength: 4 }), async (sources) => {
      const user = randomUUID();
      for (const [i, s] of sources.entries()) {
        await db.sql(`insert into public.entitlements (app_user_id, entitlement_id, product_id, source_key, status, will_renew, expires_at, grace_expires_at, last_event_id, last_event_at, store, environment, period_type, synced_at)
                      values ($1, $2, $3, $4, $5, $6, $7, $8, 'evt', $9, 'APP_STORE', 'PRODUCTION', 'NORMAL', $10)`,
        [user, s.entitlement, `product-${i}`, `key-${i}`, s.status, s.willRenew, at(s.expires), at(s.grace), at(s.lastEvent), i % 2 === 0 ? at(s.lastEvent) : null]);
      }
      for (const h of [-45, -40, -35, -5, 0, 5, 35, 40, 45]) await expectAppReadsMatchAccount(db, user, new Date(base + h * HOUR_MS), `${JSON.stringify(sources)} at ${h} h`);
    }), { numRuns: 40 });
  });

  it('has_entitlement: false before a purchase, true during its period and in a grace period, false after it and after a refund; in an app\'s own policy, per user', async () => {
    const has = (user: User, entitlement = 'pro') => asUser(db, user.userId, async (sql) => (await sql<{ has: boolean }>('select public.has_entitlement($1) as has', [entitlement]))[0]!.has);
    const [buyer, lapsed, refunded, inGrace] = [await testUser(), await testUser(), await testUser(), await testUser()];

    expect(await has(buyer)).toBe(false);
    await deliverNow('initial-purchase', buyer.userId, { purchasedHoursAgo: 1, expiresInHours: 24 });
    expect([await has(buyer), await has(buyer, 'plus')]).toEqual([true, false]);

    // Its period ended a minute ago (no EXPIRATION yet): access ended with it.
    await deliverNow('initial-purchase', lapsed.userId, { purchasedHoursAgo: 24 * 30, expiresInHours: -1 / 60 });
    expect(await has(lapsed)).toBe(false);

    await deliverNow('initial-purchase', refunded.userId, { purchasedHoursAgo: 2, expiresInHours: 24 * 29 });
    expect(await has(refunded)).toBe(true);
    await deliverNow('cancellation-customer-support', refunded.userId, { purchasedHoursAgo: 2, expiresInHours: 0 }, { price: -9.99 });
    expect(await has(refunded)).toBe(false);

    // A billing issue: the period ended an hour ago, the grace period runs another day.
    await deliverNow('initial-purchase', inGrace.userId, { purchasedHoursAgo: 24 * 30, expiresInHours: -1 });
    await deliverNow('billing-issue-grace', inGrace.userId, { purchasedHoursAgo: 24 * 30, expiresInHours: -1 }, { grace_period_expiration_at_ms: Date.now() + 24 * HOUR_MS });
    expect(await has(inGrace)).toBe(true);

    // The example policy of docs/app-reads.md, on a table of the app's own.
    for (const statement of [
      'create table public.premium_articles (id int primary key, title text not null)',
      'alter table public.premium_articles enable row level security',
      'grant select on public.premium_articles to authenticated',
      `create policy "subscribers read premium articles" on public.premium_articles for select to authenticated using ((select public.has_entitlement('pro')))`,
      `insert into public.premium_articles values (1, 'one'), (2, 'two')`,
    ]) await db.sql(statement);
    try {
      const articles = (user: User) => asUser(db, user.userId, (sql) => sql<{ id: number }>('select id from public.premium_articles order by id'));
      expect(await articles(buyer)).toEqual([{ id: 1 }, { id: 2 }]);
      expect(await articles(inGrace)).toEqual([{ id: 1 }, { id: 2 }]);
      expect(await articles(lapsed)).toEqual([]);
      expect(await articles(refunded)).toEqual([]);
    } finally {
      await db.sql('drop table public.premium_articles');
    }

    // Who may ask: a signed-in user and the service, not anon.
    await expect(asRole(db, 'anon', { role: 'anon' }, (sql) => sql(`select public.has_entitlement('pro')`))).rejects.toMatchObject({ code: '42501' });
    expect(await asRole(db, 'service_role', { role: 'service_role' }, (sql) => sql(`select public.has_entitlement('pro') as has`))).toEqual([{ has: false }]);
  });

  it('custom_access_token_hook: claims what grants with its end, lowers exp to the earliest end, leaves out what ends within a minute, keeps every other claim', async () => {
    const user = await testUser();
    await deliverNow('initial-purchase', user.userId, { expiresInHours: 2 });
    await deliverNow('non-renewing-purchase', user.userId, { expiresInHours: null }, { entitlement_ids: ['lifetime'], product_id: 'com.example.lifetime', transaction_id: `tx-${randomUUID()}` });
    await deliverNow('initial-purchase', user.userId, { expiresInHours: 30 / 3600 }, { entitlement_ids: ['soon'], product_id: 'com.example.soon', transaction_id: `tx-${randomUUID()}`, original_transaction_id: `otx-${randomUUID()}` });
    await deliverNow('initial-purchase', user.userId, { purchasedHoursAgo: 48, expiresInHours: -1 }, { entitlement_ids: ['gone'], product_id: 'com.example.gone', transaction_id: `tx-${randomUUID()}`, original_transaction_id: `otx-${randomUUID()}` });
    const [{ ends: proEnds }] = await db.sql<{ ends: number }>(
      `select floor(extract(epoch from max(grants_until)))::int as ends from public.entitlements where app_user_id = $1 and entitlement_id = 'pro'`, [user.userId]) as [{ ends: number }];
    const hook = (claims: Record<string, unknown>, userId = user.userId) => asRole(db, 'supabase_auth_admin', null, async (sql) =>
      (await sql<{ out: { claims: Record<string, unknown> } }>('select public.custom_access_token_hook($1) as out', [{ user_id: userId, claims, authentication_method: 'password' }]))[0]!.out);
    const iat = Math.floor(Date.now() / 1000);
    const claims = { ...userClaims(user.userId), iat, exp: iat + 3 * 3600, aal: 'aal1', session_id: randomUUID(), app_metadata: { provider: 'email' } };

    expect(await hook(claims)).toEqual({ claims: { ...claims, exp: proEnds, entitlements: { pro: { expires_at: proEnds }, lifetime: { expires_at: null } } } });
    // A token that ends before the earliest end keeps its exp.
    expect(await hook({ ...claims, exp: iat + 600 })).toEqual({ claims: { ...claims, exp: iat + 600, entitlements: { pro: { expires_at: proEnds }, lifetime: { expires_at: null } } } });
    // Someone with nothing: an empty object (the hook ran), exp untouched.
    const nobody = randomUUID();
    expect(await hook({ ...claims, sub: nobody }, nobody)).toEqual({ claims: { ...claims, sub: nobody, entitlements: {} } });
    // Reading fails (here: its right to read taken away): the token is issued as Supabase Auth made it.
    const failed = await db.connection(async (sql) => {
      await sql('begin');
      try {
        await sql('revoke select on public.entitlements from supabase_auth_admin');
        await sql(`select set_config('role', 'supabase_auth_admin', true)`);
        return (await sql<{ out: unknown }>('select public.custom_access_token_hook($1) as out', [{ user_id: user.userId, claims }]))[0]!.out;
      } finally {
        await sql('rollback');
      }
    });
    expect(failed).toEqual({ claims });

    // Executable by supabase_auth_admin alone.
    for (const [role, roleClaims] of [['anon', { role: 'anon' }], ['authenticated', userClaims(user.userId)], ['service_role', { role: 'service_role' }]] as const) {
      await expect(asRole(db, role, roleClaims, (sql) => sql('select public.custom_access_token_hook($1)', [{ user_id: user.userId, claims }])), role)
        .rejects.toMatchObject({ code: '42501' });
    }
  });
});
