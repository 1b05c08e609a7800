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
}

/** A customer as v2 lists it, trimmed to what the snapshot reads (kept beside v1's record in the log). */
export interface V2Customer {
  subscriptions: V2Item[];
  purchases: V2Item[];
}

export interface V2Item {
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

export class RevenueCatV2Error extends Error {}

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
  items: z.array(z.looseObject({ lookup_key: z.string().min(1) })),
  next_page: z.string().nullable().optional(),
});

const subscriptionSchema = z.looseObject({
  object: z.literal('subscription'),
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
  const common = (item: z.output<typeof subscriptionSchema> | z.output<typeof purchaseSchema>) => ({
    productId: productOf(item.product_id),
    store: item.store.toUpperCase(),
    environment: item.environment === 'sandbox' ? 'SANDBOX' as const : 'PRODUCTION' as const,
    entitlementIds: [...new Set(item.entitlements.items.map((entitlement) => entitlement.lookup_key))],
    entitlementsComplete: !item.entitlements.next_page,
    status: item.status,
  });
  return {
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
  };
}

const cacheKey = (options: RevenueCatV2Options, productId: string) => `${options.apiUrl}\n${options.projectId}\n${productId}`;

async function storeIdentifierOf(productId: string, base: string, options: RevenueCatV2Options): Promise<void> {
  const key = cacheKey(options, productId);
  if (storeIdentifiers.has(key)) return;
  const product = productSchema.safeParse(await getJson(new URL(`${options.apiUrl}${base}/products/${encodeURIComponent(productId)}`), options));
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
    const parsed = schema.safeParse(await getJson(nextPageUrl(next, options), options));
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

async function getJson(url: URL, options: RevenueCatV2Options): Promise<unknown> {
  const left = options.deadline === undefined ? Infinity : options.deadline - Date.now();
  if (left < 100) throw new RevenueCatV2Error('No time was left to ask RevenueCat v2.');
  let response: Response;
  try {
    response = await fetch(url, {
      headers: { authorization: `Bearer ${options.apiKey}`, accept: 'application/json' },
      signal: AbortSignal.timeout(Math.min(options.timeoutMs, left)),
      redirect: 'error',
    });
  } catch (error) {
    throw new RevenueCatV2Error((error as Error).name === 'TimeoutError' ? 'RevenueCat v2 did not answer in time.' : 'RevenueCat v2 could not be reached.');
  }
  if (response.status !== 200) {
    await response.body?.cancel();
    const hint = response.status === 401 || response.status === 403 ? ': check REVENUECAT_V2_SECRET_API_KEY and REVENUECAT_PROJECT_ID' : '';
    throw new RevenueCatV2Error(`RevenueCat v2 answered ${response.status}${hint}.`);
  }
  try {
    // Held to the same rules as v1's answers: capped, UTF-8, storable (lib/revenuecat/client.ts).
    return await readRevenueCatJson(response);
  } catch (error) {
    throw new RevenueCatV2Error(error instanceof DomainError && error.operatorDetail ? `RevenueCat v2: ${error.operatorDetail}` : 'RevenueCat v2 answered with a body that could not be read.');
  }
}

const storedItemSchema = z.object({
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

/** What a stored snapshot kept of REST v2 (trimSnapshot), or null: none, or not of this shape. */
export function storedV2Customer(value: unknown): V2Customer | null {
  const parsed = storedCustomerSchema.safeParse(value);
  return parsed.success ? parsed.data : null;
}
