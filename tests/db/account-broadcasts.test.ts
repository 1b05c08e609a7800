import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as userSyncRoute from '../../app/api/me/billing/sync/route.ts';
import { deliver, flowSettings } from '../billing/support.ts';
import { fixture } from '../billing/fixtures.ts';
import { delivery, freshSource, league } from '../leagues/fixtures.ts';
import { deliverLeagues, deliverNow, linkWallet, unlinkWallet, type User } from '../support/account-actions.ts';
import { asRole, asUser, userClaims } from '../support/app-reads.ts';
import { DATABASE_KINDS, suiteDatabase, type TestDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { startFakeRevenueCat, v1Entitlement, v1Subscription, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { callRoute } from '../support/http.ts';
import { testUser } from '../support/tokens.ts';
import { evmWallet } from '../wallets/wallets.ts';

/**
 * Live updates from the database: on a database shaped like Supabase's, with Realtime's schema
 * (scripts/support/supabase-realtime.ts; Realtime delivers what lands in realtime.messages when the
 * transaction commits), a change to what a user reads in GET /api/me sends ONE private broadcast
 * `account_changed` to their topic `user:<id>` per transaction, whatever it took (a refold, a league
 * snapshot rewriting its members), and none to anyone else; the policy lets a user receive their own
 * topic only. Without Realtime's schema the same writes work and send nothing. Both engines.
 */

interface Broadcast {
  topic: string;
  event: string;
  private: boolean;
  extension: string;
  payload: { what: string; at: string; id: string };
}

const DAY_MS = 86_400_000;

/** Every broadcast sent to the user's topic so far, oldest first. */
function broadcastsTo(db: TestDatabase, user: User | string): Promise<Broadcast[]> {
  return db.sql<Broadcast>(`select topic, event, private, extension, payload from realtime.messages where topic = $1 order by inserted_at, payload->>'at'`,
    [`user:${typeof user === 'string' ? user : user.userId}`]);
}

/** The kinds of change (`what`) of the broadcasts `work` sent to each user, after it returned. */
async function sentDuring(db: TestDatabase, users: User[], work: () => Promise<unknown>): Promise<string[][]> {
  const before = await Promise.all(users.map((user) => broadcastsTo(db, user)));
  await work();
  const after = await Promise.all(users.map((user) => broadcastsTo(db, user)));
  return after.map((messages, i) => messages.slice(before[i]!.length).map((message) => message.payload.what));
}

describe.each(DATABASE_KINDS)('broadcasts of account changes on %s, with Supabase Realtime\'s schema', (kind) => {
  const db = suiteDatabase(kind, { realtime: true });
  let revenuecat: FakeRevenueCat;
  let restoreEnv: () => void;
  beforeAll(async () => {
    revenuecat = await startFakeRevenueCat();
    restoreEnv = setEnv(flowSettings(revenuecat));
  });
  afterAll(async () => {
    restoreEnv();
    await revenuecat.close();
  });

  it('sends one private `account_changed` to the buyer\'s topic after a webhook, with what changed and when, and nothing to anyone else', async () => {
    const [buyer, other] = [await testUser(), await testUser()];
    const started = Date.now();
    expect(await sentDuring(db, [buyer, other], () => deliverNow('initial-purchase', buyer.userId))).toEqual([['entitlements'], []]);
    const [message] = await broadcastsTo(db, buyer);
    expect(message).toEqual({
      topic: `user:${buyer.userId}`, event: 'account_changed', private: true, extension: 'broadcast',
      payload: { what: 'entitlements', at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/), id: expect.any(String) },
    });
    expect(Date.parse(message!.payload.at)).toBeGreaterThanOrEqual(started - 1000);
    expect(Date.parse(message!.payload.at)).toBeLessThanOrEqual(Date.now());
  });

  it('sends one per webhook however many statements and rows it took (a renewal, an older event folded into the history), none for a duplicate', async () => {
    const buyer = await testUser();
    const now = Date.now();
    const event = (name: string, atMs: number, fields: Record<string, unknown> = {}) => fixture(name, {
      id: `evt-${randomUUID()}`, app_user_id: buyer.userId, aliases: [buyer.userId], original_app_user_id: buyer.userId,
      event_timestamp_ms: atMs, purchased_at_ms: now - 2 * DAY_MS, expiration_at_ms: now + 28 * DAY_MS, ...fields,
    });
    const purchase = event('initial-purchase', now - 2 * DAY_MS);
    expect(await sentDuring(db, [buyer], () => deliver(purchase))).toEqual([['entitlements']]);
    expect(await sentDuring(db, [buyer], () => deliver(event('cancellation-unsubscribe', now - DAY_MS, { cancel_reason: 'UNSUBSCRIBE' })))).toEqual([['entitlements']]);
    // Older than the cancellation: the customer's history is folded again with it in its place
    // (every row deleted and written again, then each event applied).
    const late = event('billing-issue-grace', now - 1.5 * DAY_MS, { grace_period_expiration_at_ms: now + 30 * DAY_MS });
    expect(await sentDuring(db, [buyer], () => deliver(late))).toEqual([['entitlements']]);
    expect(await db.sql('select outcome from public.billing_events where event_id = $1', [late.event.id])).toEqual([{ outcome: 'applied' }]);
    // RevenueCat's retry of the purchase: stored once, nothing changes, nothing sent.
    expect(await sentDuring(db, [buyer], () => deliver(purchase))).toEqual([[]]);
    // An app user id that is no Supabase user (a custom id, an anonymous one): no topic.
    const total = async () => (await db.sql<{ n: number }>('select count(*)::int as n from realtime.messages'))[0]!.n;
    const before = await total();
    await deliverNow('initial-purchase', `custom-${randomUUID()}`);
    expect(await total()).toBe(before);
  });

  it('sends one after a sync of RevenueCat\'s record (the user\'s own refresh)', async () => {
    const buyer = await testUser();
    await deliverNow('initial-purchase', buyer.userId, { purchasedHoursAgo: 24, expiresInHours: 24 * 29 });
    const now = Date.now();
    revenuecat.setCustomer(buyer.userId, {
      entitlements: { pro: v1Entitlement('com.example.pro.yearly', { purchased: now - DAY_MS, expires: now + 365 * DAY_MS }) },
      subscriptions: { 'com.example.pro.yearly': v1Subscription({ purchased: now - DAY_MS, expires: now + 365 * DAY_MS }) },
    });
    const refreshed = await sentDuring(db, [buyer], async () => {
      const response = await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: buyer.authorization } });
      expect(response.status).toBe(200);
    });
    expect(refreshed).toEqual([['entitlements']]);
  });

  it('sends one `wallets` after a link and one after an unlink, to the wallet\'s owner only', async () => {
    const [owner, other] = [await testUser(), await testUser()];
    let link: { id: string } | undefined;
    expect(await sentDuring(db, [owner, other], async () => {
      link = await linkWallet(owner, evmWallet());
    })).toEqual([['wallets'], []]);
    expect(await sentDuring(db, [owner, other], () => unlinkWallet(owner, link!.id))).toEqual([['wallets'], []]);
  });

  it('sends one `leagues` to each app user a delivery adds, changes or drops, once per delivery', async () => {
    const [member, dropped, outsider] = [await testUser(), await testUser(), await testUser()];
    const source = freshSource('live');
    const members = (who: User[]) => who.map((user, i) => ({ externalUserId: `m${i}`, displayName: `M${i}`, role: i === 0 ? 'commissioner' : 'member', appUserId: user.userId }));
    expect(await sentDuring(db, [member, dropped, outsider], () => deliverLeagues(delivery(source, { leagues: [league('L1', '2026-11-20T10:00:00Z', { members: members([member, dropped]) })] }))))
      .toEqual([['leagues'], ['leagues'], []]);
    // A new snapshot of the league (its row updated, its members replaced) without `dropped`.
    expect(await sentDuring(db, [member, dropped, outsider], () => deliverLeagues(delivery(source, { leagues: [league('L1', '2026-11-21T10:00:00Z', { name: 'Renamed', members: members([member]) })] }))))
      .toEqual([['leagues'], ['leagues'], []]);
    // The league deleted.
    expect(await sentDuring(db, [member, dropped, outsider], () => deliverLeagues(delivery(source, { deleted: [{ externalId: 'L1', deletedAt: '2026-11-22T10:00:00Z' }] }))))
      .toEqual([['leagues'], [], []]);
  });

  it('tells an id merged into another customer, when it is merged and when that customer\'s entitlements change', async () => {
    const [owner, merged] = [await testUser(), await testUser()];
    await deliverNow('initial-purchase', owner.userId);
    expect(await sentDuring(db, [owner, merged], () => deliverNow('renewal', owner.userId, {}, {
      original_app_user_id: merged.userId, aliases: [merged.userId, owner.userId], transaction_id: `tx-${randomUUID()}`,
    }))).toEqual([['entitlements'], ['entitlements']]);
    expect(await sentDuring(db, [owner, merged], () => deliverNow('cancellation-unsubscribe', owner.userId, {}, { cancel_reason: 'UNSUBSCRIBE' })))
      .toEqual([['entitlements'], ['entitlements']]);
  });

  it('lets a signed-in user receive their own topic and no other (the policy Realtime checks when a client joins)', async () => {
    const [a, b] = [await testUser(), await testUser()];
    await deliverNow('initial-purchase', a.userId);
    await deliverNow('initial-purchase', b.userId);
    // What Realtime does: the client's role and claims, realtime.topic set to the channel's topic, then a select.
    const readsTopic = (reader: User | null, topic: string) => (reader
      ? asUser(db, reader.userId, (sql) => sql<{ n: number }>('select count(*)::int as n from realtime.messages'), { 'realtime.topic': topic })
      : asRole(db, 'anon', { role: 'anon' }, (sql) => sql<{ n: number }>('select count(*)::int as n from realtime.messages'), { 'realtime.topic': topic }))
      .then((rows) => rows[0]!.n);
    expect(await readsTopic(a, `user:${a.userId}`)).toBe((await broadcastsTo(db, a)).length);
    expect(await readsTopic(a, `user:${a.userId}`)).toBeGreaterThan(0);
    expect(await readsTopic(b, `user:${a.userId}`)).toBe(0);
    expect(await readsTopic(a, `user:${b.userId}`)).toBe(0);
    expect(await readsTopic(null, `user:${a.userId}`)).toBe(0);
    // Realtime's own probe (inserted as its admin, read back as the client): only the topic's user reads it.
    const probe = async (reader: User) => db.connection(async (sql) => {
      await sql('begin');
      try {
        const id = randomUUID();
        await sql(`insert into realtime.messages (id, topic, extension) values ($1, $2, 'broadcast')`, [id, `user:${a.userId}`]);
        await sql(`select set_config('role', 'authenticated', true), set_config('request.jwt.claims', $1, true), set_config('realtime.topic', $2, true)`,
          [JSON.stringify(userClaims(reader.userId)), `user:${a.userId}`]);
        return (await sql('select id from realtime.messages where id = $1', [id])).length;
      } finally {
        await sql('rollback');
      }
    });
    expect([await probe(a), await probe(b)]).toEqual([1, 0]);
  });
});

