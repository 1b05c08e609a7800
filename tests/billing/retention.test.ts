import { randomUUID } from 'node:crypto';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { describe, expect, inject, it } from 'vitest';
import { describeEventEffects } from '../../lib/billing/event-effects.ts';
import { maintainBilling } from '../../lib/billing/maintenance.ts';
import { recordBillingEvent } from '../../lib/billing/record-event.ts';
import type { BillingWebhookBody } from '../../lib/billing/webhook-body.ts';
import { runMigrations } from '../../lib/db/migrate.ts';
import { openPglite } from '../../lib/db/pglite.ts';
import { clientSession, openPostgres } from '../../lib/db/postgres.ts';
import { DATABASE_KINDS, describeOn, suiteDatabase, type TestDatabase } from '../support/databases.ts';
import { createDatabase } from '../../scripts/support/postgres-server.ts';
import { apple, billingEvent, day, deliver, entitlementsOf, eventRow, LIFETIME, MONTHLY, YEARLY } from './support.ts';

/**
 * The billing log kept by month for BILLING_EVENTS_RETENTION_MONTHS (supabase/migrations/
 * *_billing_retention.sql): events go to the month they were received; maintenance makes months
 * ahead, checkpoints every customer group with events in a month that leaves, drops it and its
 * dedupe keys. Nothing any subscriber is entitled to changes; later events still fold in event
 * order on top of the checkpoint; an event older than a checkpoint changes nothing and asks for a
 * sync. "Months ago" is made by moving received_at back (the partition key moves the row).
 */
const RETENTION_MONTHS = 13;

type Maintained = { skipped?: boolean; checkpoints: number; partitionsDropped: string[]; dedupeKeysPruned: number; partitionsMade: number; plansMissing: string[] };

async function maintain(db: TestDatabase, now = 'now()'): Promise<Maintained> {
  const [row] = await db.sql<{ result: Maintained }>(`select public.billing_maintain(${now}, 20000, ${RETENTION_MONTHS}) as result`);
  return row!.result;
}

/**
 * Pretend these events (and their dedupe keys) were received `months` ago, and their groups' tails
 * say so (what the service would have written then).
 */
async function receivedMonthsAgo(db: TestDatabase, eventIds: string[], months: number): Promise<void> {
  await db.sql(`select public.billing_ensure_partitions((now() - make_interval(months => $1))::date, now()::date)`, [months]);
  await db.sql(`update public.billing_events set received_at = received_at - make_interval(months => $2) where event_id = any($1)`, [eventIds, months]);
  await db.sql(`update public.billing_event_ids set received_at = received_at - make_interval(months => $2) where event_id = any($1)`, [eventIds, months]);
  await db.sql('select public.billing_recount_tails()');
}

const partitionsOf = async (db: TestDatabase) => (await db.sql<{ name: string }>(
  `select c.relname as name from pg_inherits i join pg_class c on c.oid = i.inhrelid where i.inhparent = 'public.billing_events'::regclass order by 1`)).map((row) => row.name);

const monthName = (offset: number) => {
  const date = new Date();
  date.setUTCDate(1);
  date.setUTCMonth(date.getUTCMonth() + offset);
  return `billing_events_${date.getUTCFullYear()}_${String(date.getUTCMonth() + 1).padStart(2, '0')}`;
};

/** One subscriber's history: a monthly bought at day 0, renewed at day 30, cancelled at day 40. */
function history(user: string): BillingWebhookBody[] {
  return [
    billingEvent('initial-purchase', user, { at: 0, purchased: 0, expires: 30 }),
    billingEvent('renewal', user, { at: 30.001, purchased: 30, expires: 60 }, { transaction_id: `r-${user}-30` }),
    billingEvent('cancellation-unsubscribe', user, { at: 40, purchased: 30, expires: 60 }, { transaction_id: `r-${user}-30` }),
  ];
}
/** What came after it, generated later (delivered out of order below). */
function later(user: string): BillingWebhookBody[] {
  return [
    billingEvent('uncancellation', user, { at: 45, purchased: 30, expires: 60 }, { transaction_id: `r-${user}-30` }),
    billingEvent('renewal', user, { at: 60.001, purchased: 60, expires: 90 }, { transaction_id: `r-${user}-60` }),
    billingEvent('cancellation-unsubscribe', user, { at: 70, purchased: 60, expires: 90 }, { transaction_id: `r-${user}-60` }),
  ];
}
const ids = (bodies: BillingWebhookBody[]) => bodies.map((body) => body.event.id);
const deliverAll = async (bodies: BillingWebhookBody[]) => {
  for (const body of bodies) expect((await deliver(body)).status).toBe(200);
};
/** The views without what differs between two users by construction. */
const comparable = async (db: TestDatabase, user: string, at: number) =>
  (await entitlementsOf(db, user, new Date(day(at)))).map((view) => ({ ...view, syncedAt: null }));

