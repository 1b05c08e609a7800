import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { DomainError } from '../errors.ts';
import { readRevenueCatJson } from './client.ts';

/**
 * RevenueCat REST API v2, read-only: what v1's record cannot say, each subscription and one-time
 * purchase of a customer with EVERY entitlement it grants (v1 shows, per entitlement, only the
 * purchase that lasts longest), and whether a one-time purchase is owned or refunded.
 *
 *   GET {apiUrl}/v2/projects/{project_id}/customers/{customer_id}/subscriptions  (list-subscriptions)
 *   GET {apiUrl}/v2/projects/{project_id}/customers/{customer_id}/purchases      (list-purchases)
 *   GET {apiUrl}/v2/projects/{project_id}/products/{product_id}                  (get-product)
 *
 * v2 names products by RevenueCat's own id (`prod...`); webhooks and v1 by the store's identifier,
 * so each product is looked up once per process (its `store_identifier` never changes), at most
 * MAX_PRODUCT_LOOKUPS a sync. Lists are followed through `next_page` up to MAX_PAGES, and only
 * while it stays in the project's part of the API (nextPageUrl). Bounded like the v1 client (a timeout per request,
 * the caller's deadline), but never retried: v2 only completes v1's record, and a sync without it
 * still converges as v1 alone does (the caller logs the failure and goes on). The key travels only
 * in the Authorization header and is never logged.
 */
export interface RevenueCatV2Options {
  apiUrl: string;
  apiKey: string;
  projectId: string;
  /** Per request. */
  timeoutMs: number;
  /** Epoch ms by which every request must be over. */
  deadline?: number;
  /**
   * Retries of a request after a 5xx, a timeout or a network failure, and whether a short 429 is
   * waited out (default 0: beside v1, v2 is not worth a wait; alone it is the record, retried as
   * v1 is).
   */
  retries?: number;
}

/** A customer as v2 lists it, trimmed to what the snapshot reads (kept beside v1's record in the log). */
export interface V2Customer {
  subscriptions: V2Item[];
  purchases: V2Item[];
}

export interface V2Item {
  /** RevenueCat's own id of the subscription (`sub...`) or purchase (`purc...`); absent in snapshots stored before it was kept. */
  itemId?: string;
  /** The store's product identifier (as webhooks name it); null when v2 names no product (a promotional grant). */
  productId: string | null;
  /** Upper case, as webhooks spell it (APP_STORE, PLAY_STORE, ...). */
  store: string;
  environment: 'PRODUCTION' | 'SANDBOX';
  /** Lookup keys (the entitlement identifiers webhooks send): every entitlement it grants. */
  entitlementIds: string[];
  /** false when v2 paged the entitlement list and more than one page was not read. */
  entitlementsComplete: boolean;
  /** Subscriptions: trialing, active, expired, in_grace_period, in_billing_retry, paused, ...; purchases: owned, refunded. */
  status: string;
  /** Subscriptions only. */
  givesAccess: boolean | null;
  autoRenewalStatus: string | null;
  /** Subscriptions: ends_at (ms); purchases: null. */
  endsAt: number | null;
  startsAt: number | null;
  /** store_subscription_identifier / store_purchase_identifier. */
  storeIdentifier: string | null;
}

/**
 * A request to v2 that did not give an answer the sync can use. `kind` says whose turn it is, as
 * v1's DomainError codes do (upstream_unavailable, upstream_rejected, upstream_invalid).
 */
export class RevenueCatV2Error extends Error {
  readonly kind: 'unavailable' | 'rejected' | 'invalid';
  readonly retryAfterSeconds: number | undefined;
  /** A 429: retryAfterSeconds is RevenueCat's own Retry-After (waited out when short), not advice. */
  readonly rateLimited: boolean;
  constructor(message: string, kind: RevenueCatV2Error['kind'] = 'invalid', retryAfterSeconds?: number, rateLimited = false) {
    super(message);
    this.kind = kind;
    this.retryAfterSeconds = retryAfterSeconds;
    this.rateLimited = rateLimited;
  }
}

/** At most this many pages of one list are read (20 items each by default). */
export const MAX_PAGES = 10;

/**
 * At most this many products are looked up (get-product) for one customer's sync: those the
 * process knows already cost nothing. A customer whose purchases name more products this process
 * has not seen gets a sync without v2 (the caller's "v1's alone"), and the lookups made are kept,
 * so the next sync goes on from there. Two lists of MAX_PAGES pages could otherwise name hundreds.
 */
export const MAX_PRODUCT_LOOKUPS = 20;

