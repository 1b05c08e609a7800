/**
 * Tests move the outbox's clock by hand: a retry's due time or an attempt's lease set into the past,
 * as the clock would move them. A claim finds each user's head from its queue's row
 * (public.outbound_queues.look_at, written with the head's due time or lease), so a test that moves a
 * delivery's clock makes the queues due too. A row that is early is what the service has after any
 * new event; the claim reads the head and sets it right.
 */
export const QUEUES_DUE_NOW = "update public.outbound_queues set look_at = '-infinity'";

/**
 * Empty the outbox for a test of its own: events (their deliveries go with them), the users'
 * counters, the endpoints and the queues' rows.
 */
export async function clearOutbox(db: { sql: (text: string) => Promise<unknown> }): Promise<void> {
  for (const table of ['outbound_events', 'outbound_user_sequences', 'outbound_endpoints', 'outbound_queues']) {
    await db.sql(`delete from public.${table}`);
  }
}
