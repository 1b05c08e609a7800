import { randomUUID } from 'node:crypto';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import { describeEventEffects } from '../../lib/billing/event-effects.ts';
import { maintainBilling } from '../../lib/billing/maintenance.ts';
import type { BillingWebhookBody } from '../../lib/billing/webhook-body.ts';
import { runMigrations } from '../../lib/db/migrate.ts';
import { openPglite } from '../../lib/db/pglite.ts';
import { clientSession, openPostgres } from '../../lib/db/postgres.ts';
import { DATABASE_KINDS, suiteDatabase, type TestDatabase } from '../support/databases.ts';
import { createDatabase } from '../support/postgres-server.ts';
import { billingEvent, day, deliver, entitlementsOf, eventRow } from './support.ts';

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

/** Pretend these events (and their dedupe keys) were received `months` ago. */
async function receivedMonthsAgo(db: TestDatabase, eventIds: string[], months: number): Promise<void> {
  await db.sql(`select public.billing_ensure_partitions((now() - make_interval(months => $1))::date, now()::date)`, [months]);
  await db.sql(`update public.billing_events set received_at = received_at - make_interval(months => $2) where event_id = any($1)`, [eventIds, months]);
  await db.sql(`update public.billing_event_ids set received_at = received_at - make_interval(months => $2) where event_id = any($1)`, [eventIds, months]);
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

describe('billing retention with webhooks arriving during a partition drop (real Postgres server)', () => {
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

describe('billing maintenance from the service (lib/billing/maintenance.ts)', () => {
  const db = suiteDatabase('pglite');

  it('computes the plans an older version did not store, then checkpoints and drops the month', async () => {
    const user = `unplanned-${randomUUID()}`;
    const old = history(user);
    await deliverAll(old);
    // As a version before plans left them: no plan, no rank.
    await db.sql('update public.billing_events set plan = null, sort_rank = null where event_id = any($1)', [ids(old)]);
    await receivedMonthsAgo(db, ids(old), RETENTION_MONTHS + 1);
    const before = await comparable(db, user, 45);
    const result = await maintainBilling({ now: new Date(), budgetMs: 20_000, callBudgetMs: 2_000 });
    expect(result).toMatchObject({ plansMissing: [] });
    expect(result.checkpoints).toBeGreaterThanOrEqual(1);
    expect(result.partitionsDropped).toContain(monthName(-(RETENTION_MONTHS + 1)));
    expect(await comparable(db, user, 45)).toEqual(before);
  });
});
