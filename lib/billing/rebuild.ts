import { getConfig } from '../config.ts';
import { callDb, DbError } from '../db/index.ts';
import { subscriberResponseSchema } from '../revenuecat/subscriber.ts';
import { storedV2Customer, storedV2Record } from '../revenuecat/v2.ts';
import { describeEventEffects, type BillingEventPlan } from './event-effects.ts';
import { describeSnapshot } from './snapshot.ts';
import { describeV2Snapshot } from './snapshot-v2.ts';
import type { BillingEvent } from './webhook-body.ts';

/**
 * npm run billing:rebuild: every customer's entitlements folded again from the stored log with the
 * CURRENT decision code (describeEventEffects / describeSnapshot recomputed from the stored bodies),
 * in event order, by the same SQL step as live delivery. A dry run reports what would change and
 * writes nothing (each customer's fold runs in a transaction that is rolled back); `apply` writes,
 * one short transaction per customer under the same lock as a webhook, so it is safe while
 * deliveries keep arriving. Use it after a fix to the decision code, or after upgrading a database
 * recorded by an older version (whose events have no stored plans).
 */
export interface StoredEntry {
  eventId: string;
  eventAt: string;
  type: string;
  appUserId: string | null;
  subjectId: string | null;
  body: unknown;
}

export interface RebuildRow {
  appUserId: string;
  entitlementId: string;
  productId: string | null;
  environment: string | null;
  /** Which source (purchase) of the entitlement the row is (public.billing_source_key). */
  sourceKey: string;
  /** The purchase's id as the store names it (its original transaction, else its transaction), for people. */
  purchase: string | null;
  status: string;
  willRenew: boolean;
  expiresAt: string | null;
  graceExpiresAt: string | null;
}

export interface CustomerChange {
  ids: string[];
  before: RebuildRow[];
  after: RebuildRow[];
}

export interface RebuildOptions {
  apply: boolean;
  /**
   * Leave sandbox purchases out. Default: the configuration's rule (config.billingIgnoreSandbox),
   * the one live delivery uses, so a rebuild gives what live delivery gives.
   */
  ignoreSandbox?: boolean;
  /** Entries read per page while finding the customers (default 1000). */
  pageSize?: number;
  onProgress?: (done: number, total: number) => void;
}

export interface RebuildReport {
  customers: number;
  events: number;
  changed: CustomerChange[];
}

/** What the current code says a stored entry means. */
export function planOf(entry: StoredEntry, options: { ignoreSandbox: boolean }): BillingEventPlan {
  if (entry.type === 'SYNC') {
    const body = entry.body as { app_user_id?: string } & Record<string, unknown>;
    const response = subscriberResponseSchema.safeParse(body);
    // v2 alone read it: its record is under `v2`, with no `subscriber` (lib/billing/snapshot-v2.ts).
    const v2Record = !response.success && body.app_user_id ? storedV2Record(body.v2) : null;
    if (v2Record) return describeV2Snapshot(v2Record, body.app_user_id!, { eventId: entry.eventId, ignoreSandbox: options.ignoreSandbox });
    // A snapshot of a deleted user keeps only its id: it means nothing any more.
    if (!response.success || !body.app_user_id) return describeEventEffects({ id: entry.eventId, type: 'SYNC' }, new Date(entry.eventAt), { recorded: true });
    return describeSnapshot(response.data, body.app_user_id, { eventId: entry.eventId, ignoreSandbox: options.ignoreSandbox, v2: storedV2Customer(body.v2) });
  }
  // An event stored without a usable timestamp (or stamped past its receive time's bound) was
  // ordered at the time kept in event_at.
  return describeEventEffects((entry.body as { event: BillingEvent }).event, new Date(entry.eventAt), { ...options, recorded: true });
}

export async function rebuildBilling(requested: RebuildOptions): Promise<RebuildReport> {
  const options = { ...requested, ignoreSandbox: requested.ignoreSandbox ?? getConfig().billingIgnoreSandbox };
  const { customers, events } = await findCustomers(options);
  const changed: CustomerChange[] = [];
  let done = 0;
  for (const customer of customers) {
    const entries = await callDb<StoredEntry[]>('billing_events_by_id', { p_event_ids: customer.eventIds });
    const plans = entries.map((entry) => ({ eventId: entry.eventId, plan: planOf(entry, options) }));
    let result: { before: RebuildRow[]; after: RebuildRow[] };
    try {
      result = await callDb('billing_rebuild_group', { p_ids: customer.ids, p_plans: plans, p_apply: options.apply });
    } catch (error) {
      // The database joined these ids with others whose old events this run did not read (recorded
      // without plans, by a version older than the fold): a second run sees them together.
      if (!(error instanceof DbError) || error.reason !== 'billing_plans_missing') throw error;
      throw new Error(`Customer ${customer.ids[0]} shares a history with events this run did not read; run it again.`, { cause: error });
    }
    if (JSON.stringify(result.before) !== JSON.stringify(result.after)) changed.push({ ids: customer.ids, ...result });
    options.onProgress?.(++done, customers.length);
  }
  return { customers: customers.length, events, changed };
}

