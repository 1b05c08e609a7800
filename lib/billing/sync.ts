import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { publishAccountChange } from '../account-changes.ts';
import { getConfig } from '../config.ts';
import { callDb, DbError } from '../db/index.ts';
import { DomainError } from '../errors.ts';
import { log } from '../log.ts';
import { fetchSubscriber } from '../revenuecat/client.ts';
import type { SubscriberResponse } from '../revenuecat/subscriber.ts';
import { fetchV2Customer, fetchV2Record, RevenueCatV2Error, type V2Customer, type V2Record } from '../revenuecat/v2.ts';
import { toEntitlementViews, type EntitlementRow, type EntitlementView } from './entitlement-view.ts';
import { describeSnapshot, trimSnapshot, trimV2Snapshot } from './snapshot.ts';
import { describeV2Snapshot } from './snapshot-v2.ts';

/**
 * Bring a subscriber's entitlements to RevenueCat's own record: fetch the customer from the REST
 * API and fold the snapshot into their log like an event (record_billing_snapshot), so a lost
 * delivery, a purchase made before this service existed, a refund or a grant only RevenueCat saw
 * all converge. The paths that run it: the user's "Refresh purchases" (POST /api/me/billing/sync),
 * after a webhook that cannot say everything (run after the response), the sweep
 * (GET /api/cron/billing-sync), and an operator (POST /api/admin/billing/sync, npm run billing:sync).
 *
 * Every call takes a slot of one budget shared by every instance (REVENUECAT_REQUESTS_PER_SECOND),
 * so no path can exceed RevenueCat's rate limit; users' own refreshes together take at most
 * USER_REFRESH_SHARE of it (the sweep and the syncs after webhooks keep the rest), each user at most
 * one per USER_SYNC_INTERVAL_SECONDS and BILLING_USER_REFRESHES_PER_DAY a day. A sync that fails at
 * RevenueCat changes no entitlement and leaves the subscriber marked, so the sweep tries again with
 * a backoff; a sync the budget refused marks nobody (its caller is told when to retry, and a
 * webhook's subscriber is marked already).
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
  /** RevenueCat had no such customer and created it (v1 does; v2 answers 404 and creates none): only the user's own refresh may do that. */
  created: boolean;
}

/** A user may refresh their purchases once per this many seconds. */
export const USER_SYNC_INTERVAL_SECONDS = 5;

/**
 * The most of RevenueCat's budget users' own refreshes take together: half, so a handful of
 * accounts refreshing as fast as they may never take the sweep's or the webhooks' slots.
 */
export const USER_REFRESH_SHARE = 0.5;

export function requireRevenueCat() {
  const revenuecat = getConfig().revenuecat;
  if (!revenuecat) {
    throw new DomainError('sync_not_configured', 'Syncing purchases with RevenueCat is not enabled on this server.', {
      retryAfterSeconds: 3600,
      operatorDetail: 'Set REVENUECAT_SECRET_API_KEY (a v1 secret API key), or REVENUECAT_V2_SECRET_API_KEY and REVENUECAT_PROJECT_ID (v2), to enable the sync routes.',
    });
  }
  return revenuecat;
}

/**
 * Until when this instance found RevenueCat's budget spent (epoch ms). Syncs after webhooks do not
 * ask the database for a slot before then: their subscribers are already marked (in the webhook's
 * own transaction) and the sweep takes them, so a burst of webhooks costs no extra database calls.
 */
let budgetSpentUntil = 0;

/** Forget that RevenueCat's budget was found spent, as a fresh instance starts (tests: each file). */
export function resetBudgetSpent(): void {
  budgetSpentUntil = 0;
}

