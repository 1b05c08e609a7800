import fc from 'fast-check';
import pg from 'pg';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import * as userSyncRoute from '../../app/api/me/billing/sync/route.ts';
import * as billingRoute from '../../app/api/webhooks/subscription-billing/route.ts';
import { toEntitlementViews, type EntitlementRow, type EntitlementView } from '../../lib/billing/entitlement-view.ts';
import type { BillingWebhookBody } from '../../lib/billing/webhook-body.ts';
import { DEV_WEBHOOK_SECRETS } from '../../lib/config.ts';
import type { DatabaseAdapter } from '../../lib/db/index.ts';
import { expectAppReadsMatchAccount } from '../support/app-reads.ts';
import { expectEventsTellTheAccount } from '../support/events-receiver.ts';
import { DATABASE_KINDS, suiteDatabase, type DatabaseKind, type TestDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import type { FakeCustomer, FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { callRoute, type RouteResponse } from '../support/http.ts';
import { testUser } from '../support/tokens.ts';
import { DAY_MS, T0, fixture } from './fixtures.ts';

export { billingRoute };

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** The embedded-mode secret (the tests run without DATABASE_URL, like `npm run dev`). */
export const WEBHOOK_AUTHORIZATION = `Bearer ${DEV_WEBHOOK_SECRETS.subscription}`;

/** POST a body to the webhook over real HTTP, authenticated unless headers say otherwise. */
export function deliver(body: unknown, headers: Record<string, string> = {}): Promise<RouteResponse> {
  return callRoute(billingRoute, { method: 'POST', headers: { authorization: WEBHOOK_AUTHORIZATION, ...headers }, body });
}

/** T0 plus days (fractions allowed), in epoch milliseconds: the sequences' clock. */
export const day = (days: number) => T0 + Math.round(days * DAY_MS);
export const isoDay = (days: number) => new Date(day(days)).toISOString();

export interface EventTimes {
  /** event_timestamp_ms, in days after T0. */
  at: number;
  purchased?: number;
  /** null: no expiry (lifetime). */
  expires?: number | null;
}

/**
 * A corpus body for one subscriber, with a fresh event id and the times of a sequence step.
 * Other event fields can be replaced (undefined removes a field).
 */
export function billingEvent(name: string, user: string, times: EventTimes, fields: Record<string, unknown> = {}): BillingWebhookBody {
  return fixture(name, {
    id: `evt-${randomUUID()}`,
    app_user_id: user,
    aliases: [user],
    original_app_user_id: user,
    event_timestamp_ms: day(times.at),
    ...(times.purchased !== undefined ? { purchased_at_ms: day(times.purchased) } : {}),
    ...(times.expires !== undefined ? { expiration_at_ms: times.expires === null ? null : day(times.expires) } : {}),
    ...fields,
  });
}

/**
 * Run `deliveries` with the service's clock at `days` (T0 plus days): the webhooks arrive then.
 * The service orders an event at most a few minutes past the time it arrived (MAX_EVENT_AHEAD_MS),
 * so a history stamped later than the real clock is delivered as arriving after it.
 */
export async function receivedAt<T>(days: number, deliveries: () => Promise<T>): Promise<T> {
  vi.useFakeTimers({ toFake: ['Date'] });
  try {
    vi.setSystemTime(day(days));
    return await deliveries();
  } finally {
    vi.useRealTimers();
  }
}

/** What GET /api/me would show for the user at `now`. */
export async function entitlementsOf(db: TestDatabase, userId: string, now: Date): Promise<EntitlementView[]> {
  return toEntitlementViews((await db.adapter.call('account_entitlements', { p_user_id: userId, p_now: now })) as EntitlementRow[]);
}

export async function eventRow(db: TestDatabase, eventId: string) {
  const rows = await db.sql<{ outcome: string; type: string; app_user_id: string | null; owner_id: string | null; environment: string | null; count: string }>(
    'select outcome, type, app_user_id, owner_id, environment, count(*) over () as count from public.billing_events where event_id = $1', [eventId]);
  return rows[0] && { ...rows[0], count: Number(rows[0].count) };
}

/**
 * The delivery orders a flow is tried in. Up to three deliveries: every order. Four: six orders
 * that between them put every three of the deliveries in each of their six orders (and so every
 * two in both), the least that does: what a wrong result depends on is which of two or three
 * events came first, and all 24 orders took four times as long. More: in order, reversed and
 * `sample` others drawn with `seed` (the same ones every run).
 */
function deliveryOrders(n: number, { sample, seed }: { sample: number; seed: number }): number[][] {
  const identity = Array.from({ length: n }, (_, i) => i);
  if (n <= 3) return permutations(identity);
  if (n === 4) return everyOrderOfThree(identity);
  return [identity, [...identity].reverse(), ...fc.sample(fc.shuffledSubarray(identity, { minLength: n, maxLength: n }), { numRuns: sample, seed })];
}

function permutations(items: number[]): number[][] {
  if (items.length <= 1) return [items];
  return items.flatMap((item, i) => permutations([...items.slice(0, i), ...items.slice(i + 1)]).map((rest) => [item, ...rest]));
}

/**
 * Orders that put every three of `items` in each of their orders: greedily, each the one of all
 * orders that covers the most not yet covered (deterministic: the first such in their order).
 */
function everyOrderOfThree(items: number[]): number[][] {
  const triplesOf = (order: number[]) => {
    const seen: string[] = [];
    for (let a = 0; a < order.length; a++) for (let b = a + 1; b < order.length; b++) for (let c = b + 1; c < order.length; c++) seen.push(`${order[a]},${order[b]},${order[c]}`);
    return seen;
  };
  const all = permutations(items);
  const uncovered = new Set(all.flatMap(triplesOf));
  const chosen: number[][] = [];
  while (uncovered.size > 0) {
    let best = all[0]!;
    let bestCount = -1;
    for (const order of all) {
      const count = triplesOf(order).filter((triple) => uncovered.has(triple)).length;
      if (count > bestCount) [best, bestCount] = [order, count];
    }
    for (const triple of triplesOf(best)) uncovered.delete(triple);
    chosen.push(best);
  }
  return chosen;
}

/**
 * A delivery-order suite's orders on one engine: deliveryOrders() on `everyOrderOn`; in order and
 * reversed on the other. Both engines run the same SQL, so what depends on the order shows on one,
 * and what depends on the engine shows in any order; trying every order on both doubled the
 * longest suites. Each suite names its engine (audit.test.ts PGlite, the others Postgres), so
 * between them both engines see every order of some suite.
 */
export function deliveryOrdersOn(kind: DatabaseKind, n: number, options: { everyOrderOn: DatabaseKind; sample: number; seed: number }): number[][] {
  if (kind === options.everyOrderOn) return deliveryOrders(n, options);
  const identity = Array.from({ length: n }, (_, i) => i);
  return n > 1 ? [identity, [...identity].reverse()] : [identity];
}

// ---------------------------------------------------------------------------------------------
// Flows: webhook bodies and snapshots of RevenueCat's record, delivered in some order, then the
// state read as GET /api/me shows it. Users are named by role (`alice`, `bob`, ...) in a flow and
// get fresh ids for every run.

/** A snapshot of RevenueCat's record (GET /v1/subscribers/{id}) taken at `at` (days after T0), fetched by the user's own "Refresh purchases". */
export interface SnapshotItem {
  snapshotOf: string;
  at: number;
  customer: FakeCustomer;
}
export type FlowItem = BillingWebhookBody | SnapshotItem;
/** Per entitlement id: the view expected (partial), or null for "no such entitlement". */
export type ExpectedViews = Record<string, Partial<EntitlementView> | null>;
export interface ExpectedState {
  /** Days after T0: the instant the state is read at. */
  now: number;
  /** Per role: the entitlements expected, or null: none at all. */
  state: Partial<Record<string, ExpectedViews | null>>;
}

export const isSnapshotItem = (item: FlowItem): item is SnapshotItem => 'snapshotOf' in item;

/**
 * Deliver one item: a webhook body through the route (it must answer 200), or a snapshot: the
 * stand-in RevenueCat is given the customer and the clock, and the user refreshes their purchases.
 */
export async function deliverFlowItem(item: FlowItem, users: Record<string, string>, revenuecat?: FakeRevenueCat): Promise<void> {
  if (!isSnapshotItem(item)) {
    const response = await deliver(item);
    expect({ event: item.event.type, status: response.status }).toEqual({ event: item.event.type, status: 200 });
    return;
  }
  if (!revenuecat) throw new Error('a snapshot needs the RevenueCat stand-in');
  const userId = users[item.snapshotOf]!;
  revenuecat.setCustomer(userId, item.customer);
  revenuecat.setClock(day(item.at));
  const user = await testUser({ userId });
  const response = await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } });
  expect({ snapshot: item.snapshotOf, status: response.status }).toEqual({ snapshot: item.snapshotOf, status: 200 });
}