/**
 * The customers of the log: ids joined by every entry that names them together (one customer's
 * aliases, a TRANSFER's two sides), with the entries filed under them. One pass over the log.
 */
async function findCustomers(options: RebuildOptions & { ignoreSandbox: boolean }): Promise<{ customers: { ids: string[]; eventIds: string[] }[]; events: number }> {
  const parent = new Map<string, string>();
  const find = (id: string): string => {
    let root = id;
    while (parent.get(root) !== root) {
      if (!parent.has(root)) parent.set(root, root);
      else root = parent.get(root)!;
    }
    for (let at = id; at !== root; ) {
      const next = parent.get(at)!;
      parent.set(at, root);
      at = next;
    }
    return root;
  };
  const union = (a: string, b: string) => {
    const [ra, rb] = [find(a), find(b)];
    if (ra !== rb) parent.set(rb, ra);
  };
  const filed = new Map<string, string[]>();
  let after: string | null = null;
  let events = 0;
  for (;;) {
    const page: StoredEntry[] = await callDb<StoredEntry[]>('billing_events_page', { p_after_event_id: after, p_limit: options.pageSize ?? 1000 });
    if (page.length === 0) break;
    for (const entry of page) {
      events++;
      const plan = planOf(entry, options);
      const linked = plan.ignoredReason === null ? plan.linkedIds : [];
      // An entry the current code ignores still belongs to whoever it was filed under (its stored plan must be replaced).
      const subject = plan.ignoredReason === null ? plan.subjectId : entry.subjectId;
      if (!subject) continue;
      for (const id of [subject, ...linked]) union(subject, id);
      filed.set(subject, [...(filed.get(subject) ?? []), entry.eventId]);
    }
    after = page[page.length - 1]!.eventId;
  }
  const byRoot = new Map<string, { ids: string[]; eventIds: string[] }>();
  for (const id of parent.keys()) {
    const customer = byRoot.get(find(id)) ?? { ids: [], eventIds: [] };
    customer.ids.push(id);
    customer.eventIds.push(...(filed.get(id) ?? []));
    byRoot.set(find(id), customer);
  }
  return { customers: [...byRoot.values()].filter((customer) => customer.eventIds.length > 0), events };
}

/**
 * One line per row that differs, for people: `user pro (product, env): before -> after`; with the
 * purchase (`, purchase <id>`) where the customer has rows of more than one purchase of the
 * product, or a row was keyed anew (a row kept from before sources were purchases).
 */
export function describeChange(change: CustomerChange): string[] {
  const product = (row: RebuildRow) => `${row.appUserId} ${row.entitlementId} (${row.productId ?? 'no product'}, ${row.environment ?? 'PRODUCTION'}`;
  const keysOf = new Map<string, Set<string>>();
  for (const row of [...change.before, ...change.after]) keysOf.set(product(row), (keysOf.get(product(row)) ?? new Set()).add(row.sourceKey));
  const key = (row: RebuildRow) => `${product(row)}${(keysOf.get(product(row))?.size ?? 0) > 1 ? `, purchase ${row.purchase ?? 'unknown'}` : ''})`;
  const show = (row: RebuildRow | undefined) => (row
    ? `${row.status}${row.expiresAt ? ` until ${row.expiresAt}` : ' forever'}${row.graceExpiresAt ? ` (grace ${row.graceExpiresAt})` : ''}${row.willRenew ? ', renewing' : ''}`
    : 'no row');
  const before = new Map(change.before.map((row) => [`${key(row)}\n${row.sourceKey}`, row]));
  const after = new Map(change.after.map((row) => [`${key(row)}\n${row.sourceKey}`, row]));
  return [...new Set([...before.keys(), ...after.keys()])]
    .filter((k) => JSON.stringify(before.get(k)) !== JSON.stringify(after.get(k)))
    .map((k) => `${k.split('\n')[0]}: ${show(before.get(k))} -> ${show(after.get(k))}`);
}
