import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as challengeRoute from '../../app/api/wallet-link/challenge/route.ts';
import { describeEventEffects } from '../../lib/billing/event-effects.ts';
import { deliver, entitlementsOf, flowSettings } from '../billing/support.ts';
import { fixture } from '../billing/fixtures.ts';
import { deliverNow, linkWallet, unlinkWallet } from '../support/account-actions.ts';
import pg from 'pg';
import { DATABASE_KINDS, suiteDatabase, untilASessionWaitsForALock, type TestDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { callRoute } from '../support/http.ts';
import { startFakeRevenueCat, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { testUser } from '../support/tokens.ts';
import { evmWallet } from '../wallets/wallets.ts';

/**
 * The outbox in the database (supabase/schemas/10_events.sql): events derived from what a user's
 * entitlements and wallets became, written in the transaction that changed them, numbered per user;
 * lapses by time told by a scan; deliveries claimed in order per user and endpoint, settled,
 * replayed. Driven through the real routes; both engines.
 */

type Row = Record<string, unknown>;
interface EventRow { type: string; sequence: number; data: { reason?: string; entitlement?: Row & { status?: string }; previous?: Row; wallet?: Row & { address?: string } } }
const DAY_MS = 86_400_000;

function eventsOf(db: TestDatabase, userId: string): Promise<EventRow[]> {
  return db.sql<EventRow>('select type, sequence::int as sequence, data from public.outbound_events where user_id = $1 order by sequence', [userId]);
}

/** The events `work` wrote for the user. */
async function writtenDuring(db: TestDatabase, userId: string, work: () => Promise<unknown>): Promise<EventRow[]> {
  const before = (await eventsOf(db, userId)).length;
  await work();
  return (await eventsOf(db, userId)).slice(before);
}

const summary = (events: EventRow[]) => events.map((e) => [e.type, e.data.reason ?? e.data.entitlement?.status ?? e.data.wallet?.address ?? null]);

describe.each(DATABASE_KINDS)('the outbox on %s', (kind) => {
  const db = suiteDatabase(kind, { realtime: true }); // Supabase Realtime's schema: the lapse's broadcast is seen
  /** Every endpoint's server gone for days, then an outbox run naming none: all retired. */
  const endpointsGoneForDays = async () => {
    await db.sql("update public.outbound_endpoints set named_at = now() - interval '4 days'");
    await db.sql("select public.outbound_set_endpoints('[]'::jsonb)");
  };
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

  it('tells a purchase as granted, a cancellation as updated, a refund as revoked (refunded), numbered 1, 2, 3; a duplicate tells nothing', async () => {
    const buyer = await testUser();
    const now = Date.now();
    const event = (name: string, atMs: number, fields: Record<string, unknown> = {}) => fixture(name, {
      id: `evt-${randomUUID()}`, app_user_id: buyer.userId, aliases: [buyer.userId], original_app_user_id: buyer.userId,
      event_timestamp_ms: atMs, purchased_at_ms: now - 2 * DAY_MS, expiration_at_ms: now + 28 * DAY_MS, ...fields,
    });
    const purchase = event('initial-purchase', now - 2 * DAY_MS);
    expect(summary(await writtenDuring(db, buyer.userId, () => deliver(purchase)))).toEqual([['entitlement.granted', 'active']]);
    expect(summary(await writtenDuring(db, buyer.userId, () => deliver(purchase)))).toEqual([]);
    const cancelled = await writtenDuring(db, buyer.userId, () => deliver(event('cancellation-unsubscribe', now - DAY_MS, { cancel_reason: 'UNSUBSCRIBE' })));
    expect(summary(cancelled)).toEqual([['entitlement.updated', 'cancelled_active']]);
    expect(cancelled[0]!.data.previous).toMatchObject({ status: 'active', will_renew: true });
    expect(cancelled[0]!.data.entitlement).toMatchObject({ status: 'cancelled_active', will_renew: false, active: true });
    // A refund (RevenueCat: CANCELLATION with cancel_reason CUSTOMER_SUPPORT, expiring when refunded).
    const refunded = await writtenDuring(db, buyer.userId, () =>
      deliver(event('cancellation-customer-support', now - DAY_MS / 2, { cancel_reason: 'CUSTOMER_SUPPORT', expiration_at_ms: now - DAY_MS / 2 })));
    expect(summary(refunded)).toEqual([['entitlement.revoked', 'refunded']]);
    expect(refunded[0]!.data.entitlement).toMatchObject({ entitlement_id: 'pro', active: false, status: 'refunded' });
    expect((await eventsOf(db, buyer.userId)).map((e) => e.sequence)).toEqual([1, 2, 3]);
  });

  it('tells an event folded into the past by its outcome only (a refold rebuilds every row, and the outcome did not change)', async () => {
    const buyer = await testUser();
    const now = Date.now();
    const event = (name: string, atMs: number, fields: Record<string, unknown> = {}) => fixture(name, {
      id: `evt-${randomUUID()}`, app_user_id: buyer.userId, aliases: [buyer.userId], original_app_user_id: buyer.userId,
      event_timestamp_ms: atMs, purchased_at_ms: now - 3 * DAY_MS, expiration_at_ms: now + 27 * DAY_MS, ...fields,
    });
    await deliver(event('initial-purchase', now - 3 * DAY_MS));
    await deliver(event('renewal', now - DAY_MS));
    // An older event that changes nothing once folded in its place: no event.
    expect(summary(await writtenDuring(db, buyer.userId, () => deliver(event('subscriber-alias', now - 2 * DAY_MS))))).toEqual([]);
  });

  it('tells a renewal the fold applies in order (its shortcut) to the buyer, and to a user merged into a custom id\'s customer, with a live update each', async () => {
    const now = Date.now();
    const buyer = await testUser();
    const merged = await testUser();
    const legacy = `custom-${randomUUID()}`; // a custom app user id (no Supabase user), holding the rows
    const broadcasts = (userId: string) => db.sql<{ what: string }>("select payload->>'what' as what from realtime.messages where topic = $1", [`user:${userId}`]);
    const event = (name: string, ids: { app: string; aliases: string[] }, atMs: number, expiresMs: number) => fixture(name, {
      id: `evt-${randomUUID()}`, app_user_id: ids.app, aliases: ids.aliases, original_app_user_id: ids.app, original_transaction_id: `otx-${ids.app}`,
      event_timestamp_ms: atMs, purchased_at_ms: atMs, expiration_at_ms: expiresMs,
    });
    // The renewal as recordBillingEvent sends it, answering whether the shortcut applied it.
    const renewInOrder = async (body: ReturnType<typeof fixture>) => {
      const [row] = await db.sql<{ result: { inOrder?: boolean } }>('select public.record_billing_event(p_body => $1, p_plan => $2) as result',
        [JSON.stringify(body), JSON.stringify(describeEventEffects(body.event, new Date()))]);
      return row!.result.inOrder ?? false;
    };

    await deliver(event('initial-purchase', { app: buyer.userId, aliases: [buyer.userId] }, now - 2 * DAY_MS, now + 28 * DAY_MS));
    // The custom id buys with the user aliased to it: the user is merged into the custom id's customer.
    await deliver(event('initial-purchase', { app: legacy, aliases: [legacy, merged.userId] }, now - 2 * DAY_MS, now + 28 * DAY_MS));
    const before = { buyer: (await broadcasts(buyer.userId)).length, merged: (await broadcasts(merged.userId)).length };

    const buyerEvents = await writtenDuring(db, buyer.userId, async () =>
      expect(await renewInOrder(event('renewal', { app: buyer.userId, aliases: [buyer.userId] }, now - DAY_MS, now + 58 * DAY_MS))).toBe(true));
    expect(summary(buyerEvents)).toEqual([['entitlement.updated', 'active']]);
    expect(Date.parse(buyerEvents[0]!.data.entitlement!.expires_at as string)).toBe(now + 58 * DAY_MS);
    const mergedEvents = await writtenDuring(db, merged.userId, async () =>
      expect(await renewInOrder(event('renewal', { app: legacy, aliases: [legacy] }, now - DAY_MS, now + 58 * DAY_MS))).toBe(true));
    expect(summary(mergedEvents)).toEqual([['entitlement.updated', 'active']]);
    expect((await broadcasts(buyer.userId)).slice(before.buyer)).toEqual([{ what: 'entitlements' }]);
    expect((await broadcasts(merged.userId)).slice(before.merged)).toEqual([{ what: 'entitlements' }]);
  });

  it('says whether a webhook noted a Supabase user (so the server moves the outbox after it): the buyer, a user merged into a custom id, not a custom id alone', async () => {
    const now = Date.now();
    const record = async (appUserId: string, aliases: string[]) => {
      const body = fixture('initial-purchase', {
        id: `evt-${randomUUID()}`, app_user_id: appUserId, aliases, original_app_user_id: appUserId,
        event_timestamp_ms: now, purchased_at_ms: now, expiration_at_ms: now + 30 * DAY_MS,
      });
      const [row] = await db.sql<{ result: { usersNoted?: boolean; outcome: string } }>('select public.record_billing_event(p_body => $1, p_plan => $2) as result',
        [JSON.stringify(body), JSON.stringify(describeEventEffects(body.event, new Date()))]);
      return row!.result;
    };
    const buyer = await testUser();
    const merged = await testUser();
    expect(await record(buyer.userId, [buyer.userId])).toMatchObject({ outcome: 'applied', usersNoted: true });
    const custom = `custom-${randomUUID()}`;
    expect(await record(custom, [custom])).toMatchObject({ outcome: 'applied', usersNoted: false });
    const legacy = `custom-${randomUUID()}`;
    expect(await record(legacy, [legacy, merged.userId])).toMatchObject({ outcome: 'applied', usersNoted: true });
  });

  it('tells a wallet linked and unlinked, with the link as the API shows it', async () => {
    const owner = await testUser();
    const wallet = evmWallet();
    let link: { id: string } | undefined;
    const linked = await writtenDuring(db, owner.userId, async () => { link = await linkWallet(owner, wallet); });
    expect(linked).toEqual([{ type: 'wallet.linked', sequence: 1, data: { wallet: expect.objectContaining({ id: link!.id, chain: 'evm', address: wallet.address }) } }]);
    expect(summary(await writtenDuring(db, owner.userId, () => unlinkWallet(owner, link!.id)))).toEqual([['wallet.unlinked', wallet.address]]);
  });

  it('tells access that ended by time, when the scan finds it, once', async () => {
    const buyer = await testUser();
    await deliverNow('initial-purchase', buyer.userId, { purchasedHoursAgo: 24, expiresInHours: 24 });
    // Time passes: the period's end moves into the past with no event (as the clock would move it).
    await db.connection(async (sql) => {
      await sql('begin');
      await sql("set local session_replication_role = 'replica'"); // no trigger: nothing tells it
      await sql("update public.entitlements set expires_at = now() - interval '1 minute' where app_user_id = $1", [buyer.userId]);
      await sql("update public.outbound_told_entitlements set recheck_at = now() - interval '1 minute' where user_id = $1", [buyer.userId]);
      await sql('commit');
    });
    expect((await eventsOf(db, buyer.userId)).map((e) => e.type)).toEqual(['entitlement.granted']);
    const broadcasts = () => db.sql<{ what: string }>("select payload->>'what' as what from realtime.messages where topic = $1", [`user:${buyer.userId}`]);
    const before = (await broadcasts()).length;
    const [scan] = await db.sql<{ result: { users: string[] } }>('select public.outbound_tell_lapses(10000) as result');
    expect(scan!.result.users).toContain(buyer.userId);
    // The same live update as a written change: account_changed, what: entitlements.
    expect((await broadcasts()).slice(before)).toEqual([{ what: 'entitlements' }]);
    const events = await eventsOf(db, buyer.userId);
    expect(summary(events)).toEqual([['entitlement.granted', 'active'], ['entitlement.revoked', 'expired']]);
    const [again] = await db.sql<{ result: { users: string[] } }>('select public.outbound_tell_lapses(10000) as result');
    expect(again!.result.users).not.toContain(buyer.userId);
    expect(await eventsOf(db, buyer.userId)).toHaveLength(2);
  });

  it('tells what time changes beside access that stays: a renewing monthly lapsing beside a lifetime purchase turns will_renew off', async () => {
    const buyer = await testUser();
    await deliverNow('non-renewing-purchase', buyer.userId, { purchasedHoursAgo: 2, expiresInHours: null },
      { product_id: 'com.example.pro.lifetime', transaction_id: '2000000855550001', original_transaction_id: '2000000855550001' });
    await deliverNow('initial-purchase', buyer.userId, { purchasedHoursAgo: 29 * 24, expiresInHours: 24 });
    const granted = await eventsOf(db, buyer.userId);
    expect(granted.at(-1)!.data.entitlement).toMatchObject({ entitlement_id: 'pro', active: true, will_renew: true, expires_at: null });
    // Looked at again when the monthly ends, not only when the last source (the lifetime: never) does.
    const [monthly] = await db.sql<{ grants_until: Date }>("select grants_until from public.entitlements where app_user_id = $1 and expires_at is not null", [buyer.userId]);
    expect(await db.sql('select recheck_at from public.outbound_told_entitlements where user_id = $1', [buyer.userId])).toEqual([{ recheck_at: monthly!.grants_until }]);
    // A day passes: every time the rows hold moves a day back, the monthly's end into the past.
    await db.connection(async (sql) => {
      await sql('begin');
      await sql("set local session_replication_role = 'replica'"); // no trigger: nothing tells it
      await sql("update public.entitlements set expires_at = expires_at - interval '25 hours' where app_user_id = $1 and expires_at is not null", [buyer.userId]);
      await sql("update public.outbound_told_entitlements set recheck_at = recheck_at - interval '25 hours' where user_id = $1", [buyer.userId]);
      await sql('commit');
    });
    await db.sql('select public.outbound_tell_lapses(10000)');
    const told = (await eventsOf(db, buyer.userId)).slice(granted.length);
    expect(told.map((e) => [e.type, e.data.entitlement?.will_renew, e.data.entitlement?.active])).toEqual([['entitlement.updated', false, true]]);
    // What GET /api/me shows now, and nothing more to tell.
    expect((await entitlementsOf(db, buyer.userId, new Date())).map((view) => [view.id, view.active, view.willRenew])).toEqual([['pro', true, false]]);
    await db.sql('select public.outbound_tell_lapses(10000)');
    expect(await eventsOf(db, buyer.userId)).toHaveLength(granted.length + 1);
  });

  it('tells an erasure as one customer.deleted, not a revoke or an unlink per row, and only once; then keeps nothing of the user but it until delivered', async () => {
    const endpoint = `ep-${randomUUID().slice(0, 8)}`;
    await db.sql('select public.outbound_set_endpoints($1::jsonb)', [JSON.stringify([{ id: endpoint, types: null }])]);
    const user = await testUser();
    await deliverNow('initial-purchase', user.userId);
    await linkWallet(user, evmWallet());
    await db.sql("update public.outbound_deliveries set state = 'delivered' where user_id = $1", [user.userId]); // both told already
    await db.sql('select public.forget_user($1::uuid)', [user.userId]);
    await db.sql('select public.forget_user($1::uuid)', [user.userId]);
    // The delivered events went with the user; the customer.deleted waits for its endpoint.
    expect(await eventsOf(db, user.userId)).toEqual([{ type: 'customer.deleted', sequence: 3, data: {} }]);
    // Their session token, still valid where the Auth server is not asked (HS256), links nothing
    // more: customer.deleted stays their last event.
    const wallet = evmWallet();
    const challenge = await callRoute(challengeRoute, { method: 'POST', headers: { authorization: user.authorization }, body: { chain: wallet.chain, address: wallet.address, chainId: 1 } });
    expect({ status: challenge.status, code: challenge.body.code }).toEqual({ status: 401, code: 'session_revoked' });
    expect(await eventsOf(db, user.userId)).toEqual([{ type: 'customer.deleted', sequence: 3, data: {} }]);
    const kept = await db.sql<{ n: number }>(`select (select count(*) from public.outbound_user_sequences where user_id = $1)
      + (select count(*) from public.outbound_told_entitlements where user_id = $1) as n`, [user.userId]);
    expect(Number(kept[0]!.n)).toBe(0);
    // Delivered, it goes with the next maintenance.
    await db.sql("update public.outbound_deliveries set state = 'delivered' where user_id = $1", [user.userId]);
    await db.sql('select public.outbound_maintain(now(), clock_timestamp() + interval \'5 seconds\')');
    expect(await eventsOf(db, user.userId)).toEqual([]);
    await endpointsGoneForDays();

    // With no endpoint, nothing of the user stays at all.
    const alone = await testUser();
    await linkWallet(alone, evmWallet());
    await db.sql('select public.forget_user($1::uuid)', [alone.userId]);
    expect(await eventsOf(db, alone.userId)).toEqual([]);
  });

  it('sends nothing an erased user had before their customer.deleted again: not by a replay, not to a retired endpoint that comes back; it goes with the erasure once delivered', async () => {
    const [active, retired] = [`ep-${randomUUID().slice(0, 8)}`, `ep-${randomUUID().slice(0, 8)}`];
    await db.sql('select public.outbound_set_endpoints($1::jsonb)', [JSON.stringify([{ id: active, types: null }, { id: retired, types: null }])]);
    const user = await testUser();
    await deliverNow('initial-purchase', user.userId); // the grant waits at both endpoints
    // One endpoint's server stops naming it for days: retired, its delivery of the grant still waiting.
    await db.sql("update public.outbound_endpoints set named_at = now() - interval '4 days' where id = $1", [retired]);
    await db.sql('select public.outbound_set_endpoints($1::jsonb)', [JSON.stringify([{ id: active, types: null }])]);
    await db.sql('select public.forget_user($1::uuid)', [user.userId]);
    const waiting = () => db.sql<{ endpoint_id: string; type: string }>(`select d.endpoint_id, e.type from public.outbound_deliveries d
      join public.outbound_events e on e.id = d.event_id where d.user_id = $1 and d.state = 'pending' order by d.endpoint_id, d.sequence`, [user.userId]);
    expect(await waiting()).toEqual([{ endpoint_id: active, type: 'entitlement.granted' }, { endpoint_id: active, type: 'customer.deleted' }]);
    // Both delivered; an operator replays the hour (to every active endpoint): only the erasure is sent again.
    await db.sql("update public.outbound_deliveries set state = 'delivered', delivered_at = now() where user_id = $1", [user.userId]);
    await db.sql("select public.outbound_replay(p_from => now() - interval '1 hour', p_to => now() + interval '1 hour')");
    expect(await waiting()).toEqual([{ endpoint_id: active, type: 'customer.deleted' }]);
    const [grant] = await db.sql<{ id: string }>("select id from public.outbound_events where user_id = $1 and type = 'entitlement.granted'", [user.userId]);
    expect(await db.sql('select public.outbound_replay(p_event_id => $1) as n', [grant!.id])).toEqual([{ n: 0 }]);
    // Delivered again, the next maintenance takes the grant and the erasure both: nothing of the user is kept.
    await db.sql("update public.outbound_deliveries set state = 'delivered', delivered_at = now() where user_id = $1", [user.userId]);
    await db.sql("select public.outbound_maintain(now(), clock_timestamp() + interval '5 seconds')");
    expect(await eventsOf(db, user.userId)).toEqual([]);
    await endpointsGoneForDays();
  });

  it('keeps nothing of an erased user for an endpoint that takes no customer.deleted: what it still waited for goes with the erasure, as it would never be told of it', async () => {
    const [all, entitlementsOnly] = [`ep-${randomUUID().slice(0, 8)}`, `ep-${randomUUID().slice(0, 8)}`];
    await db.sql('select public.outbound_set_endpoints($1::jsonb)', [JSON.stringify([{ id: all, types: null }, { id: entitlementsOnly, types: ['entitlement.*'] }])]);
    const user = await testUser();
    await deliverNow('initial-purchase', user.userId); // the grant waits at both endpoints
    await db.sql('select public.forget_user($1::uuid)', [user.userId]);
    const waiting = (userId: string) => db.sql<{ endpoint_id: string; type: string }>(`select d.endpoint_id, e.type from public.outbound_deliveries d
      join public.outbound_events e on e.id = d.event_id where d.user_id = $1 and d.state = 'pending' order by d.endpoint_id = $2 desc, d.sequence`, [userId, all]);
    // The endpoint that takes every type gets the grant, then the erasure; the other nothing more.
    expect(await waiting(user.userId)).toEqual([{ endpoint_id: all, type: 'entitlement.granted' }, { endpoint_id: all, type: 'customer.deleted' }]);
    // Nor does a replay of the hour to it send the grant again.
    await db.sql("select public.outbound_replay(p_from => now() - interval '1 hour', p_to => now() + interval '1 hour', p_endpoint_id => $1)", [entitlementsOnly]);
    expect((await waiting(user.userId)).filter((row) => row.endpoint_id === entitlementsOnly)).toEqual([]);
    // Delivered, both go with the next maintenance.
    await db.sql("update public.outbound_deliveries set state = 'delivered', delivered_at = now() where user_id = $1", [user.userId]);
    await db.sql("select public.outbound_maintain(now(), clock_timestamp() + interval '5 seconds')");
    expect(await eventsOf(db, user.userId)).toEqual([]);

    // With that endpoint alone, nothing of the user is kept from the erasure on: no customer.deleted
    // has a delivery, and the grant it waited for went with the erasure.
    await db.sql('select public.outbound_set_endpoints($1::jsonb)', [JSON.stringify([{ id: entitlementsOnly, types: ['entitlement.*'] }])]);
    await db.sql("update public.outbound_endpoints set retired_at = now() where id = $1", [all]);
    const alone = await testUser();
    await deliverNow('initial-purchase', alone.userId);
    expect(await waiting(alone.userId)).toEqual([{ endpoint_id: entitlementsOnly, type: 'entitlement.granted' }]);
    await db.sql('select public.forget_user($1::uuid)', [alone.userId]);
    expect(await eventsOf(db, alone.userId)).toEqual([]);
    await endpointsGoneForDays();
  });

  it('numbers a user erased and lifted again after the customer.deleted still waiting, so it reaches a receiver first', async () => {
    const endpoint = `ep-${randomUUID().slice(0, 8)}`;
    await db.sql('select public.outbound_set_endpoints($1::jsonb)', [JSON.stringify([{ id: endpoint, types: null }])]);
    const user = await testUser();
    await deliverNow('initial-purchase', user.userId);
    await db.sql('select public.forget_user($1::uuid)', [user.userId]); // the grant and customer.deleted wait
    // An operator lifts the erased id (docs/security.md, An erased user stays erased), and the same
    // id buys again.
    await db.sql('delete from public.billing_erased_ids where id_hash = public.billing_id_hash($1)', [user.userId]);
    await deliverNow('initial-purchase', user.userId);
    const events = await eventsOf(db, user.userId);
    expect(events.map((e) => [e.sequence, e.type])).toEqual([[1, 'entitlement.granted'], [2, 'customer.deleted'], [3, 'entitlement.granted']]);
    const queue = await db.sql<{ type: string }>(`select e.type from public.outbound_deliveries d join public.outbound_events e on e.id = d.event_id
      where d.endpoint_id = $1 and d.user_id = $2 and d.state = 'pending' order by d.sequence`, [endpoint, user.userId]);
    expect(queue.map((row) => row.type)).toEqual(['entitlement.granted', 'customer.deleted', 'entitlement.granted']);
    await endpointsGoneForDays();
  });

  it.runIf(kind === 'postgres')('a replay beside an erasure not yet committed sends nothing the user had before it, once it committed', async () => {
    const [all, entitlementsOnly] = [`ep-${randomUUID().slice(0, 8)}`, `ep-${randomUUID().slice(0, 8)}`];
    await db.sql('select public.outbound_set_endpoints($1::jsonb)', [JSON.stringify([{ id: all, types: null }, { id: entitlementsOnly, types: ['entitlement.*'] }])]);
    const user = await testUser();
    await deliverNow('initial-purchase', user.userId); // the grant waits at both endpoints
    const erasing = new pg.Client({ connectionString: db.url });
    await erasing.connect();
    try {
      await erasing.query('begin');
      await erasing.query('select public.forget_user($1::uuid)', [user.userId]);
      // The operator replays the hour to the endpoint that takes no customer.deleted: it reads the
      // grant as replayable (the erasure is not committed), then waits for the erasure's rows.
      let replayDone = false;
      const replayed = db.sql("select public.outbound_replay(p_from => now() - interval '1 hour', p_to => now() + interval '1 hour', p_endpoint_id => $1)", [entitlementsOnly])
        .finally(() => { replayDone = true; });
      await untilASessionWaitsForALock(db, () => replayDone);
      await erasing.query('commit');
      await replayed;
    } finally {
      await erasing.end();
    }
    const waiting = await db.sql('select 1 from public.outbound_deliveries where user_id = $1 and endpoint_id = $2 and state = $3', [user.userId, entitlementsOnly, 'pending']);
    expect(waiting).toEqual([]);
    await endpointsGoneForDays();
  });

  it.runIf(kind === 'postgres')('numbers the first event of a user after an erasure committed meanwhile after its customer.deleted (it waited for it)', async () => {
    const endpoint = `ep-${randomUUID().slice(0, 8)}`;
    await db.sql('select public.outbound_set_endpoints($1::jsonb)', [JSON.stringify([{ id: endpoint, types: null }])]);
    const user = randomUUID(); // no event yet: the erasure makes their counter, and deletes it
    const [erasing, linking] = [new pg.Client({ connectionString: db.url }), new pg.Client({ connectionString: db.url })];
    await Promise.all([erasing.connect(), linking.connect()]);
    try {
      await erasing.query('begin');
      await erasing.query('select public.outbound_lock_user($1)', [user]);
      await erasing.query("select public.outbound_emit($1, 'customer.deleted', '{}'::jsonb)", [user]);
      await erasing.query('delete from public.outbound_user_sequences where user_id = $1', [user]);
      await linking.query('begin');
      const locked = linking.query('select public.outbound_lock_user($1)', [user]); // waits for the erasure
      await untilASessionWaitsForALock(db);
      await erasing.query('commit');
      await locked;
      const [{ sequence }] = (await linking.query("select public.outbound_emit($1, 'wallet.linked', '{}'::jsonb) as sequence", [user])).rows;
      await linking.query('commit');
      expect(Number(sequence)).toBe(2);
    } finally {
      await Promise.all([erasing.end(), linking.end()]);
    }
    expect((await eventsOf(db, user)).map((e) => [e.sequence, e.type])).toEqual([[1, 'customer.deleted'], [2, 'wallet.linked']]);
    await endpointsGoneForDays();
  });

  it('retention: a pending delivery keeps its event past 30 days while its endpoint is in use, not once it is retired', async () => {
    const [inUse, retired] = [`ep-${randomUUID().slice(0, 8)}`, `ep-${randomUUID().slice(0, 8)}`];
    await db.sql('select public.outbound_set_endpoints($1::jsonb)', [JSON.stringify([{ id: inUse, types: null }, { id: retired, types: null }])]);
    const [kept, gone] = [await testUser(), await testUser()];
    await linkWallet(kept, evmWallet());
    await linkWallet(gone, evmWallet());
    // kept's event is delivered to the retired endpoint and pending at the one in use; gone's the other way round.
    await db.sql("update public.outbound_deliveries set state = 'delivered' where (user_id = $1 and endpoint_id = $2) or (user_id = $3 and endpoint_id = $4)", [kept.userId, retired, gone.userId, inUse]);
    await db.sql("update public.outbound_endpoints set named_at = now() - interval '4 days' where id = $1", [retired]);
    await db.sql('select public.outbound_set_endpoints($1::jsonb)', [JSON.stringify([{ id: inUse, types: null }])]);
    const maintainAt = (days: number) => db.sql(`select public.outbound_maintain(now() + interval '${days} days', clock_timestamp() + interval '5 seconds')`);
    await maintainAt(29); // within the 30 days, the retired endpoint's backlog waits in case it comes back
    expect((await eventsOf(db, gone.userId)).map((e) => e.type)).toEqual(['wallet.linked']);
    await maintainAt(31);
    expect(await eventsOf(db, gone.userId)).toEqual([]);
    expect((await eventsOf(db, kept.userId)).map((e) => e.type)).toEqual(['wallet.linked']);
    await endpointsGoneForDays();
  });

  it('tells nothing for an id that is no user (a custom or anonymous app user id)', async () => {
    const id = `custom-${randomUUID()}`;
    await deliverNow('initial-purchase', id);
    expect(await eventsOf(db, id)).toEqual([]);
  });

  it('says when an endpoint\'s next attempt is due: the soonest queue head\'s not under way, not an event waiting behind its head', async () => {
    const endpoint = `ep-${randomUUID().slice(0, 8)}`;
    await db.sql('select public.outbound_set_endpoints($1::jsonb)', [JSON.stringify([{ id: endpoint, types: ['wallet.*'] }])]);
    const user = await testUser();
    await linkWallet(user, evmWallet());
    await linkWallet(user, evmWallet()); // behind the first, due since it was written
    const nextAttempt = async () => {
      const [{ status }] = await db.sql<{ status: { endpoints: Array<{ id: string; next_attempt_at: string | null; pending: number }> } }>('select public.outbound_status() as status');
      return status.endpoints.find((row) => row.id === endpoint)!;
    };
    const [{ result: [head] }] = await db.sql<{ result: Array<{ event_id: string }> }>('select public.outbound_claim($1, 1000, 30) as result', [endpoint]);
    // The head under way (leased): no attempt is due until it is settled or its lease ends.
    expect(await nextAttempt()).toMatchObject({ pending: 2, next_attempt_at: null });
    const retryAt = new Date(Date.now() + 10 * 60_000);
    await db.sql('select public.outbound_settle($1, $2::jsonb)', [endpoint, JSON.stringify([{ event_id: head!.event_id, outcome: 'retry', retry_at: retryAt.toISOString(), error: 'HTTP 500' }])]);
    const waiting = await nextAttempt();
    expect(waiting.pending).toBe(2);
    expect(new Date(waiting.next_attempt_at!).toISOString()).toBe(retryAt.toISOString());
    // Dead-lettered (as its last retry would): the second is the head now, due since it was written.
    await db.sql("update public.outbound_deliveries set state = 'dead' where endpoint_id = $1 and event_id = $2", [endpoint, head!.event_id]);
    expect(new Date((await nextAttempt()).next_attempt_at!).getTime()).toBeLessThanOrEqual(Date.now());
    // Retired (no server named it for days): never sent to, so no attempt is due, pending or not.
    await db.sql("update public.outbound_endpoints set named_at = now() - interval '4 days' where id = $1", [endpoint]);
    await db.sql('select public.outbound_set_endpoints($1::jsonb)', [JSON.stringify([{ id: `${endpoint}-next`, types: ['wallet.*'] }])]);
    expect(await nextAttempt()).toMatchObject({ pending: 1, next_attempt_at: null });
  });

  it('delivers in order per user and endpoint: only the head of a user\'s queue is claimed; settled, retried, dead-lettered, replayed', async () => {
    const endpoint = `ep-${randomUUID().slice(0, 8)}`;
    const wallets = await db.sql<{ result: number }>('select public.outbound_set_endpoints($1::jsonb) as result', [JSON.stringify([{ id: endpoint, types: ['wallet.*'] }])]);
    expect(wallets[0]!.result).toBe(1);
    const user = await testUser();
    const first = await linkWallet(user, evmWallet());
    await linkWallet(user, evmWallet());
    await deliverNow('initial-purchase', user.userId); // not a wallet event: not for this endpoint
    const claim = async () => (await db.sql<{ result: Array<{ event_id: string; user_id: string; sequence: number; type: string; attempts: number }> }>(
      'select public.outbound_claim($1, 1000, 30) as result', [endpoint]))[0]!.result.filter((c) => c.user_id === user.userId);
    const settle = (results: unknown[]) => db.sql<{ result: number }>('select public.outbound_settle($1, $2::jsonb) as result', [endpoint, JSON.stringify(results)]);

    const [head, ...rest] = await claim();
    expect(rest).toEqual([]);
    expect(head).toMatchObject({ sequence: 1, type: 'wallet.linked', attempts: 1 });
    expect(await claim()).toEqual([]); // leased, and the second waits behind it
    await settle([{ event_id: head!.event_id, outcome: 'retry', retry_at: new Date(Date.now() - 1000).toISOString(), error: 'HTTP 500' }]);
    const [retried] = await claim();
    expect(retried).toMatchObject({ event_id: head!.event_id, attempts: 2 });
    await settle([{ event_id: retried!.event_id, outcome: 'dead', error: 'HTTP 500' }]);
    // A dead letter no longer holds the queue.
    const [second] = await claim();
    expect(second).toMatchObject({ sequence: 2, type: 'wallet.linked' });
    expect((await settle([{ event_id: second!.event_id, outcome: 'delivered' }]))[0]!.result).toBe(1);
    expect((await settle([{ event_id: second!.event_id, outcome: 'retry' }]))[0]!.result).toBe(0); // settled already
    expect(await claim()).toEqual([]);

    const [dead] = await db.sql<{ result: Array<{ event_id: string; last_error: string }> }>('select public.outbound_dead_letters($1) as result', [endpoint]);
    expect(dead!.result.map((d) => [d.event_id, d.last_error])).toEqual([[head!.event_id, 'HTTP 500']]);
    expect((await db.sql<{ result: number }>('select public.outbound_replay(p_event_id => $1::uuid, p_endpoint_id => $2) as result', [head!.event_id, endpoint]))[0]!.result).toBe(1);
    const [replayed] = await claim();
    expect(replayed).toMatchObject({ event_id: head!.event_id, attempts: 1 });
    expect(first.id).toBe((await db.sql<{ id: string }>("select data->'wallet'->>'id' as id from public.outbound_events where id = $1", [head!.event_id]))[0]!.id);
    await endpointsGoneForDays();
  });
});
