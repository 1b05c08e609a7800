import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import * as userSyncRoute from '../../app/api/me/billing/sync/route.ts';
import { ConfigError, loadConfig } from '../../lib/config.ts';
import { fetchV2Customer, MAX_PRODUCT_LOOKUPS, nextPageUrl, RevenueCatV2Error } from '../../lib/revenuecat/v2.ts';
import { describeOn, suiteDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { startFakeRevenueCat, v1Entitlement as ent, v1Subscription as sub, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { callRoute } from '../support/http.ts';
import { testUser } from '../support/tokens.ts';
import { day, deliver, entitlementsOf, event, flowSettings, isoDay, LIFETIME, MONTHLY } from './support.ts';

/**
 * RevenueCat REST API v2 beside v1: the stand-in answers in v2's wire format (checked here against
 * the schemas of RevenueCat's OpenAPI spec, openapi-spec/api-v2.yaml: Subscription, Purchase,
 * Product, Entitlement, the list envelope, Error), the client follows pages and names products as
 * webhooks do, a sync uses what v2 adds, and a sync whose v2 call fails is v1's alone.
 */

// The spec's schemas, as required fields and enums (additionalProperties: false where the spec says so).
const monetary = z.strictObject({ currency: z.string(), gross: z.number(), commission: z.number().optional(), tax: z.number(), proceeds: z.number() });
const entitlement = z.strictObject({
  object: z.literal('entitlement'), project_id: z.string().min(1).max(20), id: z.string().min(1), lookup_key: z.string().min(1).max(200),
  display_name: z.string().min(1), created_at: z.number().int(), products: z.unknown().optional(),
});
const list = <T extends z.ZodType>(item: T) => z.strictObject({ object: z.literal('list'), items: z.array(item), next_page: z.string().nullable(), url: z.string().max(5000) });
const environment = z.enum(['production', 'sandbox']);
const store = z.enum(['amazon', 'app_store', 'mac_app_store', 'play_store', 'promotional', 'stripe', 'rc_billing']);
const subscriptionWire = z.strictObject({
  object: z.literal('subscription'), id: z.string().min(1), customer_id: z.string().min(1), original_customer_id: z.string().min(1),
  product_id: z.string().min(1).nullable(), starts_at: z.number().int(), current_period_starts_at: z.number().int(),
  current_period_ends_at: z.number().int().nullable(), ends_at: z.number().int().nullable(), gives_access: z.boolean(), pending_payment: z.boolean(),
  auto_renewal_status: z.enum(['will_renew', 'will_not_renew', 'will_change_product', 'will_pause', 'requires_price_increase_consent', 'has_already_renewed']),
  status: z.enum(['trialing', 'active', 'expired', 'in_grace_period', 'in_billing_retry', 'paused', 'unknown', 'incomplete']),
  total_revenue_in_usd: monetary, presented_offering_id: z.string().nullable(), entitlements: list(entitlement), environment, store,
  store_subscription_identifier: z.string().min(1), ownership: z.enum(['purchased', 'family_shared']), pending_changes: z.unknown().nullable().optional(),
  country: z.string().nullable().optional(), management_url: z.string().nullable(),
});
const purchaseWire = z.strictObject({
  object: z.literal('purchase'), id: z.string().min(1), customer_id: z.string().min(1), original_customer_id: z.string().min(1), product_id: z.string().min(1),
  purchased_at: z.number().int(), revenue_in_usd: monetary, quantity: z.number().int(), status: z.enum(['owned', 'refunded']),
  presented_offering_id: z.string().nullable(), entitlements: list(entitlement), environment, store, store_purchase_identifier: z.string().min(1),
  ownership: z.enum(['purchased', 'family_shared']), country: z.string().nullable().optional(),
});
const productWire = z.strictObject({
  object: z.literal('product'), id: z.string().min(1), store_identifier: z.string().min(1),
  type: z.enum(['subscription', 'one_time', 'consumable', 'non_consumable', 'non_renewing_subscription']), subscription: z.unknown().optional(),
  one_time: z.unknown().optional(), created_at: z.number().int(), app_id: z.string().min(1), app: z.unknown().optional(), display_name: z.string().nullable(),
});
const errorWire = z.strictObject({
  object: z.literal('error'), type: z.string(), param: z.string().nullable().optional(), doc_url: z.string(), message: z.string(), retryable: z.boolean(),
  backoff_ms: z.number().nullable().optional(),
});

let revenuecat: FakeRevenueCat;
beforeAll(async () => {
  revenuecat = await startFakeRevenueCat();
});
afterAll(async () => {
  await revenuecat.close();
});

const appleLifetime = { store: 'APP_STORE', product_id: LIFETIME, transaction_id: '7000000100000042', original_transaction_id: '7000000100000042' };
const customerWithEverything = (user: string) => revenuecat.setCustomer(user, {
  entitlements: { pro: ent(LIFETIME, { purchased: day(5), expires: null }), extras: { ...ent('pro_yearly', { purchased: day(0), expires: day(365) }), product_plan_identifier: 'yearly' } },
  subscriptions: {
    [MONTHLY]: sub({ purchased: day(0), expires: day(30), transactionId: '1000' }),
    pro_yearly: { ...sub({ purchased: day(0), expires: day(365), store: 'play_store', transactionId: 'GPA.42' }), product_plan_identifier: 'yearly' },
  },
  non_subscriptions: { [LIFETIME]: [{ id: 'rc_42', is_sandbox: false, purchase_date: new Date(day(5)).toISOString(), store: 'app_store', store_transaction_id: appleLifetime.transaction_id }] },
  productEntitlements: { [MONTHLY]: ['pro'], 'pro_yearly:yearly': ['pro', 'extras'], [LIFETIME]: ['pro'] },
});
const get = async (path: string, key = revenuecat.v2ApiKey) => {
  const response = await fetch(`${revenuecat.url}${path}`, { headers: { authorization: `Bearer ${key}` } });
  return { status: response.status, body: await response.json() };
};

describe('the RevenueCat stand-in speaks REST v2 as its OpenAPI spec says', () => {
  it('lists subscriptions and purchases, pages them, names products, and answers errors in its Error shape', async () => {
    const user = randomUUID();
    customerWithEverything(user);
    revenuecat.setClock(day(10));
    const base = `/v2/projects/${revenuecat.projectId}`;
    const subscriptions = await get(`${base}/customers/${user}/subscriptions`);
    expect(subscriptions.status).toBe(200);
    expect(list(subscriptionWire).parse(subscriptions.body).items).toHaveLength(2);
    const purchases = await get(`${base}/customers/${user}/purchases`);
    expect(list(purchaseWire).parse(purchases.body).items).toEqual([expect.objectContaining({ status: 'owned', store_purchase_identifier: appleLifetime.transaction_id })]);
    const product = await get(`${base}/products/${purchases.body.items[0].product_id}`);
    expect(productWire.parse(product.body)).toMatchObject({ store_identifier: LIFETIME });

    revenuecat.setV2PageSize(1);
    try {
      const first = list(subscriptionWire).parse((await get(`${base}/customers/${user}/subscriptions`)).body);
      expect(first.items).toHaveLength(1);
      const second = list(subscriptionWire).parse((await get(first.next_page!)).body);
      expect([first.items[0]!.id, second.items[0]!.id]).toEqual(subscriptions.body.items.map((item: { id: string }) => item.id));
      expect(second.next_page).toBeNull();
    } finally {
      revenuecat.setV2PageSize(20);
    }

    for (const [path, key, status] of [
      [`${base}/customers/${user}/subscriptions`, revenuecat.apiKey, 401],
      [`/v2/projects/proj_other/customers/${user}/subscriptions`, revenuecat.v2ApiKey, 404],
      [`${base}/customers/${randomUUID()}/purchases`, revenuecat.v2ApiKey, 404],
    ] as const) {
      const answer = await get(path, key);
      expect(answer.status).toBe(status);
      errorWire.parse(answer.body);
    }
    revenuecat.setClock(undefined);
  });
});

describe('the REST v2 client', () => {
  const options = () => ({ apiUrl: revenuecat.url, apiKey: revenuecat.v2ApiKey, projectId: revenuecat.projectId, timeoutMs: 2000 });

  it('reads every page and names each product by its store identifier, with every entitlement it grants', async () => {
    const user = randomUUID();
    customerWithEverything(user);
    revenuecat.setV2PageSize(1);
    try {
      const customer = await fetchV2Customer(user, options());
      expect(customer.subscriptions.map((item) => [item.productId, item.store, item.environment, item.entitlementIds])).toEqual([
        [MONTHLY, 'APP_STORE', 'PRODUCTION', ['pro']],
        ['pro_yearly:yearly', 'PLAY_STORE', 'PRODUCTION', ['pro', 'extras']],
      ]);
      expect(customer.purchases).toEqual([expect.objectContaining({ productId: LIFETIME, status: 'owned', entitlementIds: ['pro'], entitlementsComplete: true })]);
    } finally {
      revenuecat.setV2PageSize(20);
    }
  });

  it('fails with RevenueCatV2Error on a refused key or a failing API, naming no key', async () => {
    const user = randomUUID();
    customerWithEverything(user);
    const refused = await fetchV2Customer(user, { ...options(), apiKey: revenuecat.apiKey }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(RevenueCatV2Error);
    expect((refused as Error).message).toMatch(/401.*REVENUECAT_V2_SECRET_API_KEY/);
    expect((refused as Error).message).not.toContain(revenuecat.apiKey);
    revenuecat.failV2(503);
    try {
      await expect(fetchV2Customer(user, options())).rejects.toBeInstanceOf(RevenueCatV2Error);
    } finally {
      revenuecat.failV2(undefined);
    }
  });
});

describe('REST v2 settings', () => {
  // A RevenueCat key is a real secret: local mode is asked for, so these load without a database
  // (beside a RevenueCat on this machine: LOCAL_DEV=1 is refused beside RevenueCat itself).
  const base = { REVENUECAT_SECRET_API_KEY: 'sk_v1', REVENUECAT_API_URL: 'http://127.0.0.1:9', LOCAL_DEV: '1' };
  it('takes a v2 key and a project id together, beside a v1 key', () => {
    expect(loadConfig({ ...base, REVENUECAT_V2_SECRET_API_KEY: 'sk_v2', REVENUECAT_PROJECT_ID: 'proj1ab2c3d4' }).revenuecat?.v2).toEqual({ apiKey: 'sk_v2', projectId: 'proj1ab2c3d4', deleteOnErase: false });
    expect(loadConfig(base).revenuecat?.v2).toBeUndefined();
  });
  it('takes v2 alone: the whole record is read from v2 (docs/sync.md)', () => {
    expect(loadConfig({ LOCAL_DEV: '1', REVENUECAT_API_URL: 'http://127.0.0.1:9', REVENUECAT_V2_SECRET_API_KEY: 'sk_v2', REVENUECAT_PROJECT_ID: 'proj1ab2c3d4' }).revenuecat)
      .toMatchObject({ apiKey: null, v2: { apiKey: 'sk_v2', projectId: 'proj1ab2c3d4' } });
  });
  it('refuses one without the other, and a project id that is not one, naming variables, never values', () => {
    for (const env of [
      { ...base, REVENUECAT_V2_SECRET_API_KEY: 'sk_v2_secret' },
      { ...base, REVENUECAT_PROJECT_ID: 'proj1ab2c3d4' },
      { LOCAL_DEV: '1', REVENUECAT_V2_SECRET_API_KEY: 'sk_v2_secret' },
      { ...base, REVENUECAT_V2_SECRET_API_KEY: 'sk_v2_secret', REVENUECAT_PROJECT_ID: 'proj/../x' },
    ]) {
      let error: unknown;
      try {
        loadConfig(env);
      } catch (caught) {
        error = caught;
      }
      expect(error).toBeInstanceOf(ConfigError);
      expect((error as Error).message).toMatch(/REVENUECAT_(V2_SECRET_API_KEY|PROJECT_ID)/);
      expect((error as Error).message).not.toContain('sk_v2_secret');
    }
  });
});

// Found by an outside review: a next_page of `/v2/../..` left the API's v2 path (the check read the
// text, and fetch normalized it), so an answer could send the v2 key to any path of that origin.
describe('where the REST v2 client follows next_page', () => {
  const api = { apiUrl: 'https://api.revenuecat.com', projectId: 'proj1ab2c3d4' };
  const own = '/v2/projects/proj1ab2c3d4/customers/u1/subscriptions?starting_after=sub1';

  it('follows a page of the same project\'s part of v2, as a URL on the API\'s origin', () => {
    expect(nextPageUrl(own, api).href).toBe(`https://api.revenuecat.com${own}`);
    // Under REVENUECAT_API_URL's own path (a proxy), as the client's first request is.
    expect(nextPageUrl(own, { ...api, apiUrl: 'https://proxy.example/rc' }).href).toBe(`https://proxy.example/rc${own}`);
  });

  it.each([
    '/v2/../v1/subscribers/victim', '/v2/..', '/v2/projects/proj1ab2c3d4/../../v1/subscribers/victim', '/v2/%2e%2e/v1/subscribers/victim',
    '/v2/projects/proj1ab2c3d4/..%2f..%2f..%2fv1', '/v2/projects/proj1ab2c3d4/%2E%2E/other/customers/u1/subscriptions', '/v2\\..\\v1\\subscribers',
    '/v2/projects/proj_other/customers/u1/subscriptions', '/v2/projects/proj1ab2c3d4x/customers', 'https://evil.example/v2/projects/proj1ab2c3d4/x',
    '//evil.example/v2/projects/proj1ab2c3d4/x', '/v2@evil.example/projects/proj1ab2c3d4/x', 'v2/projects/proj1ab2c3d4/x', '',
  ])('refuses %j: not followed, whatever normalization makes of it', (hostile) => {
    expect(() => nextPageUrl(hostile, api)).toThrow(RevenueCatV2Error);
    expect(() => nextPageUrl(hostile, { ...api, apiUrl: 'https://proxy.example/rc' })).toThrow(RevenueCatV2Error);
  });

  it('sends nothing outside v2 when the API answers a hostile next_page: the v2 key never reaches v1', async () => {
    const user = randomUUID();
    customerWithEverything(user);
    const v1Before = revenuecat.requests.length;
    const v2Before = revenuecat.v2Requests.length;
    revenuecat.setV2NextPage(`/v2/../v1/subscribers/${user}`);
    try {
      const failure = await fetchV2Customer(user, { apiUrl: revenuecat.url, apiKey: revenuecat.v2ApiKey, projectId: revenuecat.projectId, timeoutMs: 2000 }).catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(RevenueCatV2Error);
      expect((failure as Error).message).toMatch(/next_page outside/);
    } finally {
      revenuecat.setV2NextPage(undefined);
    }
    expect(revenuecat.requests.slice(v1Before)).toEqual([]);
    expect(revenuecat.v2Requests.slice(v2Before).map((request) => request.path)).toEqual([`/v2/projects/${revenuecat.projectId}/customers/${user}/subscriptions`]);
  });
});

describeOn('pglite')('a sync with REST v2, on pglite', () => {
  const db = suiteDatabase('pglite');
  let restoreEnv: () => void;
  beforeAll(() => {
    restoreEnv = setEnv({ ...flowSettings(revenuecat), REVENUECAT_V2_SECRET_API_KEY: revenuecat.v2ApiKey, REVENUECAT_PROJECT_ID: revenuecat.projectId });
  });
  afterAll(() => {
    revenuecat.setClock(undefined);
    restoreEnv();
  });

  async function refresh(userId: string) {
    const user = await testUser({ userId });
    await db.sql(`update public.billing_sync_requests set requested_at = requested_at - interval '1 minute' where app_user_id = $1`, [userId]);
    const response = await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } });
    expect(response.status).toBe(200);
  }

  it('grants from the subscriptions v1 shows under no entitlement of theirs, and keeps what v2 said for a rebuild', async () => {
    const user = randomUUID();
    customerWithEverything(user);
    revenuecat.setClock(day(10));
    await refresh(user);
    const views = await entitlementsOf(db, user, new Date(day(11)));
    expect(views.map((view) => view.id)).toEqual(['extras', 'pro']);
    expect(views.find((view) => view.id === 'extras')).toMatchObject({ active: true, productId: 'pro_yearly:yearly', expiresAt: isoDay(365) });
    expect(views.find((view) => view.id === 'pro')!.sources.map((source) => source.productId).sort()).toEqual([LIFETIME, MONTHLY, 'pro_yearly:yearly'].sort());
    const [stored] = await db.sql<{ body: { v2?: { subscriptions: unknown[] } } }>(`select body from public.billing_events where type = 'SYNC' and app_user_id = $1`, [user]);
    expect(stored!.body.v2?.subscriptions).toHaveLength(2);
  });

  it('ends a one-time purchase v2 says was refunded, though v1 still lists it and its refund webhook was lost', async () => {
    const user = randomUUID();
    expect((await deliver(event('non-renewing-purchase', user, 5, 5, null, appleLifetime))).status).toBe(200);
    revenuecat.setCustomer(user, {
      entitlements: { pro: ent(MONTHLY, { purchased: day(0), expires: day(30) }) },
      subscriptions: { [MONTHLY]: sub({ purchased: day(0), expires: day(30), transactionId: '1000' }) },
      non_subscriptions: { [LIFETIME]: [{ id: 'rc_43', is_sandbox: false, purchase_date: new Date(day(5)).toISOString(), store: 'app_store', store_transaction_id: appleLifetime.transaction_id }] },
      productEntitlements: { [MONTHLY]: ['pro'], [LIFETIME]: ['pro'] },
      refundedPurchases: [appleLifetime.transaction_id],
    });
    revenuecat.setClock(day(10));
    await refresh(user);
    const [view] = await entitlementsOf(db, user, new Date(day(31)));
    expect(view).toMatchObject({ id: 'pro', active: false });
    expect(view!.sources.find((source) => source.productId === LIFETIME)).toMatchObject({ status: 'refunded', active: false });
  });

  it('is v1\'s alone when v2 fails: the sync succeeds, and what v1 cannot say stays as the events said', async () => {
    const user = randomUUID();
    expect((await deliver(event('non-renewing-purchase', user, 5, 5, null, appleLifetime))).status).toBe(200);
    customerWithEverything(user);
    revenuecat.setClock(day(10));
    revenuecat.failV2(500);
    try {
      await refresh(user);
    } finally {
      revenuecat.failV2(undefined);
    }
    const views = await entitlementsOf(db, user, new Date(day(11)));
    // v1 shows the lifetime under pro and the yearly under extras; that the monthly and the yearly
    // grant pro too only v2 would have said.
    expect(views.map((view) => view.id)).toEqual(['extras', 'pro']);
    expect(views.find((view) => view.id === 'pro')!.sources.map((source) => source.productId)).toEqual([LIFETIME]);
    expect((await db.sql<{ v2: boolean }>(`select body ? 'v2' as v2 from public.billing_events where type = 'SYNC' and app_user_id = $1`, [user]))[0]).toEqual({ v2: false });
  });

  it('follows no hostile next_page through the refresh route: the sync is v1\'s alone and nothing reached another path', async () => {
    const user = randomUUID();
    customerWithEverything(user);
    revenuecat.setClock(day(10));
    const v1Before = revenuecat.requests.length;
    revenuecat.setV2NextPage(`/v2/projects/${revenuecat.projectId}/../../../v1/subscribers/${encodeURIComponent('victim')}`);
    try {
      await refresh(user);
    } finally {
      revenuecat.setV2NextPage(undefined);
    }
    // One v1 call, the refresh's own, with the v1 key; the v2 key went nowhere but v2.
    expect(revenuecat.requests.slice(v1Before).map((request) => [request.appUserId, request.authorization])).toEqual([[user, `Bearer ${revenuecat.apiKey}`]]);
    expect((await db.sql<{ v2: boolean }>(`select body ? 'v2' as v2 from public.billing_events where type = 'SYNC' and app_user_id = $1`, [user]))[0]).toEqual({ v2: false });
  });

  // Also found by the review: every product a customer's lists named was looked up in one sync.
  it(`looks up at most ${MAX_PRODUCT_LOOKUPS} products a sync: past it the sync is v1's alone, and the next sync goes on from there`, async () => {
    const user = randomUUID();
    const run = randomUUID().slice(0, 8);
    const count = MAX_PRODUCT_LOOKUPS + 5;
    const products = Array.from({ length: count }, (_, i) => `com.example.pack_${run}_${i}`);
    const purchase = (i: number, n = 0) => ({
      id: `rc_${run}_${i}_${n}`, is_sandbox: false, purchase_date: new Date(day(1 + n)).toISOString(), store: 'app_store', store_transaction_id: `7000${i}${n}${run}`,
    });
    revenuecat.setCustomer(user, { non_subscriptions: Object.fromEntries(products.map((product, i) => [product, [purchase(i)]])) });
    revenuecat.setClock(day(10));
    const lookups = (from: number) => revenuecat.v2Requests.slice(from).filter((request) => request.path.includes('/products/')).length;
    const stored = async () => (await db.sql<{ v2: boolean }>(`select body ? 'v2' as v2 from public.billing_events where type = 'SYNC' and app_user_id = $1 order by received_at`, [user])).map((row) => row.v2);

    let before = revenuecat.v2Requests.length;
    await refresh(user);
    expect(lookups(before)).toBe(MAX_PRODUCT_LOOKUPS);
    expect(await stored()).toEqual([false]);

    // The next refresh looks up only the rest, and has v2. (One purchase more of a product seen, so
    // its snapshot says something new and is stored.)
    revenuecat.setCustomer(user, { non_subscriptions: Object.fromEntries(products.map((product, i) => [product, i === 0 ? [purchase(i), purchase(i, 1)] : [purchase(i)]])) });
    before = revenuecat.v2Requests.length;
    revenuecat.setClock(day(11));
    await refresh(user);
    expect(lookups(before)).toBe(count - MAX_PRODUCT_LOOKUPS);
    expect((await stored()).at(-1)).toBe(true);
  });
});