const entitlementListSchema = z.looseObject({
  items: z.array(z.looseObject({ id: z.string().min(1).optional(), lookup_key: z.string().min(1) })),
  next_page: z.string().nullable().optional(),
});

const subscriptionSchema = z.looseObject({
  object: z.literal('subscription'),
  id: z.string().optional(),
  product_id: z.string().nullable(),
  starts_at: z.number().nullable().optional(),
  ends_at: z.number().nullable().optional(),
  gives_access: z.boolean(),
  auto_renewal_status: z.string(),
  status: z.string(),
  entitlements: entitlementListSchema,
  environment: z.enum(['production', 'sandbox']),
  store: z.string(),
  store_subscription_identifier: z.string().nullable().optional(),
});

const purchaseSchema = z.looseObject({
  object: z.literal('purchase'),
  id: z.string().optional(),
  product_id: z.string(),
  purchased_at: z.number().nullable().optional(),
  status: z.string(),
  entitlements: entitlementListSchema,
  environment: z.enum(['production', 'sandbox']),
  store: z.string(),
  store_purchase_identifier: z.string().nullable().optional(),
});

const listSchema = <T extends z.ZodType>(item: T) => z.looseObject({ object: z.literal('list'), items: z.array(item), next_page: z.string().nullable().optional() });
const productSchema = z.looseObject({ object: z.literal('product'), id: z.string(), store_identifier: z.string().min(1) });

/** RevenueCat product id -> store identifier, per API and project (products never change it). */
const storeIdentifiers = new Map<string, string>();
const MAX_CACHED_PRODUCTS = 10_000;

export async function fetchV2Customer(customerId: string, options: RevenueCatV2Options): Promise<V2Customer> {
  return (await readItems(customerId, options)).customer;
}

/**
 * The whole record as v2 ALONE reads it (no v1 key; docs/sync.md, "Which record a sync reads"):
 * the items fetchV2Customer lists, and what v1's record says beside them, from
 *
 *   GET .../customers/{customer_id}                      (get-customer: active_entitlements)
 *   GET .../customers/{customer_id}/active_entitlements  (list-customer-active-entitlements, past the first page)
 *   GET .../customers/{customer_id}/aliases              (list-customer-aliases)
 *   GET .../entitlements/{entitlement_id}                (get-entitlement: a lookup key no item names)
 *
 * null when RevenueCat has no such customer (get-customer answers 404; v2, unlike v1, creates none).
 * Retried as v1's client is (options.retries); its failures are RevenueCatV2Error with a kind.
 */
export interface V2Record extends V2Customer {
  /** RevenueCat's clock when it answered get-customer (its Date header, to the second), as v1's request_date_ms. */
  requestDateMs: number;
  /** The entitlements active now, by lookup key, each until when (ms; null: no end). */
  activeEntitlements: { lookupKey: string; expiresAt: number | null }[];
  /** The customer's first id (its earliest alias), as v1's original_app_user_id. */
  originalCustomerId: string | null;
}

const activeEntitlementSchema = z.looseObject({ entitlement_id: z.string().min(1), expires_at: z.number().nullable().optional() });
const customerSchema = z.looseObject({
  object: z.literal('customer'),
  id: z.string(),
  active_entitlements: z.looseObject({ items: z.array(activeEntitlementSchema), next_page: z.string().nullable().optional() }).nullable().optional(),
});
const aliasSchema = z.looseObject({ id: z.string().min(1), created_at: z.number() });
const entitlementSchema = z.looseObject({ object: z.literal('entitlement'), id: z.string(), lookup_key: z.string().min(1) });

