import { createServer, type Server } from 'node:http';
import { randomUUID } from 'node:crypto';

/**
 * A stand-in for RevenueCat's REST API v1 over real HTTP on loopback, speaking its documented wire
 * format for `GET /v1/subscribers/{app_user_id}` (Bearer secret key):
 *   200 { request_date, request_date_ms, subscriber: { entitlements, subscriptions,
 *        non_subscriptions, original_app_user_id, first_seen, subscriber_attributes, ... } }
 *   201 with an empty customer for an id it does not know (v1 creates it)
 *   401 { code: 7225, message } for another key
 * Tests give it customer records, a clock (request_date_ms), and a script of failures to serve
 * first (statuses, headers, bodies, a hang past the client's timeout), or a failure rate.
 */
export interface FakeCustomer {
  original_app_user_id?: string;
  entitlements?: Record<string, Record<string, unknown>>;
  subscriptions?: Record<string, Record<string, unknown>>;
  non_subscriptions?: Record<string, Record<string, unknown>[]>;
  subscriber_attributes?: Record<string, unknown>;
}

export type ScriptedAnswer =
  /** `stallAfterBytes`: send the headers and that much of the body, then nothing more (a stalled upstream). */
  | { status: number; headers?: Record<string, string>; body?: string; stallAfterBytes?: number }
  | 'hang';

export interface FakeRevenueCat {
  url: string;
  apiKey: string;
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
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    apiKey,
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
