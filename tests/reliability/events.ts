import { randomUUID } from 'node:crypto';
import type { BillingWebhookBody } from '../../lib/billing/webhook-body.ts';
import { fixture } from '../billing/fixtures.ts';
import { at, delivery, league } from '../leagues/fixtures.ts';
import type { ReliabilityStack } from './stack.ts';

/**
 * Events for the reliability scenarios, built from the billing and leagues test fixtures. Each
 * unique id has exactly one countable effect: a billing event is an INITIAL_PURCHASE for a
 * subscriber of its own (one entitlement row written once), a leagues delivery carries one league
 * of its own (one league row written once). So "effects = unique ids" is a count.
 */

export interface BillingDelivery {
  id: string;
  subscriber: string;
  body: BillingWebhookBody;
  /** The exact bytes sent on every delivery of this id (a redelivery is byte-for-byte the same). */
  text: string;
}

/** A purchase by a new subscriber: a custom app user id, or (asUser) a Supabase user id, whose changes the outbox tells. */
export function purchaseEvent(prefix: string, { asUser = false }: { asUser?: boolean } = {}): BillingDelivery {
  const key = randomUUID();
  const id = `${prefix}-evt-${key}`;
  const subscriber = asUser ? key : `${prefix}-sub-${key}`;
  // A user's purchase is current (the outbox tells what grants now); the corpus's own dates are past.
  const now = Date.now();
  const current = asUser ? { event_timestamp_ms: now, purchased_at_ms: now - 3_600_000, expiration_at_ms: now + 30 * 86_400_000 } : {};
  const body = fixture('initial-purchase', { id, app_user_id: subscriber, aliases: [subscriber], original_app_user_id: subscriber, ...current });
  return { id, subscriber, body, text: JSON.stringify(body) };
}

export interface LeaguesDelivery {
  id: string;
  source: string;
  externalId: string;
  text: string;
}

export function leaguesDelivery(source: string): LeaguesDelivery {
  const externalId = `lg-${randomUUID()}`;
  const id = `dlv-${randomUUID()}`;
  return { id, source, externalId, text: JSON.stringify(delivery(source, { id, leagues: [league(externalId, at(1))] })) };
}

/** Writes counted by the test-only triggers (see stack.ts), per key, for keys with a prefix. */
export async function writesByKey(stack: ReliabilityStack, table: 'entitlements' | 'leagues' | 'wallet_links', keys: string[]): Promise<Map<string, number>> {
  const rows = await stack.sql<{ key: string; writes: number }>(
    'select key, count(*)::int as writes from reliability.writes where tbl = $1 and key = any($2) group by key', [table, keys]);
  return new Map(rows.map((row) => [row.key, row.writes]));
}

/**
 * For a set of billing events: how many are lost (no event row, or no effect) and how many effects
 * were applied more than once (writes beyond the first for one subscriber).
 */
export async function billingOutcome(stack: ReliabilityStack, events: BillingDelivery[]) {
  const ids = events.map((event) => event.id);
  const stored = new Set((await stack.sql<{ event_id: string }>('select event_id from public.billing_events where event_id = any($1)', [ids])).map((row) => row.event_id));
  const writes = await writesByKey(stack, 'entitlements', events.map((event) => event.subscriber));
  const lost = events.filter((event) => !stored.has(event.id) || !writes.has(event.subscriber)).length;
  const duplicatesApplied = [...writes.values()].reduce((total, count) => total + count - 1, 0);
  return { rows: stored.size, effects: writes.size, lost, duplicatesApplied };
}

export async function leaguesOutcome(stack: ReliabilityStack, deliveries: LeaguesDelivery[]) {
  const stored = new Set((await stack.sql<{ delivery_id: string }>(
    'select delivery_id from public.league_sync_deliveries where delivery_id = any($1)', [deliveries.map((d) => d.id)])).map((row) => row.delivery_id));
  const writes = await writesByKey(stack, 'leagues', deliveries.map((d) => d.externalId));
  const lost = deliveries.filter((d) => !stored.has(d.id) || !writes.has(d.externalId)).length;
  const duplicatesApplied = [...writes.values()].reduce((total, count) => total + count - 1, 0);
  return { rows: stored.size, effects: writes.size, lost, duplicatesApplied };
}
