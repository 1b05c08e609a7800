import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { publishAccountChange } from '../account-changes.ts';
import { getConfig } from '../config.ts';
import { callDb } from '../db/index.ts';
import { DomainError } from '../errors.ts';
import { log } from '../log.ts';
import { fetchSubscriber } from '../revenuecat/client.ts';
import { fetchV2Customer, type V2Customer } from '../revenuecat/v2.ts';
import { toEntitlementViews, type EntitlementRow, type EntitlementView } from './entitlement-view.ts';
import { describeSnapshot, trimSnapshot } from './snapshot.ts';

/**
 * Bring a subscriber's entitlements to RevenueCat's own record: fetch the customer from the REST
 * API and fold the snapshot into their log like an event (record_billing_snapshot), so a lost
 * delivery, a purchase made before this service existed, a refund or a grant only RevenueCat saw
 * all converge. The paths that run it: the user's "Refresh purchases" (POST /api/me/billing/sync),
 * after a webhook that cannot say everything (run after the response), the sweep
 * (GET /api/cron/billing-sync), and an operator (POST /api/admin/billing/sync, npm run billing:sync).
 *
 * Every call takes a slot of one budget shared by every instance (REVENUECAT_REQUESTS_PER_SECOND),
 * so no path can exceed RevenueCat's rate limit. A sync that fails changes no entitlement and
 * leaves the subscriber marked, so the sweep tries again with a backoff.
 */
export type SyncReason = 'user' | 'admin' | 'webhook' | 'sweep' | 'cli';

export interface SyncOptions {
  reason: SyncReason;
  /** The longest wait for a slot of RevenueCat's budget; beyond it: 503 and the subscriber stays marked. */
  maxSlotWaitMs: number;
  /** Epoch ms by which the call to RevenueCat must be over (default: SYNC_BUDGET_MS from now). */
  deadline?: number;
}

/**
 * The longest one sync may take, retries and waits included, unless its caller gives a deadline:
 * every path that syncs (a request, after() following a webhook) ends well inside the function's
 * 30 s (vercel.json maxDuration).
 */
export const SYNC_BUDGET_MS = 20_000;

export interface SyncResult {
  appUserId: string;
  outcome: 'applied' | 'stale' | 'ignored';
  /** The subscriber's entitlements after the sync, as GET /api/me shows them. */
  entitlements: EntitlementView[];
  /** RevenueCat had no such customer and created it (v1 does): only the user's own refresh may do that. */
  created: boolean;
}

/** A user may refresh their purchases once per this many seconds. */
export const USER_SYNC_INTERVAL_SECONDS = 5;

export function requireRevenueCat() {
  const revenuecat = getConfig().revenuecat;
  if (!revenuecat) {
    throw new DomainError('sync_not_configured', 'Syncing with RevenueCat needs REVENUECAT_SECRET_API_KEY (a secret API key) on the server.', { retryAfterSeconds: 3600 });
  }
  return revenuecat;
}

/**
 * Until when this instance found RevenueCat's budget spent (epoch ms). Syncs after webhooks do not
 * ask the database for a slot before then: their subscribers are already marked (in the webhook's
 * own transaction) and the sweep takes them, so a burst of webhooks costs no extra database calls.
 */
let budgetSpentUntil = 0;