/** A flow of a suite: its webhooks (and syncs) for fresh users, and the state expected after all of them. */
export interface Flow<Role extends string = string> {
  name: string;
  /** The documentation the expectation rests on (quoted, with its page). */
  doc: string;
  items: (users: Record<Role, string>) => FlowItem[];
  expected: ExpectedState[];
  /**
   * A known fault, not fixed: the service's state differs from the expected one. Runs as it.fails,
   * so it must keep failing until it is fixed (SHOW_KNOWN_FAULTS=1 runs it as a plain test, to see the diff).
   */
  failing?: boolean;
}

/**
 * Run a flow in each of `orders` (deliveryOrdersOn): fresh users each time, every item delivered
 * through the route (or refreshed, for a snapshot), then every expected state read.
 */
export async function runFlowInOrders<Role extends string>(db: TestDatabase, flow: Flow<Role>, newUsers: () => Record<Role, string>,
  orders: (n: number, kind: DatabaseKind) => number[][], revenuecat?: FakeRevenueCat): Promise<void> {
  const count = flow.items(newUsers()).length;
  for (const order of orders(count, db.kind)) {
    const users = newUsers();
    const items = flow.items(users);
    for (const index of order) await deliverFlowItem(items[index]!, users, revenuecat);
    for (const state of flow.expected) await expectEntitlementState(db, users, state, `${flow.name.slice(0, 12)} order ${order.join(',')}, day ${state.now}`);
  }
}

