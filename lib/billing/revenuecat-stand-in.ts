import { readFileSync } from 'node:fs';
import path from 'node:path';
import { getConfig, REVENUECAT_STAND_IN_KEY } from '../config.ts';
import { callDb } from '../db/index.ts';
import type { StoredRow } from './explain.ts';

/**
 * A stand-in for RevenueCat's REST API in local mode (REVENUECAT_STAND_IN=1), so "Refresh
 * purchases", the sweep and `npm run billing:sync` can be tried without a RevenueCat account. It
 * answers `GET /v1/subscribers/{app_user_id}` (the only call the service makes without REST v2)
 * in v1's wire format, at this service's own /api/dev/revenuecat (REVENUECAT_API_URL points there),
 * from what the local webhooks said: the customer's rows as their events left them, shown as v1
 * shows a customer (each product a subscription or a one-time purchase, each entitlement pointing
 * to the purchase that lasts longest), so a sync confirms what the webhooks said. Or from a scripted
 * customer: an entry for the id in `revenuecat-stand-in.json` beside the dev key (`.data/`), in v1's
 * `subscriber` shape, answered as it is (to try what webhooks never said: a lost delivery, a
 * purchase made elsewhere).
 *
 * Never in a deployment: the configuration refuses REVENUECAT_STAND_IN outside local mode, and the
 * route answers 404 unless the stand-in is on in local mode.
 */

export interface StandInAnswer {
  status: number;
  body: unknown;
}

/** Whether this process serves the stand-in: local mode with REVENUECAT_STAND_IN=1. */
export function standInServed(): boolean {
  try {
    const config = getConfig();
    return config.local && config.revenuecat?.standIn === true;
  } catch {
    return false;
  }
}

export async function answerAsRevenueCat(appUserId: string, authorization: string | null, now = new Date()): Promise<StandInAnswer> {
  // As RevenueCat answers a request without its secret key.
  if (authorization !== `Bearer ${REVENUECAT_STAND_IN_KEY}`) return { status: 401, body: { code: 7225, message: 'Invalid API key.' } };
  const scripted = scriptedCustomer(appUserId);
  if (scripted) return { status: 200, body: subscriberBody(appUserId, now, scripted) };
  const record = await callDb<{ known: boolean; rows: StoredRow[] }>('billing_stand_in_record', { p_app_user_id: appUserId });
  // v1 creates a customer it does not know, and says so with 201.
  return { status: record.known ? 200 : 201, body: subscriberBody(appUserId, now, recordOf(record.rows)) };
}

export interface V1Customer {
  original_app_user_id?: string;
  entitlements?: Record<string, Record<string, unknown>>;
  subscriptions?: Record<string, Record<string, unknown>>;
  non_subscriptions?: Record<string, Record<string, unknown>[]>;
}

function subscriberBody(appUserId: string, now: Date, customer: V1Customer) {
  return {
    request_date: now.toISOString(),
    request_date_ms: now.getTime(),
    subscriber: {
      original_app_user_id: customer.original_app_user_id ?? appUserId,
      first_seen: now.toISOString(),
      last_seen: now.toISOString(),
      management_url: null,
      original_application_version: null,
      original_purchase_date: null,
      other_purchases: {},
      entitlements: customer.entitlements ?? {},
      subscriptions: customer.subscriptions ?? {},
      non_subscriptions: customer.non_subscriptions ?? {},
      subscriber_attributes: {},
    },
  };
}

/**
 * The customer as v1 would show it, from the rows the events left: a product with a subscription
 * lineage (or a temporary grant, shown as RevenueCat's promotional one) is a subscription, one
 * without (a one-time purchase) a non-subscription; each entitlement points to the purchase that
 * lasts longest, expired ones included (v1 lists them too). Rows moved away by a transfer, and rows
 * without a product, are not shown.
 */