describe.each(DATABASE_KINDS)('billing retention on %s', (kind) => {
  const db = suiteDatabase(kind);

  it('files events under the month they were received, with months made twelve ahead', async () => {
    const names = await partitionsOf(db);
    for (let offset = 0; offset <= 12; offset++) expect(names).toContain(monthName(offset));
    expect(names).toContain('billing_events_default');
    const body = billingEvent('initial-purchase', `month-${randomUUID()}`, { at: 0, purchased: 0, expires: 30 });
    await deliverAll([body]);
    const [row] = await db.sql<{ partition: string }>(`select tableoid::regclass::text as partition from public.billing_events where event_id = $1`, [body.event.id]);
    expect(row!.partition).toBe(monthName(0));
  });

  it('drops a month older than the retention after checkpointing its customers: no entitlement changes, later events still fold in event order', async () => {
    const [kept, control] = [`kept-${randomUUID()}`, `control-${randomUUID()}`];
    const old = history(kept);
    await deliverAll(old);
    await deliverAll(history(control));
    await receivedMonthsAgo(db, ids(old), RETENTION_MONTHS + 1);
    const before = await comparable(db, kept, 45);
    expect(before[0]).toMatchObject({ status: 'cancelled_active', active: true });

    const result = await maintain(db);
    expect(result.checkpoints).toBeGreaterThanOrEqual(1);
    expect(result.partitionsDropped).toContain(monthName(-(RETENTION_MONTHS + 1)));
    expect(result.dedupeKeysPruned).toBeGreaterThanOrEqual(old.length);
    expect(await db.sql('select event_id from public.billing_events where event_id = any($1)', [ids(old)])).toEqual([]);
    expect(await db.sql('select event_id from public.billing_event_ids where event_id = any($1)', [ids(old)])).toEqual([]);
    expect(await comparable(db, kept, 45)).toEqual(before);

    // Later events, delivered in reverse: folded in event order on top of the checkpoint, exactly as
    // for a subscriber whose history was never dropped.
    await deliverAll([...later(kept)].reverse());
    await deliverAll([...later(control)].reverse());
    for (const at of [50, 75, 95]) expect(await comparable(db, kept, at)).toEqual(await comparable(db, control, at));
    expect((await comparable(db, kept, 75))[0]).toMatchObject({ status: 'cancelled_active', active: true, willRenew: false, expiresAt: new Date(day(90)).toISOString() });
  });

  it('an event older than a checkpoint changes nothing and marks its subscriber for a sync; a redelivery of a dropped event is recorded again and changes nothing', async () => {
    const user = `late-${randomUUID()}`;
    const old = history(user);
    await deliverAll(old);
    await receivedMonthsAgo(db, ids(old), RETENTION_MONTHS + 2);
    await maintain(db);
    const before = await comparable(db, user, 45);

    // An expiration generated long ago that was never delivered, resent from the dashboard now.
    const lost = billingEvent('expiration', user, { at: 35, purchased: 30, expires: 60 }, { transaction_id: `r-${user}-30` });
    const plan = describeEventEffects(lost.event, new Date());
    const recorded = await db.adapter.call('record_billing_event', { p_body: lost, p_plan: plan, p_sync_after: 'gaps' });
    expect(recorded).toMatchObject({ duplicate: false, outcome: 'stale', syncIds: [user] });
    expect(await db.sql('select reason from public.billing_sync_queue where app_user_id = $1', [user])).toEqual([{ reason: 'before_history' }]);
    expect(await comparable(db, user, 45)).toEqual(before);

    // The first purchase again (its dedupe key went with its month): a new record, no change.
    expect((await deliver(old[0]!)).status).toBe(200);
    expect(await eventRow(db, old[0]!.event.id)).toMatchObject({ outcome: 'stale', count: 1 });
    expect(await comparable(db, user, 45)).toEqual(before);
  });

  it('recognises a redelivery exactly while its month is kept, however old', async () => {
    const user = `dedupe-${randomUUID()}`;
    const body = billingEvent('initial-purchase', user, { at: 0, purchased: 0, expires: 30 });
    await deliverAll([body]);
    await receivedMonthsAgo(db, [body.event.id], RETENTION_MONTHS - 1);
    await maintain(db);
    const again = await deliver(body);
    expect(again.status).toBe(200);
    expect(await eventRow(db, body.event.id)).toMatchObject({ count: 1 });
    expect(await db.sql('select count(*)::int as n from public.billing_event_ids where event_id = $1', [body.event.id])).toEqual([{ n: 1 }]);
  });

  it('keeps the content digest of an event without an id for RevenueCat\'s retry window (3 hours), then deletes it', async () => {
    const user = `digest-${randomUUID()}`;
    await deliverAll([{ event: { type: 'INITIAL_PURCHASE', app_user_id: user, product_id: 'pro_monthly', entitlement_ids: ['pro'] } } as unknown as BillingWebhookBody]);
    const digests = () => db.sql<{ n: number }>(`select count(*)::int as n from public.billing_content_keys
      where event_id in (select event_id from public.billing_events where app_user_id = $1)`, [user]);
    await maintain(db);
    expect(await digests()).toEqual([{ n: 1 }]);
    const result = await maintain(db, `now() + interval '3 hours 1 minute'`) as Maintained & { contentKeysPruned: number };
    expect(result.contentKeysPruned).toBeGreaterThanOrEqual(1);
    expect(await digests()).toEqual([{ n: 0 }]);
  });

  it('moves rows that landed in the default partition into their month when maintenance makes it', async () => {
    const body = billingEvent('initial-purchase', `default-${randomUUID()}`, { at: 0, purchased: 0, expires: 30 });
    await deliverAll([body]);
    // Twenty months ahead: no partition yet, so the row sits in the default one.
    await db.sql(`update public.billing_events set received_at = received_at + interval '20 months' where event_id = $1`, [body.event.id]);
    const where = async () => (await db.sql<{ partition: string }>(`select tableoid::regclass::text as partition from public.billing_events where event_id = $1`, [body.event.id]))[0]!.partition;
    expect(await where()).toBe('billing_events_default');
    const result = await maintain(db, `now() + interval '20 months'`);
    expect(result.partitionsMade).toBeGreaterThan(0);
    expect(await where()).toBe(monthName(20));
  });

  it('two maintenance runs at once: one works, the other skips or finds nothing to do, and nothing breaks', async () => {
    const user = `twice-${randomUUID()}`;
    const old = history(user);
    await deliverAll(old);
    await receivedMonthsAgo(db, ids(old), RETENTION_MONTHS + 3);
    const before = await comparable(db, user, 45);
    const results = await Promise.all([maintain(db), maintain(db)]);
    expect(results.filter((result) => !result.skipped).length).toBeGreaterThanOrEqual(1);
    expect(results.flatMap((result) => result.partitionsDropped ?? [])).toContain(monthName(-(RETENTION_MONTHS + 3)));
    expect(await comparable(db, user, 45)).toEqual(before);
  });
});

