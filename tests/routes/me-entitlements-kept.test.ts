import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { getAccount, getAccountJson } from '../../lib/account.ts';
import { toEntitlementViews, type EntitlementRow } from '../../lib/billing/entitlement-view.ts';
import { billingIssue, purchase, receivedAt, refund, renewal, transfer, deliver, day, LIFETIME, apple } from '../billing/support.ts';
import { delivery, freshSource, league } from '../leagues/fixtures.ts';
import { describeOn, DATABASE_KINDS, suiteDatabase, untilASessionWaitsForALock, type TestDatabase } from '../support/databases.ts';
import { deliverLeagues, getMe, linkWallet } from '../support/account-actions.ts';
import { testUser } from '../support/tokens.ts';
import { evmWallet } from '../wallets/wallets.ts';

// GET /api/me keeps a user's entitlements between reads (account_entitlements_cache, 07_account.sql)
// and uses them only while they still hold: the same code, the same owners, the same contents of
// their rows, and a time between the ends of the user's access around the time they were built.
// What it answers must be what it would answer without keeping, after every kind of write and at
// every time.

const KEPT_MARK = '"kept"';

/** get_account_json's entitlements for the user at `now` (the JSON text's part, parsed). */
async function readAt(db: TestDatabase, userId: string, now: number): Promise<unknown> {
  const [row] = await db.sql<{ account: string }>('select public.get_account_json($1, $2) as account', [userId, new Date(now)]);
  return JSON.parse(row!.account).entitlements;
}

/** account_entitlements at `now`, read without anything kept: what the read must answer. */
async function builtAt(db: TestDatabase, userId: string, now: number): Promise<unknown> {
  const [row] = await db.sql<{ entitlements: string }>('select public.account_entitlements($1, $2)::text as entitlements', [userId, new Date(now)]);
  return JSON.parse(row!.entitlements);
}

/**
 * Replace what is kept for the user with a mark, leaving what it was kept with: a read that answers
 * the mark used what was kept, one that answers the entitlements built them again.
 */
async function markKept(db: TestDatabase, userId: string): Promise<void> {
  const rows = await db.sql('update public.account_entitlements_cache set entitlements = $2 where user_id = $1 returning user_id', [userId, KEPT_MARK]);
  expect(rows).toHaveLength(1);
}

/**
 * The read at `now` answers what is built at `now`, and then answers it from what it kept (a user
 * with no entitlement keeps nothing).
 */
async function expectReadBuilds(db: TestDatabase, userId: string, now: number): Promise<unknown> {
  const built = await builtAt(db, userId, now);
  expect(await readAt(db, userId, now)).toEqual(built);
  if (Array.isArray(built) && built.length === 0) {
    expect(await db.sql('select 1 from public.account_entitlements_cache where user_id = $1', [userId])).toEqual([]);
    return built;
  }
  await markKept(db, userId);
  expect(await readAt(db, userId, now)).toBe('kept');
  return built;
}

