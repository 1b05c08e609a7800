import { randomBytes, randomUUID } from 'node:crypto';
import { lookup } from 'node:dns/promises';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { hostname } from 'node:os';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import * as eventsRoute from '../../app/api/admin/events/route.ts';
import * as deadLettersRoute from '../../app/api/admin/events/dead-letters/route.ts';
import * as deliverRoute from '../../app/api/admin/events/deliver/route.ts';
import * as endpointsRoute from '../../app/api/admin/events/endpoints/route.ts';
import * as replayRoute from '../../app/api/admin/events/replay/route.ts';
import * as statusRoute from '../../app/api/admin/status/route.ts';
import { resetOperatorSecretThrottle } from '../../lib/auth/operator-secret.ts';
import { nonPublicRange } from '../../lib/events/addresses.ts';
import { forgetRegisteredEndpoints, runOutboundEvents } from '../../lib/events/delivery.ts';
import { describeStatus } from '../../lib/operations/status.ts';
import { checkEventReceiverAddresses } from '../../lib/startup.ts';
import { deadLettersResponseSchema, eventOutboxSchema, eventsRunResponseSchema, replayResponseSchema, serviceStatusSchema, writtenEventsResponseSchema } from '../../lib/openapi/responses.ts';
import { linkWallet } from '../support/account-actions.ts';
import { DATABASE_KINDS, suiteDatabase, type TestDatabase } from '../support/databases.ts';
import { QUEUES_DUE_NOW } from '../support/outbox.ts';
import { DEPLOYMENT_SETTINGS, setEnv } from '../support/env.ts';
import { callRoute } from '../support/http.ts';
import { testUser } from '../support/tokens.ts';
import { evmWallet } from '../wallets/wallets.ts';

/**
 * The operator's side of the outbox, through the real route modules: each endpoint's backlog and
 * last failure after a receiver (a real local HTTP server) answers 500, the dead letters once the
 * retries ran out, a replay by id and by range that the next run sends under the same webhook-id,
 * the events as written with their exact bodies; bad input refused with problem+json and nothing
 * changed. Both engines.
 */
const ADMIN_SECRET = 'admin-secret-for-event-operate-tests-0123456789';
const SIGNING_SECRET = `whsec_${randomBytes(32).toString('base64')}`;
const admin = { authorization: `Bearer ${ADMIN_SECRET}` };

interface Received { headers: IncomingHttpHeaders; body: string }

/** A receiver answering `status` (switchable), recording what it got. */
async function startReceiver() {
  const received: Received[] = [];
  let status = 500;
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      received.push({ headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
      res.writeHead(status, { 'content-type': 'text/plain' }).end(status === 500 ? 'receiver is down' : 'ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    received,
    answer: (next: number) => { status = next; },
    close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }),
  };
}

const run = () => runOutboundEvents({ budgetMs: 10_000, lapses: false });

