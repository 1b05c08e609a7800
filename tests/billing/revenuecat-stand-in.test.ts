import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as sweepRoute from '../../app/api/cron/billing-sync/route.ts';
import * as standInRoute from '../../app/api/dev/revenuecat/v1/subscribers/[appUserId]/route.ts';
import * as userSyncRoute from '../../app/api/me/billing/sync/route.ts';
import { ConfigError, describeConfig, loadConfig, REVENUECAT_STAND_IN_KEY } from '../../lib/config.ts';
import { DATABASE_KINDS, describeOn, migratedEmbeddedDbDir, suiteDatabase, type TestDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { callRoute } from '../support/http.ts';
import { startRouteServer, type RouteServer } from '../support/route-server.ts';
import { testUser } from '../support/tokens.ts';
import { DAY_MS } from './fixtures.ts';
import { apple, billingEvent, deliver, entitlementsOf } from './support.ts';

/**
 * RevenueCat in local mode: with REVENUECAT_STAND_IN=1 and no RevenueCat key, the service answers
 * RevenueCat's REST API v1 itself (GET /api/dev/revenuecat/v1/subscribers/{id}) from what the local
 * webhooks said, or from a scripted customer, so "Refresh purchases", the sweep and
 * `npm run billing:sync` run end to end over real HTTP. Never in a deployment: refused by the
 * configuration, and the route is a 404 anywhere but local mode with the stand-in on.
 */
const CRON_SECRET = 'cron-secret-for-stand-in-tests-0123456789';

describe('the stand-in in the configuration', () => {
  const deployable = {
    SUPABASE_JWT_SECRET: 'x'.repeat(40), SUBSCRIPTION_WEBHOOK_SECRET: 'deployed-secret-0123456789abcdef', LEAGUES_WEBHOOK_SECRET: 'leagues-secret-0123456789abcdef01234',
    APP_ORIGIN: 'https://app.example.com', DATABASE_URL: 'postgres://db.example.com/app',
  };

  it('in local mode: RevenueCat is this service\'s own /api/dev/revenuecat, with the stand-in\'s key', () => {
    const config = loadConfig({ REVENUECAT_STAND_IN: '1' });
    expect(config.local).toBe(true);
    expect(config.revenuecat).toMatchObject({ standIn: true, apiKey: REVENUECAT_STAND_IN_KEY, apiUrl: 'http://localhost:3000/api/dev/revenuecat' });
    expect(loadConfig({ REVENUECAT_STAND_IN: '1', APP_ORIGIN: 'http://127.0.0.1:4100' }).revenuecat?.apiUrl).toBe('http://127.0.0.1:4100/api/dev/revenuecat');
    // The startup log names the stand-in's absolute URL: where the service calls it.
    expect(describeConfig(config).revenuecat).toBe('local stand-in (http://localhost:3000/api/dev/revenuecat) (sync after gaps; 1/s, users at most half, 20 refreshes a day each)');
    // Local mode's origin is the port Next listens on (it sets PORT), so the stand-in is found on another port too.
    expect(loadConfig({ REVENUECAT_STAND_IN: '1', PORT: '3001' })).toMatchObject({ appOrigin: 'http://localhost:3001', revenuecat: { apiUrl: 'http://localhost:3001/api/dev/revenuecat' } });
    expect(loadConfig({ REVENUECAT_STAND_IN: '1', PORT: '3001', APP_ORIGIN: 'http://127.0.0.1:4100' }).appOrigin).toBe('http://127.0.0.1:4100');
    // PORT is Next's, not the operator's: one that is no port number is set aside, not a configuration error.
    for (const port of ['abc', '0', '70000', '30 01', '-1']) expect(loadConfig({ REVENUECAT_STAND_IN: '1', PORT: port }).appOrigin).toBe('http://localhost:3000');
    expect(loadConfig({}).revenuecat).toBeUndefined();
  });

  it.each([
    { name: 'on Vercel', env: { ...deployable, VERCEL: '1', REVENUECAT_STAND_IN: '1' }, message: /REVENUECAT_STAND_IN=1 is for local mode only/ },
    { name: 'outside local mode', env: { ...deployable, REVENUECAT_STAND_IN: '1' }, message: /REVENUECAT_STAND_IN=1 is for local mode only/ },
    // LOCAL_DEV=1 itself is refused beside a real RevenueCat account's key.
    { name: 'beside a RevenueCat key', env: { LOCAL_DEV: '1', REVENUECAT_STAND_IN: '1', REVENUECAT_SECRET_API_KEY: 'sk_real' }, message: /^LOCAL_DEV=1 is refused beside a real deployment's settings: REVENUECAT_SECRET_API_KEY/ },
    { name: 'beside a RevenueCat key for this machine', env: { LOCAL_DEV: '1', REVENUECAT_STAND_IN: '1', REVENUECAT_SECRET_API_KEY: 'sk_test', REVENUECAT_API_URL: 'http://127.0.0.1:9' }, message: /remove REVENUECAT_SECRET_API_KEY, REVENUECAT_API_URL, or the stand-in/ },
    { name: 'beside a RevenueCat URL', env: { REVENUECAT_STAND_IN: '1', REVENUECAT_API_URL: 'http://127.0.0.1:9' }, message: /remove REVENUECAT_API_URL, or the stand-in/ },
  ])('is refused $name, naming the setting', ({ env, message }) => {
    expect(() => loadConfig(env)).toThrow(ConfigError);
    expect(() => loadConfig(env)).toThrow(message);
  });
});

describe.each(DATABASE_KINDS)('the stand-in over real HTTP on %s', (kind) => {
  const db = suiteDatabase(kind);
  let server: RouteServer;
  let dataDir: string;
  let restoreEnv: () => void;

  beforeAll(async () => {
    server = await startRouteServer([[/^\/api\/dev\/revenuecat\/v1\/subscribers\/(?<appUserId>[^/]+)$/, standInRoute]]);
    dataDir = mkdtempSync(path.join(tmpdir(), 'account-link-stand-in-'));
    restoreEnv = setEnv({
      REVENUECAT_STAND_IN: '1', APP_ORIGIN: server.url, EMBEDDED_DB_DIR: migratedEmbeddedDbDir(dataDir), LOCAL_DEV: '1', CRON_SECRET,
      REVENUECAT_SECRET_API_KEY: undefined, REVENUECAT_API_URL: undefined, REVENUECAT_REQUESTS_PER_SECOND: '100', BILLING_SYNC_AFTER: 'none',
    });
  });
  afterAll(async () => {
    restoreEnv();
    await server.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const ask = (appUserId: string, key = REVENUECAT_STAND_IN_KEY) => fetch(`${server.url}/api/dev/revenuecat/v1/subscribers/${encodeURIComponent(appUserId)}`, { headers: { authorization: `Bearer ${key}` } });
  const now = Date.now();
  const at = (days: number) => now + days * DAY_MS;
  const event = (name: string, user: string, fields: Record<string, unknown>) => billingEvent(name, user, { at: 0 }, { ...apple('3000', '3000'), ...fields });

  it('answers as v1 does: 401 with RevenueCat\'s code for another key, 201 for an id it does not know, 200 with the customer for one it does', async () => {
    const user = randomUUID();
    expect((await deliver(event('initial-purchase', user, { event_timestamp_ms: at(-1), purchased_at_ms: at(-1), expiration_at_ms: at(29) }))).status).toBe(200);
    const refused = await ask(user, 'sk_not_the_stand_in');
    expect({ status: refused.status, body: await refused.json() }).toEqual({ status: 401, body: { code: 7225, message: 'Invalid API key.' } });
    const unknown = await ask(`nobody-${randomUUID()}`);
    expect(unknown.status).toBe(201);
    expect((await unknown.json()).subscriber).toMatchObject({ entitlements: {}, subscriptions: {}, non_subscriptions: {} });
    const known = await ask(user);
    expect(known.status).toBe(200);
    const body = await known.json();
    expect(body.request_date_ms).toBeGreaterThanOrEqual(now);
    expect(body.subscriber.entitlements).toEqual({ pro: { product_identifier: 'com.example.pro.monthly', purchase_date: iso(at(-1)), expires_date: iso(at(29)), grace_period_expires_date: null } });
    expect(body.subscriber.subscriptions['com.example.pro.monthly']).toMatchObject({
      expires_date: iso(at(29)), purchase_date: iso(at(-1)), store: 'app_store', is_sandbox: false, unsubscribe_detected_at: null, billing_issues_detected_at: null, refunded_at: null,
    });
  });

  it.each([
    { name: 'an active, renewing subscription', events: (u: string) => [event('initial-purchase', u, { event_timestamp_ms: at(-1), purchased_at_ms: at(-1), expiration_at_ms: at(29) })], expect: { active: true, status: 'active', willRenew: true } },
    {
      name: 'a cancelled one', expect: { active: true, status: 'cancelled_active', willRenew: false },
      events: (u: string) => [
        event('initial-purchase', u, { event_timestamp_ms: at(-2), purchased_at_ms: at(-2), expiration_at_ms: at(28) }),
        event('cancellation-unsubscribe', u, { event_timestamp_ms: at(-1), purchased_at_ms: at(-2), expiration_at_ms: at(28), cancel_reason: 'UNSUBSCRIBE' }),
      ],
    },
    {
      name: 'one in its billing grace period', expect: { active: true, status: 'grace', willRenew: false },
      events: (u: string) => [
        event('initial-purchase', u, { event_timestamp_ms: at(-31), purchased_at_ms: at(-31), expiration_at_ms: at(-1) }),
        event('billing-issue-grace', u, { event_timestamp_ms: at(-1), purchased_at_ms: at(-31), expiration_at_ms: at(-1), grace_period_expiration_at_ms: at(15) }),
      ],
    },
    {
      name: 'a refunded one', expect: { active: false, status: 'refunded' },
      events: (u: string) => [
        event('initial-purchase', u, { event_timestamp_ms: at(-3), purchased_at_ms: at(-3), expiration_at_ms: at(27) }),
        event('cancellation-customer-support', u, { event_timestamp_ms: at(-1), purchased_at_ms: at(-3), expiration_at_ms: at(-1), cancel_reason: 'CUSTOMER_SUPPORT', price: -9.99 }),
      ],
    },
    {
      name: 'an expired one', expect: { active: false, status: 'expired' },
      events: (u: string) => [
        event('initial-purchase', u, { event_timestamp_ms: at(-40), purchased_at_ms: at(-40), expiration_at_ms: at(-10) }),
        event('expiration', u, { event_timestamp_ms: at(-10), purchased_at_ms: at(-40), expiration_at_ms: at(-10), expiration_reason: 'UNSUBSCRIBE' }),
      ],
    },
    {
      // Two purchases of one product: v1 keys subscriptions by product and shows the latest.
      name: 'one bought again after it expired', expect: { active: true, status: 'active', willRenew: true, expiresAt: iso(at(28)) },
      events: (u: string) => [
        event('initial-purchase', u, { event_timestamp_ms: at(-40), purchased_at_ms: at(-40), expiration_at_ms: at(-10) }),
        event('expiration', u, { event_timestamp_ms: at(-10), purchased_at_ms: at(-40), expiration_at_ms: at(-10), expiration_reason: 'UNSUBSCRIBE' }),
        event('initial-purchase', u, { ...apple('3100', '3100'), event_timestamp_ms: at(-2), purchased_at_ms: at(-2), expiration_at_ms: at(28) }),
      ],
    },
    {
      name: 'a lifetime purchase', expect: { active: true, status: 'active', willRenew: false, expiresAt: null },
      events: (u: string) => [billingEvent('non-renewing-purchase', u, { at: 0 }, { event_timestamp_ms: at(-1), purchased_at_ms: at(-1), expiration_at_ms: null })],
    },
  ])('"Refresh purchases" for $name: the stand-in says what the webhooks said, and the refresh confirms it', async ({ events, expect: expected }) => {
    const user = await testUser();
    for (const body of events(user.userId)) expect((await deliver(body)).status).toBe(200);
    const before = await entitlementsOf(db, user.userId, new Date());
    expect(before).toEqual([expect.objectContaining({ id: 'pro', syncedAt: null, ...expected })]);
    const refresh = await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } });
    expect({ status: refresh.status, text: refresh.text }).toMatchObject({ status: 200 });
    const after = await entitlementsOf(db, user.userId, new Date());
    const withoutSyncedAt = (views: typeof after) => views.map((view) => ({ ...view, syncedAt: undefined }));
    expect(withoutSyncedAt(after)).toEqual(withoutSyncedAt(before));
    expect(after[0]!.syncedAt).not.toBeNull();
  });

  it.each([
    { name: 'renewing when refunded', unsubscribed: false, after: { status: 'active', willRenew: true } },
    { name: 'turned off before the refund', unsubscribed: true, after: { status: 'cancelled_active', willRenew: false } },
  ])('a refresh after a refund leaves renewal as it was ($name): a REFUND_REVERSED then gives what the webhooks alone give', async ({ unsubscribed, after }) => {
    // (A refund need not cancel the subscription: "refunds can be given without cancelling a
    // subscription", event types and fields. The record says which: refunded_at, and an unsubscribe or not.)
    const user = await testUser();
    const events = [
      event('initial-purchase', user.userId, { event_timestamp_ms: at(-3), purchased_at_ms: at(-3), expiration_at_ms: at(27) }),
      ...(unsubscribed ? [event('cancellation-unsubscribe', user.userId, { event_timestamp_ms: at(-2.5), purchased_at_ms: at(-3), expiration_at_ms: at(27), cancel_reason: 'UNSUBSCRIBE' })] : []),
      event('cancellation-customer-support', user.userId, { event_timestamp_ms: at(-2), purchased_at_ms: at(-3), expiration_at_ms: at(-2), cancel_reason: 'CUSTOMER_SUPPORT', price: -9.99 }),
    ];
    for (const body of events) expect((await deliver(body)).status).toBe(200);
    const rowOf = async () => (await db.sql<{ status: string; will_renew: boolean }>('select status, will_renew from public.entitlements where app_user_id = $1', [user.userId]))[0];
    const before = await rowOf();
    expect(before).toEqual({ status: 'refunded', will_renew: !unsubscribed });
    const refresh = await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } });
    expect(refresh.status).toBe(200);
    expect(await rowOf()).toEqual(before);
    // The reversal comes after the refresh (the record's time is the refresh's).
    const reversed = event('refund-reversed', user.userId, { event_timestamp_ms: Date.now() + 1_000, purchased_at_ms: at(-3), expiration_at_ms: at(27) });
    expect((await deliver(reversed)).status).toBe(200);
    expect(await entitlementsOf(db, user.userId, new Date())).toEqual([expect.objectContaining({ id: 'pro', active: true, ...after, expiresAt: iso(at(27)) })]);
  });

  it('answers a scripted customer as it is: a purchase no webhook told of appears after a refresh', async () => {
    const user = await testUser();
    writeFileSync(path.join(dataDir, 'revenuecat-stand-in.json'), JSON.stringify({
      [user.userId]: {
        entitlements: { pro: { product_identifier: 'com.example.pro.yearly', purchase_date: iso(at(-1)), expires_date: iso(at(364)) } },
        subscriptions: { 'com.example.pro.yearly': { purchase_date: iso(at(-1)), expires_date: iso(at(364)), store: 'play_store', is_sandbox: false, period_type: 'normal' } },
      },
    }));
    expect(await entitlementsOf(db, user.userId, new Date())).toEqual([]);
    const refresh = await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } });
    expect(refresh.status).toBe(200);
    expect(refresh.body.entitlements).toEqual([expect.objectContaining({ id: 'pro', active: true, productId: 'com.example.pro.yearly', store: 'PLAY_STORE', expiresAt: iso(at(364)) })]);
  });

  it('serves the sweep: a marked subscriber is synced from the stand-in', async () => {
    const user = randomUUID();
    expect((await deliver(event('initial-purchase', user, { event_timestamp_ms: at(-1), purchased_at_ms: at(-1), expiration_at_ms: at(29) }))).status).toBe(200);
    await db.sql(`select public.billing_mark_sync(array[$1], 'refund')`, [user]);
    const sweep = await callRoute(sweepRoute, { headers: { authorization: `Bearer ${CRON_SECRET}` } });
    expect(sweep.status).toBe(200);
    expect(sweep.body.synced).toBeGreaterThanOrEqual(1);
    expect(await db.sql('select app_user_id from public.billing_sync_queue where app_user_id = $1', [user])).toEqual([]);
    expect((await entitlementsOf(db, user, new Date()))[0]!.syncedAt).not.toBeNull();
  });

  it('is a 404 when the stand-in is off, and when the configuration is a deployment\'s', async () => {
    const user = randomUUID();
    for (const env of [{ REVENUECAT_STAND_IN: undefined }, { VERCEL: '1', LOCAL_DEV: undefined }]) {
      const restore = setEnv(env);
      try {
        const response = await callRoute(standInRoute, { params: { appUserId: user }, headers: { authorization: `Bearer ${REVENUECAT_STAND_IN_KEY}` } });
        expect({ status: response.status, code: response.body.code }).toEqual({ status: 404, code: 'not_found' });
      } finally {
        restore();
      }
    }
  });
});

