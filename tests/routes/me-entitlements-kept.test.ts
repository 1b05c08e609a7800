import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { purchase, receivedAt, refund, renewal, transfer, deliver, day } from '../billing/support.ts';
import { describeOn, DATABASE_KINDS, suiteDatabase, type TestDatabase } from '../support/databases.ts';
import { getMe } from '../support/account-actions.ts';
import { testUser } from '../support/tokens.ts';

// GET /api/me keeps a user's entitlements between reads (account_entitlements_cache, 07_account.sql)
// and uses them only while they still hold: the same owners, the same versions of their rows, and a
// time between the ends of the user's access around the time they were built. What it answers must
// be what it would answer without keeping, after every kind of write and at every time.

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

/** The read at `now` answers what is built at `now`, and then answers it from what it kept. */
async function expectReadBuilds(db: TestDatabase, userId: string, now: number): Promise<unknown> {
  const built = await builtAt(db, userId, now);
  expect(await readAt(db, userId, now)).toEqual(built);
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

  it('builds again when time passes the end of an access, in either direction, and not between two ends', async () => {
    const user = (await testUser()).userId;
    await receivedAt(0, () => deliver(purchase(user, 0, 0, 30)));
    await expectReadBuilds(db, user, day(10));
    // Between the start of the user's history and its first end: what was kept holds.
    expect(await readAt(db, user, day(29.9))).toBe('kept');
    expect(await readAt(db, user, day(0.5))).toBe('kept');
    // At the end and after it, access has lapsed with no write to tell.
    const lapsed = await expectReadBuilds(db, user, day(30));
    expect(lapsed).toEqual([expect.objectContaining({ active: false, status: 'expired' })]);
    expect(await readAt(db, user, day(900))).toBe('kept');
    // Asked for an earlier time again (another instance's clock): built again, active.
    expect(await readAt(db, user, day(29))).toEqual(await builtAt(db, user, day(29)));
    expect(await builtAt(db, user, day(29))).toEqual([expect.objectContaining({ active: true })]);
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

  it('builds again after rows written by hand: a status updated, a row deleted, a customer\'s rows merged in', async () => {
    const user = (await testUser()).userId;
    await receivedAt(0, () => deliver(purchase(user, 0, 0, 30)));
    await expectReadBuilds(db, user, day(1));
    await db.sql(`update public.entitlements set status = 'refunded' where app_user_id = $1`, [user]);
    expect(await expectReadBuilds(db, user, day(1))).toEqual([expect.objectContaining({ active: false, status: 'refunded' })]);
    await db.sql('delete from public.entitlements where app_user_id = $1', [user]);
    expect(await expectReadBuilds(db, user, day(1))).toEqual([]);

    const customer = `customer-${randomUUID()}`;
    await receivedAt(0, () => deliver(purchase(customer, 0, 0, 30)));
    await db.sql('update public.billing_subscribers set customer_id = $2 where app_user_id = $1', [user, customer]);
    expect(await expectReadBuilds(db, user, day(1))).toEqual([expect.objectContaining({ entitlement_id: 'pro', active: true })]);
  });

  it('answers the entitlements through the route as it builds them, and keeps nothing of an erased user', async () => {
    const tester = await testUser();
    await receivedAt(0, () => deliver(purchase(tester.userId, 0, 0, 30)));
    const [first, second] = [await getMe(tester), await getMe(tester)];
    expect(second.entitlements).toEqual(first.entitlements);
    expect(await db.sql('select 1 from public.account_entitlements_cache where user_id = $1', [tester.userId])).toHaveLength(1);
    await db.sql('select public.forget_user($1)', [tester.userId]);
    expect(await db.sql('select 1 from public.account_entitlements_cache where user_id = $1', [tester.userId])).toEqual([]);
  });
});

describeOn('postgres')('GET /api/me\'s entitlements read while a write is under way, on postgres', () => {
  const db = suiteDatabase('postgres');

  it('never keeps what a read built before a write committed as if it were after it', async () => {
    const user = (await testUser()).userId;
    await receivedAt(0, () => deliver(purchase(user, 0, 0, 30)));
    const writer = new pg.Client({ connectionString: db.url });
    await writer.connect();
    try {
      await writer.query('begin');
      await writer.query(`update public.entitlements set status = 'refunded' where app_user_id = $1`, [user]);
      // The read builds from what is committed (active), and keeps it, while the refund is open.
      expect(await readAt(db, user, day(1))).toEqual([expect.objectContaining({ active: true })]);
      await writer.query('commit');
    } finally {
      await writer.end();
    }
    expect(await readAt(db, user, day(1))).toEqual([expect.objectContaining({ active: false, status: 'refunded' })]);
  });
});
