import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { contentDigest } from '../../lib/billing/webhook-body.ts';
import { dbCallCount } from '../../lib/db/index.ts';
import { DEV_WEBHOOK_SECRETS } from '../../lib/config.ts';
import { DATABASE_KINDS, describeOn, suiteDatabase, type TestDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { callRoute } from '../support/http.ts';
import { FIXTURE_NAMES, fixture, loadFixture } from './fixtures.ts';
import { billingEvent, billingRoute, day, deliver, entitlementsOf, eventRow, transfer } from './support.ts';

const DEV_SECRET = DEV_WEBHOOK_SECRETS.subscription;
const countEvents = async (db: TestDatabase) => Number((await db.sql<{ n: string }>('select count(*) as n from public.billing_events'))[0]!.n);
const countEventsOf = async (db: TestDatabase, user: string) => Number((await db.sql<{ n: string }>('select count(*) as n from public.billing_events where app_user_id = $1', [user]))[0]!.n);

describe.each(DATABASE_KINDS)('the corpus through the webhook on %s', (kind) => {
  const db = suiteDatabase(kind);

  it.each(FIXTURE_NAMES)('%s: 200 { received: true }, recorded once, 200 again when repeated', async (name) => {
    const body = loadFixture(name);
    for (let attempt = 0; attempt < 2; attempt++) {
      const response = await deliver(body);
      expect(response.status).toBe(200);
      expect(response.headers.get('content-type')).toBe('application/json');
      expect(response.text).toBe('{"received":true}');
    }
    expect(await eventRow(db, body.event.id)).toMatchObject({ count: 1, type: body.event.type, app_user_id: body.event.app_user_id ?? null });
  });

  // Well-formed but extreme: still 200 and recorded, never a 5xx (btree entries have a size limit).
  const wide = (n: number) => '\u{1D4C1}'.repeat(n);
  const extremes: { name: string; event: Record<string, unknown>; outcome: string; pro?: boolean }[] = [
    { name: 'an app_user_id of 10,000 four-byte characters', event: { app_user_id: wide(10_000), aliases: [], original_app_user_id: null }, outcome: 'ignored' },
    { name: 'an entitlement id of 300 four-byte characters beside "pro"', event: { entitlement_ids: [wide(300), 'pro'] }, outcome: 'applied', pro: true },
    { name: 'an app_user_id and entitlement id of 256 four-byte characters each', event: { app_user_id: wide(256), entitlement_ids: [wide(256)] }, outcome: 'applied' },
    { name: 'those, and a product id of 10,000 four-byte characters', event: { app_user_id: wide(256), entitlement_ids: [wide(256)], product_id: wide(10_000) }, outcome: 'applied' },
    { name: 'a product id of 10,000 four-byte characters', event: { product_id: wide(10_000) }, outcome: 'applied', pro: true },
    { name: '1,000 anonymous aliases', event: { aliases: Array.from({ length: 1000 }, (_, i) => `$RCAnonymousID:${i}`) }, outcome: 'applied', pro: true },
    { name: 'a type of 100,000 characters', event: { type: 'X'.repeat(100_000) }, outcome: 'ignored' },
    { name: 'an event id of 256 four-byte characters', event: { id: wide(256) }, outcome: 'applied', pro: true },
  ];
  it.each(extremes)('$name: 200, recorded ($outcome)', async ({ event, outcome, pro }) => {
    const user = `extreme-${kind}-${Math.random()}`;
    const body = billingEvent('initial-purchase', user, { at: 0.001 }, event);
    expect(await deliver(body)).toMatchObject({ status: 200, body: { received: true } });
    expect(await eventRow(db, body.event.id)).toMatchObject({ count: 1, outcome });
    if (pro) expect((await entitlementsOf(db, user, new Date(day(1)))).map((view) => view.id)).toEqual(['pro']);
  });

  it('a TRANSFER from 20,000 ids (a 400 KB body): 200, stored, the first ids\' purchases moved (it held the database until it gave up, every retry)', async () => {
    const [first, to] = [`transfer-many-${kind}-${randomUUID()}`, `transfer-to-${kind}-${randomUUID()}`];
    expect((await deliver(billingEvent('initial-purchase', first, { at: 0.001, purchased: 0, expires: 30 }))).status).toBe(200);
    const from = [first, ...Array.from({ length: 19_999 }, (_, index) => `transfer-from-${kind}-${index}-${'x'.repeat(8)}`)];
    const moved = transfer(from, [to], 1);
    expect(await deliver(moved)).toMatchObject({ status: 200, body: { received: true } });
    expect(await eventRow(db, moved.event.id)).toMatchObject({ count: 1, outcome: 'applied' });
    expect((await entitlementsOf(db, to, new Date(day(2)))).map((view) => [view.id, view.active])).toEqual([['pro', true]]);
  });

  // The embedded database gets each call's values written into the statement as literals
  // (lib/db/sql-call.ts): ids that read as SQL must arrive as the text they are, changing nothing else.
  it('takes ids that read as SQL (quotes, backslashes, $1, a statement\'s end) as the text they are', async () => {
    const tail = `${kind}-${randomUUID()}`;
    const user = `o'brien\\'); drop table public.billing_events; -- $1 $$ ${tail}`;
    const id = `evt'' E'\\x' $2'); select pg_sleep(1); -- ${tail}`;
    const events = await countEvents(db);
    const body = billingEvent('initial-purchase', user, { at: 0.001 }, { id });
    expect(await deliver(body)).toMatchObject({ status: 200, body: { received: true } });
    expect(await eventRow(db, id)).toMatchObject({ count: 1, outcome: 'applied', app_user_id: user });
    expect(await countEvents(db)).toBe(events + 1);
    expect((await entitlementsOf(db, user, new Date(day(1)))).map((view) => view.id)).toEqual(['pro']);
  });
});

/**
 * Events without an id (the contract shows none) are recognised by a digest of their content for
 * RevenueCat's retry window (3 hours: retries come 5, 10, 20, 40 and 80 minutes apart): the same
 * content within it is a redelivery, after it a new event. "Hours later" is made by moving the first
 * delivery's time back, as the clock would.
 */
describe.each(DATABASE_KINDS)('events without an id on %s', (kind) => {
  const db = suiteDatabase(kind);
  const minimal = (type: string, user: string, fields: Record<string, unknown> = {}) => ({ event: { type, app_user_id: user, product_id: 'pro_monthly', entitlement_ids: ['pro'], ...fields } });
  const hoursPass = (hours: number, user: string) => db.sql(`
    update public.billing_content_keys set received_at = received_at - make_interval(hours => $1)
    where event_id in (select event_id from public.billing_events where app_user_id = $2)`, [hours, user]);
  const active = async (user: string) => (await entitlementsOf(db, user, new Date()))[0]?.active ?? false;

  it('a purchase, its expiration, then the same purchase again hours later: the re-purchase is a new event and grants again', async () => {
    const user = `repurchase-${kind}-${randomUUID()}`;
    expect((await deliver(minimal('INITIAL_PURCHASE', user))).status).toBe(200);
    expect(await active(user)).toBe(true);
    expect((await deliver(minimal('EXPIRATION', user, { expiration_reason: 'UNSUBSCRIBE' }))).status).toBe(200);
    expect(await active(user)).toBe(false);
    // RevenueCat retrying the purchase within its window: the same delivery, nothing applied again.
    expect((await deliver(minimal('INITIAL_PURCHASE', user))).status).toBe(200);
    expect(await countEventsOf(db, user)).toBe(2);
    expect(await active(user)).toBe(false);
    // Four hours on, the same content is a purchase of its own.
    await hoursPass(4, user);
    expect((await deliver(minimal('INITIAL_PURCHASE', user))).status).toBe(200);
    expect(await countEventsOf(db, user)).toBe(3);
    expect(await active(user)).toBe(true);
    const ids = (await db.sql<{ event_id: string }>('select event_id from public.billing_events where app_user_id = $1', [user])).map((row) => row.event_id);
    expect(new Set(ids).size).toBe(3);
  });

  it('an explicit id shaped like a content digest claims nothing: the event without an id whose digest it names is still applied', async () => {
    const user = `claimed-${kind}-${randomUUID()}`;
    const purchase = minimal('INITIAL_PURCHASE', user);
    const digest = contentDigest(purchase.event);
    // Sent first, with the id the digest of that purchase would make (and the forms of it an id could take).
    for (const id of [`sha256:${digest}`, `sha256:${digest}:00000000-0000-0000-0000-000000000000`]) {
      expect((await deliver(fixture('test', { id, app_user_id: `squatter-${randomUUID()}` }))).status).toBe(200);
    }
    expect((await deliver(purchase)).status).toBe(200);
    expect(await countEventsOf(db, user)).toBe(1);
    expect(await active(user)).toBe(true);
  });

  it('two deliveries of one event without an id at once: recorded once', async () => {
    const user = `together-${kind}-${randomUUID()}`;
    const answers = await Promise.all([deliver(minimal('INITIAL_PURCHASE', user)), deliver(minimal('INITIAL_PURCHASE', user))]);
    expect(answers.map((answer) => answer.status)).toEqual([200, 200]);
    expect(await countEventsOf(db, user)).toBe(1);
  });
});

describeOn('pglite')('the webhook request', () => {
  const db = suiteDatabase('pglite');

  it.each([
    { name: 'a new event', body: () => billingEvent('initial-purchase', 'calls-user', { at: 0.001 }) },
    { name: 'a TEST event', body: () => fixture('test', { id: 'calls-test' }) },
    { name: 'an unknown type', body: () => fixture('future-unknown-type', { id: 'calls-unknown' }) },
    { name: 'no app_user_id', body: () => fixture('renewal', { id: 'calls-no-user', app_user_id: undefined, aliases: undefined, original_app_user_id: undefined }) },
    { name: 'a TRANSFER', body: () => fixture('transfer', { id: 'calls-transfer' }) },
  ])('makes exactly one database call for $name, and one for its repeat', async ({ body }) => {
    const delivery = body();
    for (let attempt = 0; attempt < 2; attempt++) {
      const before = dbCallCount();
      expect((await deliver(delivery)).status).toBe(200);
      expect(dbCallCount() - before).toBe(1);
    }
  });

  // Bodies that are not what RevenueCat sends: 4xx problem+json, nothing recorded, no database call.
  const valid = JSON.stringify(loadFixture('initial-purchase'));
  const cases: { name: string; body: string; status: number; code: string; path?: string }[] = [
    { name: 'not JSON', body: '{"event": ', status: 400, code: 'invalid_json' },
    { name: 'empty', body: '', status: 400, code: 'invalid_json' },
    { name: 'a NUL character in a string', body: valid.replace('"ada@example.test"', '"ada\\u0000@example.test"'), status: 400, code: 'invalid_json' },
    { name: 'a lone surrogate in a string', body: valid.replace('"ada@example.test"', '"ada\\ud800@example.test"'), status: 400, code: 'invalid_json' },
    { name: 'a NUL character in a key', body: valid.replace('"country_code"', '"country\\u0000code"'), status: 400, code: 'invalid_json' },
    { name: 'a number too large to represent', body: valid.replace('"price":9.99', '"price":1e400'), status: 400, code: 'invalid_json' },
    { name: 'an array', body: '[]', status: 400, code: 'invalid_request', path: '(body)' },
    { name: 'no event', body: '{"api_version":"1.0"}', status: 400, code: 'invalid_request', path: 'event' },
    { name: 'event is null', body: '{"event":null}', status: 400, code: 'invalid_request', path: 'event' },
    { name: 'a numeric event id', body: '{"event":{"id":12,"type":"RENEWAL"}}', status: 400, code: 'invalid_request', path: 'event.id' },
    { name: 'an empty event id', body: '{"event":{"id":"","type":"RENEWAL"}}', status: 400, code: 'invalid_request', path: 'event.id' },
    { name: 'an event id of 257 characters', body: JSON.stringify({ event: { id: 'x'.repeat(257), type: 'RENEWAL' } }), status: 400, code: 'invalid_request', path: 'event.id' },
    { name: 'a numeric app_user_id', body: '{"event":{"id":"e1","type":"RENEWAL","app_user_id":42}}', status: 400, code: 'invalid_request', path: 'event.app_user_id' },
    { name: 'a product_id that is an object', body: '{"event":{"id":"e1","type":"RENEWAL","product_id":{}}}', status: 400, code: 'invalid_request', path: 'event.product_id' },
    { name: 'a numeric type', body: '{"event":{"id":"e1","type":7}}', status: 400, code: 'invalid_request', path: 'event.type' },
  ];
  it.each(cases)('answers $status $code to $name, and records nothing', async ({ body, status, code, path }) => {
    const events = await countEvents(db);
    const calls = dbCallCount();
    const response = await deliver(body, { 'content-type': 'application/json' });
    expect(response.status).toBe(status);
    expect(response.headers.get('content-type')).toBe('application/problem+json');
    expect(response.body).toMatchObject({ code, status });
    if (path) expect(response.body.errors.map((error: { path: string }) => error.path)).toContain(path);
    expect(dbCallCount()).toBe(calls);
    expect(await countEvents(db)).toBe(events);
  });

  // The published contract names event.type, app_user_id and product_id, and no id.
  it('takes an event the way the contract shows it (no id): 200, stored once under its content digest, its effect applied', async () => {
    const user = 'contract-shaped-user';
    const event = { type: 'NON_RENEWING_PURCHASE', app_user_id: user, product_id: 'lifetime', entitlement_ids: ['pro'], event_timestamp_ms: day(0.001), purchased_at_ms: day(0), store: 'APP_STORE', environment: 'PRODUCTION' };
    expect(await deliver({ event })).toMatchObject({ status: 200, text: '{"received":true}' });
    // The same content again, keys in another order and spaced out: a duplicate, nothing applied twice.
    const reordered = JSON.stringify({ event: Object.fromEntries(Object.entries(event).reverse()) }, null, 2);
    expect(await deliver(reordered, { 'content-type': 'application/json' })).toMatchObject({ status: 200, text: '{"received":true}' });
    const rows = await db.sql<{ event_id: string; outcome: string; body_id: string }>("select event_id, outcome, body->'event'->>'id' as body_id from public.billing_events where app_user_id = $1", [user]);
    expect(rows).toEqual([{ event_id: expect.stringMatching(/^sha256:[0-9a-f]{64}:[0-9a-f-]{36}$/), outcome: 'applied', body_id: rows[0]!.event_id }]);
    expect(await entitlementsOf(db, user, new Date(day(1)))).toMatchObject([{ id: 'pro', active: true, productId: 'lifetime' }]);
    // Other content is another event.
    expect((await deliver({ event: { ...event, product_id: 'lifetime_2' } })).status).toBe(200);
    expect(await countEventsOf(db, user)).toBe(2);
  });

  it('takes an event with no type (or a null one) as an unknown type: 200, recorded as ignored, nothing changed', async () => {
    for (const body of ['{"event":{"id":"no-type-1","app_user_id":"no-type-user"}}', '{"event":{"id":"no-type-2","type":null,"app_user_id":"no-type-user"}}']) {
      expect(await deliver(body, { 'content-type': 'application/json' })).toMatchObject({ status: 200, text: '{"received":true}' });
    }
    expect(await eventRow(db, 'no-type-1')).toMatchObject({ count: 1, outcome: 'ignored', type: '' });
    expect(await eventRow(db, 'no-type-2')).toMatchObject({ count: 1, outcome: 'ignored', type: '' });
    expect(await entitlementsOf(db, 'no-type-user', new Date(day(1)))).toEqual([]);
  });

  it('answers 415 to a body that is not sent as JSON', async () => {
    const response = await deliver(valid, { 'content-type': 'text/plain' });
    expect(response).toMatchObject({ status: 415, body: { code: 'unsupported_media_type' } });
  });

  it('answers 415 to JSON said to be in another charset than UTF-8, storing nothing; the same event in UTF-8 is then applied', async () => {
    const event = billingEvent('initial-purchase', 'charset-user', { at: 0.001 });
    const utf16 = new Uint8Array(Buffer.from(JSON.stringify(event), 'utf16le'));
    const events = await countEvents(db);
    expect(await deliver(utf16, { 'content-type': 'application/json; charset=utf-16le' })).toMatchObject({ status: 415, body: { code: 'unsupported_media_type' } });
    expect(await countEvents(db)).toBe(events);
    expect(await deliver(event)).toMatchObject({ status: 200, text: '{"received":true}' });
    expect(await countEventsOf(db, 'charset-user')).toBe(1);
    expect(await entitlementsOf(db, 'charset-user', new Date(day(1)))).toMatchObject([{ id: 'pro', active: true }]);
  });

  it('takes a body of just under 1 MB, and answers 413 above 1 MB (declared or streamed) without reading on', async () => {
    const sized = (bytes: number) => {
      const body = billingEvent('large-subscriber-attributes', 'size-user', { at: 0.001 });
      const base = JSON.stringify({ ...body, padding: '' }).length;
      return JSON.stringify({ ...body, padding: 'p'.repeat(bytes - base) });
    };
    const justUnder = sized(1024 * 1024);
    expect(Buffer.byteLength(justUnder)).toBe(1024 * 1024);
    expect((await deliver(justUnder, { 'content-type': 'application/json' })).status).toBe(200);

    const events = await countEvents(db);
    const over = sized(1024 * 1024 + 1);
    expect(await deliver(over, { 'content-type': 'application/json' })).toMatchObject({ status: 413, body: { code: 'payload_too_large' } });
    const chunked = new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode(over));
        controller.close();
      },
    });
    expect(await deliver(chunked, { 'content-type': 'application/json' })).toMatchObject({ status: 413, body: { code: 'payload_too_large' } });
    expect(await countEvents(db)).toBe(events);
  });

  // The webhook secret, as RevenueCat sends it: `Authorization: Bearer <secret>` (set in its dashboard).
  const secretCases: { name: string; authorization?: string; env?: Record<string, string | undefined>; status: number; code?: string }[] = [
    { name: 'the right secret', authorization: `Bearer ${DEV_SECRET}`, status: 200 },
    { name: 'the scheme in lower case (schemes are case-insensitive)', authorization: `bearer ${DEV_SECRET}`, status: 200 },
    { name: 'no header', status: 401, code: 'invalid_webhook_secret' },
    { name: 'a wrong secret', authorization: 'Bearer not-the-secret', status: 401, code: 'invalid_webhook_secret' },
    { name: 'the secret truncated', authorization: `Bearer ${DEV_SECRET.slice(0, -1)}`, status: 401, code: 'invalid_webhook_secret' },
    { name: 'the secret with one more character', authorization: `Bearer ${DEV_SECRET}x`, status: 401, code: 'invalid_webhook_secret' },
    { name: 'the secret in the wrong case', authorization: `Bearer ${DEV_SECRET.toUpperCase()}`, status: 401, code: 'invalid_webhook_secret' },
    { name: 'the secret without a scheme', authorization: DEV_SECRET, status: 401, code: 'invalid_webhook_secret' },
    { name: 'the Basic scheme', authorization: `Basic ${Buffer.from(`revenuecat:${DEV_SECRET}`).toString('base64')}`, status: 401, code: 'invalid_webhook_secret' },
    { name: 'the secret under the Basic scheme', authorization: `Basic ${DEV_SECRET}`, status: 401, code: 'invalid_webhook_secret' },
    { name: 'two spaces after the scheme (RFC 9110: one or more)', authorization: `Bearer  ${DEV_SECRET}`, status: 200 },
    { name: 'the header twice (joined by the client as one value)', authorization: `Bearer ${DEV_SECRET}, Bearer ${DEV_SECRET}`, status: 401, code: 'invalid_webhook_secret' },
    { name: 'an 8 KiB value', authorization: `Bearer ${'s'.repeat(8 * 1024)}`, status: 401, code: 'invalid_webhook_secret' },
    { name: 'the current secret after a rotation', authorization: 'Bearer rc-secret-new-0123456789abcdef0123', env: { SUBSCRIPTION_WEBHOOK_SECRET: 'rc-secret-new-0123456789abcdef0123', SUBSCRIPTION_WEBHOOK_SECRET_PREVIOUS: 'rc-secret-old-0123456789abcdef0123', LOCAL_DEV: '1' }, status: 200 },
    { name: 'the previous secret during a rotation', authorization: 'Bearer rc-secret-old-0123456789abcdef0123', env: { SUBSCRIPTION_WEBHOOK_SECRET: 'rc-secret-new-0123456789abcdef0123', SUBSCRIPTION_WEBHOOK_SECRET_PREVIOUS: 'rc-secret-old-0123456789abcdef0123', LOCAL_DEV: '1' }, status: 200 },
    { name: 'the dev secret once a real one is set', authorization: `Bearer ${DEV_SECRET}`, env: { SUBSCRIPTION_WEBHOOK_SECRET: 'rc-secret-new-0123456789abcdef0123', LOCAL_DEV: '1' }, status: 401, code: 'invalid_webhook_secret' },
    { name: 'the leagues secret', authorization: `Bearer ${DEV_WEBHOOK_SECRETS.leagues}`, status: 401, code: 'invalid_webhook_secret' },
    {
      name: 'any secret when none is set outside local mode', authorization: `Bearer ${DEV_SECRET}`,
      env: { DATABASE_URL: 'postgres://app:pw@127.0.0.1:9/app', SUBSCRIPTION_WEBHOOK_SECRET: undefined, SUBSCRIPTION_WEBHOOK_SECRET_PREVIOUS: undefined },
      status: 503, code: 'service_misconfigured',
    },
  ];
  it.each(secretCases)('$name: $status', async ({ authorization, env, status, code }) => {
    const restore = setEnv({ SUBSCRIPTION_WEBHOOK_SECRET: undefined, SUBSCRIPTION_WEBHOOK_SECRET_PREVIOUS: undefined, DATABASE_URL: undefined, LOCAL_DEV: undefined, ...env });
    try {
      const body = billingEvent('initial-purchase', 'secret-user', { at: 0.001 });
      const calls = dbCallCount();
      const response = await callRoute(billingRoute, { method: 'POST', headers: authorization === undefined ? {} : { authorization }, body });
      expect(response.status).toBe(status);
      if (status === 200) {
        expect(response.body).toEqual({ received: true });
        return;
      }
      expect(response.body).toMatchObject({ code, status });
      expect(response.headers.get('content-type')).toBe('application/problem+json');
      if (status === 401) expect(response.headers.get('www-authenticate')).toMatch(/^Bearer /);
      if (status === 503) expect(response.headers.get('retry-after')).toBeTruthy();
      // Refused before the body is read: nothing recorded, no database call, no secret echoed.
      expect(dbCallCount()).toBe(calls);
      expect(await eventRow(db, body.event.id)).toBeUndefined();
      expect(response.text).not.toContain(DEV_SECRET);
    } finally {
      restore();
    }
  });
});
