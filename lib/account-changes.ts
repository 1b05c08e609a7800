import { getConfig } from './config.ts';
import { DomainError } from './errors.ts';
import { log } from './log.ts';
import { processWide } from './process-wide.ts';

/**
 * "User X's account changed", told inside this process: the code paths that change an account
 * (a billing event or sync that applied something, a wallet linked or unlinked, a league delivery)
 * publish here after their one database call committed, and GET /api/me/events streams it to the
 * user's open pages. The payload is the one the database broadcasts on Supabase Realtime (topic
 * `user:<id>`, event `account_changed`), so an app handles both channels alike: it says what kind
 * of thing changed and when, never what it now is; the app reads that with GET /api/me.
 *
 * Why in-process and not Postgres LISTEN/NOTIFY: the stream is served in local mode only, where
 * one process holds the database (PGlite cannot be shared) and makes every change itself. NOTIFY
 * would need triggers in the schema, a session of its own outside the pool (a transaction pooler
 * such as Supabase's drops LISTEN), and would do on two engines what a Map does in memory.
 * Deployments have many instances, and there the database itself broadcasts (realtime.send).
 */
export const ACCOUNT_CHANGE_KINDS = ['entitlements', 'wallets', 'leagues'] as const;
export type AccountChangeKind = (typeof ACCOUNT_CHANGE_KINDS)[number];

export interface AccountChange {
  what: AccountChangeKind;
  /** When the change was published (ISO 8601). */
  at: string;
}

export type AccountChangeListener = (change: AccountChange) => void;

// One registry per process (processWide): Next bundles each route and page separately, and a
// module-level Map could exist once per bundle, so a webhook's route would publish where no stream listens.
const registry = processWide('account-changes', () => new Map<string, Set<AccountChangeListener>>());

/** Tell every listener of these users (duplicates and nulls skipped) that `what` changed. Never throws. */
export function publishAccountChange(userIds: Iterable<string | null | undefined>, what: AccountChangeKind, now: Date = new Date()): void {
  if (registry.size === 0) return;
  const change: AccountChange = { what, at: now.toISOString() };
  for (const userId of new Set(userIds)) {
    if (!userId) continue;
    for (const listener of registry.get(userId.toLowerCase()) ?? []) {
      try {
        listener(change);
      } catch (error) {
        // A broken stream must not fail the request that changed the account (it has committed).
        log.warn({ err: { message: (error as Error).message } }, 'account change listener failed');
      }
    }
  }
}

/** Listen to one user's changes; the returned function stops listening. */
export function subscribeAccountChanges(userId: string, listener: AccountChangeListener): () => void {
  const key = userId.toLowerCase();
  const own = registry.get(key) ?? new Set();
  own.add(listener);
  registry.set(key, own);
  return () => {
    own.delete(listener);
    if (own.size === 0 && registry.get(key) === own) registry.delete(key);
  };
}

/**
 * The stream's rhythm: a comment every 15 s (well inside the idle limits of proxies and browsers),
 * a new connection every 5 minutes (so no connection lives unbounded; the page catches up on
 * reconnecting), and 2 s before the browser reconnects.
 */
export const ACCOUNT_EVENTS_TIMING = { keepAliveMs: 15_000, maxLifetimeMs: 5 * 60_000, retryMs: 2_000 } as const;

/**
 * At most this many open streams per user: a page per tab, and a few more for a reconnect that
 * overlaps the old connection. More would be one client holding the process's sockets.
 */
export const MAX_ACCOUNT_STREAMS_PER_USER = 10;

/** Refuses another stream to a user who holds MAX_ACCOUNT_STREAMS_PER_USER already (429, retry when one ends). */
export function requireAccountStreamSlot(userId: string): void {
  if (accountChangeListenerCount(userId) < MAX_ACCOUNT_STREAMS_PER_USER) return;
  throw new DomainError('rate_limited', `At most ${MAX_ACCOUNT_STREAMS_PER_USER} open event streams per account; close one (another tab) and retry.`, {
    retryAfterSeconds: Math.ceil(ACCOUNT_EVENTS_TIMING.retryMs / 1000),
  });
}

/** How many listeners this process holds (all users): for tests and the stream's own bound. */
export function accountChangeListenerCount(userId?: string): number {
  if (userId) return registry.get(userId.toLowerCase())?.size ?? 0;
  let count = 0;
  for (const own of registry.values()) count += own.size;
  return count;
}

/**
 * The stream exists where one process sees every change: local mode. A deployment runs many
 * instances, each seeing only its own requests, so there the app subscribes to the database's
 * Realtime broadcasts instead, and this says so.
 */
export function requireAccountEventsServed(): void {
  if (!getConfig().local) {
    throw new DomainError('live_updates_not_served',
      'This deployment sends account changes through Supabase Realtime: subscribe to the private channel "user:<your user id>", event "account_changed". This stream is served in local mode only.');
  }
}