export async function syncSubscriber(appUserId: string, options: SyncOptions): Promise<SyncResult> {
  const revenuecat = requireRevenueCat();
  const deadline = options.deadline ?? Date.now() + SYNC_BUDGET_MS;
  const budgetSpent = () => new DomainError('upstream_unavailable', 'Too many calls to RevenueCat right now; the subscriber stays marked for the sweep.', {
    retryAfterSeconds: Math.max(1, Math.ceil((budgetSpentUntil - Date.now()) / 1000)),
  });
  if (options.reason === 'webhook' && Date.now() < budgetSpentUntil) throw budgetSpent();
  const begin = await callDb<{ waitMs?: number; retryAfterSeconds?: number; limitedBy?: 'user' | 'budget' }>('billing_sync_begin', {
    p_user_id: options.reason === 'user' ? appUserId : null,
    p_user_interval_seconds: USER_SYNC_INTERVAL_SECONDS,
    p_slot_ms: Math.ceil(1000 / revenuecat.requestsPerSecond),
    p_max_wait_ms: options.maxSlotWaitMs,
  });
  if (begin.waitMs === undefined) {
    const retryAfterSeconds = begin.retryAfterSeconds ?? USER_SYNC_INTERVAL_SECONDS;
    if (begin.limitedBy === 'user') {
      throw new DomainError('rate_limited', `Purchases were refreshed a moment ago; try again in ${retryAfterSeconds} s.`, { retryAfterSeconds });
    }
    budgetSpentUntil = Math.max(budgetSpentUntil, Date.now() + retryAfterSeconds * 1000);
    // A webhook's subscriber is marked already and due now: the sweep takes it, nothing to write.
    if (options.reason !== 'webhook') await markFailed(appUserId, options.reason, 'no slot in the RevenueCat budget in time', retryAfterSeconds);
    throw budgetSpent();
  }
  if (begin.waitMs > 0) await sleep(Math.min(begin.waitMs, Math.max(0, deadline - Date.now())));

  const fetchStartedAt = new Date();
  let fetched;
  try {
    fetched = await fetchSubscriber(appUserId, { ...revenuecat, deadline });
  } catch (error) {
    if (error instanceof DomainError) await markFailed(appUserId, options.reason, error.detail, error.retryAfterSeconds);
    throw error;
  }
  if (fetched.created) {
    // RevenueCat had no record of this id (it made an empty one just now): that says nothing about
    // purchases made under it, so nothing is written; the answer is what is stored.
    const entitlements = await callDb<EntitlementRow[]>('billing_sync_found_nothing', { p_app_user_id: appUserId, p_fetch_started_at: fetchStartedAt });
    return { appUserId, outcome: 'ignored', entitlements: toEntitlementViews(entitlements), created: true };
  }
  const v2 = await fetchV2IfConfigured(appUserId, revenuecat, deadline);
  const plan = describeSnapshot(fetched.response, appUserId, { eventId: `sync:${randomUUID()}`, ignoreSandbox: getConfig().billingIgnoreSandbox, v2 });
  const result = await callDb<{ outcome: SyncResult['outcome']; entitlements: EntitlementRow[] }>('record_billing_snapshot', {
    p_body: trimSnapshot(fetched.response, appUserId, v2),
    p_plan: plan,
    p_fetch_started_at: fetchStartedAt,
  });
  if (result.outcome === 'applied') publishAccountChange([appUserId], 'entitlements');
  return { appUserId, outcome: result.outcome, entitlements: toEntitlementViews(result.entitlements), created: fetched.created };
}

/**
 * REST v2's list of the customer's purchases with every entitlement each grants, when configured
 * (REVENUECAT_V2_SECRET_API_KEY, REVENUECAT_PROJECT_ID). It only completes v1's record: when it
 * fails the snapshot is v1's alone, as without v2 (logged, never an error of the sync).
 */
async function fetchV2IfConfigured(appUserId: string, revenuecat: ReturnType<typeof requireRevenueCat>, deadline: number): Promise<V2Customer | null> {
  if (!revenuecat.v2) return null;
  try {
    return await fetchV2Customer(appUserId, { apiUrl: revenuecat.apiUrl, timeoutMs: revenuecat.timeoutMs, deadline, ...revenuecat.v2 });
  } catch (error) {
    log.warn({ appUserId, err: { message: (error as Error).message } }, 'billing sync: RevenueCat v2 failed; the snapshot is v1\'s alone');
    return null;
  }
}

/** POST /api/admin/billing/sync: `{ "app_user_id": "..." }`. */
export const adminSyncBodySchema = z.object({
  app_user_id: z.string().min(1).max(256).meta({ description: 'The RevenueCat app user id to sync (one this service has received events for)' }),
});

/**
 * Sync a subscriber RevenueCat told this service about (an event named the id). v1 creates any
 * customer it is asked for, so an operator's sync of an unknown id is refused (404) rather than
 * made: only the user's own refresh may create one.
 */
export async function syncKnownSubscriber(appUserId: string, reason: 'admin' | 'cli'): Promise<SyncResult> {
  requireRevenueCat();
  if (!(await callDb<boolean>('billing_subscriber_known', { p_app_user_id: appUserId }))) {
    throw new DomainError('subscriber_unknown', 'No RevenueCat event has named this app user id; the user can refresh their own purchases instead.');
  }
  return syncSubscriber(appUserId, { reason, maxSlotWaitMs: 10_000 });
}

