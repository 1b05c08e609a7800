import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { deliver, flowSettings } from '../billing/support.ts';
import { fixture } from '../billing/fixtures.ts';
import { deliverNow, linkWallet } from '../support/account-actions.ts';
import { DATABASE_KINDS, suiteDatabase } from '../support/databases.ts';
import { QUEUES_DUE_NOW } from '../support/outbox.ts';
import { setEnv } from '../support/env.ts';
import { testUser } from '../support/tokens.ts';
import { evmWallet } from '../wallets/wallets.ts';
import { startFakeRevenueCat, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { startWebhookReceiver, type ReceivedEvent, type WebhookReceiver } from '../../scripts/support/webhook-receiver.ts';
import { forgetRegisteredEndpoints, IN_FLIGHT_LIMITS, LEAST_ATTEMPT_MS, moveOutboxAfterWrite, moveOutboxOnSchedule, runOutboundEvents } from '../../lib/events/delivery.ts';
import { DELIVERY_TIMEOUT_MS } from '../../lib/events/attempt.ts';
import { parseEventEndpoints, type EventEndpoint } from '../../lib/events/endpoints.ts';
import { EVENT_SCHEMAS } from '../../lib/events/schemas.ts';
import { verifyWebhook } from '../../packages/client/src/webhooks.ts';

/**
 * Outbound events end to end: changes made through the real routes, the outbox moved by the
 * service's delivery run, and a real HTTP receiver that verifies every signature with the
 * `standardwebhooks` library. Each event type, in order per user, and the faults a receiver can
 * cause (500, a hang, a redirect, a 2xx after the timeout, down for days). Both engines.
 *
 * Time is moved where the rule counts it, never waited for: a retry's due time (next_attempt_at)
 * and an attempt's lease are set into the past, as the clock would move them.
 */

const DAY_MS = 86_400_000;
const secret = () => `whsec_${randomBytes(32).toString('base64')}`;

function endpointsFor(receivers: WebhookReceiver[], secrets: string[]): EventEndpoint[] {
  return parseEventEndpoints({ EVENTS_WEBHOOK_ENDPOINTS: JSON.stringify(receivers.map((r, i) => ({ url: r.url, secret: secrets[i] }))) }, { local: true });
}

const ofUser = (received: ReceivedEvent[], userId: string) => received.filter((r) => (r.data as { userId?: string } | undefined)?.userId === userId);
const typesOf = (received: ReceivedEvent[]) => received.map((r) => r.type);

describe.each(DATABASE_KINDS)('outbound events to a real receiver on %s', (kind) => {
  const db = suiteDatabase(kind);
  let revenuecat: FakeRevenueCat;
  let restoreEnv: () => void;
  let receiver: WebhookReceiver;
  let signingSecret: string;
  let endpoints: EventEndpoint[];
  const run = (options: { timeoutMs?: number; only?: EventEndpoint[] } = {}) =>
    runOutboundEvents({ budgetMs: 20_000, endpoints: options.only ?? endpoints, timeoutMs: options.timeoutMs ?? 5_000 });

  beforeAll(async () => {
    revenuecat = await startFakeRevenueCat();
    restoreEnv = setEnv(flowSettings(revenuecat));
  });
  afterAll(async () => {
    restoreEnv();
    await revenuecat.close();
  });
  beforeEach(async () => {
    signingSecret = secret();
    receiver = await startWebhookReceiver({ secrets: signingSecret });
    endpoints = endpointsFor([receiver], [signingSecret]);
    forgetRegisteredEndpoints();
    // The earlier tests' receivers, as if their servers had been gone for days: the run retires them.
    await db.sql("update public.outbound_endpoints set named_at = now() - interval '4 days'");
    await run(); // registers the endpoint: events from here on are its
  });
  afterEach(async () => {
    await receiver.close();
  });

  /** The user's period ends with no event: the clock moved past it; no trigger writes anything. */
  const periodEndsWithoutAnEvent = (userId: string) => db.connection(async (sql) => {
    await sql('begin');
    await sql("set local session_replication_role = 'replica'");
    await sql("update public.entitlements set expires_at = now() - interval '1 minute' where app_user_id = $1", [userId]);
    await sql("update public.outbound_told_entitlements set recheck_at = now() - interval '1 minute' where user_id = $1", [userId]);
    await sql('commit');
  });

  /** Make every pending retry due now, as the clock would. */
  const retriesDue = async () => {
    await db.sql("update public.outbound_deliveries set next_attempt_at = now() - interval '1 second' where state = 'pending'");
    await db.sql(QUEUES_DUE_NOW);
  };

  it('sends a purchase, a renewal, a refund and a wallet link, signed, in order, with bodies the schemas and the client verifier accept', async () => {
    const buyer = await testUser();
    const now = Date.now();
    const event = (name: string, atMs: number, fields: Record<string, unknown> = {}) => fixture(name, {
      id: `evt-${randomUUID()}`, app_user_id: buyer.userId, aliases: [buyer.userId], original_app_user_id: buyer.userId,
      event_timestamp_ms: atMs, purchased_at_ms: now - 2 * DAY_MS, expiration_at_ms: now + 28 * DAY_MS, ...fields,
    });
    await deliver(event('initial-purchase', now - 2 * DAY_MS));
    await deliver(event('renewal', now - DAY_MS, { expiration_at_ms: now + 58 * DAY_MS }));
    await deliver(event('cancellation-customer-support', now - DAY_MS / 2, { cancel_reason: 'CUSTOMER_SUPPORT', expiration_at_ms: now - DAY_MS / 2 }));
    const wallet = evmWallet();
    await linkWallet(buyer, wallet);

    expect(await run()).toMatchObject({ done: true, endpoints: [{ id: endpoints[0]!.id, delivered: 4, retried: 0, dead: 0 }] });
    const got = ofUser(receiver.received, buyer.userId);
    expect(typesOf(got)).toEqual(['entitlement.granted', 'entitlement.updated', 'entitlement.revoked', 'wallet.linked']);
    expect(got.every((r) => r.verified)).toBe(true);
    expect(got.map((r) => (r.data as { sequence: number }).sequence)).toEqual([1, 2, 3, 4]);
    for (const r of got) {
      const parsed = JSON.parse(r.body) as { type: keyof typeof EVENT_SCHEMAS };
      expect(EVENT_SCHEMAS[parsed.type].safeParse(parsed).success, r.body).toBe(true);
      expect(r.id).toMatch(/^evt_[0-9a-f-]{36}$/);
      const verified = await verifyWebhook(r.body, r.headers, signingSecret);
      expect(verified.type).toBe(r.type);
    }
    type Entitlement = { expiresAt: string };
    const [granted, updated, revoked, linked] = got.map((r) => r.data as { entitlement: Entitlement; previous: Entitlement; changed: string[]; wallet: unknown });
    expect(granted!.entitlement).toMatchObject({ id: 'pro', active: true, status: 'active', productId: 'com.example.pro.monthly' });
    expect(updated!.changed).toEqual(['expiresAt']);
    expect(Date.parse(updated!.entitlement.expiresAt)).toBeGreaterThan(Date.parse(updated!.previous.expiresAt));
    expect(revoked).toMatchObject({ reason: 'refunded', entitlement: { id: 'pro', active: false, status: 'refunded' } });
    expect(linked!.wallet).toMatchObject({ chain: 'evm', address: wallet.address });
    // Nothing is sent twice once delivered.
    await run();
    expect(ofUser(receiver.received, buyer.userId)).toHaveLength(4);
  });

  it('sends a transfer as a revoke (transferred) to the old owner and a grant to the new one', async () => {
    const [from, to] = [await testUser(), await testUser()];
    await deliverNow('initial-purchase', from.userId, { purchasedHoursAgo: 1, expiresInHours: 24 * 30 });
    expect((await deliver(fixture('transfer', { id: `evt-${randomUUID()}`, event_timestamp_ms: Date.now(), transferred_from: [from.userId], transferred_to: [to.userId] }))).status).toBe(200);
    await run();
    expect(ofUser(receiver.received, from.userId).map((r) => [r.type, (r.data as { reason?: string }).reason])).toEqual([['entitlement.granted', undefined], ['entitlement.revoked', 'transferred']]);
    expect(typesOf(ofUser(receiver.received, to.userId))).toEqual(['entitlement.granted']);
  });

  it('sends a lapse by time as a revoke (expired), and an erasure as customer.deleted', async () => {
    const buyer = await testUser();
    await deliverNow('initial-purchase', buyer.userId, { purchasedHoursAgo: 24, expiresInHours: 24 });
    await linkWallet(buyer, evmWallet());
    await periodEndsWithoutAnEvent(buyer.userId);
    expect((await run()).lapsesTold).toBeGreaterThanOrEqual(1);
    await db.sql('select public.forget_user($1::uuid)', [buyer.userId]);
    await run();
    const got = ofUser(receiver.received, buyer.userId);
    expect(got.map((r) => [r.type, (r.data as { reason?: string }).reason])).toEqual([
      ['entitlement.granted', undefined], ['wallet.linked', undefined], ['entitlement.revoked', 'expired'], ['customer.deleted', undefined]]);
  });

  it('on the schedule, a lapse the scan tells is sent at once, even while another user\'s attempt hangs', async () => {
    const restore = setEnv({ EVENTS_WEBHOOK_ENDPOINTS: JSON.stringify([{ url: receiver.url, secret: signingSecret }]) });
    try {
      forgetRegisteredEndpoints();
      const [buyer, stuck] = [await testUser(), await testUser()];
      await deliverNow('initial-purchase', buyer.userId, { purchasedHoursAgo: 24, expiresInHours: 24 });
      await run(); // the grant goes out
      // Another user's event is under way, and its attempt hangs (until the 15 s timeout): the run
      // is waiting on it when the period ends and the turn's scan writes the revoke.
      receiver.setBehaviour((_req, body) => (body.includes(stuck.userId) ? 'hang' : 'ok'));
      await linkWallet(stuck, evmWallet());
      const first = moveOutboxAfterWrite();
      await receiver.waitFor((received) => ofUser(received, stuck.userId).length === 1, 20_000);
      await periodEndsWithoutAnEvent(buyer.userId);
      const turn = moveOutboxOnSchedule();
      // Well within the stuck attempt's timeout: the run claims what the scan wrote without waiting for it.
      await receiver.waitFor((received) => ofUser(received, buyer.userId).length === 2, 10_000);
      expect(typesOf(ofUser(receiver.received, buyer.userId))).toEqual(['entitlement.granted', 'entitlement.revoked']);
      await receiver.close(); // the stuck attempt fails now
      await Promise.all([first, turn]);
    } finally {
      restore();
    }
  });

  /** As if no server had named `id` since `ago` (an SQL interval). */
  const unnamedSince = (id: string, ago: string) => db.sql(`update public.outbound_endpoints set named_at = now() - $2::interval where id = $1`, [id, ago]);

  it('on the schedule, with no receiver left in the settings: keeps writing deliveries for the one registered before until no server has named it for 3 days, then retires it', async () => {
    // (beforeEach registered this test's receiver; these settings name none.)
    const restore = setEnv({ EVENTS_WEBHOOK_ENDPOINTS: undefined, EVENTS_WEBHOOK_URL: undefined, EVENTS_WEBHOOK_SECRET: undefined });
    const deliveriesOf = async (userId: string) => (await db.sql<{ n: number }>('select count(*)::int as n from public.outbound_deliveries where user_id = $1', [userId]))[0]!.n;
    try {
      const [endpoint] = endpoints;
      forgetRegisteredEndpoints();
      await unnamedSince(endpoint!.id, '71 hours');
      await moveOutboxOnSchedule();
      expect(await db.sql('select retired_at is null as active from public.outbound_endpoints where id = $1', [endpoint!.id])).toEqual([{ active: true }]);
      const before = await testUser();
      await linkWallet(before, evmWallet());
      expect(await deliveriesOf(before.userId)).toBe(1);

      await unnamedSince(endpoint!.id, '73 hours');
      await moveOutboxOnSchedule();
      expect(await db.sql('select retired_at is not null as retired from public.outbound_endpoints where id = $1', [endpoint!.id])).toEqual([{ retired: true }]);
      const after = await testUser();
      await linkWallet(after, evmWallet());
      expect(await deliveriesOf(after.userId)).toBe(0);
    } finally {
      restore();
    }
  });

  it('a receiver another server registered (a preview, a rollout) keeps every event while that server names it, though this one\'s runs name others; the runs keep naming their own', async () => {
    // A preview or rollout with other settings sharing the database registered a second receiver.
    const other = await startWebhookReceiver({ secrets: signingSecret });
    const elsewhere = endpointsFor([other], [signingSecret])[0]!;
    const registerElsewhere = () => db.sql('select public.outbound_add_endpoints($1::jsonb)', [JSON.stringify([{ id: elsewhere.id, types: null }])]);
    const active = async () => (await db.sql<{ id: string }>('select id from public.outbound_endpoints where retired_at is null order by id')).map((row) => row.id);
    const restore = setEnv({ EVENTS_WEBHOOK_ENDPOINTS: JSON.stringify([{ url: receiver.url, secret: signingSecret }]), EVENTS_WEBHOOK_URL: undefined, EVENTS_WEBHOOK_SECRET: undefined });
    try {
      await registerElsewhere();
      // This server's schedule and a run asked over HTTP name only its own receiver...
      await moveOutboxOnSchedule();
      await runOutboundEvents({ budgetMs: 5_000 });
      expect(await active()).toEqual([endpoints[0]!.id, elsewhere.id].sort());
      // ...and each event written meanwhile has a delivery for both: the other server sends its own.
      const user = await testUser();
      await linkWallet(user, evmWallet());
      expect((await db.sql<{ endpoint_id: string }>('select endpoint_id from public.outbound_deliveries where user_id = $1 order by endpoint_id', [user.userId])).map((row) => row.endpoint_id))
        .toEqual([endpoints[0]!.id, elsewhere.id].sort());
      expect(other.received).toEqual([]);

      // Its own receiver, unnamed for days by a database shared with servers that never name it,
      // is named again by this server's schedule (at most hourly a write), so it is never retired.
      await unnamedSince(endpoints[0]!.id, '2 hours');
      await moveOutboxOnSchedule();
      expect(await db.sql('select named_at > now() - interval \'1 minute\' as named from public.outbound_endpoints where id = $1', [endpoints[0]!.id])).toEqual([{ named: true }]);

      // The other server gone for more than 3 days: the next run retires its receiver.
      await unnamedSince(elsewhere.id, '4 days');
      await moveOutboxOnSchedule();
      expect(await active()).toEqual([endpoints[0]!.id]);
    } finally {
      restore();
      await other.close();
    }
  });

  it('retries an endpoint that answers 500, holding the user\'s later events behind the failed one, then sends them in order under the same ids', async () => {
    const user = await testUser();
    receiver.setBehaviour('fail500');
    await linkWallet(user, evmWallet());
    await linkWallet(user, evmWallet());
    expect((await run()).endpoints[0]).toMatchObject({ delivered: 0, retried: 1 });
    const [failed] = await db.sql<{ attempts: number; last_error: string; later: boolean }>(
      "select attempts, last_error, next_attempt_at > now() + interval '10 seconds' as later from public.outbound_deliveries where user_id = $1 and sequence = 1", [user.userId]);
    expect(failed).toEqual({ attempts: 1, last_error: expect.stringContaining('500'), later: true });
    await run(); // not due yet: nothing sent
    expect(ofUser(receiver.received, user.userId)).toHaveLength(1);

    receiver.setBehaviour('ok');
    await retriesDue();
    await run();
    const got = ofUser(receiver.received, user.userId);
    expect(got.map((r) => [(r.data as { sequence: number }).sequence, r.behaviour])).toEqual([[1, 'fail500'], [1, 'ok'], [2, 'ok']]);
    expect(got[0]!.id).toBe(got[1]!.id); // the receiver's idempotency key is stable across retries
    expect(got[0]!.body).toBe(got[1]!.body);
    // The endpoint's last failure is still the failed attempt (its time and number), not the one that delivered.
    const [{ status }] = await db.sql<{ status: { endpoints: { id: string; last_failure: { at: string; attempts: number; error: string } | null }[] } }>(
      'select public.outbound_status() as status');
    const [delivery] = await db.sql<{ failed_at: string; delivered_at: string }>(
      "select to_jsonb(last_failed_at) #>> '{}' as failed_at, to_jsonb(delivered_at) #>> '{}' as delivered_at from public.outbound_deliveries where user_id = $1 and sequence = 1", [user.userId]);
    const lastFailure = status.endpoints.find((endpoint) => endpoint.id === endpoints[0]!.id)!.last_failure!;
    expect({ attempts: lastFailure.attempts, error: lastFailure.error, at: Date.parse(lastFailure.at) }).toEqual({ attempts: 1, error: expect.stringContaining('500'), at: Date.parse(delivery!.failed_at) });
    expect(Date.parse(delivery!.failed_at)).toBeLessThan(Date.parse(delivery!.delivered_at));
  });

  it('counts a hang, a redirect and a 2xx that outlasts the timeout as failures, and sends again until answered in time', async () => {
    const user = await testUser();
    await linkWallet(user, evmWallet());
    for (const behaviour of ['hang', 'redirect', 'slow2xx'] as const) {
      receiver.setBehaviour(behaviour);
      await retriesDue();
      expect((await run({ timeoutMs: 300 })).endpoints[0], behaviour).toMatchObject({ delivered: 0, retried: 1 });
    }
    const errors = await db.sql<{ last_error: string }>('select last_error from public.outbound_deliveries where user_id = $1', [user.userId]);
    expect(errors[0]!.last_error).toMatch(/^HTTP 200, but the answer did not complete/); // the last failure, the slow 2xx
    receiver.setBehaviour('ok');
    await retriesDue();
    await run();
    const got = ofUser(receiver.received, user.userId);
    expect(got.map((r) => r.behaviour)).toEqual(['hang', 'redirect', 'slow2xx', 'ok']);
    expect(new Set(got.map((r) => r.id)).size).toBe(1);
  });

  it('ends a run within its budget: an attempt gets at most the time left as its timeout, and none starts with less than 5 s left', async () => {
    const user = await testUser();
    await linkWallet(user, evmWallet());
    receiver.setBehaviour('hang');
    await retriesDue();
    // Less than LEAST_ATTEMPT_MS left from the start: nothing is attempted, and the run says it is not done.
    expect(await runOutboundEvents({ budgetMs: 4_000, endpoints, timeoutMs: 15_000 })).toMatchObject({ done: false, endpoints: [{ delivered: 0, retried: 0 }] });
    // A 10 s run with 15 s attempts: the hanging attempt is cut at the run's end, not 15 s in.
    expect((await runOutboundEvents({ budgetMs: 10_000, endpoints, timeoutMs: 15_000 })).endpoints[0]).toMatchObject({ delivered: 0, retried: 1 });
    const [failed] = await db.sql<{ last_error: string }>('select last_error from public.outbound_deliveries where user_id = $1', [user.userId]);
    const timeoutMs = Number(/^no answer within (\d+) ms$/.exec(failed!.last_error)?.[1]);
    expect(timeoutMs).toBeGreaterThanOrEqual(LEAST_ATTEMPT_MS);
    expect(timeoutMs).toBeLessThanOrEqual(10_000);
    receiver.setBehaviour('ok');
    await retriesDue();
    await run();
    expect(ofUser(receiver.received, user.userId).map((r) => r.behaviour)).toEqual(['hang', 'ok']);
  });

  // (One engine: what it checks is the run's clock, not the database.)
  it.runIf(kind === DATABASE_KINDS[0])('gives an attempt of a run after a write its whole 15 s, even one that starts attempts for 10 s only', async () => {
    const restore = setEnv({ EVENTS_WEBHOOK_ENDPOINTS: JSON.stringify([{ url: receiver.url, secret: signingSecret }]) });
    try {
      forgetRegisteredEndpoints();
      await moveOutboxAfterWrite(); // registers it
      const user = await testUser();
      receiver.setBehaviour('hang');
      await linkWallet(user, evmWallet());
      await moveOutboxAfterWrite(); // as the schedule's run and a write's after() do
      const [failed] = await db.sql<{ last_error: string }>('select last_error from public.outbound_deliveries where user_id = $1', [user.userId]);
      expect(failed!.last_error).toBe(`no answer within ${DELIVERY_TIMEOUT_MS} ms`);
    } finally {
      restore();
    }
  });

  // (One engine, as above.)
  it.runIf(kind === DATABASE_KINDS[0])('after a write past a run\'s 10 s of starting attempts, while its attempt hangs, sends that write\'s event in the same run', async () => {
    const restore = setEnv({ EVENTS_WEBHOOK_ENDPOINTS: JSON.stringify([{ url: receiver.url, secret: signingSecret }]) });
    try {
      forgetRegisteredEndpoints();
      await moveOutboxAfterWrite(); // registers it
      const [stuck, later] = [await testUser(), await testUser()];
      receiver.setBehaviour((_req, body) => (body.includes(stuck.userId) ? 'hang' : 'ok'));
      await linkWallet(stuck, evmWallet());
      const first = moveOutboxAfterWrite(); // its attempt hangs until its 15 s timeout
      await receiver.waitFor((received) => ofUser(received, stuck.userId).length === 1, 20_000);
      // Past the 10 s in which the run starts attempts (the time itself is the condition here).
      await new Promise((resolve) => setTimeout(resolve, 10_500));
      await linkWallet(later, evmWallet());
      void moveOutboxAfterWrite(); // joins the run under way, whose stuck attempt still hangs
      await receiver.waitFor((received) => ofUser(received, later.userId).length === 1, 4_000);
      await receiver.close(); // the stuck attempt fails now, to be sent again later
      await first;
    } finally {
      restore();
    }
  });

  it('after a write whose request began 21 s ago (a long sweep), starts no attempt: less than 5 s is left of the 25 s after its start', async () => {
    const restore = setEnv({ EVENTS_WEBHOOK_ENDPOINTS: JSON.stringify([{ url: receiver.url, secret: signingSecret }]) });
    try {
      forgetRegisteredEndpoints();
      await moveOutboxAfterWrite(); // registers it
      const user = await testUser();
      await linkWallet(user, evmWallet());
      await moveOutboxAfterWrite({ startedAt: performance.now() - 21_000 });
      const [waiting] = await db.sql<{ attempts: number; state: string }>('select attempts, state from public.outbound_deliveries where user_id = $1', [user.userId]);
      expect(waiting).toEqual({ attempts: 0, state: 'pending' });
      await moveOutboxAfterWrite({ startedAt: performance.now() }); // the next write's
      expect(ofUser(receiver.received, user.userId).map((r) => r.behaviour)).toEqual(['ok']);
    } finally {
      restore();
    }
  });

  it('keeps a slow endpoint from holding up another: each has its own queue', async () => {
    const [fastSecret, slowSecret] = [secret(), secret()];
    const [fast, slow] = [await startWebhookReceiver({ secrets: fastSecret }), await startWebhookReceiver({ secrets: slowSecret, behaviour: () => 'hang' })];
    try {
      const both = endpointsFor([fast, slow], [fastSecret, slowSecret]);
      forgetRegisteredEndpoints();
      await run({ only: both });
      const user = await testUser();
      await linkWallet(user, evmWallet());
      await linkWallet(user, evmWallet());
      const report = await run({ only: both, timeoutMs: 500 });
      expect(report.endpoints).toEqual([
        { id: both[0]!.id, delivered: 2, retried: 0, dead: 0 },
        { id: both[1]!.id, delivered: 0, retried: 1, dead: 0 },
      ]);
      expect(ofUser(fast.received, user.userId).map((r) => (r.data as { sequence: number }).sequence)).toEqual([1, 2]);
    } finally {
      await fast.close();
      await slow.close();
    }
  });

  it('keeps one user\'s hanging attempt from holding up another user\'s events at the same endpoint', async () => {
    const [stuck, other] = [await testUser(), await testUser()];
    receiver.setBehaviour((_req, body) => (body.includes(stuck.userId) ? 'hang' : 'ok'));
    await linkWallet(stuck, evmWallet());
    await linkWallet(other, evmWallet());
    await linkWallet(other, evmWallet());
    // The stuck attempt lasts until the receiver lets go; the other user's second event, claimed
    // once their first is settled, arrives meanwhile.
    const running = run({ timeoutMs: 120_000 });
    await receiver.waitFor((received) => ofUser(received, other.userId).length === 2, 20_000);
    expect(ofUser(receiver.received, stuck.userId).map((r) => r.behaviour)).toEqual(['hang']);
    await receiver.close(); // the stuck attempt fails now, to be sent again later
    expect((await running).endpoints[0]).toMatchObject({ delivered: 2, retried: 1 });
  });

  it('after a write, sends the events written while another user\'s attempt hangs, without waiting for it to end', async () => {
    const restore = setEnv({ EVENTS_WEBHOOK_ENDPOINTS: JSON.stringify([{ url: receiver.url, secret: signingSecret }]) });
    try {
      forgetRegisteredEndpoints();
      await moveOutboxAfterWrite(); // registers it
      const [stuck, other] = [await testUser(), await testUser()];
      receiver.setBehaviour((_req, body) => (body.includes(stuck.userId) ? 'hang' : 'ok'));
      await linkWallet(stuck, evmWallet());
      const first = moveOutboxAfterWrite(); // the first write's after(): its attempt hangs (until its 15 s timeout)
      await receiver.waitFor((received) => ofUser(received, stuck.userId).length === 1, 20_000);
      await linkWallet(other, evmWallet());
      void moveOutboxAfterWrite(); // the second write's, while the stuck attempt is under way in the same run
      // Well within the stuck attempt's timeout: the run claims the new event without waiting for it.
      await receiver.waitFor((received) => ofUser(received, other.userId).length === 1, 10_000);
      expect(ofUser(receiver.received, stuck.userId).map((r) => r.behaviour)).toEqual(['hang']);
      await receiver.close(); // the stuck attempt fails now, to be sent again later
      await first;
    } finally {
      restore();
    }
  });

  it('after a write, sends another user\'s new event while more users\' retries hang than half the attempts an endpoint has under way', async () => {
    const restore = setEnv({ EVENTS_WEBHOOK_ENDPOINTS: JSON.stringify([{ url: receiver.url, secret: signingSecret }]) });
    try {
      forgetRegisteredEndpoints();
      await moveOutboxAfterWrite(); // registers it
      const stuck = await Promise.all(Array.from({ length: IN_FLIGHT_LIMITS.retries + 10 }, () => testUser()));
      const stuckIds = stuck.map((user) => user.userId);
      const isStuck = (body: string) => stuckIds.some((id) => body.includes(id));
      for (const user of stuck) await linkWallet(user, evmWallet());
      // Their first attempts fail; their retries, once due, hang (each until its 15 s timeout).
      receiver.setBehaviour((_req, body) => (isStuck(body) ? 'fail500' : 'ok'));
      await runOutboundEvents({ budgetMs: 20_000, endpoints, timeoutMs: 5_000 });
      await retriesDue();
      receiver.setBehaviour((_req, body) => (isStuck(body) ? 'hang' : 'ok'));
      const hanging = () => receiver.received.filter((r) => r.behaviour === 'hang').length;
      const first = moveOutboxAfterWrite();
      await receiver.waitFor(() => hanging() === IN_FLIGHT_LIMITS.retries, 20_000);
      const other = await testUser();
      await linkWallet(other, evmWallet());
      void moveOutboxAfterWrite(); // the write's own run: it joins the one under way
      // Well within the hanging retries' timeout: the other half of the attempts is the new events'.
      await receiver.waitFor((received) => ofUser(received, other.userId).length === 1, 10_000);
      expect(hanging()).toBe(IN_FLIGHT_LIMITS.retries); // the other ten retries wait their turn
      await receiver.close(); // the hanging attempts fail now, to be sent again later
      await first;
    } finally {
      restore();
    }
  });

  it('after a write, keeps a hanging endpoint from holding up another endpoint\'s next events', async () => {
    const [fastSecret, slowSecret] = [secret(), secret()];
    const [fast, slow] = [await startWebhookReceiver({ secrets: fastSecret }), await startWebhookReceiver({ secrets: slowSecret, behaviour: () => 'hang' })];
    const restore = setEnv({ EVENTS_WEBHOOK_ENDPOINTS: JSON.stringify([{ url: fast.url, secret: fastSecret }, { url: slow.url, secret: slowSecret }]) });
    try {
      forgetRegisteredEndpoints();
      await moveOutboxAfterWrite(); // registers both
      const user = await testUser();
      await linkWallet(user, evmWallet());
      const first = moveOutboxAfterWrite(); // the first write's after(): its attempt at the slow endpoint hangs (15 s)
      await fast.waitFor((received) => ofUser(received, user.userId).length === 1, 20_000);
      await linkWallet(user, evmWallet());
      void moveOutboxAfterWrite(); // the second write's, while the slow attempt is under way
      // Well within the slow attempt's timeout: the fast endpoint's run does not wait for it.
      await fast.waitFor((received) => ofUser(received, user.userId).length === 2, 10_000);
      await slow.close();
      await first;
    } finally {
      restore();
      await fast.close();
      await slow.close();
    }
  });

  it('after a write that noted no Supabase user, starts no run (the events due wait for the next write that did)', async () => {
    const restore = setEnv({ EVENTS_WEBHOOK_ENDPOINTS: JSON.stringify([{ url: receiver.url, secret: signingSecret }]) });
    try {
      forgetRegisteredEndpoints();
      await moveOutboxAfterWrite(); // registers it
      const user = await testUser();
      await linkWallet(user, evmWallet()); // its event is due now
      await moveOutboxAfterWrite({ usersNoted: false }); // a custom id's webhook, say: nothing for a receiver
      expect(ofUser(receiver.received, user.userId)).toEqual([]);
      await moveOutboxAfterWrite({ usersNoted: true });
      expect(typesOf(ofUser(receiver.received, user.userId))).toEqual(['wallet.linked']);
    } finally {
      restore();
    }
  });

  it('sends what was leased to an attempt that never settled (the process died) once the lease runs out', async () => {
    const user = await testUser();
    await linkWallet(user, evmWallet());
    // An attempt under way in a process that then died: claimed, never settled.
    await db.sql('select public.outbound_claim($1, 1000, 60)', [endpoints[0]!.id]);
    await run();
    expect(ofUser(receiver.received, user.userId)).toHaveLength(0);
    await db.sql("update public.outbound_deliveries set leased_until = now() - interval '1 second' where user_id = $1", [user.userId]);
    await db.sql(QUEUES_DUE_NOW);
    await run();
    expect(typesOf(ofUser(receiver.received, user.userId))).toEqual(['wallet.linked']);
  });

  it('keeps a receiver that is down for a day waiting, then sends its backlog in order', async () => {
    const user = await testUser();
    const port = new URL(receiver.url).port;
    await receiver.close(); // down: connections refused
    await linkWallet(user, evmWallet());
    await linkWallet(user, evmWallet());
    expect((await run()).endpoints[0]).toMatchObject({ delivered: 0, retried: 1 });
    // A day of retries has passed: still waiting, not dead.
    await db.sql("update public.outbound_deliveries set first_attempt_at = now() - interval '1 day', next_attempt_at = now() - interval '1 second' where user_id = $1 and state = 'pending' and first_attempt_at is not null", [user.userId]);
    await db.sql(QUEUES_DUE_NOW);
    expect((await run()).endpoints[0]).toMatchObject({ delivered: 0, retried: 1, dead: 0 });
    const [waiting] = await db.sql<{ last_error: string }>('select last_error from public.outbound_deliveries where user_id = $1 and sequence = 1', [user.userId]);
    expect(waiting!.last_error).not.toBe('');
    // Back, on the same address.
    receiver = await startWebhookReceiver({ secrets: signingSecret, port: Number(port) });
    await retriesDue();
    await run();
    expect(ofUser(receiver.received, user.userId).map((r) => [(r.data as { sequence: number }).sequence, r.verified])).toEqual([[1, true], [2, true]]);
  });

  it('dead-letters an event after about three days of failures, and the user\'s next event goes on', async () => {
    const user = await testUser();
    receiver.setBehaviour('fail500');
    await linkWallet(user, evmWallet());
    await run();
    // Three days of retries have passed.
    await db.sql("update public.outbound_deliveries set first_attempt_at = now() - interval '3 days 1 minute', next_attempt_at = now() - interval '1 second' where user_id = $1", [user.userId]);
    await db.sql(QUEUES_DUE_NOW);
    expect((await run()).endpoints[0]).toMatchObject({ dead: 1 });
    receiver.setBehaviour('ok');
    await linkWallet(user, evmWallet());
    await run();
    expect(ofUser(receiver.received, user.userId).map((r) => [(r.data as { sequence: number }).sequence, r.behaviour])).toEqual([[1, 'fail500'], [1, 'fail500'], [2, 'ok']]);
    const [dead] = await db.sql<{ state: string }>('select state from public.outbound_deliveries where user_id = $1 and sequence = 1', [user.userId]);
    expect(dead!.state).toBe('dead');
  });
});