/** Webhooks only: no refresh from RevenueCat after an event, and no RevenueCat key to refresh with. */
export const WEBHOOKS_ONLY: Record<string, string | undefined> = { LOCAL_DEV: '1', BILLING_SYNC_AFTER: 'none', REVENUECAT_SECRET_API_KEY: undefined };

/** A suite of flows on each engine (`title, on <engine>`), each flow run in `orders` with `settings` set (webhooks only unless told). */
export function describeFlows<Role extends string>(title: string, flows: Flow<Role>[], newUsers: () => Record<Role, string>,
  orders: (n: number, kind: DatabaseKind) => number[][], settings: Record<string, string | undefined> = WEBHOOKS_ONLY): void {
  describe.each(DATABASE_KINDS)(`${title}, on %s`, (kind) => {
    const db = suiteDatabase(kind);
    let restoreEnv: () => void;
    beforeAll(() => {
      restoreEnv = setEnv(settings);
    });
    afterAll(() => restoreEnv());

    for (const flow of flows) {
      (flow.failing && !process.env.SHOW_KNOWN_FAULTS ? it.fails : it)(flow.name, () => runFlowInOrders(db, flow, newUsers, orders), 240_000);
    }
  });
}

/**
 * Every role's entitlements at `expected.now` match what is expected; and for a role that is a
 * Supabase user (a uuid), what the app reads through Supabase at that instant (my_entitlements,
 * has_entitlement, the access token's claims) matches what GET /api/me shows, and so does what a
 * receiver of their outbound events holds now (tests/support/events-receiver.ts).
 */