async function markFailed(appUserId: string, reason: SyncReason, error: string, retryAfterSeconds: number | undefined): Promise<void> {
  await callDb('billing_sync_failed', { p_app_user_id: appUserId, p_reason: reason, p_error: error, p_retry_after_seconds: retryAfterSeconds ?? null });
}

/**
 * At most this many syncs after webhooks run at once in one instance. Each is a call to RevenueCat
 * and two database calls, the snapshot's fold among them: unbounded, a burst of webhooks would take
 * the CPU and the pool from the webhooks that follow. Beyond it a subscriber stays marked (in the
 * webhook's own transaction) and the sweep takes it.
 */
export const MAX_SYNCS_AFTER_WEBHOOKS = 2;
let syncsAfterWebhooksInFlight = 0;

/**
 * After a webhook's 200 (Next's `after()`): sync the subscribers it marked, one after another.
 * Never throws: a failure, or no room among MAX_SYNCS_AFTER_WEBHOOKS, leaves the mark for the
 * sweep, and the webhook already answered.
 */
export async function syncMarkedAfterWebhook(appUserIds: string[], eventId: string): Promise<void> {
  if (syncsAfterWebhooksInFlight >= MAX_SYNCS_AFTER_WEBHOOKS) {
    log.info({ eventId, appUserIds: appUserIds.length }, 'billing sync after webhook: busy; left for the sweep');
    return;
  }
  syncsAfterWebhooksInFlight++;
  try {
    await syncEachAfterWebhook(appUserIds, eventId);
  } finally {
    syncsAfterWebhooksInFlight--;
  }
}

async function syncEachAfterWebhook(appUserIds: string[], eventId: string): Promise<void> {
  for (const appUserId of appUserIds) {
    try {
      const result = await syncSubscriber(appUserId, { reason: 'webhook', maxSlotWaitMs: 10_000 });
      log.info({ eventId, appUserId, outcome: result.outcome }, 'billing sync after webhook');
    } catch (error) {
      log.warn({ eventId, appUserId, err: { message: (error as Error).message } }, 'billing sync after webhook failed; left for the sweep');
    }
  }
}

/**
 * How long one sweep may work: well inside the function's time limit (vercel.json maxDuration 30 s),
 * so it answers before Vercel cuts it off; what is left is due in the next run.
 */
export const SWEEP_BUDGET_MS = 20_000;

export interface SweepResult {
  /** Subscribers taken from the queue this run. */
  claimed: number;
  synced: number;
  failed: number;
  /** Marks still due when the run ended (the next run takes them). */
  due: number;
}

/**
 * GET /api/cron/billing-sync: work through due marks (and known subscribers whose access ends soon,
 * or that no snapshot confirmed for 30 days), as many as RevenueCat's budget allows in `budgetMs`,
 * claimed with a lease so two sweeps at once never take the same one. Idempotent; bounded in time.
 */
export async function sweepBillingSync(budgetMs: number): Promise<SweepResult> {
  const revenuecat = requireRevenueCat();
  const started = Date.now();
  // Every sync's call to RevenueCat, retries and waits included, is over by then.
  const deadline = started + budgetMs;
  const limit = Math.max(1, Math.floor((budgetMs / 1000) * revenuecat.requestsPerSecond));
  const { claimed, due } = await callDb<{ claimed: { appUserId: string }[]; due: number }>('billing_sync_claim', {
    p_limit: limit,
    p_lease_seconds: Math.ceil(budgetMs / 1000) + 60,
  });
  let synced = 0;
  let failed = 0;
  for (const { appUserId } of claimed) {
    const left = budgetMs - (Date.now() - started);
    // Out of time: the rest keep their lease and become due again when it ends.
    if (left <= revenuecat.timeoutMs) break;
    try {
      await syncSubscriber(appUserId, { reason: 'sweep', maxSlotWaitMs: left - revenuecat.timeoutMs, deadline });
      synced++;
    } catch (error) {
      failed++;
      log.warn({ appUserId, err: { message: (error as Error).message } }, 'billing sweep: sync failed');
    }
  }
  return { claimed: claimed.length, synced, failed, due: Math.max(0, Number(due) - synced) };
}