describe.each(DATABASE_KINDS)('the outbox operated on %s', (kind) => {
  const db: TestDatabase = suiteDatabase(kind);
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  let restoreEnv: () => void;
  // The query stands for a token a receiver may take in its URL: never shown.
  const hookUrl = () => `${receiver.url}/hooks/account?token=query-token-not-to-show`;
  beforeAll(async () => {
    receiver = await startReceiver();
    restoreEnv = setEnv({ ADMIN_API_SECRET: ADMIN_SECRET, LOCAL_DEV: '1', EVENTS_WEBHOOK_URL: hookUrl(), EVENTS_WEBHOOK_SECRET: SIGNING_SECRET, EVENTS_WEBHOOK_ENDPOINTS: undefined });
    forgetRegisteredEndpoints();
    await run(); // registers the endpoint: events written from now on have a delivery to it
  });
  afterAll(async () => {
    restoreEnv();
    forgetRegisteredEndpoints();
    resetOperatorSecretThrottle();
    await receiver.close();
  });
  beforeEach(() => receiver.answer(500));

  const endpoints = async () => {
    const response = await callRoute(endpointsRoute, { headers: admin });
    expect(response.status, response.text).toBe(200);
    expect(eventOutboxSchema.safeParse(response.body).error).toBeUndefined();
    expect(response.text).not.toContain('query-token-not-to-show');
    expect(response.text).not.toContain(SIGNING_SECRET);
    return response.body as { endpoints: Array<Record<string, unknown>>; lapsesDue: number; events: number };
  };
  const sentOf = (eventId: string) => receiver.received.filter((request) => request.headers['webhook-id'] === `evt_${eventId}`);
  const deliveries = () => db.sql('select endpoint_id, event_id, state, attempts, next_attempt_at, last_error from public.outbound_deliveries order by event_id');

  /** A user links a wallet: one wallet.linked event. Its id and stored time. */
  async function walletEvent(): Promise<{ id: string; createdAt: Date }> {
    const user = await testUser();
    await linkWallet(user, evmWallet());
    const [event] = await db.sql<{ id: string; created_at: Date }>("select id, created_at from public.outbound_events where user_id = $1 and type = 'wallet.linked'", [user.userId]);
    return { id: event!.id, createdAt: new Date(event!.created_at) };
  }

  it('GET endpoints: the backlog and the last failure after a receiver answered 500; origin and path only; one these settings do not name shown as such, with when it is retired', async () => {
    const event = await walletEvent();
    const report = await run();
    expect(report.endpoints).toEqual([expect.objectContaining({ retried: 1, delivered: 0, dead: 0 })]);
    const body = await endpoints();
    expect(body.endpoints).toEqual([expect.objectContaining({
      url: `${receiver.url}/hooks/account`, setting: 'EVENTS_WEBHOOK_URL, entry 1', types: null, state: 'active', pending: 1, dead: 0, lastDeliveredAt: null,
      oldestPendingAt: event.createdAt.toISOString(),
      lastFailure: { eventId: event.id, at: expect.any(String), error: 'HTTP 500: receiver is down', attempts: 1 },
    })]);
    // The next attempt is the failed one's retry (its own time), not now.
    const [{ next_attempt_at: retryAt }] = await db.sql<{ next_attempt_at: Date }>('select next_attempt_at from public.outbound_deliveries where event_id = $1', [event.id]);
    expect(new Date(retryAt).getTime()).toBeGreaterThan(Date.now());
    expect(body.endpoints[0]!.nextAttemptAt).toBe(new Date(retryAt).toISOString());
    expect(body.events).toBeGreaterThanOrEqual(1);

    // The settings name another receiver: the first one is not named here (no URL: these settings do
    // not have it) until 3 days after a server last named it; the new one not registered yet.
    const restore = setEnv({ EVENTS_WEBHOOK_URL: `${receiver.url}/hooks/other` });
    try {
      const moved = await endpoints();
      expect(moved.endpoints.map((endpoint) => [endpoint.url, endpoint.state, endpoint.pending])).toEqual([
        [`${receiver.url}/hooks/other`, 'pending registration', 0],
        [null, 'not named here', 1],
      ]);
      const [{ named_at: namedAt }] = await db.sql<{ named_at: Date }>('select named_at from public.outbound_endpoints');
      expect(moved.endpoints[1]!.retiresAt).toBe(new Date(new Date(namedAt).getTime() + 3 * 86_400_000).toISOString());
    } finally {
      restore();
    }
  });

  it('GET dead-letters: a delivery whose retries ran out, newest first, with its webhook-id; by endpoint; an unknown endpoint is a 404', async () => {
    const event = await walletEvent();
    await run(); // the first attempt fails (500)
    // Three days pass (the retries' span): the next failure dead-letters it.
    await db.sql("update public.outbound_deliveries set first_attempt_at = now() - interval '4 days', next_attempt_at = now() where event_id = $1", [event.id]);
    await db.sql(QUEUES_DUE_NOW);
    expect((await run()).endpoints).toEqual([expect.objectContaining({ dead: 1 })]);
    const [{ id: endpointId }] = (await endpoints()).endpoints as [{ id: string }];
    const list = await callRoute(deadLettersRoute, { headers: admin, url: `/api/admin/events/dead-letters?endpoint=${endpointId}&limit=5` });
    expect(list.status, list.text).toBe(200);
    expect(deadLettersResponseSchema.safeParse(list.body).error).toBeUndefined();
    expect(list.body.deadLetters[0]).toEqual({
      endpointId, eventId: event.id, webhookId: `evt_${event.id}`, type: 'wallet.linked', userId: expect.any(String), sequence: 1,
      createdAt: event.createdAt.toISOString(), attempts: 2, firstAttemptAt: expect.any(String), lastAttemptAt: expect.any(String), lastError: 'HTTP 500: receiver is down',
    });
    const all = await callRoute(deadLettersRoute, { headers: admin, url: '/api/admin/events/dead-letters' });
    expect(all.body.deadLetters.map((dead: { eventId: string }) => dead.eventId)).toContain(event.id);
    expect((await endpoints()).endpoints[0]).toMatchObject({ dead: 1 });

    expect(await callRoute(deadLettersRoute, { headers: admin, url: `/api/admin/events/dead-letters?endpoint=${'0'.repeat(16)}` }))
      .toMatchObject({ status: 404, body: { code: 'endpoint_not_found' } });
    for (const query of ['endpoint=not-an-id', 'limit=0', 'limit=1001', 'limit=ten', 'limit=1&limit=2', 'other=1']) {
      const refused = await callRoute(deadLettersRoute, { headers: admin, url: `/api/admin/events/dead-letters?${query}` });
      expect({ query, status: refused.status, code: refused.body?.code, type: refused.headers.get('content-type') })
        .toEqual({ query, status: 400, code: 'invalid_request', type: 'application/problem+json' });
    }
  });

  it('POST replay by id (evt_ or bare) and by range: pending again, sent by the next run with the same webhook-id, signed', async () => {
    const event = await walletEvent();
    await run(); // fails: 500
    expect(sentOf(event.id)).toHaveLength(1);

    receiver.answer(200);
    // Make it dead, so only a replay sends it again.
    await db.sql("update public.outbound_deliveries set state = 'dead' where event_id = $1", [event.id]);
    await db.sql(QUEUES_DUE_NOW);
    await run();
    expect(sentOf(event.id)).toHaveLength(1); // a dead letter is not sent again on its own
    const replayed = await callRoute(replayRoute, { method: 'POST', headers: admin, body: { eventId: `evt_${event.id.toUpperCase()}` } });
    expect(replayed.status, replayed.text).toBe(200);
    expect(replayResponseSchema.safeParse(replayed.body).error).toBeUndefined();
    expect(replayed.body).toEqual({ replayed: 1 });
    await run();
    const sent = sentOf(event.id);
    expect(sent).toHaveLength(2);
    expect(sent[1]!.body).toBe(sent[0]!.body);
    const verified = new Webhook(SIGNING_SECRET).verify(sent[1]!.body, sent[1]!.headers as Record<string, string>) as { type: string };
    expect(verified.type).toBe('wallet.linked');

    // By range: the events written in [from, to) — here exactly this one (delivered already: sent again).
    const from = event.createdAt.toISOString();
    const to = new Date(event.createdAt.getTime() + 1).toISOString();
    const [{ id: endpointId }] = (await endpoints()).endpoints as [{ id: string }];
    const byRange = await callRoute(replayRoute, { method: 'POST', headers: admin, body: { from, to, endpoint: endpointId } });
    expect(byRange).toMatchObject({ status: 200, body: { replayed: 1 } });
    await run();
    const again = sentOf(event.id);
    expect(again).toHaveLength(3);
    expect(again[2]!.body).toBe(sent[0]!.body);
  });

  it('POST replay refuses bad input with problem+json and changes nothing', async () => {
    const event = await walletEvent();
    // A user erased since: their wallet.linked still waits to go out before their customer.deleted,
    // and is never sent again.
    const erased = await testUser();
    await linkWallet(erased, evmWallet());
    await db.sql('select public.forget_user($1::uuid)', [erased.userId]);
    const [erasedEvent] = await db.sql<{ id: string }>("select id from public.outbound_events where user_id = $1 and type = 'wallet.linked'", [erased.userId]);
    await run();
    const before = await deliveries();
    const now = new Date();
    const cases: Array<{ name: string; body: unknown; status: number; code: string }> = [
      { name: 'no event and no range', body: {}, status: 400, code: 'invalid_request' },
      { name: 'a range whose end is before its start', body: { from: now.toISOString(), to: new Date(now.getTime() - 60_000).toISOString() }, status: 400, code: 'invalid_request' },
      { name: 'an empty range', body: { from: now.toISOString(), to: now.toISOString() }, status: 400, code: 'invalid_request' },
      { name: 'a range without its end', body: { from: now.toISOString() }, status: 400, code: 'invalid_request' },
      { name: 'a time that is not ISO 8601', body: { from: 'yesterday', to: now.toISOString() }, status: 400, code: 'invalid_request' },
      // Well-formed, but not a time the database holds (it has no year 0): the caller's 400 saying so.
      { name: 'a time in the year 0', body: { from: '0000-01-01T00:00:00Z', to: now.toISOString() }, status: 400, code: 'invalid_request' },
      { name: 'a time past the year 9999 once its offset is applied', body: { from: now.toISOString(), to: '9999-12-31T23:59:59-15:59' }, status: 400, code: 'invalid_request' },
      { name: 'an event and a range', body: { eventId: event.id, from: new Date(0).toISOString(), to: now.toISOString() }, status: 400, code: 'invalid_request' },
      { name: 'a malformed event id', body: { eventId: 'evt_123' }, status: 400, code: 'invalid_request' },
      { name: 'an unknown member', body: { eventId: event.id, force: true }, status: 400, code: 'invalid_request' },
      { name: 'an unknown event', body: { eventId: randomUUID() }, status: 404, code: 'event_not_found' },
      { name: 'an event of a user erased since', body: { eventId: erasedEvent!.id }, status: 404, code: 'event_not_found' },
      { name: 'an unknown endpoint', body: { eventId: event.id, endpoint: 'f'.repeat(16) }, status: 404, code: 'endpoint_not_found' },
      { name: 'not JSON', body: '{"eventId":', status: 400, code: 'invalid_json' },
    ];
    for (const { name, body, status, code } of cases) {
      const response = await callRoute(replayRoute, { method: 'POST', headers: { ...admin, 'content-type': 'application/json' }, body });
      expect({ name, status: response.status, code: response.body?.code, type: response.headers.get('content-type') })
        .toEqual({ name, status, code, type: 'application/problem+json' });
    }
    expect(await deliveries()).toEqual(before);
  });

  it('GET events: those written since a time, with the exact body a receiver gets; a bad query is a 400', async () => {
    const since = new Date(Date.now() - 1000).toISOString();
    const event = await walletEvent();
    receiver.answer(200);
    await run();
    const response = await callRoute(eventsRoute, { headers: admin, url: `/api/admin/events?since=${encodeURIComponent(since)}&limit=1000` });
    expect(response.status, response.text).toBe(200);
    expect(writtenEventsResponseSchema.safeParse(response.body).error).toBeUndefined();
    const listed = response.body.events.find((written: { id: string }) => written.id === event.id);
    const delivered = sentOf(event.id).at(-1)!;
    expect(listed).toEqual({ id: event.id, webhookId: `evt_${event.id}`, type: 'wallet.linked', userId: expect.any(String), sequence: 1, createdAt: event.createdAt.toISOString(), body: delivered.body });
    for (const query of ['', 'since=yesterday', `since=${encodeURIComponent(since)}&limit=0`, `since=${encodeURIComponent(since)}&after=evt_1`]) {
      expect(await callRoute(eventsRoute, { headers: admin, url: `/api/admin/events?${query}` })).toMatchObject({ status: 400, body: { code: 'invalid_request' } });
    }
    // A time the database does not hold: the query's 400 names the parameter and the bound.
    expect(await callRoute(eventsRoute, { headers: admin, url: '/api/admin/events?since=0000-01-01T00:00:00Z' }))
      .toMatchObject({ status: 400, body: { code: 'invalid_request', errors: [{ path: 'since', message: 'must not be before 1970-01-01T00:00:00Z' }] } });
  });

  it('with event settings the service refuses: GET endpoints and the status say why (never the secret) and ask for attention, instead of a 503', async () => {
    const restore = setEnv({ EVENTS_WEBHOOK_SECRET: 'my-shared-secret' });
    try {
      const body = await endpoints() as unknown as { settingsRefused: string | null; endpoints: Array<Record<string, unknown>> };
      expect(body.settingsRefused).toMatch(/^EVENTS_WEBHOOK_SECRET: secret 1 is not `whsec_`/);
      expect(body.endpoints).toEqual([expect.objectContaining({ url: null, state: 'active' })]);
      const status = await callRoute(statusRoute, { headers: admin });
      expect(status.status, status.text).toBe(200);
      expect(status.text).not.toContain('my-shared-secret');
      expect(status.body.events.settingsRefused).toBe(body.settingsRefused);
      expect(status.body.attention).toEqual(expect.arrayContaining([expect.stringContaining("The outbound events' settings are refused")]));
    } finally {
      restore();
    }
    expect((await endpoints() as unknown as { settingsRefused: string | null }).settingsRefused).toBeNull();
  });

  // (One engine: what it checks is the settings, not the database.)
  it.runIf(kind === DATABASE_KINDS[0])('outside local mode, with a receiver whose name resolves to a non-public address: refused as a literal one is, once its name is looked up', async () => {
    // This machine's own name resolves to one of its own addresses (loopback or private).
    const host = hostname();
    const addresses = await lookup(host, { all: true });
    expect(addresses.map(({ address }) => nonPublicRange(address))).not.toContain(null);
    const restore = setEnv({ ...DEPLOYMENT_SETTINGS, ADMIN_API_SECRET: ADMIN_SECRET, EVENTS_WEBHOOK_URL: `https://${host}/hooks?token=query-token-not-to-show` });
    try {
      expect((await endpoints() as unknown as { settingsRefused: string | null }).settingsRefused).toBeNull(); // not looked up yet
      await checkEventReceiverAddresses(); // as the server does as it starts
      const refused = (await endpoints() as unknown as { settingsRefused: string | null }).settingsRefused;
      expect(refused).toMatch(new RegExp(`^EVENTS_WEBHOOK_URL, entry 1: ${host.replace(/[.]/g, '\\.')} resolves to .*, not on the public internet`));
      const run = await callRoute(deliverRoute, { method: 'POST', headers: admin });
      expect({ status: run.status, code: run.body?.code, type: run.headers.get('content-type') })
        .toEqual({ status: 503, code: 'service_misconfigured', type: 'application/problem+json' });
      expect(run.text).not.toContain('query-token-not-to-show');
    } finally {
      restore();
    }
  });

  it('POST deliver: one run now, as the events cron\'s, to the server\'s receivers: a retry that came due is sent, and the answer counts it', async () => {
    const event = await walletEvent();
    await run(); // fails: 500, its retry minutes away
    receiver.answer(200);
    const early = await callRoute(deliverRoute, { method: 'POST', headers: admin });
    expect(early.status, early.text).toBe(200);
    expect(sentOf(event.id)).toHaveLength(1); // not due yet: nothing sent
    await db.sql('update public.outbound_deliveries set next_attempt_at = now() where event_id = $1', [event.id]);
    await db.sql(QUEUES_DUE_NOW);
    const response = await callRoute(deliverRoute, { method: 'POST', headers: admin });
    expect(response.status, response.text).toBe(200);
    expect(eventsRunResponseSchema.safeParse(response.body).error).toBeUndefined();
    const [{ id: endpointId }] = (await endpoints()).endpoints as [{ id: string }];
    expect(response.body).toMatchObject({ done: true, endpoints: [{ id: endpointId, delivered: 1, retried: 0, dead: 0 }] });
    expect(sentOf(event.id)).toHaveLength(2);
    expect(await db.sql('select state from public.outbound_deliveries where event_id = $1', [event.id])).toEqual([{ state: 'delivered' }]);
  });

  it('answers 401 without the admin secret, on every route, and reads nothing', async () => {
    const calls = [
      () => callRoute(endpointsRoute),
      () => callRoute(deadLettersRoute, { headers: { authorization: 'Bearer not-the-secret' } }),
      () => callRoute(eventsRoute, { url: `/api/admin/events?since=${new Date().toISOString()}` }),
      () => callRoute(replayRoute, { method: 'POST', body: { eventId: randomUUID() } }),
      () => callRoute(deliverRoute, { method: 'POST', headers: { authorization: 'Bearer not-the-secret' } }),
    ];
    for (const call of calls) expect(await call()).toMatchObject({ status: 401, body: { code: 'invalid_admin_secret' } });
    resetOperatorSecretThrottle();
  });

  it('the status shows each endpoint\'s backlog and asks for attention on a dead letter and on a backlog older than an hour', async () => {
    const event = await walletEvent();
    await run();
    await db.sql("update public.outbound_deliveries set first_attempt_at = now() - interval '4 days', next_attempt_at = now() where event_id = $1", [event.id]);
    await db.sql(QUEUES_DUE_NOW);
    await run(); // dead
    const late = await walletEvent();
    await run();
    await db.sql("update public.outbound_events set created_at = now() - interval '2 hours' where id = $1", [late.id]);
    const response = await callRoute(statusRoute, { headers: admin });
    expect(response.status, response.text).toBe(200);
    expect(serviceStatusSchema.safeParse(response.body).error).toBeUndefined();
    expect(response.text).not.toContain('query-token-not-to-show');
    const { events, attention } = response.body;
    expect(events.endpoints[0]).toMatchObject({ url: `${receiver.url}/hooks/account`, state: 'active', lastFailure: { error: 'HTTP 500: receiver is down' } });
    expect(attention).toEqual(expect.arrayContaining([
      expect.stringMatching(/^\d+ event\(s\) to endpoint [0-9a-f]{16} \(http:\/\/127\.0\.0\.1:\d+\/hooks\/account\) were dead-lettered .*`npm run events:dead-letters`.*`npm run events:replay`/),
      expect.stringMatching(/^\d+ event\(s\) wait for endpoint [0-9a-f]{16} .*, the oldest since .*; the last failure: HTTP 500: receiver is down\.$/),
    ]));
    const lines = describeStatus(response.body);
    expect(lines).toEqual(expect.arrayContaining([
      expect.stringMatching(/^Events: \d+ stored, the last at .* UTC; \d+ lapse\(s\) due$/),
      expect.stringMatching(/^ {2}[0-9a-f]{16} http:\/\/127\.0\.0\.1:\d+\/hooks\/account \[active\]: \d+ pending \(the oldest since .* UTC\), \d+ dead; last delivered .*; last failure .* UTC \(attempt \d+\): HTTP 500: receiver is down$/),
    ]));
    // Delivered, the backlog is gone, and with it its note (the dead letter stays until replayed or aged out).
    receiver.answer(200);
    await db.sql('update public.outbound_deliveries set next_attempt_at = now() where event_id = $1', [late.id]); // its retry comes due
    await db.sql(QUEUES_DUE_NOW);
    await run();
    const after = (await callRoute(statusRoute, { headers: admin })).body;
    expect(after.attention.filter((note: string) => note.includes(' wait for endpoint '))).toEqual([]);
  });

  it('the last delivery stays named after the retention deleted the delivered events (as an erasure deletes its user\'s)', async () => {
    receiver.answer(200);
    await walletEvent();
    await run();
    const [{ lastDeliveredAt }] = (await endpoints()).endpoints as [{ lastDeliveredAt: string | null }];
    expect(lastDeliveredAt).not.toBeNull();
    // The retention as if 31 days had passed: every event that waits for no endpoint goes, with its deliveries.
    await db.sql("select public.outbound_maintain(now() + interval '31 days', now() + interval '1 minute')");
    expect(await db.sql("select count(*)::int as n from public.outbound_deliveries where state = 'delivered'")).toEqual([{ n: 0 }]);
    expect((await endpoints()).endpoints).toEqual([expect.objectContaining({ lastDeliveredAt })]);
  });
});
