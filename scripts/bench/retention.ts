// What retention and one busy customer cost on the scale seed (`npm run bench -- --scale`), timed
// through the SQL functions the service calls, on the seeded database:
//
// * a customer whose app refreshes purchases over and over: 1,500 snapshots of RevenueCat's record
//   that say the same (how many rows, and the cost of each), then 1,500 that each say something new
//   (the tail bound keeps the events after the checkpoint under billing_tail_bound()), then a late
//   webhook event among them (what it replays, and how long it takes);
// * a month on, when the oldest kept month leaves: how many customer groups it waits for, how many
//   of them went quiet since (what maintenance is left with once webhooks have taken their
//   checkpoints), and how fast maintenance checkpoints them in its calls (MAINTENANCE_CALL_BUDGET_MS) until the month is gone.
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { describeEventEffects } from '../../lib/billing/event-effects.ts';
import { describeSnapshot, trimSnapshot } from '../../lib/billing/snapshot.ts';
import { subscriberResponseSchema } from '../../lib/revenuecat/subscriber.ts';
import { MAINTENANCE_CALL_BUDGET_MS } from '../../lib/maintenance.ts';
import { v1Entitlement, v1Subscription } from '../support/fake-revenuecat.ts';

const DAY = 86_400_000;
const SNAPSHOTS = 1_500;
const RETENTION_MONTHS = 13;
const CALL_BUDGET_MS = MAINTENANCE_CALL_BUDGET_MS;

export interface BusyCustomerResult {
  snapshots: number;
  /** Rows stored for SNAPSHOTS refreshes that said the same. */
  sameStored: number;
  sameMeanMs: number;
  /** Rows stored for SNAPSHOTS refreshes that each said something new. */
  changedStored: number;
  changedMeanMs: number;
  changedMaxMs: number;
  /** The events after the checkpoint when they were all in (what an out-of-order event replays). */
  tailEvents: number;
  lateEventMs: number;
  lateEventReplayed: number;
}

export interface RetentionResult {
  now: string;
  cutoff: string;
  /** Groups with an event after their checkpoint received before the cutoff. */
  groupsWaiting: number;
  /** Of those, groups whose last event came before the cutoff: quiet since (steady state leaves these to maintenance). */
  groupsQuietSince: number;
  checkpoints: number;
  partitionsDropped: string[];
  calls: number;
  seconds: number;
  checkpointsPerSecond: number;
  maxCallMs: number;
  done: boolean;
}

export async function benchBusyCustomer(connectionString: string, now: Date): Promise<BusyCustomerResult> {
  const client = new pg.Client({ connectionString, application_name: 'bench-busy-customer' });
  await client.connect();
  try {
    const user = randomUUID();
    const product = 'com.example.pro.monthly';
    const start = now.getTime() - 2 * DAY;
    const snapshot = async (at: number, expires: number) => {
      const response = subscriberResponseSchema.parse({
        request_date: new Date(at).toISOString(), request_date_ms: at,
        subscriber: {
          entitlements: { pro: v1Entitlement(product, { purchased: start, expires }) },
          subscriptions: { [product]: v1Subscription({ purchased: start, expires }) },
          non_subscriptions: {}, original_app_user_id: user, first_seen: new Date(start).toISOString(), subscriber_attributes: {},
        },
      });
      const began = performance.now();
      await client.query('select public.record_billing_snapshot($1, $2, $3)', [
        trimSnapshot(response, user), describeSnapshot(response, user, { eventId: `sync:${randomUUID()}` }), new Date(at),
      ]);
      return performance.now() - began;
    };
    const stored = async () => Number((await client.query(`select count(*) from public.billing_events where app_user_id = $1 and type = 'SYNC'`, [user])).rows[0].count);

    // A refresh every second of a record that does not change.
    const same: number[] = [];
    for (let i = 0; i < SNAPSHOTS; i++) same.push(await snapshot(start + i * 1000, start + 30 * DAY));
    const sameStored = await stored();
    // A refresh every second of a record that changes each time (its expiry moves).
    const changed: number[] = [];
    const from = start + SNAPSHOTS * 1000;
    for (let i = 0; i < SNAPSHOTS; i++) changed.push(await snapshot(from + i * 1000, start + 30 * DAY + i * 1000));
    const changedStored = (await stored()) - sameStored;
    const tail = async () => Number((await client.query('select tail_events from public.billing_subscribers where app_user_id = (select group_id from public.billing_subscribers where app_user_id = $1)', [user])).rows[0].tail_events);
    const tailEvents = await tail();

    // A cancellation generated among the last refreshes, delivered after all of them.
    const late = {
      api_version: '1.0',
      event: {
        type: 'CANCELLATION', cancel_reason: 'UNSUBSCRIBE', store: 'APP_STORE', environment: 'PRODUCTION', period_type: 'NORMAL',
        id: randomUUID(), app_user_id: user, original_app_user_id: user, aliases: [user], product_id: product, entitlement_ids: ['pro'],
        transaction_id: '2000000812345678', original_transaction_id: '2000000812345678',
        event_timestamp_ms: from + (SNAPSHOTS - 50) * 1000 + 500, purchased_at_ms: start, expiration_at_ms: start + 30 * DAY,
      },
    };
    const began = performance.now();
    await client.query('select public.record_billing_event($1, $2, $3)', [late, describeEventEffects(late.event, now), 'none']);
    const lateEventMs = performance.now() - began;

    const mean = (values: number[]) => values.reduce((sum, value) => sum + value, 0) / values.length;
    const round = (value: number) => Math.round(value * 100) / 100;
    return {
      snapshots: SNAPSHOTS, sameStored, sameMeanMs: round(mean(same)), changedStored, changedMeanMs: round(mean(changed)),
      changedMaxMs: round(Math.max(...changed)), tailEvents, lateEventMs: round(lateEventMs), lateEventReplayed: await tail(),
    };
  } finally {
    await client.end();
  }
}

