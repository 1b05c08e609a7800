import { createServer, type Server } from 'node:http';
import { createHash, randomUUID } from 'node:crypto';

/**
 * A stand-in for RevenueCat's REST API v1 over real HTTP on loopback, speaking its documented wire
 * format for `GET /v1/subscribers/{app_user_id}` (Bearer secret key):
 *   200 { request_date, request_date_ms, subscriber: { entitlements, subscriptions,
 *        non_subscriptions, original_app_user_id, first_seen, subscriber_attributes, ... } }
 *   201 with an empty customer for an id it does not know (v1 creates it)
 *   401 { code: 7225, message } for another key
 * Tests give it customer records, a clock (request_date_ms), and a script of failures to serve
 * first (statuses, headers, bodies, a hang past the client's timeout), or a failure rate.
 *
 * And REST API v2 (RevenueCat's OpenAPI spec, openapi-spec/api-v2.yaml: list-subscriptions,
 * list-purchases, get-product), with its own secret key and project id, derived from the same
 * customer record as RevenueCat derives both from one: each v1 subscription is a v2 Subscription
 * and each v1 non-subscription purchase a v2 Purchase, with the entitlements the project maps its
 * product to (`productEntitlements`; by default those v1 shows it granting), products named by
 * RevenueCat ids (`prod...`) whose `store_identifier` is the product as webhooks name it:
 *   GET /v2/projects/{project_id}/customers/{customer_id}/subscriptions|purchases -> 200 { object: 'list', items, next_page, url }
 *   GET /v2/projects/{project_id}/products/{product_id} -> 200 Product
 *   GET /v2/projects/{project_id}/customers/{customer_id} -> 200 Customer with active_entitlements (get-customer)
 *   GET /v2/projects/{project_id}/customers/{customer_id}/active_entitlements|aliases -> 200 { object: 'list', ... }
 *   GET /v2/projects/{project_id}/entitlements/{entitlement_id} -> 200 Entitlement (get-entitlement)
 * Every v2 answer carries a Date header of the fake's clock (what a v2-alone snapshot is timed by).
 * Active entitlements are those v1 shows unexpired (or in grace), each until its expiry (or grace
 * end); aliases are original_app_user_id (the earliest) and the customer's id.
 *   401 { object: 'error', type: 'authentication_error', ... } for another key; 404 resource_missing
 *   for another project, an unknown customer or product. Lists page by `pageSize` (next_page).
 */
export interface FakeCustomer {
  original_app_user_id?: string;
  entitlements?: Record<string, Record<string, unknown>>;
  subscriptions?: Record<string, Record<string, unknown>>;
  non_subscriptions?: Record<string, Record<string, unknown>[]>;
  subscriber_attributes?: Record<string, unknown>;
  /** v2 only: the entitlements the project maps each product to (keyed as webhooks name it); default: what v1 shows it granting. */
  productEntitlements?: Record<string, string[]>;
  /** v2 only: one-time purchases (v1 `id` or `store_transaction_id`) that were refunded: v1 still lists them, v2 says `refunded`. */
  refundedPurchases?: string[];
  /** v2 only: fields of the v2 Subscription of a v1 subscription key that v2 says otherwise (the two records disagreeing). */
  v2Subscriptions?: Record<string, Record<string, unknown>>;
}

export type ScriptedAnswer =
  /** `stallAfterBytes`: send the headers and that much of the body, then nothing more (a stalled upstream). */
  | { status: number; headers?: Record<string, string>; body?: string; stallAfterBytes?: number }
  | 'hang';

export interface FakeRevenueCat {
  url: string;
  apiKey: string;
  /** REST v2's secret key and project. */
  v2ApiKey: string;
  projectId: string;
  /** Requests to v2 (kept apart from `requests`, v1's). */
  v2Requests: { method: string; path: string; status: number }[];
  /** Answer every v2 request with this status (undefined: normally). */
  failV2(status: number | undefined): void;
  /** Items per page of v2 lists (default 20, v2's default). */
  setV2PageSize(size: number): void;
  /** Answer every v2 list with this `next_page` instead of its own (a hostile or broken API); undefined: its own. */
  setV2NextPage(nextPage: string | undefined): void;
  /** What GET /v1/subscribers/{id} shows for this id (replaces what was there). */
  setCustomer(appUserId: string, customer: FakeCustomer): void;
  /** request_date_ms of the answers (default: the real clock). */
  setClock(ms: number | undefined): void;
  /** Answers to serve, in order, before normal ones. */
  script(...answers: ScriptedAnswer[]): void;
  /** Drop the scripted answers not served yet. */
  unscript(): void;
  /** Answer this share of requests with a 500 (0..1), drawn from a seeded sequence. */
  failRate(rate: number, seed?: number): void;
  requests: { appUserId: string; authorization: string | undefined; status: number }[];
  /** The most requests it was answering at once (reset with resetPeak). */
  peakConcurrency(): number;
  resetPeak(): void;
  close(): Promise<void>;
}