describe.each(DATABASE_KINDS)('GET /api/me\'s entitlements between reads, on %s', (kind) => {
  const db = suiteDatabase(kind);

  it('uses what it kept until a write changes a row of the user, then builds again: a renewal, a refund, a second purchase', async () => {
    const user = (await testUser()).userId;
    await receivedAt(0, () => deliver(purchase(user, 0, 0, 30)));
    const first = await expectReadBuilds(db, user, day(1));
    expect(first).toEqual([expect.objectContaining({ entitlement_id: 'pro', active: true })]);

    await receivedAt(30, () => deliver(renewal(user, 30, 30, 60)));
    const renewed = await expectReadBuilds(db, user, day(31));
    expect(renewed).toEqual([expect.objectContaining({ active: true, expires_at: expect.stringMatching(new Date(day(60)).toISOString().slice(0, 10)) })]);

    await receivedAt(32, () => deliver(purchase(user, 32, 32, 400, { entitlement_ids: ['plus'], product_id: 'com.example.plus.yearly', transaction_id: `tx-${randomUUID()}`, original_transaction_id: `otx-${randomUUID()}` })));
    expect(((await expectReadBuilds(db, user, day(33))) as { entitlement_id: string }[]).map((item) => item.entitlement_id)).toEqual(['plus', 'pro']);

    await receivedAt(34, () => deliver(refund(user, 34, 30, 34, { ...{ transaction_id: '200030000' } })));
    const refunded = await expectReadBuilds(db, user, day(35));
    expect(refunded).toEqual(await builtAt(db, user, day(35)));
  });

  it('builds again when time passes an end of the user\'s access, in either direction, and not between two ends', async () => {
    const user = (await testUser()).userId;
    // Ends at 30 (grace until 40) and 60; a lifetime purchase never ends.
    await receivedAt(0, () => deliver(purchase(user, 0, 0, 60, { entitlement_ids: ['plus'], ...apple('7000', '7000', 'com.example.plus.monthly') })));
    await receivedAt(0, () => deliver(purchase(user, 0, 0, 30)));
    await receivedAt(30, () => deliver(billingIssue(user, 30, 0, 30, 40)));
    await receivedAt(1, () => deliver(purchase(user, 1, 1, null as unknown as number, { entitlement_ids: ['lifetime'], ...apple('8000', '8000', LIFETIME), expiration_at_ms: null })));
    await expectReadBuilds(db, user, day(10));
    // Between the start of the user's history and the first end: what was kept holds.
    expect(await readAt(db, user, day(39.9))).toBe('kept');
    expect(await readAt(db, user, day(0.5))).toBe('kept');
    // At an end and after it, access has lapsed with no write to tell; each end is built again once.
    const graceOver = await expectReadBuilds(db, user, day(40));
    expect((graceOver as { entitlement_id: string; active: boolean }[]).map((item) => [item.entitlement_id, item.active])).toEqual([['lifetime', true], ['plus', true], ['pro', false]]);
    expect(await readAt(db, user, day(59))).toBe('kept');
    const plusOver = await expectReadBuilds(db, user, day(60));
    expect((plusOver as { entitlement_id: string; active: boolean }[]).map((item) => [item.entitlement_id, item.active])).toEqual([['lifetime', true], ['plus', false], ['pro', false]]);
    expect(await readAt(db, user, day(900))).toBe('kept');
    // Asked for an earlier time again (another instance's clock): built again.
    expect(await readAt(db, user, day(39))).toEqual(await builtAt(db, user, day(39)));
    expect(await readAt(db, user, day(39))).toEqual(await builtAt(db, user, day(39)));
  });

  it('keeps nothing for a time that is not one, nor for a user with no entitlement', async () => {
    const user = (await testUser()).userId;
    await receivedAt(0, () => deliver(purchase(user, 0, 0, 30)));
    for (const time of [null, 'infinity', '-infinity']) {
      await db.sql('select public.get_account_json($1, $2)', [user, time]);
      expect(await db.sql('select 1 from public.account_entitlements_cache where user_id = $1', [user])).toEqual([]);
    }
    expect(await readAt(db, user, day(31))).toEqual([expect.objectContaining({ active: false, status: 'expired' })]);
    const nobody = (await testUser()).userId;
    expect(await readAt(db, nobody, day(1))).toEqual([]);
    expect(await db.sql('select 1 from public.account_entitlements_cache where user_id = $1', [nobody])).toEqual([]);
  });

  it('builds again after a migration gives what it keeps a new format', async () => {
    const user = (await testUser()).userId;
    await receivedAt(0, () => deliver(purchase(user, 0, 0, 30)));
    await expectReadBuilds(db, user, day(1));
    const format = (n: number) => db.sql(`create or replace function public.account_entitlements_format() returns integer language sql immutable set search_path = '' as $$ select ${n} $$`);
    const [{ current }] = await db.sql<{ current: number }>('select public.account_entitlements_format() as current');
    await format(Number(current) + 1);
    try {
      expect(await readAt(db, user, day(1))).toEqual(await builtAt(db, user, day(1)));
    } finally {
      await format(Number(current));
    }
  });

  it('builds again when the user\'s owners change: an anonymous purchase merged in, then transferred away', async () => {
    const user = (await testUser()).userId;
    const anonymous = `$RCAnonymousID:${randomUUID().replaceAll('-', '')}`;
    await receivedAt(0, () => deliver(purchase(anonymous, 0, 0, 30, { aliases: [anonymous], original_app_user_id: anonymous })));
    expect(await expectReadBuilds(db, user, day(1))).toEqual([]);

    // The user signs in on the device: RevenueCat names both ids as one customer.
    await receivedAt(2, () => deliver(renewal(user, 2, 2, 32, { aliases: [anonymous, user], original_app_user_id: anonymous })));
    expect(await expectReadBuilds(db, user, day(3))).toEqual([expect.objectContaining({ entitlement_id: 'pro', active: true })]);

    const other = (await testUser()).userId;
    await receivedAt(4, () => deliver(transfer([anonymous, user], [other], 4)));
    expect(await readAt(db, user, day(5))).toEqual(await builtAt(db, user, day(5)));
    expect(await readAt(db, other, day(5))).toEqual(await builtAt(db, other, day(5)));
    expect(await builtAt(db, other, day(5))).toEqual([expect.objectContaining({ entitlement_id: 'pro', active: true })]);
  });

  it('builds again after rows written by hand: a status updated, a row deleted', async () => {
    const user = (await testUser()).userId;
    await receivedAt(0, () => deliver(purchase(user, 0, 0, 30)));
    await expectReadBuilds(db, user, day(1));
    await db.sql(`update public.entitlements set status = 'refunded' where app_user_id = $1`, [user]);
    expect(await expectReadBuilds(db, user, day(1))).toEqual([expect.objectContaining({ active: false, status: 'refunded' })]);
    await db.sql('delete from public.entitlements where app_user_id = $1', [user]);
    expect(await expectReadBuilds(db, user, day(1))).toEqual([]);

  });

  it('builds again when a customer is merged into the user by hand, their own rows unchanged', async () => {
    const user = (await testUser()).userId;
    await receivedAt(0, () => deliver(purchase(user, 0, 0, 30)));
    await expectReadBuilds(db, user, day(1));
    const customer = `customer-${randomUUID()}`;
    await receivedAt(0, () => deliver(purchase(customer, 0, 0, 30, { entitlement_ids: ['plus'], ...apple('4000', '4000', 'com.example.plus.monthly') })));
    await db.sql('update public.billing_subscribers set customer_id = $2 where app_user_id = $1', [user, customer]);
    expect(((await expectReadBuilds(db, user, day(1))) as { entitlement_id: string }[]).map((item) => item.entitlement_id)).toEqual(['plus', 'pro']);
  });

  it('builds again after a transaction that wrote a row twice and read the account between the writes', async () => {
    const user = (await testUser()).userId;
    await receivedAt(0, () => deliver(purchase(user, 0, 0, 30)));
    await db.connection(async (sql) => {
      await sql('begin');
      await sql(`update public.entitlements set will_renew = false where app_user_id = $1`, [user]);
      await sql('select public.get_account_json($1, $2)', [user, new Date(day(1))]);
      await sql(`update public.entitlements set status = 'refunded' where app_user_id = $1`, [user]);
      await sql('commit');
    });
    expect(await readAt(db, user, day(1))).toEqual([expect.objectContaining({ active: false, status: 'refunded' })]);
  });

  it('answers through the route the body that parsing the whole account gives, wallets and leagues copied as the database wrote them', async () => {
    const tester = await testUser();
    await receivedAt(0, () => deliver(purchase(tester.userId, 0, 0, 30)));
    await linkWallet(tester, evmWallet());
    const me = { appUserId: tester.userId };
    await deliverLeagues(delivery(freshSource('kept'), { leagues: [league('A', '2026-11-20T10:00:00.5Z', { name: 'A ,"entitlements": "leagues":', members: [{ externalUserId: 'a', displayName: '","leagues":[', role: 'member', ...me }] })] }));
    const now = new Date(day(1));
    for (let read = 0; read < 2; read++) {
      const [row] = await db.sql<{ account: string }>('select public.get_account_json($1, $2) as account', [tester.userId, now]);
      const whole = JSON.parse(row!.account) as { wallets: unknown[]; entitlements: EntitlementRow[]; leagues: unknown[] };
      const expected = { userId: tester.userId, email: tester.email ?? null, wallets: whole.wallets, entitlements: toEntitlementViews(whole.entitlements), leagues: whole.leagues };
      expect(JSON.parse(await getAccountJson({ userId: tester.userId, email: expected.email }, now))).toEqual(expected);
      expect(await getAccount({ userId: tester.userId, email: expected.email }, now)).toEqual(expected);
      expect(expected.wallets).toHaveLength(1);
      expect(expected.leagues).toEqual([expect.objectContaining({ name: 'A ,"entitlements": "leagues":' })]);
    }
  });

  it('answers through the route the entitlements it builds, and keeps nothing of an erased user', async () => {
    const tester = await testUser();
    await receivedAt(0, () => deliver(purchase(tester.userId, 0, 0, 30)));
    const [first, second] = [await getMe(tester), await getMe(tester)];
    expect(second.entitlements).toEqual(first.entitlements);
    expect(await db.sql('select 1 from public.account_entitlements_cache where user_id = $1', [tester.userId])).toHaveLength(1);
    await db.sql('select public.forget_user($1)', [tester.userId]);
    expect(await db.sql('select 1 from public.account_entitlements_cache where user_id = $1', [tester.userId])).toEqual([]);
  });
});