export async function fetchV2Record(customerId: string, options: RevenueCatV2Options): Promise<V2Record | null> {
  const base = `/v2/projects/${encodeURIComponent(options.projectId)}`;
  const path = `${base}/customers/${encodeURIComponent(customerId)}`;
  const askedAt = Date.now();
  let answer: Answer;
  try {
    answer = await getJson(path, options, 'customer');
  } catch (error) {
    if (error instanceof CustomerMissing) return null;
    throw error;
  }
  const customer = customerSchema.safeParse(answer.body);
  if (!customer.success) throw new RevenueCatV2Error('RevenueCat v2 answered with a body that is not a customer.');
  const firstPage = customer.data.active_entitlements;
  const active = firstPage
    ? [...firstPage.items, ...(firstPage.next_page ? await readList(firstPage.next_page, activeEntitlementSchema, options) : [])]
    : await readList(`${path}/active_entitlements`, activeEntitlementSchema, options);
  const { customer: items, lookupKeys } = await readItems(customerId, options);
  const aliases = await readList(`${path}/aliases`, aliasSchema, options);
  for (const { entitlement_id: id } of active) {
    if (lookupKeys.has(id)) continue;
    const entitlement = entitlementSchema.safeParse((await getJson(`${base}/entitlements/${encodeURIComponent(id)}`, options)).body);
    if (!entitlement.success) throw new RevenueCatV2Error('RevenueCat v2 answered with a body that is not an entitlement.');
    lookupKeys.set(id, entitlement.data.lookup_key);
  }
  const dated = answer.date === null ? Number.NaN : Date.parse(answer.date);
  const original = [...aliases].sort((a, b) => a.created_at - b.created_at)[0];
  return {
    ...items,
    requestDateMs: Number.isFinite(dated) ? dated : askedAt,
    activeEntitlements: active.map((entitlement) => ({ lookupKey: lookupKeys.get(entitlement.entitlement_id)!, expiresAt: entitlement.expires_at ?? null })),
    originalCustomerId: original?.id ?? null,
  };
}

/** The customer's subscriptions and purchases, and the lookup key of each entitlement id they name. */
async function readItems(customerId: string, options: RevenueCatV2Options): Promise<{ customer: V2Customer; lookupKeys: Map<string, string> }> {
  const base = `/v2/projects/${encodeURIComponent(options.projectId)}`;
  const customer = `${base}/customers/${encodeURIComponent(customerId)}`;
  const subscriptions = await readList(`${customer}/subscriptions`, subscriptionSchema, options);
  const purchases = await readList(`${customer}/purchases`, purchaseSchema, options);
  const productIds = [...new Set([...subscriptions, ...purchases].map((item) => item.product_id).filter((id): id is string => id !== null))];
  const unknown = productIds.filter((id) => !storeIdentifiers.has(cacheKey(options, id)));
  for (const id of unknown.slice(0, MAX_PRODUCT_LOOKUPS)) await storeIdentifierOf(id, base, options);
  if (unknown.length > MAX_PRODUCT_LOOKUPS) {
    throw new RevenueCatV2Error(`RevenueCat v2 names ${unknown.length} products this instance has not looked up; ${MAX_PRODUCT_LOOKUPS} were, the rest wait for the next sync.`);
  }
  const productOf = (id: string | null) => (id === null ? null : storeIdentifiers.get(cacheKey(options, id)) ?? null);
  const lookupKeys = new Map<string, string>();
  for (const item of [...subscriptions, ...purchases]) {
    for (const entitlement of item.entitlements.items) if (entitlement.id) lookupKeys.set(entitlement.id, entitlement.lookup_key);
  }
  const common = (item: z.output<typeof subscriptionSchema> | z.output<typeof purchaseSchema>) => ({
    itemId: item.id,
    productId: productOf(item.product_id),
    store: item.store.toUpperCase(),
    environment: item.environment === 'sandbox' ? 'SANDBOX' as const : 'PRODUCTION' as const,
    entitlementIds: [...new Set(item.entitlements.items.map((entitlement) => entitlement.lookup_key))],
    entitlementsComplete: !item.entitlements.next_page,
    status: item.status,
  });
  return {
    lookupKeys,
    customer: {
      subscriptions: subscriptions.map((item) => ({
        ...common(item),
        givesAccess: item.gives_access,
        autoRenewalStatus: item.auto_renewal_status,
        endsAt: item.ends_at ?? null,
        startsAt: item.starts_at ?? null,
        storeIdentifier: item.store_subscription_identifier ?? null,
      })),
      purchases: purchases.map((item) => ({
        ...common(item),
        givesAccess: null,
        autoRenewalStatus: null,
        endsAt: null,
        startsAt: item.purchased_at ?? null,
        storeIdentifier: item.store_purchase_identifier ?? null,
      })),
    },
  };
}

const cacheKey = (options: RevenueCatV2Options, productId: string) => `${options.apiUrl}\n${options.projectId}\n${productId}`;

async function storeIdentifierOf(productId: string, base: string, options: RevenueCatV2Options): Promise<void> {
  const key = cacheKey(options, productId);
  if (storeIdentifiers.has(key)) return;
  const product = productSchema.safeParse((await getJson(`${base}/products/${encodeURIComponent(productId)}`, options)).body);
  if (!product.success) throw new RevenueCatV2Error('RevenueCat v2 answered with a body that is not a product.');
  if (storeIdentifiers.size >= MAX_CACHED_PRODUCTS) storeIdentifiers.clear();
  storeIdentifiers.set(key, product.data.store_identifier);
}

