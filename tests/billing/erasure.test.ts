import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as cronSyncRoute from '../../app/api/cron/billing-sync/route.ts';
import * as adminSyncRoute from '../../app/api/admin/billing/sync/route.ts';
import { startFakeRevenueCat, v1Entitlement, v1Subscription, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { DATABASE_KINDS, suiteDatabase, type TestDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { callRoute } from '../support/http.ts';
import { billingEvent, day, deliver, entitlementsOf, flowSettings, MONTHLY } from './support.ts';

/**
 * An erasure lasts. RevenueCat keeps renewing a deleted user's store subscription (deleting an
 * account cancels nothing at the store), so after the auth.users row goes, later events about the
 * same id keep arriving. They are answered 200, stored without personal data and grant nothing to
 * anyone, until the same id signs up again.
 */
describe.each(DATABASE_KINDS)('an erased user stays erased, on %s', (kind) => {
  const db = suiteDatabase(kind);

  /** Delete the user as Supabase Auth does: their auth.users row goes, the trigger forgets them. */
  async function eraseUser(id: string, email: string) {
    await db.sql('insert into auth.users (id, email) values ($1, $2)', [id, email]);
    await db.sql('delete from auth.users where id = $1', [id]);
  }

  it('forget, then a renewal with the e-mail in subscriber_attributes: 200, nothing granted, nothing personal stored', async () => {
    const user = randomUUID();
    const email = `erased-${randomUUID()}@example.test`;
    const attributes = { subscriber_attributes: { $email: { value: email, updated_at_ms: day(0) } } };
    expect((await deliver(billingEvent('initial-purchase', user, { at: 0, purchased: 0, expires: 30 }, attributes))).status).toBe(200);
    expect((await entitlementsOf(db, user, new Date(day(1))))[0]).toMatchObject({ active: true });
    await eraseUser(user, email);
    expect(await storedAnywhere(db, email)).toEqual([]);

    const renewal = billingEvent('renewal', user, { at: 30, purchased: 30, expires: 60 }, { ...attributes, country_code: 'FR' });
    const response = await deliver(renewal);

    expect(response).toMatchObject({ status: 200, body: { received: true } });
    expect(await entitlementsOf(db, user, new Date(day(31)))).toEqual([]);
    expect(await db.sql('select 1 from public.entitlements where app_user_id = $1', [user])).toEqual([]);
    expect(await storedAnywhere(db, email)).toEqual([]);
    // The id itself stays in two places only: its billing_subscribers row, the fold's bookkeeping
    // (a group and watermark; no body, no attribute), and, until the next billing sweep, the
    // deletion queued for RevenueCat (sent or dropped then: the tests below).
    expect((await storedAnywhere(db, user)).map((found) => found.split(':')[0])).toEqual(['billing_revenuecat_deletions', 'billing_subscribers']);
    const [row] = await db.sql<{ body: unknown; outcome: string; app_user_id: string | null; owner_id: string | null; subject_id: string | null; reason: string }>(
      `select body, outcome, app_user_id, owner_id, subject_id, plan->>'ignoredReason' as reason from public.billing_events where event_id = $1`, [renewal.event.id]);
    expect(row).toEqual({
      body: { event: { id: renewal.event.id, type: 'RENEWAL', event_timestamp_ms: day(30), environment: 'PRODUCTION' } },
      outcome: 'ignored', app_user_id: null, owner_id: null, subject_id: null, reason: 'erased',
    });
    // A retry of it is a duplicate, still 200.
    expect((await deliver(renewal)).status).toBe(200);
    // The list of erased ids holds a digest, never the id.
    const [listed] = await db.sql<{ n: string }>('select count(*) as n from public.billing_erased_ids where id_hash = public.billing_id_hash($1)', [user]);
    expect(Number(listed!.n)).toBe(1);
  });

  it('grants nothing to anyone through aliases or a TRANSFER naming the erased id', async () => {
    const [erased, other, anonymous] = [randomUUID(), randomUUID(), `$RCAnonymousID:${randomUUID().replace(/-/g, '')}`];
    expect((await deliver(billingEvent('initial-purchase', erased, { at: 0, purchased: 0, expires: 30 }))).status).toBe(200);
    await eraseUser(erased, 'aliased@example.test');

    // RevenueCat names the erased id as an alias of another id (an anonymous id now holds the purchase).
    const aliased = billingEvent('renewal', anonymous, { at: 30, purchased: 30, expires: 60 }, { aliases: [anonymous, erased], original_app_user_id: erased });
    expect((await deliver(aliased)).status).toBe(200);
    // A TRANSFER of the erased id's purchases to another user.
    const transfer = billingEvent('transfer', other, { at: 31 }, { app_user_id: undefined, aliases: undefined, original_app_user_id: undefined, transferred_from: [erased], transferred_to: [other] });
    expect((await deliver(transfer)).status).toBe(200);

    for (const id of [erased, other, anonymous]) expect(await entitlementsOf(db, id, new Date(day(32)))).toEqual([]);
    expect((await storedAnywhere(db, erased)).map((found) => found.split(':')[0])).toEqual(['billing_revenuecat_deletions', 'billing_subscribers']);
    const rows = await db.sql<{ reason: string; outcome: string }>(
      `select plan->>'ignoredReason' as reason, outcome from public.billing_events where event_id = any ($1) order by event_at`, [[aliased.event.id, transfer.event.id]]);
    expect(rows).toEqual([{ reason: 'erased', outcome: 'ignored' }, { reason: 'erased', outcome: 'ignored' }]);
    // Nothing of theirs is queued for a sync from RevenueCat either.
    expect(await db.sql('select app_user_id from public.billing_sync_queue where app_user_id = any ($1)', [[erased, other, anonymous]])).toEqual([]);
  });

  it('lifts when the same id signs up again (a new auth.users row): later events grant again, what was erased stays erased', async () => {
    const user = randomUUID();
    const first = billingEvent('initial-purchase', user, { at: 0, purchased: 0, expires: 30 });
    expect((await deliver(first)).status).toBe(200);
    await eraseUser(user, 'back@example.test');
    expect((await deliver(billingEvent('renewal', user, { at: 30, purchased: 30, expires: 60 }))).status).toBe(200);
    expect(await entitlementsOf(db, user, new Date(day(31)))).toEqual([]);

    await db.sql('insert into auth.users (id, email) values ($1, $2)', [user, 'back@example.test']);
    expect((await deliver(billingEvent('renewal', user, { at: 60, purchased: 60, expires: 90 }))).status).toBe(200);

    expect((await entitlementsOf(db, user, new Date(day(61))))[0]).toMatchObject({ active: true, expiresAt: new Date(day(90)).toISOString() });
    expect(await db.sql('select 1 from public.billing_erased_ids where id_hash = public.billing_id_hash($1)', [user])).toEqual([]);
    const [erasedFirst] = await db.sql<{ body: unknown }>('select body from public.billing_events where event_id = $1', [first.event.id]);
    expect(erasedFirst!.body).toEqual({ event: { id: first.event.id, type: 'INITIAL_PURCHASE' } });
  });

  it('an id that had been merged into another customer, erased and back, buys for itself, never for that customer', async () => {
    const [user, holder] = [randomUUID(), randomUUID()];
    // Legacy aliasing: the holder's purchase names the user as the same customer.
    expect((await deliver(billingEvent('initial-purchase', holder, { at: 0, purchased: 0, expires: 30 }, { original_app_user_id: holder, aliases: [holder, user] }))).status).toBe(200);
    expect(await db.sql('select customer_id from public.billing_subscribers where app_user_id = $1', [user])).toEqual([{ customer_id: holder }]);
    await eraseUser(user, 'merged@example.test');
    await db.sql('insert into auth.users (id, email) values ($1, $2)', [user, 'merged@example.test']);

    const purchase = billingEvent('initial-purchase', user, { at: 40, purchased: 40, expires: 70 }, { product_id: 'com.example.second', transaction_id: '7000', original_transaction_id: '7000' });
    expect((await deliver(purchase)).status).toBe(200);
    expect(await db.sql('select app_user_id from public.entitlements where app_user_id in ($1, $2)', [user, holder])).toEqual([{ app_user_id: user }]);
    expect((await entitlementsOf(db, user, new Date(day(41))))[0]).toMatchObject({ active: true, productId: 'com.example.second' });
    expect(await entitlementsOf(db, holder, new Date(day(41)))).toEqual([]);
  });
});

/** Every row of a public table whose text contains `needle`: "table: row". */
export async function storedAnywhere(db: TestDatabase, needle: string): Promise<string[]> {
  const tables = await db.sql<{ name: string }>(
    `select c.relname as name from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid = c.relnamespace
     where n.nspname = 'public' and c.relkind in ('r', 'p') and not c.relispartition order by 1`);
  const found: string[] = [];
  for (const { name } of tables) {
    const rows = await db.sql<{ row: string }>(`select t::text as row from public."${name}" t where strpos(t::text, $1) > 0`, [needle]);
    found.push(...rows.map(({ row }) => `${name}: ${row.slice(0, 200)}`));
  }
  return found;
}

/**
 * REVENUECAT_DELETE_ON_ERASE: the billing sweep deletes an erased user's customer at RevenueCat
 * (REST v2 DELETE /v2/projects/{project_id}/customers/{id}, against the fake RevenueCat server);
 * not opted in, it sends nothing and drops the queued id.
 */
describe.each(DATABASE_KINDS)('deleting the RevenueCat customer of an erased user, on %s', (kind) => {
  const db = suiteDatabase(kind);
  const CRON_SECRET = 'cron-secret-for-erasure-tests-0123456789';
  let revenuecat: FakeRevenueCat;
  beforeAll(async () => {
    revenuecat = await startFakeRevenueCat();
  });
  afterAll(() => revenuecat.close());

  async function eraseThenSweep(deleteOnErase: boolean) {
    const restore = setEnv({
      ...flowSettings(revenuecat), CRON_SECRET, REVENUECAT_V2_SECRET_API_KEY: revenuecat.v2ApiKey, REVENUECAT_PROJECT_ID: revenuecat.projectId,
      REVENUECAT_DELETE_ON_ERASE: deleteOnErase ? '1' : undefined,
    });
    try {
      const user = randomUUID();
      expect((await deliver(billingEvent('initial-purchase', user, { at: 0, purchased: 0, expires: 30 }))).status).toBe(200);
      revenuecat.setCustomer(user, {});
      await db.sql('insert into auth.users (id, email) values ($1, $2)', [user, 'rc@example.test']);
      await db.sql('delete from auth.users where id = $1', [user]);
      expect(await db.sql('select app_user_id from public.billing_revenuecat_deletions where app_user_id = $1', [user])).toEqual([{ app_user_id: user }]);
      const before = revenuecat.v2Requests.length;
      const sweep = await callRoute(cronSyncRoute, { headers: { authorization: `Bearer ${CRON_SECRET}` } });
      expect(sweep.status, JSON.stringify(sweep.body)).toBe(200);
      return { user, v2: revenuecat.v2Requests.slice(before) };
    } finally {
      restore();
    }
  }

  it('opted in: the sweep sends DELETE for the erased id, and forgets it once RevenueCat answered', async () => {
    const { user, v2 } = await eraseThenSweep(true);
    expect(v2).toEqual([{ method: 'DELETE', path: `/v2/projects/${revenuecat.projectId}/customers/${user}`, status: 200 }]);
    expect(await db.sql('select 1 from public.billing_revenuecat_deletions where app_user_id = $1', [user])).toEqual([]);
    expect((await storedAnywhere(db, user)).map((found) => found.split(':')[0])).toEqual(['billing_subscribers']);
  });

  it('a sync from RevenueCat of an erased id (its store subscription still active there) stores nothing and grants nothing', async () => {
    const restore = setEnv({ ...flowSettings(revenuecat), ADMIN_API_SECRET: CRON_SECRET });
    try {
      const user = randomUUID();
      expect((await deliver(billingEvent('initial-purchase', user, { at: 0, purchased: 0, expires: 30 }))).status).toBe(200);
      await db.sql('insert into auth.users (id, email) values ($1, $2)', [user, 'synced@example.test']);
      await db.sql('delete from auth.users where id = $1', [user]);
      const far = Date.now() + 30 * 86_400_000;
      revenuecat.setCustomer(user, {
        entitlements: { pro: v1Entitlement(MONTHLY, { purchased: Date.now(), expires: far }) },
        subscriptions: { [MONTHLY]: v1Subscription({ purchased: Date.now(), expires: far, transactionId: '7000' }) },
        subscriber_attributes: { $email: { value: 'synced@example.test', updated_at_ms: Date.now() } },
      });

      const sync = await callRoute(adminSyncRoute, { method: 'POST', headers: { authorization: `Bearer ${CRON_SECRET}` }, body: { app_user_id: user } });

      expect(sync).toMatchObject({ status: 200, body: { outcome: 'ignored', entitlements: [] } });
      expect(await entitlementsOf(db, user, new Date())).toEqual([]);
      expect(await storedAnywhere(db, 'synced@example.test')).toEqual([]);
      expect(await db.sql(`select 1 from public.billing_events where event_id like 'sync:%' and (owner_id = $1 or app_user_id = $1)`, [user])).toEqual([]);
    } finally {
      restore();
    }
  });

  it('not opted in: nothing is sent to RevenueCat, and the queued id is dropped', async () => {
    const { user, v2 } = await eraseThenSweep(false);
    expect(v2.filter((request) => request.method === 'DELETE')).toEqual([]);
    expect(await db.sql('select 1 from public.billing_revenuecat_deletions where app_user_id = $1', [user])).toEqual([]);
  });

  it('a failed deletion stays queued and is tried again later', async () => {
    revenuecat.failV2(503);
    try {
      const { user, v2 } = await eraseThenSweep(true);
      expect(v2).toEqual([{ method: 'DELETE', path: `/v2/projects/${revenuecat.projectId}/customers/${user}`, status: 503 }]);
      const [row] = await db.sql<{ attempts: number; later: boolean }>(
        'select attempts, next_attempt_at > now() as later from public.billing_revenuecat_deletions where app_user_id = $1', [user]);
      expect(row).toEqual({ attempts: 1, later: true });
    } finally {
      revenuecat.failV2(undefined);
    }
  });
});