/**
 * Bounded work (the groups' tails): a fold replays only the events after its group's checkpoint,
 * and checkpoints are taken as events arrive, so neither a late event nor retention depends on how
 * long a customer's history is. One group whose checkpoint fails never holds up the others.
 */
describe.each(DATABASE_KINDS)('bounded folds and retention on %s', (kind) => {
  const db = suiteDatabase(kind);
  const BOUND = 200; // public.billing_tail_bound()
  const record = (body: BillingWebhookBody) => recordBillingEvent(body, { now: new Date(), ignoreSandbox: false, syncAfter: 'gaps' });
  const groupOf = async (user: string) => (await db.sql<{ base_key: string | null; folded_key: string; tail_events: number; pending_since: Date | null; replayed: number }>(`
    select g.base_key, g.folded_key, g.tail_events, g.pending_since,
      (select count(*)::int from public.billing_events e join public.billing_subscribers s on s.app_user_id = e.subject_id
       where s.group_id = g.group_id and e.plan->>'ignoredReason' is null
         and public.billing_sort_key(e.event_at, e.sort_rank, e.event_id) collate "C" > coalesce(s.base_key, '') collate "C") as replayed
    from public.billing_subscribers g where g.app_user_id = $1`, [user]))[0]!;
  /** A daily subscription renewed every day: `days` renewals after the purchase. */
  const daily = (user: string, days: number) => [
    billingEvent('initial-purchase', user, { at: 0, purchased: 0, expires: 1 }, { transaction_id: `${user}-t0` }),
    ...Array.from({ length: days }, (_, i) => billingEvent('renewal', user, { at: i + 1.001, purchased: i + 1, expires: i + 2 }, { transaction_id: `${user}-t${i + 1}` })),
  ];

  it('checkpoints a group whose tail passes the bound as events arrive; a late event then replays less than the bound and folds in its place', async () => {
    const [user, control] = [`tail-${randomUUID()}`, `tail-control-${randomUUID()}`];
    const late = (who: string) => billingEvent('cancellation-unsubscribe', who, { at: 250.5, purchased: 250, expires: 251 }, { transaction_id: `${who}-t250` });
    let longest = 0;
    for (const body of daily(user, 259)) {
      expect(await record(body)).toMatchObject({ duplicate: false, outcome: 'applied' });
      longest = Math.max(longest, (await groupOf(user)).tail_events);
    }
    expect(longest).toBe(BOUND - 1);
    const before = await groupOf(user);
    expect(before.base_key).not.toBeNull();
    expect(before.replayed).toBe(before.tail_events);
    expect(before.replayed).toBeLessThan(BOUND);

    // The cancellation of day 250 arrives after the renewals of days 251 to 259: folded again in its
    // place, where the renewals into later periods turn renewal on again (RevenueCat sends no
    // UNCANCELLATION for every store): the group ends as it was, so the event is stale.
    expect(await record(late(user))).toMatchObject({ duplicate: false, outcome: 'stale', syncIds: [] });
    const after = await groupOf(user);
    expect(after.base_key).toBe(before.base_key);
    expect(after.replayed).toBe(before.replayed + 1);
    expect(after.replayed).toBeLessThanOrEqual(BOUND);
    // As if it had come in order.
    for (const body of [...daily(control, 250), late(control), ...daily(control, 259).slice(251)]) await record(body);
    const view = await comparable(db, user, 259.5);
    expect(view).toEqual(await comparable(db, control, 259.5));
    expect(view[0]).toMatchObject({ status: 'active', willRenew: true, active: true });
  });

  it('a refund sent again from RevenueCat\'s dashboard 6 days late, after later events and a month of history, still folds in its place: no access', async () => {
    // Lost in an outage (RevenueCat's retries end within hours), then sent again once the server
    // was fixed ("Retrying a Failed Webhook", integrations/webhooks): a checkpoint taken 3 days
    // after the last event had made it stale, and the refunded lifetime purchase kept granting.
    const user = `resent-${randomUUID()}`;
    const now = (Date.now() - day(0)) / 86_400_000; // in the fixtures' days
    const lifetime = billingEvent('non-renewing-purchase', user, { at: now - 31, purchased: now - 31, expires: null }, apple('L-1', 'L-1', LIFETIME));
    const refund = billingEvent('cancellation-customer-support', user, { at: now - 6, purchased: now - 31, expires: now - 6 }, { ...apple('L-1', 'L-1', LIFETIME), price: -79.99 });
    const monthly = billingEvent('initial-purchase', user, { at: now - 5, purchased: now - 5, expires: now + 25 }, { ...apple('M-1', 'M-1', MONTHLY), entitlement_ids: ['other'] });
    const unsubscribe = billingEvent('cancellation-unsubscribe', user, { at: now - 0.01, purchased: now - 5, expires: now + 25 }, { ...apple('M-1', 'M-1', MONTHLY), entitlement_ids: ['other'], cancel_reason: 'UNSUBSCRIBE' });
    const receivedDaysAgo = async (eventId: string, days: number) => {
      await db.sql('update public.billing_events set received_at = received_at - make_interval(days => $2) where event_id = $1', [eventId, days]);
      await db.sql('update public.billing_event_ids set received_at = received_at - make_interval(days => $2) where event_id = $1', [eventId, days]);
      await db.sql('select public.billing_recount_tails()');
    };
    await deliverAll([lifetime, monthly]);
    await receivedDaysAgo(lifetime.event.id, 31);
    await receivedDaysAgo(monthly.event.id, 5);
    await deliverAll([unsubscribe]); // the group's history is a month old: the next event may checkpoint it
    await deliverAll([refund]);
    expect(await eventRow(db, refund.event.id)).toMatchObject({ outcome: 'applied' });
    const views = await entitlementsOf(db, user, new Date());
    expect(views.find((view) => view.id === 'pro')).toMatchObject({ active: false });
    expect(views.find((view) => view.id === 'other')).toMatchObject({ active: true, willRenew: false });
  });

  it('a weekly subscriber whose state is a month old: this week\'s renewal checkpoints it before its last month of events (a replay of the tail), and a late event of that month still folds in its place', async () => {
    const user = `weekly-${randomUUID()}`;
    const now = (Date.now() - day(0)) / 86_400_000; // in the fixtures' days
    const start = now - 7 * 20;
    const renewalOfWeek = (week: number) => billingEvent('renewal', user, { at: start + 7 * week - 0.01, purchased: start + 7 * week - 0.01, expires: start + 7 * (week + 1) },
      { transaction_id: `${user}-t${week}` });
    const history = [billingEvent('initial-purchase', user, { at: start, purchased: start, expires: start + 7 }, { transaction_id: `${user}-t0` }),
      ...Array.from({ length: 19 }, (_, i) => renewalOfWeek(i + 1))];
    await db.sql(`select public.billing_ensure_partitions((now() - interval '6 months')::date, now()::date)`);
    await deliverAll(history);
    // Each received when it happened (what the service would have recorded then).
    for (const body of history) {
      const at = new Date((body.event.event_timestamp_ms as number) + 60_000);
      await db.sql('update public.billing_events set received_at = $2 where event_id = $1', [body.event.id, at]);
      await db.sql('update public.billing_event_ids set received_at = $2 where event_id = $1', [body.event.id, at]);
    }
    await db.sql('select public.billing_recount_tails()');
    expect(await groupOf(user)).toMatchObject({ base_key: null, tail_events: 20 });

    await deliverAll([renewalOfWeek(20)]);
    const group = await groupOf(user);
    // Checkpointed at the newest event more than 30 days old: the five since then (this one included) stay after it.
    expect(group.base_key).not.toBeNull();
    expect(group.tail_events).toBe(5);
    expect(group.replayed).toBe(5);
    // An unsubscribe of two weeks ago, lost until now: still folded in its place (renewal off until the next RENEWAL, which turns it on again).
    const late = billingEvent('cancellation-unsubscribe', user, { at: start + 7 * 18 + 1, purchased: start + 7 * 18 - 0.01, expires: start + 7 * 19 }, { transaction_id: `${user}-t18` });
    await deliverAll([late]);
    // After the checkpoint: one more event the fold replays, where one before it would be outside every fold.
    expect(await groupOf(user)).toMatchObject({ base_key: group.base_key, replayed: 6 });
    expect((await entitlementsOf(db, user, new Date()))[0]).toMatchObject({ active: true, willRenew: true });
  });

  it('ids merged into one group: the checkpoint before recent events never moves an id\'s checkpoint back behind events its rows hold', async () => {
    const [x, y] = [`merge-x-${randomUUID()}`, `merge-y-${randomUUID()}`];
    const now = (Date.now() - day(0)) / 86_400_000;
    const receivedWhenGenerated = async (bodies: BillingWebhookBody[]) => {
      await db.sql(`select public.billing_ensure_partitions((now() - interval '6 months')::date, now()::date)`);
      for (const body of bodies) {
        const at = new Date((body.event.event_timestamp_ms as number) + 60_000);
        await db.sql('update public.billing_events set received_at = $2 where event_id = $1', [body.event.id, at]);
        await db.sql('update public.billing_event_ids set received_at = $2 where event_id = $1', [body.event.id, at]);
      }
      await db.sql('select public.billing_recount_tails()');
    };
    const purchaseX = billingEvent('initial-purchase', x, { at: now - 75, purchased: now - 75, expires: now - 45 }, apple(`${x}-t0`, `${x}-o`));
    const renewalX = billingEvent('renewal', x, { at: now - 45, purchased: now - 45, expires: now - 15 }, apple(`${x}-t1`, `${x}-o`));
    await deliverAll([purchaseX, renewalX]);
    await receivedWhenGenerated([purchaseX, renewalX]);
    const nextX = billingEvent('renewal', x, { at: now - 15, purchased: now - 15, expires: now + 15 }, apple(`${x}-t2`, `${x}-o`));
    await deliverAll([nextX]); // x's state a month old, its last event too: checkpointed where it stood (at its renewal)
    await receivedWhenGenerated([nextX]);
    const checkpointOfX = (await groupOf(x)).base_key!;
    expect(checkpointOfX).toContain(renewalX.event.id);
    const purchaseY = billingEvent('initial-purchase', y, { at: now - 50, purchased: now - 50, expires: now + 315 }, apple(`${y}-t0`, `${y}-o`, YEARLY));
    await deliverAll([purchaseY]);
    await receivedWhenGenerated([purchaseY]);
    // One customer (an alias): the groups join, with y's month-old purchase unfolded and recent events.
    await deliverAll([billingEvent('subscriber-alias', x, { at: now - 0.01 }, { aliases: [x, y], original_app_user_id: x })]);
    const checkpoints = await db.sql<{ base_key: string }>('select base_key from public.billing_subscribers where app_user_id = any ($1)', [[x, y]]);
    for (const { base_key: key } of checkpoints) expect(key >= checkpointOfX, `${key} against ${checkpointOfX}`).toBe(true);
  });

  it('checkpoints a tail from before tails were bounded (far past the bound) where the group stands, without replaying it', async () => {
    const user = `long-tail-${randomUUID()}`;
    for (const body of daily(user, 420)) await record(body);
    // As a database upgraded with this history finds it: no checkpoint, every event in the tail.
    await db.sql('update public.billing_subscribers set base_key = null, base_rows = null, base_customer = null where group_id = $1', [user]);
    await db.sql('select public.billing_recount_tails()');
    expect(await groupOf(user)).toMatchObject({ base_key: null, tail_events: 421, replayed: 421 });

    const next = billingEvent('renewal', user, { at: 421.001, purchased: 421, expires: 422 }, { transaction_id: `${user}-t421` });
    expect(await record(next)).toMatchObject({ duplicate: false, outcome: 'applied' });
    const group = await groupOf(user);
    expect(group).toMatchObject({ base_key: group.folded_key, tail_events: 0, replayed: 0 });
    const after = await comparable(db, user, 421.5);
    expect(after[0]).toMatchObject({ active: true, status: 'active', expiresAt: new Date(day(422)).toISOString() });
    // Folding again from that checkpoint gives the same rows.
    await db.sql(`select public.billing_refold_group($1, '')`, [user]);
    expect(await comparable(db, user, 421.5)).toEqual(after);
  });

  it('checkpoints a group when an event arrives long after the last (a copy of its rows): retention then has nothing to do for it', async () => {
    const user = `incremental-${randomUUID()}`;
    const old = history(user);
    await deliverAll(old);
    await receivedMonthsAgo(db, ids(old), 2);
    expect(await groupOf(user)).toMatchObject({ base_key: null, tail_events: 3, replayed: 3 });
    const { folded_key: watermark } = await groupOf(user);

    const renewal = billingEvent('renewal', user, { at: 60.001, purchased: 60, expires: 90 }, { transaction_id: `r-${user}-60` });
    await deliverAll([renewal]);
    const group = await groupOf(user);
    expect(group).toMatchObject({ base_key: watermark, tail_events: 1, replayed: 1 });
    expect(Date.now() - group.pending_since!.getTime()).toBeLessThan(3_600_000);
    // Thirteen months on, the month of its history goes without another checkpoint of it.
    await db.sql(`select public.billing_ensure_partitions((now() - make_interval(months => $1))::date, now()::date)`, [RETENTION_MONTHS + 5]);
    await receivedMonthsAgo(db, ids(old), RETENTION_MONTHS + 3);
    expect((await groupOf(user)).pending_since!.getTime()).toBe(group.pending_since!.getTime());
    const before = await comparable(db, user, 65);
    const result = await maintain(db);
    expect(result.partitionsDropped).toContain(monthName(-(RETENTION_MONTHS + 5)));
    expect(await db.sql('select event_id from public.billing_events where event_id = any($1)', [ids(old)])).toEqual([]);
    expect(await groupOf(user)).toMatchObject({ base_key: watermark, tail_events: 1 });
    expect(await comparable(db, user, 65)).toEqual(before);
  });

  it('one group whose checkpoint fails does not stop the month: the others are checkpointed and the month dropped, its events kept aside, and the next run checkpoints it', async () => {
    const [failing, others] = [`failing-${randomUUID()}`, [`other-a-${randomUUID()}`, `other-b-${randomUUID()}`]];
    const histories = new Map([failing, ...others].map((user) => [user, history(user)]));
    for (const bodies of histories.values()) await deliverAll(bodies);
    const all = [...histories.values()].flat();
    await receivedMonthsAgo(db, ids(all), RETENTION_MONTHS + 6);
    const month = monthName(-(RETENTION_MONTHS + 6));
    const before = new Map(await Promise.all([failing, ...others].map(async (user) => [user, await comparable(db, user, 45)] as const)));

    // Made to fail for real: on Postgres another session holds the group's lock (maintenance waits
    // its short lock_timeout, then goes on); on PGlite (one connection) its checkpoint raises an error.
    const release = await failCheckpointOf(db, kind, failing);
    let first: Maintained & { failedGroups: { groupId: string; error: string }[]; heldEvents: number; done: boolean };
    try {
      first = await maintain(db) as typeof first;
    } finally {
      await release();
    }
    expect(first.failedGroups).toEqual([{ groupId: failing, error: expect.stringMatching(kind === 'postgres' ? /lock_not_available/ : /checkpoint refused/) }]);
    expect(first.partitionsDropped).toContain(month);
    expect(first.heldEvents).toBe(3);
    expect(first.done).toBe(false);
    for (const user of others) {
      expect(await groupOf(user)).toMatchObject({ pending_since: null, replayed: 0 });
      expect(await db.sql('select event_id from public.billing_events where event_id = any($1)', [ids(histories.get(user)!)])).toEqual([]);
    }
    // Its events are kept (and recognised if redelivered); nobody's entitlements changed.
    const kept = await db.sql<{ partition: string }>('select tableoid::regclass::text as partition from public.billing_events where event_id = any($1)', [ids(histories.get(failing)!)]);
    expect(kept.map((row) => row.partition)).toEqual(['billing_events_default', 'billing_events_default', 'billing_events_default']);
    expect(await deliver(histories.get(failing)![0]!)).toMatchObject({ status: 200 });
    expect(await eventRow(db, histories.get(failing)![0]!.event.id)).toMatchObject({ count: 1 });
    for (const [user, view] of before) expect(await comparable(db, user, 45)).toEqual(view);

    // The next run: checkpointed, its kept events (and their dedupe keys) gone, nothing changed.
    const second = await maintain(db) as typeof first;
    expect(second.failedGroups).toEqual([]);
    expect(second.checkpoints).toBeGreaterThanOrEqual(1);
    expect(await groupOf(failing)).toMatchObject({ pending_since: null, replayed: 0 });
    expect(await db.sql('select event_id from public.billing_events where event_id = any($1)', [ids(histories.get(failing)!)])).toEqual([]);
    expect(await db.sql('select event_id from public.billing_event_ids where event_id = any($1)', [ids(histories.get(failing)!)])).toEqual([]);
    for (const [user, view] of before) expect(await comparable(db, user, 45)).toEqual(view);
  });
});