export async function expectEntitlementState(db: TestDatabase, users: Record<string, string>, expected: ExpectedState, label: string): Promise<void> {
  for (const [role, entitlements] of Object.entries(expected.state)) {
    const views = await entitlementsOf(db, users[role]!, new Date(day(expected.now)));
    if (UUID.test(users[role]!)) {
      await expectAppReadsMatchAccount(db, users[role]!, new Date(day(expected.now)), `${label}, ${role}`);
      await expectEventsTellTheAccount(db, users[role]!, `${label}, ${role}`);
    }
    if (entitlements === null || entitlements === undefined) {
      expect({ label, role, views }).toEqual({ label, role, views: [] });
      continue;
    }
    for (const [id, view] of Object.entries(entitlements)) {
      const actual = views.find((candidate) => candidate.id === id) ?? null;
      if (view === null) expect({ label, role, id, actual }).toEqual({ label, role, id, actual: null });
      else expect({ label, role, id, actual }).toMatchObject({ label, role, id, actual: view });
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Event builders: corpus bodies (tests/billing/fixtures) with a flow's facts (times in days after T0;
// App Store by default), v1 snapshot builders, and the documentation pages flows quote.

export const MONTHLY = 'com.example.pro.monthly';
export const YEARLY = 'com.example.pro.yearly';
export const LIFETIME = 'com.example.pro.lifetime';
export const PLAY_MONTHLY = 'pro_monthly:monthly';
export const apple = (tx: string, otx = '1000', product = MONTHLY) => ({ store: 'APP_STORE', product_id: product, transaction_id: tx, original_transaction_id: otx });
export const play = (order: string, product = PLAY_MONTHLY, otx = order.replace(/\.\.\d+$/, '')) => ({ store: 'PLAY_STORE', product_id: product, transaction_id: order, original_transaction_id: otx });

export const purchase = (u: string, at: number, purchased: number, expires: number, fields: Record<string, unknown> = {}) =>
  billingEvent('initial-purchase', u, { at, purchased, expires }, { ...apple('1000'), ...fields });
export const trial = (u: string, at: number, purchased: number, expires: number, fields: Record<string, unknown> = {}) =>
  billingEvent('initial-purchase-trial', u, { at, purchased, expires }, { ...apple('1000'), period_type: 'TRIAL', ...fields });
export const renewal = (u: string, at: number, purchased: number, expires: number, fields: Record<string, unknown> = {}) =>
  billingEvent('renewal', u, { at, purchased, expires }, { ...apple(`2000${Math.round(purchased * 1000)}`), ...fields });
export const cancellation = (u: string, reason: string, at: number, purchased: number, expires: number, fields: Record<string, unknown> = {}) =>
  billingEvent('cancellation-unsubscribe', u, { at, purchased, expires }, { ...apple('1000'), cancel_reason: reason, ...fields });
export const billingIssue = (u: string, at: number, purchased: number, expires: number, grace: number | null, fields: Record<string, unknown> = {}) =>
  billingEvent(grace === null ? 'billing-issue-no-grace' : 'billing-issue-grace', u, { at, purchased, expires },
    { ...apple('1000'), grace_period_expiration_at_ms: grace === null ? null : day(grace), ...fields });
export const expiration = (u: string, reason: string, at: number, purchased: number, expires: number, fields: Record<string, unknown> = {}) =>
  billingEvent('expiration', u, { at, purchased, expires }, { ...apple('1000'), expiration_reason: reason, ...fields });
export const refund = (u: string, at: number, purchased: number, refundedAt: number | null, fields: Record<string, unknown> = {}) =>
  billingEvent('cancellation-customer-support', u, { at, purchased, expires: refundedAt }, { ...apple('1000'), price: -9.99, ...fields });
export const event = (fixtureName: string, u: string, at: number, purchased: number, expires: number | null, fields: Record<string, unknown> = {}) =>
  billingEvent(fixtureName, u, { at, purchased, expires }, { ...apple('1000'), ...fields });
export const transfer = (from: string[], to: string[], at: number, fields: Record<string, unknown> = {}) =>
  billingEvent('transfer', to[to.length - 1]!, { at }, { app_user_id: undefined, aliases: undefined, original_app_user_id: undefined, transferred_from: from, transferred_to: to, ...fields });

// v1 snapshot builders.
export const snapshot = (snapshotOf: string, at: number, customer: FakeCustomer): SnapshotItem => ({ snapshotOf, at, customer });
export const v1Time = (days: number | null) => (days === null ? null : new Date(day(days)).toISOString().replace(/\.\d{3}Z$/, 'Z'));

/** The RevenueCat pages the flows' expectations come from. */
export const DOC = {
  flows: 'https://www.revenuecat.com/docs/integrations/webhooks/event-flows',
  types: 'https://www.revenuecat.com/docs/integrations/webhooks/event-types-and-fields',
  grace: 'https://www.revenuecat.com/docs/subscription-guidance/how-grace-periods-work',
  refunds: 'https://www.revenuecat.com/docs/subscription-guidance/refunds',
  manage: 'https://www.revenuecat.com/docs/subscription-guidance/managing-subscriptions',
  web: 'https://www.revenuecat.com/docs/web/web-billing/subscription-lifecycle',
  prepaid: 'https://www.revenuecat.com/docs/subscription-guidance/google-prepaid-plans',
  promo: 'https://www.revenuecat.com/docs/dashboard-and-metrics/customer-history/promotionals',
  v1: 'https://www.revenuecat.com/docs/api-v1/customer-info-model',
};

/**
 * The settings of the flow suites: RevenueCat's stand-in, and webhooks that never sync (each flow
 * says when RevenueCat's record is fetched). A RevenueCat key is a real secret, so local mode (the
 * dev tokens and the dev webhook secret these suites use) is asked for with LOCAL_DEV.
 */
export function flowSettings(revenuecat: FakeRevenueCat): Record<string, string> {
  return {
    LOCAL_DEV: '1',
    REVENUECAT_SECRET_API_KEY: revenuecat.apiKey,
    REVENUECAT_API_URL: revenuecat.url,
    REVENUECAT_TIMEOUT_MS: '2000',
    REVENUECAT_REQUESTS_PER_SECOND: '100',
    BILLING_SYNC_AFTER: 'none',
  };
}

/**
 * Which of RevenueCat's records a sync reads (docs/sync.md): REST v1 alone, v2 alone, or both (v2's
 * per-item record wins where they differ). A flow that syncs runs under each, to the same end state.
 */
export type Reader = 'v1' | 'v2' | 'both';
export const READERS: readonly Reader[] = ['v1', 'v2', 'both'];
export const READER_NAMES: Record<Reader, string> = { v1: 'REST v1', v2: 'REST v2 alone', both: 'REST v1 + v2' };

/** The flow suites' settings (flowSettings) with the keys of the reader's API(s) only. */
export function readerSettings(revenuecat: FakeRevenueCat, reader: Reader): Record<string, string | undefined> {
  return {
    ...flowSettings(revenuecat),
    REVENUECAT_SECRET_API_KEY: reader === 'v2' ? undefined : revenuecat.apiKey,
    REVENUECAT_V2_SECRET_API_KEY: reader === 'v1' ? undefined : revenuecat.v2ApiKey,
    REVENUECAT_PROJECT_ID: reader === 'v1' ? undefined : revenuecat.projectId,
  };
}

/**
 * A month past the default retention (15 months ago) with its partition made, and customers (fresh
 * ids, each with a purchase) whose oldest event not in a checkpoint counts as received in it: what a
 * retention run must checkpoint before it drops the month. Returns the month (YYYY_MM) and the ids.
 */
export async function customersWaitingInAnOldMonth(db: TestDatabase, prefix: string, count: number): Promise<{ month: string; users: string[] }> {
  const start = new Date();
  start.setUTCDate(1);
  start.setUTCMonth(start.getUTCMonth() - 15);
  await db.sql('select public.billing_ensure_partitions($1::date, $1::date)', [start.toISOString().slice(0, 10)]);
  const users = Array.from({ length: count }, () => `${prefix}-${randomUUID()}`);
  for (const user of users) {
    expect((await deliver(purchase(user, 0, 0, 30))).status).toBe(200);
    await db.sql('update public.billing_subscribers set pending_since = $2 where app_user_id = $1', [user, start.toISOString()]);
  }
  return { month: start.toISOString().slice(0, 7).replace('-', '_'), users };
}

/**
 * Hold the lock the service takes for a subscriber's group (an id not yet in a group is its own),
 * from a connection of its own, until the returned function releases it.
 */
export async function holdSubscriberLock(databaseUrl: string, user: string): Promise<() => Promise<void>> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  await client.query('begin');
  await client.query(`select pg_advisory_xact_lock(hashtextextended('billing_group:' || $1, 0))`, [user]);
  return async () => {
    await client.query('rollback');
    await client.end();
  };
}

/** Hold a user's outbound events sequence row (as a transaction writing the user's events does) until released. */
export async function holdOutboundUserLock(databaseUrl: string, user: string): Promise<() => Promise<void>> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  await client.query('begin');
  await client.query('select public.outbound_lock_user($1)', [user]);
  return async () => {
    await client.query('rollback');
    await client.end();
  };
}

/** From now on, count the adapter's calls that go alone and its gathered calls (with how many events each carried). */
export function countAdapterCalls(adapter: DatabaseAdapter): { alone: number; gathered: number[] } {
  const counts = { alone: 0, gathered: [] as number[] };
  const { call, callProcedureWhenConnected } = adapter;
  adapter.call = (fn, args) => {
    counts.alone++;
    return call(fn, args);
  };
  adapter.callProcedureWhenConnected = (procedure, take) => callProcedureWhenConnected!(procedure, () => {
    const args = take();
    if (args) counts.gathered.push((args.p_calls as unknown[]).length);
    return args;
  });
  return counts;
}