export function recordOf(rows: StoredRow[]): V1Customer {
  const subscriptions: Record<string, Record<string, unknown>> = {};
  const nonSubscriptions: Record<string, Record<string, unknown>[]> = {};
  const entitlements: Record<string, Record<string, unknown>> = {};
  const longest = new Map<string, StoredRow>();
  // v1 keys subscriptions by product and shows each product's latest purchase: with two (bought
  // again after the first expired) the rows come in the order of their source keys, a digest.
  const latestFirst = [...rows].sort((a, b) => purchasedAt(b) - purchasedAt(a) || endOf(b) - endOf(a));
  for (const row of latestFirst) {
    if (row.status === 'transferred' || row.product_id === null) continue;
    const store = row.status === 'temporary' ? 'promotional' : (row.store ?? 'app_store').toLowerCase();
    const sandbox = row.environment?.toUpperCase() === 'SANDBOX';
    if (row.original_transaction_id === null && row.status !== 'temporary') {
      nonSubscriptions[row.product_id] ??= [{
        id: row.transaction_id ?? row.last_event_id, purchase_date: v1Time(row.period_purchased_at ?? row.granted_at), store, is_sandbox: sandbox,
        store_transaction_id: row.transaction_id,
      }];
    } else {
      const issue = row.status === 'grace' || row.status === 'billing_issue';
      subscriptions[row.product_id] ??= {
        purchase_date: v1Time(row.period_purchased_at ?? row.granted_at),
        // Never after purchase_date (the row knows its period and when it was granted, not the
        // subscription's first purchase, which v1 means: the earlier of the two is the closest).
        original_purchase_date: v1Time(earliest(row.granted_at, row.period_purchased_at)),
        expires_date: v1Time(row.expires_at),
        period_type: (row.period_type ?? 'normal').toLowerCase(),
        store,
        is_sandbox: sandbox,
        ownership_type: 'PURCHASED',
        store_transaction_id: row.transaction_id,
        // (A refunded row keeps the renewal its events left: refunds "can be given without cancelling".)
        unsubscribe_detected_at: !row.will_renew && !issue ? v1Time(row.last_event_at) : null,
        billing_issues_detected_at: issue ? v1Time(row.last_event_at) : null,
        grace_period_expires_date: row.status === 'grace' ? v1Time(row.grace_expires_at) : null,
        refunded_at: row.status === 'refunded' ? v1Time(row.expires_at ?? row.last_event_at) : null,
        auto_resume_date: v1Time(row.auto_resume_at),
      };
    }
    const shown = longest.get(row.entitlement_id);
    if (!shown || endOf(row) > endOf(shown)) longest.set(row.entitlement_id, row);
  }
  for (const [entitlementId, row] of longest) {
    entitlements[entitlementId] = {
      product_identifier: row.product_id,
      purchase_date: v1Time(row.period_purchased_at ?? row.granted_at),
      expires_date: v1Time(row.expires_at),
      grace_period_expires_date: row.status === 'grace' ? v1Time(row.grace_expires_at) : null,
    };
  }
  return { entitlements, subscriptions, non_subscriptions: nonSubscriptions };
}

/** v1's times: ISO 8601 in UTC (with the milliseconds the events carried, so a sync confirms them exactly). */
const v1Time = (value: string | null) => (value === null ? null : new Date(value).toISOString());

const purchasedAt = (row: StoredRow) => Date.parse(row.period_purchased_at ?? row.granted_at ?? '') || 0;
const earliest = (a: string | null, b: string | null) => (a === null ? b : b === null ? a : Date.parse(a) <= Date.parse(b) ? a : b);

const endOf = (row: StoredRow) => (row.grants_until === 'infinity' || row.expires_at === null ? Infinity : Math.max(Date.parse(row.expires_at), row.grace_expires_at ? Date.parse(row.grace_expires_at) : 0));

/** A customer scripted for this id in `revenuecat-stand-in.json` beside the dev key, if any. */
function scriptedCustomer(appUserId: string): V1Customer | undefined {
  const file = path.join(/*turbopackIgnore: true*/ path.dirname(getConfig().embeddedDbDir), 'revenuecat-stand-in.json');
  let customers: Record<string, V1Customer>;
  try {
    customers = JSON.parse(readFileSync(/*turbopackIgnore: true*/ file, 'utf8')) as Record<string, V1Customer>;
  } catch {
    return undefined;
  }
  return Object.hasOwn(customers, appUserId) ? customers[appUserId] : undefined;
}