/** Make the checkpoint of `user`'s group fail until the returned function is called. */
async function failCheckpointOf(db: TestDatabase, kind: string, user: string): Promise<() => Promise<void>> {
  if (kind === 'postgres') {
    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    await holder.query(`select pg_advisory_lock(hashtextextended('billing_group:' || $1, 0))`, [user]);
    return () => holder.end();
  }
  await db.sql(`create or replace function public.test_refuse_checkpoint() returns trigger language plpgsql as $$
    begin raise exception 'checkpoint refused (test)'; end $$`);
  await db.sql(`create trigger test_refuse_checkpoint before update of base_key on public.billing_subscribers for each row
    when (old.app_user_id = '${user}') execute function public.test_refuse_checkpoint()`);
  return async () => {
    await db.sql('drop trigger test_refuse_checkpoint on public.billing_subscribers');
  };
}

describeOn('postgres')('billing retention with webhooks arriving during a partition drop (real Postgres server)', () => {
  const db = suiteDatabase('postgres');

  it('every delivery racing the drop is stored and applied once', async () => {
    const old = history(`race-old-${randomUUID()}`);
    await deliverAll(old);
    await receivedMonthsAgo(db, ids(old), RETENTION_MONTHS + 4);
    const racers = Array.from({ length: 20 }, () => billingEvent('initial-purchase', `race-${randomUUID()}`, { at: 0, purchased: 0, expires: 30 }));
    const [result, ...answers] = await Promise.all([maintain(db), ...racers.map((body) => deliver(body))]);
    expect(result!.partitionsDropped ?? []).toContain(monthName(-(RETENTION_MONTHS + 4)));
    expect(answers.map((answer) => answer.status)).toEqual(racers.map(() => 200));
    const stored = await db.sql<{ n: number }>('select count(*)::int as n from public.billing_events where event_id = any($1) and outcome = $2', [ids(racers), 'applied']);
    expect(stored).toEqual([{ n: racers.length }]);
  });
});