describeOn('postgres')('GET /api/me\'s entitlements read while a write or an erasure is under way, on postgres', () => {
  const db = suiteDatabase('postgres');

  async function withClient<T>(work: (client: pg.Client) => Promise<T>): Promise<T> {
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      return await work(client);
    } finally {
      await client.end();
    }
  }

  it('never uses what a read built while a write was open once the write commits', async () => {
    const user = (await testUser()).userId;
    await receivedAt(0, () => deliver(purchase(user, 0, 0, 30)));
    await withClient(async (writer) => {
      await writer.query('begin');
      await writer.query(`update public.entitlements set status = 'refunded' where app_user_id = $1`, [user]);
      // The read builds from what is committed (active), and keeps it, while the refund is open.
      expect(await readAt(db, user, day(1))).toEqual([expect.objectContaining({ active: true })]);
      await writer.query('commit');
    });
    expect(await readAt(db, user, day(1))).toEqual([expect.objectContaining({ active: false, status: 'refunded' })]);
  });

  it('leaves nothing of an erased user kept by a read that was keeping it when the erasure ran', async () => {
    const tester = await testUser();
    await receivedAt(0, () => deliver(purchase(tester.userId, 0, 0, 30)));
    await withClient(async (reader) => {
      await reader.query('begin');
      await reader.query('select public.get_account_json($1, $2)', [tester.userId, new Date(day(1))]);
      let erased = false;
      const erasing = db.sql('select public.forget_user($1)', [tester.userId]).finally(() => (erased = true));
      // The erasure waits for the read to end (were it not to wait, it would end first).
      await untilASessionWaitsForALock(db, () => erased);
      await reader.query('commit');
      await erasing;
    });
    expect(await db.sql('select 1 from public.account_entitlements_cache where user_id = $1', [tester.userId])).toEqual([]);
  });

  /** A user and another merged into one customer, each with a purchase of their own; the customer's `pro` shows to both. */
  async function mergedPair() {
    const user = (await testUser()).userId;
    const merged = (await testUser()).userId;
    const customer = `customer-${randomUUID()}`;
    await receivedAt(0, () => deliver(purchase(customer, 0, 0, 30)));
    await receivedAt(0, () => deliver(purchase(merged, 0, 0, 30, { entitlement_ids: ['plus'], ...apple('6000', '6000', 'com.example.plus.monthly') })));
    await receivedAt(0, () => deliver(purchase(user, 0, 0, 30, { entitlement_ids: ['plus'], ...apple('5000', '5000', 'com.example.plus.monthly') })));
    await db.sql('update public.billing_subscribers set customer_id = $2 where app_user_id = any ($1)', [[user, merged], customer]);
    return { user, merged, customer };
  }
  const keptRows = (userId: string) => db.sql('select 1 from public.account_entitlements_cache where user_id = $1', [userId]);

  it('forgets what users merged into an erased user\'s customer keep of it, merged still or not', async () => {
    const { user, merged } = await mergedPair();
    expect(((await readAt(db, merged, day(1))) as { entitlement_id: string }[]).map((item) => item.entitlement_id)).toEqual(['plus', 'pro']);
    await db.sql('select public.forget_user($1)', [user]);
    expect(await keptRows(merged)).toEqual([]);

    const second = await mergedPair();
    await readAt(db, second.merged, day(1));
    await db.sql('update public.billing_subscribers set customer_id = null where app_user_id = $1', [second.merged]);
    await db.sql('select public.forget_user($1)', [second.user]);
    expect(await keptRows(second.merged)).toEqual([]);
  });

  it('leaves nothing of an erased customer kept by a merged user\'s read that was keeping it when the erasure ran', async () => {
    const { user, merged } = await mergedPair();
    await withClient(async (reader) => {
      await reader.query('begin');
      await reader.query('select public.get_account_json($1, $2)', [merged, new Date(day(1))]);
      let erased = false;
      const erasing = db.sql('select public.forget_user($1)', [user]).finally(() => (erased = true));
      await untilASessionWaitsForALock(db, () => erased);
      await reader.query('commit');
      await erasing;
    });
    expect(await keptRows(merged)).toEqual([]);
  });

  it('keeps nothing for a read at another isolation than read committed', async () => {
    const user = (await testUser()).userId;
    await receivedAt(0, () => deliver(purchase(user, 0, 0, 30)));
    await withClient(async (reader) => {
      await reader.query('begin isolation level repeatable read');
      await reader.query('select public.get_account_json($1, $2)', [user, new Date(day(1))]);
      await reader.query('commit');
    });
    expect(await keptRows(user)).toEqual([]);
  });
});