async function readList<T extends z.ZodType>(path: string, item: T, options: RevenueCatV2Options): Promise<z.output<T>[]> {
  const schema = listSchema(item);
  const items: z.output<T>[] = [];
  let next: string | null | undefined = path;
  for (let page = 0; next; page++) {
    if (page === MAX_PAGES) throw new RevenueCatV2Error(`RevenueCat v2 lists more than ${MAX_PAGES} pages at ${path}.`);
    // next_page is a path on the same API, within this project's part of v2 (nextPageUrl): anything else is not followed.
    nextPageUrl(next, options);
    const parsed = schema.safeParse((await getJson(next, options)).body);
    if (!parsed.success) {
      const where = parsed.error.issues.slice(0, 3).map((issue) => issue.path.join('.') || '(body)').join(', ');
      throw new RevenueCatV2Error(`RevenueCat v2 answered with a body that is not a list (at ${where}).`);
    }
    items.push(...(parsed.data.items as z.output<T>[]));
    next = parsed.data.next_page;
  }
  return items;
}

/**
 * Where a list's page is read: `next_page` is a path on the same API (`/v2/projects/{project_id}/...`,
 * under REVENUECAT_API_URL's own path when that has one). It is resolved as a URL first (so `..`,
 * `%2e%2e` and backslashes are what the URL means, not what the text looks like; an encoded `/` or
 * `\` is refused outright), and followed only
 * when it is still on the API's origin and under this project's part of v2: an answer can never send
 * the secret key elsewhere, not to v1 (`/v2/../v1/...`) and not to another project.
 */
export function nextPageUrl(nextPage: string, options: Pick<RevenueCatV2Options, 'apiUrl' | 'projectId'>): URL {
  const api = new URL(options.apiUrl);
  const within = `${api.pathname.replace(/\/+$/, '')}/v2/projects/${encodeURIComponent(options.projectId)}/`;
  let url: URL | undefined;
  try {
    url = nextPage.startsWith('/v2/') ? new URL(`${options.apiUrl.replace(/\/+$/, '')}${nextPage}`) : undefined;
  } catch {
    url = undefined;
  }
  // An encoded slash or backslash is left as it is by URL rules, but some servers and proxies decode it into a separator.
  if (!url || url.origin !== api.origin || !url.pathname.startsWith(within) || /%2f|%5c/i.test(url.pathname) || url.username || url.password) {
    throw new RevenueCatV2Error('RevenueCat v2 answered a next_page outside this project\'s part of its API; it was not followed.');
  }
  return url;
}

/** A 404 of get-customer: RevenueCat has no customer of this id (v2 never creates one). */
class CustomerMissing extends Error {}

async function getJson(path: string, options: RevenueCatV2Options, missing?: 'customer'): Promise<Answer> {
  const retries = options.retries ?? 0;
  for (let attempt = 0; ; attempt++) {
    try {
      return await getJsonOnce(path, options, missing);
    } catch (error) {
      const again = error instanceof RevenueCatV2Error && error.kind === 'unavailable' && attempt < retries;
      // A 429 is waited out only when RevenueCat asks for a short wait (as v1's client does).
      const waitMs = !again ? 0 : error.rateLimited ? (error.retryAfterSeconds ?? 60) * 1000 : 200 * 2 ** attempt + Math.floor(Math.random() * 200 * 2 ** attempt);
      const left = options.deadline === undefined ? Infinity : options.deadline - Date.now();
      if (!again || waitMs > 3000 || waitMs + 100 > left) throw error;
      await sleep(waitMs);
    }
  }
}

/** An answer's JSON body, and its Date header (RevenueCat's clock, to the second). */
interface Answer { body: unknown; date: string | null }