export async function syncSubscriber(appUserId: string, options: SyncOptions): Promise<SyncResult> {
  const revenuecat = requireRevenueCat();
  const deadline = options.deadline ?? Date.now() + SYNC_BUDGET_MS;
  const budgetSpent = (retryAfterSeconds: number) => new DomainError('upstream_unavailable', 'Too many calls to RevenueCat right now; nothing was changed. Try again later.', {
    retryAfterSeconds: Math.max(1, retryAfterSeconds),
    operatorDetail: 'no slot in the RevenueCat budget in time (REVENUECAT_REQUESTS_PER_SECOND)',
  });
  if (options.reason === 'webhook' && Date.now() < budgetSpentUntil) throw budgetSpent(Math.ceil((budgetSpentUntil - Date.now()) / 1000));
  const byUser = options.reason === 'user';
  const begin = await callDb<{ waitMs?: number; retryAfterSeconds?: number; limitedBy?: 'user' | 'day' | 'budget' }>('billing_sync_begin', {
    p_user_id: byUser ? appUserId : null,
    p_user_interval_seconds: USER_SYNC_INTERVAL_SECONDS,
    p_slot_ms: Math.ceil(1000 / revenuecat.requestsPerSecond),
    p_max_wait_ms: options.maxSlotWaitMs,
    p_user_share: USER_REFRESH_SHARE,
    p_user_daily_limit: getConfig().billingUserRefreshesPerDay,
  });
  if (begin.waitMs === undefined) {
    const retryAfterSeconds = begin.retryAfterSeconds ?? USER_SYNC_INTERVAL_SECONDS;
    if (begin.limitedBy === 'user') {
      throw new DomainError('rate_limited', `Purchases were refreshed a moment ago; try again in ${retryAfterSeconds} s.`, { retryAfterSeconds });
    }
    if (begin.limitedBy === 'day') {
      throw new DomainError('rate_limited', `Purchases were refreshed as often today as one account may; try again in ${formatWait(retryAfterSeconds)}.`, { retryAfterSeconds });
    }
    // Only this instance's own syncs after webhooks read this: a user's refresh always asks, since
    // the users' lane may be spent while the rest of the budget is not.
    if (!byUser) budgetSpentUntil = Math.max(budgetSpentUntil, Date.now() + retryAfterSeconds * 1000);
    // Nobody is marked: the budget says nothing about the subscriber. A webhook's subscriber is
    // marked already (in the webhook's transaction), the sweep's keeps its lease and is due again
    // when it ends, and a user or an operator is told when to retry. (Queueing every refused
    // refresh let a few accounts fill the sweep's queue with their ids.)
    throw budgetSpent(retryAfterSeconds);
  }
  if (begin.waitMs > 0) await sleep(Math.min(begin.waitMs, Math.max(0, deadline - Date.now())));

  const fetchStartedAt = new Date();
  let record: RevenueCatRecord;
  try {
    record = await readRecord(appUserId, revenuecat, deadline);
  } catch (error) {
    // Which RevenueCat was called (host and port: the stand-in under this service's own origin, a
    // proxy, RevenueCat itself), for the log only: the mark and the status name no host.
    log.warn({ appUserId, reason: options.reason, revenuecat: `${revenuecat.standIn ? 'local stand-in at ' : ''}${new URL(revenuecat.apiUrl).host}`, err: describeFailure(error) }, 'billing sync: the call to RevenueCat failed');
    if (error instanceof DomainError) await markFailed(appUserId, options.reason, error);
    throw error;
  }
  if (record.reader === 'none') {
    // RevenueCat had no record of this id (v1 made an empty one just now; v2 answered 404): that
    // says nothing about purchases made under it, so nothing is written; the answer is what is stored.
    const entitlements = await callDb<EntitlementRow[]>('billing_sync_found_nothing', { p_app_user_id: appUserId, p_fetch_started_at: fetchStartedAt });
    return { appUserId, outcome: 'ignored', entitlements: toEntitlementViews(entitlements), created: record.created };
  }
  const result = await recordSnapshot(appUserId, record, fetchStartedAt, options.reason);
  if (result.outcome === 'applied') publishAccountChange([appUserId], 'entitlements');
  return { appUserId, outcome: result.outcome, entitlements: toEntitlementViews(result.entitlements), created: false };
}

/**
 * What a sync read of the customer: v1's record (with v2's items beside it when both keys are set),
 * v2's alone (no v1 key), or nothing (RevenueCat has no such customer).
 */
type RevenueCatRecord =
  | { reader: 'v1'; response: SubscriberResponse; v2: V2Customer | null }
  | { reader: 'v2'; record: V2Record }
  | { reader: 'none'; created: boolean };

/**
 * Which reader: v1 whenever its key is set (v2's items complete it and win where they differ:
 * lib/billing/snapshot.ts completeFromV2), else v2 alone (lib/billing/snapshot-v2.ts). Failures
 * are DomainErrors either way (upstream_unavailable, upstream_rejected, upstream_invalid).
 */
async function readRecord(appUserId: string, revenuecat: ReturnType<typeof requireRevenueCat>, deadline: number): Promise<RevenueCatRecord> {
  if (revenuecat.apiKey !== null) {
    const fetched = await fetchSubscriber(appUserId, { ...revenuecat, apiKey: revenuecat.apiKey, deadline });
    if (fetched.created) return { reader: 'none', created: true };
    return { reader: 'v1', response: fetched.response, v2: await fetchV2IfConfigured(appUserId, revenuecat, deadline) };
  }
  try {
    const record = await fetchV2Record(appUserId, { apiUrl: revenuecat.apiUrl, timeoutMs: revenuecat.timeoutMs, deadline, retries: 2, ...revenuecat.v2! });
    return record ? { reader: 'v2', record } : { reader: 'none', created: false };
  } catch (error) {
    if (!(error instanceof RevenueCatV2Error)) throw error;
    const operatorDetail = `RevenueCat: ${error.message}`;
    throw error.kind === 'unavailable'
      ? new DomainError('upstream_unavailable', 'RevenueCat could not give the record now; nothing was changed.', { retryAfterSeconds: error.retryAfterSeconds ?? 30, operatorDetail })
      : error.kind === 'rejected'
        ? new DomainError('upstream_rejected', 'RevenueCat refused this service\'s request; nothing was changed. The operator can see why in the server log.', { operatorDetail })
        : new DomainError('upstream_invalid', 'RevenueCat answered with something this service cannot use; nothing was changed.', { operatorDetail });
  }
}