describe.each(DATABASE_KINDS)('account changes on %s without Realtime\'s schema (embedded, plain Postgres)', (kind) => {
  const db = suiteDatabase(kind);

  it('applies the same webhooks, links and deliveries, and sends nothing', async () => {
    expect(await db.sql(`select to_regnamespace('realtime') as realtime, public.can_broadcast() as can`)).toEqual([{ realtime: null, can: false }]);
    const user = await testUser();
    await deliverNow('initial-purchase', user.userId);
    await linkWallet(user, evmWallet());
    await deliverLeagues(delivery(freshSource('quiet'), { leagues: [league('Q1', '2026-11-20T10:00:00Z', { members: [{ externalUserId: 'q', displayName: 'Q', role: 'member', appUserId: user.userId }] })] }));
    const read = await asUser(db, user.userId, async (sql) => [
      (await sql('select count(*)::int as n from public.my_entitlements'))[0],
      (await sql('select count(*)::int as n from public.my_wallet_links'))[0],
      (await sql('select count(*)::int as n from public.my_leagues'))[0],
    ]);
    expect(read).toEqual([{ n: 1 }, { n: 1 }, { n: 1 }]);
    expect(await db.sql(`select to_regnamespace('realtime') as realtime`)).toEqual([{ realtime: null }]);
  });
});