async function getJsonOnce(path: string, options: RevenueCatV2Options, missing?: 'customer'): Promise<Answer> {
  const left = options.deadline === undefined ? Infinity : options.deadline - Date.now();
  if (left < 100) throw new RevenueCatV2Error('No time was left to ask RevenueCat v2.', 'unavailable', 30);
  let response: Response;
  try {
    response = await fetch(`${options.apiUrl}${path}`, {
      headers: { authorization: `Bearer ${options.apiKey}`, accept: 'application/json' },
      signal: AbortSignal.timeout(Math.min(options.timeoutMs, left)),
      redirect: 'error',
    });
  } catch (error) {
    throw new RevenueCatV2Error((error as Error).name === 'TimeoutError' ? 'RevenueCat v2 did not answer in time.' : 'RevenueCat v2 could not be reached.', 'unavailable', 30);
  }
  if (response.status === 404 && missing === 'customer') {
    await response.body?.cancel();
    throw new CustomerMissing();
  }
  if (response.status !== 200) {
    await response.body?.cancel();
    const hint = response.status === 401 || response.status === 403 ? ': check REVENUECAT_V2_SECRET_API_KEY and REVENUECAT_PROJECT_ID' : '';
    const retryAfter = Number(response.headers.get('retry-after'));
    throw response.status === 429 || response.status >= 500
      ? new RevenueCatV2Error(`RevenueCat v2 answered ${response.status}.`, 'unavailable',
        response.status === 429 && Number.isFinite(retryAfter) && retryAfter >= 0 ? Math.ceil(retryAfter) : response.status === 429 ? 60 : 30, response.status === 429)
      : new RevenueCatV2Error(`RevenueCat v2 answered ${response.status}${hint}.`, 'rejected');
  }
  try {
    // Held to the same rules as v1's answers: capped, UTF-8, storable (lib/revenuecat/client.ts).
    return { body: await readRevenueCatJson(response), date: response.headers.get('date') };
  } catch (error) {
    throw new RevenueCatV2Error(error instanceof DomainError && error.operatorDetail ? `RevenueCat v2: ${error.operatorDetail}` : 'RevenueCat v2 answered with a body that could not be read.');
  }
}

const storedItemSchema = z.object({
  itemId: z.string().optional(),
  productId: z.string().nullable(),
  store: z.string(),
  environment: z.enum(['PRODUCTION', 'SANDBOX']),
  entitlementIds: z.array(z.string()),
  entitlementsComplete: z.boolean(),
  status: z.string(),
  givesAccess: z.boolean().nullable(),
  autoRenewalStatus: z.string().nullable(),
  endsAt: z.number().nullable(),
  startsAt: z.number().nullable(),
  storeIdentifier: z.string().nullable(),
});
const storedCustomerSchema = z.object({ subscriptions: z.array(storedItemSchema), purchases: z.array(storedItemSchema) });

const storedRecordSchema = storedCustomerSchema.extend({
  requestDateMs: z.number().int().nonnegative().max(8.64e15),
  activeEntitlements: z.array(z.object({ lookupKey: z.string(), expiresAt: z.number().nullable() })),
  originalCustomerId: z.string().nullable(),
});

/** What a snapshot read by v2 alone stored (trimV2Snapshot), or null: not of this shape. */
export function storedV2Record(value: unknown): V2Record | null {
  const parsed = storedRecordSchema.safeParse(value);
  return parsed.success ? parsed.data : null;
}

/** What a stored snapshot kept of REST v2 (trimSnapshot), or null: none, or not of this shape. */
export function storedV2Customer(value: unknown): V2Customer | null {
  const parsed = storedCustomerSchema.safeParse(value);
  return parsed.success ? parsed.data : null;
}

/**
 * Delete a customer at RevenueCat (REST v2 `DELETE /v2/projects/{project_id}/customers/{customer_id}`),
 * for REVENUECAT_DELETE_ON_ERASE (lib/billing/erasure.ts). Done when RevenueCat answers 2xx, or 404
 * (no such customer: nothing left to delete). Anything else throws RevenueCatV2Error and the
 * deletion is tried again later. Deleting the customer cancels no App Store or Play subscription.
 */
export async function deleteV2Customer(customerId: string, options: RevenueCatV2Options): Promise<'deleted' | 'not_found'> {
  let response: Response;
  try {
    response = await fetch(`${options.apiUrl}/v2/projects/${encodeURIComponent(options.projectId)}/customers/${encodeURIComponent(customerId)}`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${options.apiKey}`, accept: 'application/json' },
      signal: AbortSignal.timeout(options.timeoutMs),
      redirect: 'error',
    });
  } catch (error) {
    throw new RevenueCatV2Error((error as Error).name === 'TimeoutError' ? 'RevenueCat v2 did not answer in time.' : 'RevenueCat v2 could not be reached.');
  }
  await response.body?.cancel();
  if (response.status === 404) return 'not_found';
  if (response.status >= 200 && response.status < 300) return 'deleted';
  const hint = response.status === 401 || response.status === 403 ? ': check REVENUECAT_V2_SECRET_API_KEY and REVENUECAT_PROJECT_ID (the key needs write access to customers)' : '';
  throw new RevenueCatV2Error(`RevenueCat v2 answered ${response.status} to a customer deletion${hint}.`);
}