describe.each(DATABASE_KINDS)('upgrading a filled billing log to the partitioned one on %s', (kind) => {
  it('moves every event and its dedupe key into its month; folds and redeliveries work as before', async () => {
    const files = readdirSync('supabase/migrations').filter((name) => name.endsWith('.sql')).sort();
    const before = files.filter((name) => name < '20261124000200');
    const beforeDir = mkdtempSync(path.join(tmpdir(), 'migrations-before-'));
    for (const name of before) cpSync(path.join('supabase/migrations', name), path.join(beforeDir, name));

    const root = mkdtempSync(path.join(tmpdir(), 'retention-upgrade-'));
    let sql: (text: string, values?: unknown[]) => Promise<Record<string, unknown>[]>;
    let migrateAll: () => Promise<string[]>;
    let close: () => Promise<void>;
    if (kind === 'pglite') {
      mkdirSync(root, { recursive: true });
      const pglite = await openPglite(path.join(root, 'db'), { migrate: false });
      await runMigrations(pglite.session, { dir: beforeDir });
      sql = async (text, values) => (await pglite.session.query(text, values)).rows;
      migrateAll = () => runMigrations(pglite.session);
      close = () => pglite.close();
    } else {
      const name = `upgrade_${randomUUID().replace(/-/g, '').slice(0, 12)}`;
      const serverUrl = inject('postgresServerUrl');
      await createDatabase(serverUrl, name);
      const postgres = await openPostgres({ connectionString: serverUrl.replace(/\/postgres$/, `/${name}`), max: 2, migrate: false });
      const client = await postgres.pool.connect();
      await runMigrations(clientSession(client), { dir: beforeDir });
      client.release();
      sql = async (text, values) => (await postgres.pool.query(text, values)).rows;
      migrateAll = async () => {
        const session = await postgres.pool.connect();
        try {
          return await runMigrations(clientSession(session));
        } finally {
          session.release();
        }
      };
      close = () => postgres.close();
    }
    try {
      const user = `upgrade-${randomUUID()}`;
      const bodies = history(user);
      for (const body of bodies) {
        await sql('select public.record_billing_event($1, $2, $3)', [body, describeEventEffects(body.event, new Date()), 'none']);
      }
      await sql(`update public.billing_events set received_at = received_at - interval '3 months' where event_id = $1`, [bodies[0]!.event.id]);

      expect(await migrateAll()).toEqual(files.filter((name) => name >= '20261124000200'));

      const rows = await sql(`select event_id, tableoid::regclass::text as partition from public.billing_events where event_id = any($1) order by event_at`, [ids(bodies)]);
      expect(rows.map((row) => row.partition)).toEqual([monthName(-3), monthName(0), monthName(0)]);
      expect(await sql('select count(*)::int as n from public.billing_event_ids where event_id = any($1)', [ids(bodies)])).toEqual([{ n: 3 }]);
      // A redelivery is a duplicate; an older event folds the history again in its place.
      const again = await sql('select public.record_billing_event($1, $2, $3) as r', [bodies[1], describeEventEffects(bodies[1]!.event, new Date()), 'none']);
      expect(again[0]!.r).toMatchObject({ duplicate: true });
      const late = billingEvent('renewal', user, { at: 35, purchased: 30, expires: 65 }, { transaction_id: `r-${user}-30` });
      const folded = await sql('select public.record_billing_event($1, $2, $3) as r', [late, describeEventEffects(late.event, new Date()), 'none']);
      expect(folded[0]!.r).toMatchObject({ duplicate: false, outcome: 'applied' });
      const [view] = await sql(`select public.account_entitlements($1, $2) as v`, [user, new Date(day(45))]);
      expect((view!.v as { status: string; expires_at: string }[])[0]).toMatchObject({ status: 'cancelled_active' });
    } finally {
      await close();
      rmSync(root, { recursive: true, force: true });
      rmSync(beforeDir, { recursive: true, force: true });
    }
  }, 120_000);
});