export interface FakeRevenueCatOptions {
  /** How long each answer takes (a real API is tens of milliseconds away; default 0). */
  latencyMs?: number;
}

export async function startFakeRevenueCat(options: FakeRevenueCatOptions = {}): Promise<FakeRevenueCat> {
  const apiKey = `sk_${randomUUID().replace(/-/g, '')}`;
  const v2ApiKey = `sk_${randomUUID().replace(/-/g, '')}`;
  const projectId = `proj${randomUUID().replace(/-/g, '').slice(0, 8)}`;
  const v2Requests: FakeRevenueCat['v2Requests'] = [];
  let v2Failure: number | undefined;
  let v2PageSize = 20;
  let v2NextPage: string | undefined;
  const customers = new Map<string, FakeCustomer>();
  const scripted: ScriptedAnswer[] = [];
  const requests: FakeRevenueCat['requests'] = [];
  let clock: number | undefined;
  let rate = 0;
  let seed = 1;
  const random = () => {
    // mulberry32: the same failures for the same seed.
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const hanging = new Set<import('node:http').ServerResponse>();

  let inFlight = 0;
  let peak = 0;
  const server: Server = createServer((req, res) => {
    inFlight++;
    peak = Math.max(peak, inFlight);
    res.once('close', () => inFlight--);
    if ((req.url ?? '').startsWith('/v2/')) {
      const { status, body } = answerV2(req.url!, req.method ?? 'GET', req.headers.authorization);
      v2Requests.push({ method: req.method ?? 'GET', path: req.url!, status });
      const answer = () => {
        res.writeHead(status, { 'content-type': 'application/json', date: new Date(clock ?? Date.now()).toUTCString() });
        res.end(JSON.stringify(body));
      };
      if (options.latencyMs) setTimeout(answer, options.latencyMs);
      else answer();
      return;
    }
    const match = /^\/v1\/subscribers\/([^/?]+)$/.exec((req.url ?? '').split('?')[0]!);
    const appUserId = match ? decodeURIComponent(match[1]!) : '';
    const send = (status: number, body: string, headers: Record<string, string> = { 'content-type': 'application/json' }) => {
      requests.push({ appUserId, authorization: req.headers.authorization, status });
      const answer = () => {
        res.writeHead(status, headers);
        res.end(body);
      };
      if (options.latencyMs) setTimeout(answer, options.latencyMs);
      else answer();
    };
    const next = scripted.shift();
    if (next === 'hang') {
      requests.push({ appUserId, authorization: req.headers.authorization, status: 0 });
      hanging.add(res);
      return;
    }
    if (next && next.stallAfterBytes !== undefined) {
      requests.push({ appUserId, authorization: req.headers.authorization, status: next.status });
      hanging.add(res);
      res.writeHead(next.status, { 'content-type': 'application/json', ...next.headers });
      res.write((next.body ?? '').slice(0, next.stallAfterBytes));
      return;
    }
    if (next) return send(next.status, next.body ?? '', { 'content-type': 'application/json', ...next.headers });
    if (rate > 0 && random() < rate) return send(500, JSON.stringify({ code: 7110, message: 'Internal server error' }));
    if (req.method !== 'GET' || !match) return send(404, JSON.stringify({ code: 7259, message: 'Not found' }));
    if (req.headers.authorization !== `Bearer ${apiKey}`) return send(401, JSON.stringify({ code: 7225, message: 'Invalid API key.' }));

    const now = clock ?? Date.now();
    const known = customers.get(appUserId);
    const customer = known ?? {};
    send(known ? 200 : 201, JSON.stringify({
      request_date: new Date(now).toISOString().replace(/\.\d{3}Z$/, 'Z'),
      request_date_ms: now,
      subscriber: {
        entitlements: customer.entitlements ?? {},
        first_seen: '2026-02-01T00:00:00Z',
        last_seen: new Date(now).toISOString().replace(/\.\d{3}Z$/, 'Z'),
        management_url: null,
        non_subscriptions: customer.non_subscriptions ?? {},
        original_app_user_id: customer.original_app_user_id ?? appUserId,
        original_application_version: null,
        original_purchase_date: null,
        other_purchases: {},
        subscriptions: customer.subscriptions ?? {},
        subscriber_attributes: customer.subscriber_attributes ?? {},
      },
    }));
    if (!known) customers.set(appUserId, {});
  });
  function answerV2(url: string, method: string, authorization: string | undefined): { status: number; body: unknown } {
    const error = (status: number, type: string, message: string) =>
      ({ status, body: { object: 'error', type, message, retryable: status >= 500, doc_url: `https://errors.rev.cat/${type.replace(/_/g, '-')}` } });
    if (v2Failure !== undefined) return error(v2Failure, v2Failure >= 500 ? 'server_error' : 'invalid_request', 'Scripted failure');
    if (authorization !== `Bearer ${v2ApiKey}`) return error(401, 'authentication_error', 'Invalid API key.');
    const { pathname, searchParams } = new URL(url, 'http://fake');
    // REST v2 delete-customer: DELETE /v2/projects/{project_id}/customers/{customer_id} (any alias
    // names the customer); the customer and its purchases are gone, later reads find nothing.
    const deletion = method === 'DELETE' ? /^\/v2\/projects\/([^/]+)\/customers\/([^/]+)$/.exec(pathname) : null;
    if (deletion) {
      const customerId = decodeURIComponent(deletion[2]!);
      if (decodeURIComponent(deletion[1]!) !== projectId || !customers.has(customerId)) return error(404, 'resource_missing', 'Customer not found');
      customers.delete(customerId);
      return { status: 200, body: { object: 'customer', id: customerId, deleted_at: clock ?? Date.now() } };
    }
    const list = /^\/v2\/projects\/([^/]+)\/customers\/([^/]+)\/(subscriptions|purchases|active_entitlements|aliases)$/.exec(pathname);
    const product = /^\/v2\/projects\/([^/]+)\/products\/([^/]+)$/.exec(pathname);
    const entitlement = /^\/v2\/projects\/([^/]+)\/entitlements\/([^/]+)$/.exec(pathname);
    const customerPath = /^\/v2\/projects\/([^/]+)\/customers\/([^/]+)$/.exec(pathname);
    const project = decodeURIComponent((list ?? product ?? entitlement ?? customerPath)?.[1] ?? '');
    if (method !== 'GET' || (!list && !product && !entitlement && !customerPath) || project !== projectId) return error(404, 'resource_missing', 'Resource not found');
    if (product) {
      const found = [...products.values()].find((candidate) => candidate.id === decodeURIComponent(product[2]!));
      return found ? { status: 200, body: found } : error(404, 'resource_missing', 'Product not found');
    }
    if (entitlement) {
      const lookupKey = entitlementIds.get(decodeURIComponent(entitlement[2]!));
      return lookupKey === undefined ? error(404, 'resource_missing', 'Entitlement not found') : { status: 200, body: entitlementObject(lookupKey) };
    }
    const customerId = decodeURIComponent((list ?? customerPath)![2]!);
    const customer = customers.get(customerId);
    if (!customer) return error(404, 'resource_missing', 'Customer not found');
    const listOf = (kind: string, items: Record<string, unknown>[], after: string | null) => {
      const start = after === null ? 0 : items.findIndex((item) => (item.id ?? item.entitlement_id) === after) + 1;
      const page = items.slice(start, start + v2PageSize);
      const path = `/v2/projects/${projectId}/customers/${encodeURIComponent(customerId)}/${kind}`;
      const more = start + v2PageSize < items.length;
      const last = page[page.length - 1];
      return { object: 'list', items: page, next_page: v2NextPage ?? (more ? `${path}?starting_after=${String(last!.id ?? last!.entitlement_id)}` : null), url: path };
    };
    if (customerPath) {
      const now = clock ?? Date.now();
      return { status: 200, body: {
        object: 'customer', id: customerId, project_id: projectId, first_seen_at: T_CATALOG, last_seen_at: now,
        last_seen_app_version: null, last_seen_country: null, last_seen_platform: null, last_seen_platform_version: null,
        active_entitlements: listOf('active_entitlements', v2ActiveEntitlements(customer), null), experiment: null,
      } };
    }
    const kind = list![3]!;
    const items = kind === 'subscriptions' ? v2Subscriptions(customerId, customer) : kind === 'purchases' ? v2Purchases(customerId, customer)
      : kind === 'active_entitlements' ? v2ActiveEntitlements(customer) : v2Aliases(customerId, customer);
    return { status: 200, body: listOf(kind, items, searchParams.get('starting_after')) };
  }

  /** RevenueCat's entitlement ids (`entl...`) this project has named, to their lookup keys. */
  const entitlementIds = new Map<string, string>();
  const entitlementObject = (lookupKey: string) => {
    const id = `entl${digest(lookupKey)}`;
    entitlementIds.set(id, lookupKey);
    return { object: 'entitlement', project_id: projectId, id, lookup_key: lookupKey, display_name: lookupKey, created_at: T_CATALOG };
  };
  function v2ActiveEntitlements(customer: FakeCustomer): Record<string, unknown>[] {
    const now = clock ?? Date.now();
    return Object.entries(customer.entitlements ?? {}).flatMap(([lookupKey, fields]) => {
      const expires = ms(fields.expires_date);
      const grace = ms(fields.grace_period_expires_date);
      const until = expires === null ? null : Math.max(expires, grace ?? expires);
      if (until !== null && until <= now) return [];
      return [{ object: 'customer.active_entitlement', entitlement_id: entitlementObject(lookupKey).id, expires_at: until }];
    });
  }
  function v2Aliases(customerId: string, customer: FakeCustomer): Record<string, unknown>[] {
    const ids = [...new Set([customer.original_app_user_id ?? customerId, customerId])];
    return ids.map((id, index) => ({ object: 'customer.alias', id, created_at: T_CATALOG + index }));
  }

  /** Products RevenueCat knows, by store identifier (webhooks' product id) and store. */
  const products = new Map<string, Record<string, unknown>>();
  const productFor = (storeIdentifier: string, store: string, type: 'subscription' | 'non_consumable') => {
    const key = `${store}\n${storeIdentifier}`;
    if (!products.has(key)) {
      products.set(key, {
        object: 'product', id: `prod${digest(key)}`, store_identifier: storeIdentifier, type,
        created_at: T_CATALOG, app_id: `app${digest(store)}`, display_name: storeIdentifier,
      });
    }
    return products.get(key)!;
  };
  const entitlementsFor = (customer: FakeCustomer, productId: string, v1Key: string) => {
    const ids = customer.productEntitlements?.[productId]
      ?? Object.entries(customer.entitlements ?? {}).filter(([, entitlement]) => [productId, v1Key].includes(String(entitlement.product_identifier))).map(([id]) => id);
    return {
      object: 'list', next_page: null, url: `/v2/projects/${projectId}/entitlements`,
      items: ids.map((id) => entitlementObject(id)),
    };
  };
  const ms = (value: unknown) => (typeof value === 'string' ? Date.parse(value) : null);
  function v2Subscriptions(customerId: string, customer: FakeCustomer): Record<string, unknown>[] {
    const now = clock ?? Date.now();
    return Object.entries(customer.subscriptions ?? {}).map(([key, sub]) => {
      const productId = sub.product_plan_identifier && !key.includes(':') ? `${key}:${String(sub.product_plan_identifier)}` : key;
      const store = String(sub.store ?? 'app_store');
      const expires = ms(sub.expires_date);
      const grace = ms(sub.grace_period_expires_date);
      const refunded = ms(sub.refunded_at) !== null;
      const lapsed = expires !== null && expires <= now;
      const inGrace = grace !== null && grace > now;
      const paused = lapsed && (ms(sub.auto_resume_date) ?? 0) > now;
      const status = refunded || (lapsed && !inGrace && !paused) ? 'expired' : paused ? 'paused' : lapsed ? 'in_grace_period'
        : sub.billing_issues_detected_at ? (inGrace ? 'in_grace_period' : 'in_billing_retry') : String(sub.period_type) === 'trial' ? 'trialing' : 'active';
      return {
        object: 'subscription',
        id: `sub${digest(`${customerId}\n${key}`)}`,
        customer_id: customerId,
        original_customer_id: customer.original_app_user_id ?? customerId,
        product_id: store === 'promotional' ? null : productFor(productId, store, 'subscription').id,
        starts_at: ms(sub.original_purchase_date) ?? ms(sub.purchase_date) ?? now,
        current_period_starts_at: ms(sub.purchase_date) ?? now,
        current_period_ends_at: expires,
        ends_at: expires,
        gives_access: !refunded && (!lapsed || inGrace),
        pending_payment: false,
        auto_renewal_status: sub.unsubscribe_detected_at || sub.billing_issues_detected_at || String(sub.period_type) === 'prepaid' || store === 'promotional'
          ? 'will_not_renew' : sub.auto_resume_date ? 'will_pause' : 'will_renew',
        status,
        total_revenue_in_usd: { currency: 'USD', gross: 0, commission: 0, tax: 0, proceeds: 0 },
        presented_offering_id: null,
        entitlements: entitlementsFor(customer, productId, key),
        environment: sub.is_sandbox ? 'sandbox' : 'production',
        store,
        store_subscription_identifier: String(sub.store_transaction_id ?? key),
        ownership: sub.ownership_type === 'FAMILY_SHARED' ? 'family_shared' : 'purchased',
        pending_changes: null,
        country: null,
        management_url: null,
        ...customer.v2Subscriptions?.[key],
      };
    });
  }
  function v2Purchases(customerId: string, customer: FakeCustomer): Record<string, unknown>[] {
    return Object.entries(customer.non_subscriptions ?? {}).flatMap(([productId, purchases]) => purchases.map((purchase) => {
      const store = String(purchase.store ?? 'app_store');
      const storeId = String(purchase.store_transaction_id ?? purchase.id ?? productId);
      const refunded = (customer.refundedPurchases ?? []).some((id) => id === purchase.id || id === purchase.store_transaction_id);
      return {
        object: 'purchase',
        id: `purc${digest(`${customerId}\n${productId}\n${storeId}`)}`,
        customer_id: customerId,
        original_customer_id: customer.original_app_user_id ?? customerId,
        product_id: productFor(productId, store, 'non_consumable').id,
        purchased_at: ms(purchase.purchase_date) ?? 0,
        revenue_in_usd: { currency: 'USD', gross: 0, commission: 0, tax: 0, proceeds: 0 },
        quantity: 1,
        status: refunded ? 'refunded' : 'owned',
        presented_offering_id: null,
        entitlements: entitlementsFor(customer, productId, productId),
        environment: purchase.is_sandbox ? 'sandbox' : 'production',
        store,
        store_purchase_identifier: storeId,
        ownership: 'purchased',
        country: null,
      };
    }));
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    apiKey,
    v2ApiKey,
    projectId,
    v2Requests,
    failV2: (status) => {
      v2Failure = status;
    },
    setV2PageSize: (size) => {
      v2PageSize = size;
    },
    setV2NextPage: (nextPage) => {
      v2NextPage = nextPage;
    },
    setCustomer: (appUserId, customer) => void customers.set(appUserId, customer),
    setClock: (ms) => {
      clock = ms;
    },
    script: (...answers) => void scripted.push(...answers),
    unscript: () => void scripted.splice(0),
    failRate: (share, newSeed = 1) => {
      rate = share;
      seed = newSeed;
    },
    requests,
    peakConcurrency: () => peak,
    resetPeak: () => {
      peak = inFlight;
    },
    close: async () => {
      for (const res of hanging) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** When the fake project's products and entitlements were made (ms since epoch). */
const T_CATALOG = Date.parse('2026-01-01T00:00:00Z');
const digest = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 10);

/** A v1 subscription object, as RevenueCat shows one (ISO times without milliseconds). */
export function v1Subscription(fields: {
  purchased: number;
  expires: number | null;
  store?: string;
  sandbox?: boolean;
  unsubscribed?: number;
  billingIssue?: number;
  grace?: number;
  refunded?: number;
  periodType?: string;
  transactionId?: string;
}): Record<string, unknown> {
  const time = (ms: number | undefined | null) => (ms === undefined || ms === null ? null : new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z'));
  return {
    auto_resume_date: null,
    billing_issues_detected_at: time(fields.billingIssue),
    expires_date: time(fields.expires),
    grace_period_expires_date: time(fields.grace),
    is_sandbox: fields.sandbox ?? false,
    original_purchase_date: time(fields.purchased),
    ownership_type: 'PURCHASED',
    period_type: fields.periodType ?? 'normal',
    purchase_date: time(fields.purchased),
    refunded_at: time(fields.refunded),
    store: fields.store ?? 'app_store',
    store_transaction_id: fields.transactionId ?? '2000000999000001',
    unsubscribe_detected_at: time(fields.unsubscribed),
  };
}

/** A v1 entitlement object: the purchase that expires furthest for it. */
export function v1Entitlement(productId: string, fields: { purchased: number; expires: number | null; grace?: number }): Record<string, unknown> {
  const time = (ms: number | undefined | null) => (ms === undefined || ms === null ? null : new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z'));
  return { expires_date: time(fields.expires), grace_period_expires_date: time(fields.grace), product_identifier: productId, purchase_date: time(fields.purchased) };
}