describeOn('postgres')('npm run billing:sync against the stand-in', () => {
  const db: TestDatabase = suiteDatabase('postgres');
  let server: RouteServer;
  beforeAll(async () => {
    server = await startRouteServer([[/^\/api\/dev\/revenuecat\/v1\/subscribers\/(?<appUserId>[^/]+)$/, standInRoute]]);
  });
  afterAll(() => server.close());

  it('syncs a subscriber from what the webhooks said, without a RevenueCat account', async () => {
    const restore = setEnv({ REVENUECAT_STAND_IN: '1', APP_ORIGIN: server.url, LOCAL_DEV: '1', REVENUECAT_SECRET_API_KEY: undefined, REVENUECAT_API_URL: undefined });
    try {
      const user = randomUUID();
      const now = Date.now();
      expect((await deliver(billingEvent('initial-purchase', user, { at: 0 }, { event_timestamp_ms: now - DAY_MS, purchased_at_ms: now - DAY_MS, expiration_at_ms: now + 29 * DAY_MS }))).status).toBe(200);
      const { stdout } = await promisify(execFile)(process.execPath, ['scripts/billing-sync.ts', '--user', user], {
        env: { ...process.env, DATABASE_URL: db.url!, LOCAL_DEV: '1', LOG_LEVEL: 'silent', SUPABASE_URL: '', VERCEL: '', REVENUECAT_STAND_IN: '1', APP_ORIGIN: server.url, REVENUECAT_SECRET_API_KEY: '', REVENUECAT_API_URL: '' },
        timeout: 60_000,
      });
      // What the webhooks said, confirmed: nothing changes but when it was last confirmed.
      expect(JSON.parse(stdout)).toMatchObject({ appUserId: user, outcome: 'stale', entitlements: [{ id: 'pro', active: true, expiresAt: new Date(now + 29 * DAY_MS).toISOString(), syncedAt: expect.any(String) }] });
    } finally {
      restore();
    }
  });
});

const iso = (ms: number) => new Date(ms).toISOString();