/**
 * Fold what RevenueCat answered into the subscriber's history. The client held the answer to what
 * any stored JSON must hold; should the snapshot still be something the service cannot describe
 * or the database refuses (a value out of a column's range), that is RevenueCat's data, never the
 * caller's: 502 upstream_invalid, nothing stored, and the subscriber marked with a backoff (not
 * a 400, and not a failure the sweep retries at once, forever).
 */
async function recordSnapshot(appUserId: string, record: Exclude<RevenueCatRecord, { reader: 'none' }>, fetchStartedAt: Date, reason: SyncReason) {
  const refused = async (operatorDetail: string) => {
    const error = new DomainError('upstream_invalid', 'RevenueCat answered with something this service cannot use; nothing was changed.', {
      operatorDetail: `RevenueCat's answer could not be stored: ${operatorDetail}`,
    });
    await markFailed(appUserId, reason, error);
    return error;
  };
  let plan;
  let body;
  try {
    const options = { eventId: `sync:${randomUUID()}`, ignoreSandbox: getConfig().billingIgnoreSandbox };
    plan = record.reader === 'v1' ? describeSnapshot(record.response, appUserId, { ...options, v2: record.v2 }) : describeV2Snapshot(record.record, appUserId, options);
    body = record.reader === 'v1' ? trimSnapshot(record.response, appUserId, record.v2) : trimV2Snapshot(record.record, appUserId);
  } catch (error) {
    throw await refused((error as Error).message);
  }
  try {
    return await callDb<{ outcome: SyncResult['outcome']; entitlements: EntitlementRow[] }>('record_billing_snapshot', {
      p_body: body,
      p_plan: plan,
      p_fetch_started_at: fetchStartedAt,
    });
  } catch (error) {
    if (error instanceof DbError && error.kind === 'invalid') throw await refused(error.message);
    throw error;
  }
}

/** "3 h 20 min", "12 min", "40 s": a wait as a person reads it. */
function formatWait(seconds: number): string {
  if (seconds < 60) return `${seconds} s`;
  const minutes = Math.ceil(seconds / 60);
  return minutes < 60 ? `${minutes} min` : `${Math.floor(minutes / 60)} h${minutes % 60 ? ` ${minutes % 60} min` : ''}`;
}

/**
 * Beside v1: REST v2's list of the customer's purchases with every entitlement each grants, when
 * configured (REVENUECAT_V2_SECRET_API_KEY, REVENUECAT_PROJECT_ID). Its items win where they differ
 * from v1's; when it fails the snapshot is v1's alone, as without v2 (logged, never an error of the sync).
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

/** Leave the subscriber marked, due again after a backoff; the mark keeps what the operator should read. */
async function markFailed(appUserId: string, reason: SyncReason, error: DomainError): Promise<void> {
  await callDb('billing_sync_failed', {
    // Text from outside (an upstream's words) could hold what Postgres cannot store.
    p_app_user_id: appUserId, p_reason: reason, p_error: (error.operatorDetail ?? error.detail).toWellFormed().replaceAll('\u0000', '\\u0000'), p_retry_after_seconds: error.retryAfterSeconds ?? null,
  });
}

/** What a failed sync's log line says: the answer's detail and, for the operator, what lies behind it. */
function describeFailure(error: unknown): Record<string, unknown> {
  return { message: (error as Error).message, ...(error instanceof DomainError && error.operatorDetail ? { operatorDetail: error.operatorDetail } : {}) };
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
      log.warn({ eventId, appUserId, err: describeFailure(error) }, 'billing sync after webhook failed; left for the sweep');
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
  /** Set when the run had nothing to do, and why (no RevenueCat REST key: webhooks alone keep entitlements). */
  nothingToDo?: string;
}

/** What a sweep on a server without a RevenueCat REST key answers: a success, since nothing is wrong. */
export const SWEEP_WITHOUT_REVENUECAT = 'RevenueCat sync is off on this server (no REST API key): webhooks alone keep entitlements, so the sweep has nothing to do.';

/**
 * GET /api/cron/billing-sync: work through due marks (and known subscribers whose access ends soon,
 * or that no snapshot confirmed for 30 days), as many as RevenueCat's budget allows in `budgetMs`,
 * claimed with a lease so two sweeps at once never take the same one. Idempotent; bounded in time.
 */
export async function sweepBillingSync(budgetMs: number): Promise<SweepResult> {
  const started = Date.now();
  // A deployment on webhooks only still has the daily cron job of vercel.json: a run with nothing to
  // do is a success that says so, or the scheduler would report a failure every day.
  if (!getConfig().revenuecat) {
    return { claimed: 0, synced: 0, failed: 0, due: 0, nothingToDo: SWEEP_WITHOUT_REVENUECAT };
  }
  const revenuecat = requireRevenueCat();
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
      log.warn({ appUserId, err: describeFailure(error) }, 'billing sweep: sync failed');
    }
  }
  return { claimed: claimed.length, synced, failed, due: Math.max(0, Number(due) - synced) };
}
