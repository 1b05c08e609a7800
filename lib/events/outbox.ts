import type { DatabaseAdapter } from '../db/adapter.ts';
import { callDb } from '../db/index.ts';
import type { EventType } from './schemas.ts';

/**
 * The outbox's database calls (supabase/schemas/10_events.sql). The events themselves are written
 * by the database, in the transactions that change what they tell; the service only moves them.
 */

/** An event as the outbox returns it (times as timestamptz JSON strings). */
export interface StoredEvent {
  event_id: string;
  type: EventType;
  user_id: string;
  sequence: number;
  data: Record<string, unknown>;
  created_at: string;
}

/** A delivery claimed for an attempt: its event, which attempt this is, and when the first was. */
export interface ClaimedDelivery extends StoredEvent {
  attempts: number;
  first_attempt_at: string;
}

export type DeliveryOutcome =
  | { event_id: string; outcome: 'delivered' }
  | { event_id: string; outcome: 'retry'; retry_at: string; error: string }
  | { event_id: string; outcome: 'dead'; error: string };

export interface EndpointStatus {
  id: string;
  types: string[] | null;
  registered_at: string;
  retired_at: string | null;
  /** When a server's settings last named it (to within an hour). */
  named_at: string;
  /** When it is retired unless a server names it again; null: retired. */
  retires_at: string | null;
  pending: number;
  oldest_pending_at: string | null;
  next_attempt_at: string | null;
  dead: number;
  last_delivered_at: string | null;
  last_failure: { event_id: string; at: string; error: string; attempts: number } | null;
}

export interface OutboxStatus {
  endpoints: EndpointStatus[];
  events: number;
  last_event_at: string | null;
  /** Told access whose end has passed and that no scan has told yet. */
  lapses_due: number;
}

export interface DeadLetter {
  endpoint_id: string;
  event_id: string;
  type: EventType;
  user_id: string;
  sequence: number;
  created_at: string;
  attempts: number;
  first_attempt_at: string | null;
  last_attempt_at: string | null;
  last_error: string | null;
}

/** Tell the access whose told end has passed: at most `limit` users a call. */
export function tellLapses(limit: number): Promise<{ users: string[]; more: boolean }> {
  return callDb('outbound_tell_lapses', { p_limit: limit });
}

/** The endpoints the settings name now; those no server has named for 3 days are retired (an outbox run). */
export function setEndpoints(endpoints: Array<{ id: string; types: string[] | null }>): Promise<number> {
  return callDb('outbound_set_endpoints', { p_endpoints: endpoints });
}

/**
 * The endpoints a server's settings name, added (or updated, or brought back), no other retired:
 * through `db` itself, as the port opens it (the port's calls wait for that open).
 */
export async function addEndpoints(endpoints: Array<{ id: string; types: string[] | null }>, db: DatabaseAdapter): Promise<void> {
  await db.call('outbound_add_endpoints', { p_endpoints: endpoints });
}

/**
 * Put back any queue's row missing beside its pending deliveries (a claim finds a user's head from
 * that row; a delivery written while the migration that made the rows ran has none): as the server
 * opens the database. (The daily maintenance does the same in the database: outbound_maintain.)
 */
export async function mendQueues(db: DatabaseAdapter): Promise<void> {
  await db.call('outbound_mend_queues', {});
}

/**
 * Lease up to `limit` users' due heads to an attempt: at most `retries` retries first, then first
 * attempts in the places left (each kind in the order its users' queues came due).
 */
export function claimDeliveries(endpointId: string, counts: { limit: number; retries: number }, leaseSeconds: number): Promise<ClaimedDelivery[]> {
  return callDb('outbound_claim', { p_endpoint_id: endpointId, p_limit: counts.limit, p_lease_seconds: leaseSeconds, p_retry_limit: counts.retries });
}

export function settleDeliveries(endpointId: string, outcomes: DeliveryOutcome[]): Promise<number> {
  return callDb('outbound_settle', { p_endpoint_id: endpointId, p_results: outcomes });
}

/** Send again one event, or those written in [from, to), to one endpoint or all. Returns how many deliveries. */
export function replayEvents(target: { eventId?: string; from?: Date; to?: Date; endpointId?: string }): Promise<number> {
  return callDb('outbound_replay', {
    p_event_id: target.eventId ?? null,
    p_from: target.from?.toISOString() ?? null,
    p_to: target.to?.toISOString() ?? null,
    p_endpoint_id: target.endpointId ?? null,
  });
}

export function readOutboxStatus(): Promise<OutboxStatus> {
  return callDb('outbound_status', {});
}

/** Null when `endpointId` names no endpoint ever registered. */
export function readDeadLetters(endpointId: string | null, limit: number): Promise<DeadLetter[] | null> {
  return callDb('outbound_dead_letters', { p_endpoint_id: endpointId, p_limit: limit });
}

/** Events written since `since` (inclusive), oldest first; after the event `after` (the last of a full page), when given. */
export function readEventsSince(since: Date, limit: number, after?: string): Promise<StoredEvent[]> {
  return callDb('outbound_events_since', { p_since: since.toISOString(), p_limit: limit, p_after: after ?? null });
}