/** A month after `seededAt`: the oldest kept month leaves; maintenance's calls until it is gone (at most `limitMs`). */
export async function benchRetention(connectionString: string, seededAt: Date, limitMs = 600_000): Promise<RetentionResult> {
  const client = new pg.Client({ connectionString, application_name: 'bench-retention' });
  await client.connect();
  try {
    const now = new Date(seededAt.getTime() + 31 * DAY);
    const cutoff = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - RETENTION_MONTHS, 1));
    const counts = (await client.query(`
      select count(*)::int as waiting,
             count(*) filter (where public.billing_key_time(folded_key) < $1)::int as quiet
      from public.billing_subscribers where pending_since < $1`, [cutoff])).rows[0];
    let checkpoints = 0;
    let calls = 0;
    let maxCallMs = 0;
    let done = false;
    const dropped: string[] = [];
    const began = performance.now();
    while (!done && performance.now() - began < limitMs) {
      const at = performance.now();
      const result = (await client.query('select public.billing_maintain($1, $2, $3) as r', [now, CALL_BUDGET_MS, RETENTION_MONTHS])).rows[0].r;
      maxCallMs = Math.max(maxCallMs, performance.now() - at);
      calls++;
      checkpoints += result.checkpoints;
      dropped.push(...result.partitionsDropped);
      done = result.done;
      if (!done && result.checkpoints === 0 && result.partitionsDropped.length === 0 && result.dedupeKeysPruned === 0) break;
    }
    const seconds = (performance.now() - began) / 1000;
    return {
      now: now.toISOString(), cutoff: cutoff.toISOString(), groupsWaiting: counts.waiting, groupsQuietSince: counts.quiet,
      checkpoints, partitionsDropped: dropped, calls, seconds: Math.round(seconds * 10) / 10,
      checkpointsPerSecond: Math.round(checkpoints / Math.max(seconds, 0.001)), maxCallMs: Math.round(maxCallMs), done,
    };
  } finally {
    await client.end();
  }
}

export function formatRetention(busy: BusyCustomerResult, retention: RetentionResult): string {
  return [
    `- A customer refreshing ${busy.snapshots} times, RevenueCat's record unchanged: ${busy.sameStored} snapshot stored, ${busy.sameMeanMs} ms a refresh (the database's part).`,
    `- The same customer, ${busy.snapshots} refreshes that each say something new: ${busy.changedStored} stored, ${busy.changedMeanMs} ms mean, ${busy.changedMaxMs} ms at most (a refresh that checkpoints the tail); ${busy.tailEvents} events after the checkpoint at the end.`,
    `- Then a webhook event generated among the last of them: ${busy.lateEventMs} ms, ${busy.lateEventReplayed} events replayed after the checkpoint.`,
    `- A month on (${retention.now.slice(0, 10)}; months before ${retention.cutoff.slice(0, 10)} leave): ${retention.groupsWaiting} customer groups waiting for a checkpoint, ${retention.groupsQuietSince} of them quiet since; `
      + `${retention.checkpoints} checkpoints in ${retention.seconds} s (${retention.checkpointsPerSecond}/s, ${retention.calls} calls of at most ${retention.maxCallMs} ms), months dropped: ${retention.partitionsDropped.join(', ') || 'none'}${retention.done ? '' : ' (not done)'}.`,
  ].join('\n');
}