describeOn('pglite')('billing maintenance from the service (lib/billing/maintenance.ts)', () => {
  const db = suiteDatabase('pglite');

  it('computes the plans an older version did not store, then checkpoints and drops the month', async () => {
    const user = `unplanned-${randomUUID()}`;
    const old = history(user);
    await deliverAll(old);
    // As a version before plans left them: no plan, no rank (on a database that had such events,
    // the upgrade recorded until when they were received).
    await db.sql('update public.billing_events set plan = null, sort_rank = null where event_id = any($1)', [ids(old)]);
    await receivedMonthsAgo(db, ids(old), RETENTION_MONTHS + 1);
    await db.sql('update public.billing_legacy_horizon set received_before = now()');
    try {
      const before = await comparable(db, user, 45);
      const result = await maintainBilling({ now: new Date(), budgetMs: 20_000, callBudgetMs: 2_000 });
      expect(result).toMatchObject({ plansMissing: [], failed: 0 });
      expect(result.calls).toBeGreaterThanOrEqual(2);
      expect(result.checkpoints).toBeGreaterThanOrEqual(1);
      expect(result.partitionsDropped).toContain(monthName(-(RETENTION_MONTHS + 1)));
      expect(await comparable(db, user, 45)).toEqual(before);
    } finally {
      await db.sql('update public.billing_legacy_horizon set received_before = null');
    }
  });
});
