// The scale seed of `npm run bench -- --scale` and of tests/db/query-plans.test.ts: fills a
// migrated database with a realistic volume, in SQL (generate_series), never through HTTP.
//
// Billing: subscribers with RevenueCat histories over the retention window (13 months), shaped
// like RevenueCat's sample events (tests/billing/fixtures: ~1.5 KB bodies, an anonymous alias for
// most customers, App Store / Play Store / Stripe ids), in realistic proportions: monthly
// subscriptions (trials, renewals, cancellations, expirations, billing issues in grace), yearly
// ones and lifetime purchases. Every row is what the service itself writes for that history:
// billing_events (body, plan, subject, rank, outcome, owner, moved ids) in the monthly partition of
// its receive time, billing_event_ids, billing_subscribers (groups, watermarks, checkpoints for
// customers whose older events retention already dropped, and each group's tail: the events after
// its checkpoint, as a database upgraded to this version finds them) and the entitlements the fold of each
// history gives. validateSeed() proves it: the stored plans are what describeEventEffects() says of
// the stored bodies, and folding sampled histories again (from their checkpoints) gives the
// stored rows.
//
// Wallets: links (EVM and Solana, a few smart-contract ones) and the last day's challenges.
// Leagues: leagues of 12 members (some of them users of the app) and the last 7 days' deliveries.
import pg from 'pg';
import { APPLE_CHARGE_WINDOW_MS, describeEventEffects } from '../../lib/billing/event-effects.ts';
import type { BillingEvent } from '../../lib/billing/webhook-body.ts';
import { clientSession } from '../../lib/db/postgres.ts';
import { runMigrations } from '../../lib/db/migrate.ts';

export interface ScaleSizes {
  billingEvents: number;
  subscribers: number;
  walletLinks: number;
  leagues: number;
  membersPerLeague: number;
  /** Challenges never signed, open or expired (retention keeps a day's); default one for ten links. */
  walletChallenges?: number;
  /** Deliveries of the last 7 days (retention keeps 7 days'); default one a minute. */
  leagueDeliveries?: number;
}

/** The issue's volume: 1M events over 13 months, 300k subscribers, 200k wallets, 20k leagues of 12. */
export const FULL_SCALE: ScaleSizes = { billingEvents: 1_000_000, subscribers: 300_000, walletLinks: 200_000, leagues: 20_000, membersPerLeague: 12 };

export interface SeedReport {
  ms: number;
  steps: { step: string; ms: number }[];
  tables: { table: string; rows: number; bytes: number }[];
  /** The clock the histories end at (events are received up to an hour before it). */
  now: string;
}

const DAY = 86_400_000;
/** The partitions kept: BILLING_EVENTS_RETENTION_MONTHS' default. */
const RETENTION_MONTHS = 13;
/** Events per subscriber at most: a monthly subscription's 13 months. */
const MAX_EVENTS_PER_SUBSCRIBER = 12;
const SCHEMA = 'scale_seed';

/**
 * Seed a database (migrating it first when needed). Sizes are exact: billingEvents events among
 * subscribers customers, each with at least one event. `parallel` connections share the big inserts.
 */
export async function seedScale(connectionString: string, sizes: ScaleSizes, options: { now?: Date; parallel?: number; log?: (line: string) => void } = {}): Promise<SeedReport> {
  const started = performance.now();
  const log = options.log ?? (() => undefined);
  const nowMs = Math.floor((options.now ?? new Date()).getTime() / 1000) * 1000;
  const ratio = sizes.billingEvents / sizes.subscribers;
  if (!Number.isInteger(sizes.billingEvents) || !Number.isInteger(sizes.subscribers) || sizes.subscribers < 10 || ratio < 1.2 || ratio > 6) {
    throw new Error(`seedScale: ${sizes.billingEvents} events among ${sizes.subscribers} subscribers (1.2 to 6 events each, please)`);
  }
  const clients = await Promise.all(Array.from({ length: Math.max(1, options.parallel ?? 2) }, async () => {
    const client = new pg.Client({ connectionString, application_name: 'scale-seed' });
    await client.connect();
    return client;
  }));
  const [main] = clients as [pg.Client, ...pg.Client[]];
  const steps: SeedReport['steps'] = [];
  const step = async (name: string, work: () => Promise<unknown>) => {
    const at = performance.now();
    await work();
    const ms = Math.round(performance.now() - at);
    steps.push({ step: name, ms });
    log(`  seed: ${name} (${(ms / 1000).toFixed(1)} s)`);
  };
  /** The same statement on every connection, each for its share of the subscribers (i % n = part). */
  const inParallel = (sql: (part: number, parts: number) => string) =>
    Promise.all(clients.map((client, part) => client.query(sql(part, clients.length))));
  /** Independent statements, each connection taking the next one when it is free (biggest first). */
  const shared = (jobs: { name: string; sql: string }[]) => {
    const queue = [...jobs];
    return Promise.all(clients.map(async (client) => {
      for (let job = queue.shift(); job; job = queue.shift()) {
        const at = performance.now();
        await client.query(job.sql);
        log(`    ${job.name} (${((performance.now() - at) / 1000).toFixed(1)} s)`);
      }
    }));
  };
  try {
    await runMigrations(clientSession(main));
    // No triggers while seeding (a bulk load, as pg_restore does): the outbound events' would
    // reconcile every seeded user at commit. The access seeded is then noted as told, below.
    for (const client of clients) await client.query(`set synchronous_commit = off; set maintenance_work_mem = '256MB'; set work_mem = '64MB'; set session_replication_role = replica`);
    const params = seedParameters(sizes, nowMs);
    await step('plan the histories', () => main.query(historiesSql(params)));
    const check = (await main.query(`select min(n) as min, max(n) as max, sum(n)::bigint as total, count(*) as subscribers from ${SCHEMA}.subs`)).rows[0];
    if (Number(check.min) < 1 || Number(check.max) > MAX_EVENTS_PER_SUBSCRIBER || Number(check.total) !== sizes.billingEvents || Number(check.subscribers) !== sizes.subscribers) {
      throw new Error(`seedScale: the history lengths came out wrong: ${JSON.stringify(check)}`);
    }
    await step('events (scalars)', () => inParallel((part, parts) => eventsSql(params, part, parts)));
    await main.query(`select public.billing_ensure_partitions($1::timestamptz::date, $2::timestamptz::date)`, [new Date(params.windowStartMs).toISOString(), new Date(nowMs).toISOString()]);
    await step(`billing_events: ${sizes.billingEvents} rows with bodies and plans`, () => inParallel((part) => billingEventsSql(part)));
    await step('the rest', () => shared([
      { name: 'billing_subscribers (groups, watermarks, checkpoints), entitlements', sql: billingStateSql(clients.length) },
      { name: 'billing_event_ids', sql: eventIdsSql(clients.length) },
      { name: `wallet links (${sizes.walletLinks}) and challenges`, sql: walletsSql(params) },
      { name: `leagues (${sizes.leagues} x ${sizes.membersPerLeague}) and deliveries`, sql: leaguesSql(params) },
    ]));
    await main.query(`drop schema ${SCHEMA} cascade`);
    await step('outbound events: the seeded access noted as told', () => main.query('select public.outbound_adopt_current_state()'));
    const vacuumed = ['billing_events', 'billing_event_ids', 'billing_subscribers', 'entitlements', 'billing_sync_queue', 'wallet_links', 'wallet_challenges', 'leagues', 'league_members', 'league_sync_deliveries'];
    await step('vacuum analyze', () => shared(vacuumed.map((table) => ({ name: `vacuum analyze ${table}`, sql: `vacuum analyze public.${table}` }))));
    const tables = await tableSizes(main);
    return { ms: Math.round(performance.now() - started), steps, tables, now: new Date(nowMs).toISOString() };
  } finally {
    await Promise.all(clients.map((client) => client.end()));
  }
}

interface SeedParameters {
  sizes: ScaleSizes;
  nowMs: number;
  /** Where the kept months begin (the retention cutoff), plus a day: every event is received after it. */
  windowStartMs: number;
  /** Dropped months: a checkpointed history's older events happened before this. */
  cutoffMs: number;
  /** Lengths: F(x) = E (a x + (1 - a) x^p) over the subscribers, stepped; a permutation spreads them. */
  a: number;
  p: number;
  prime: number;
}

function seedParameters(sizes: ScaleSizes, nowMs: number): SeedParameters {
  const now = new Date(nowMs);
  const cutoffMs = Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - RETENTION_MONTHS, 1);
  const ratio = sizes.billingEvents / sizes.subscribers;
  // At least one event each (a ratio >= 1/a), at most MAX_EVENTS_PER_SUBSCRIBER (the slope at x = 1).
  const a = Math.min(0.8, 1.15 / ratio);
  const p = Math.max(1.5, Math.min(5, (MAX_EVENTS_PER_SUBSCRIBER * 0.95 / ratio - a) / (1 - a)));
  const gcd = (x: number, y: number): number => (y === 0 ? x : gcd(y, x % y));
  const prime = [7919, 7927, 7933, 7937].find((candidate) => gcd(candidate, sizes.subscribers) === 1)!;
  return { sizes, nowMs, cutoffMs, windowStartMs: cutoffMs + DAY, a, p, prime };
}

/** Helpers of the seed (dropped at the end): a uniform number from a hash, times from milliseconds. */
function helpersSql(): string {
  return `
    drop schema if exists ${SCHEMA} cascade;
    create schema ${SCHEMA};
    create function ${SCHEMA}.u(i bigint, salt bigint) returns float8 language sql immutable parallel safe
      as $$ select (hashint8extended(i, salt) & 16777215)::float8 / 16777216 $$;
    create function ${SCHEMA}.ts(ms bigint) returns timestamptz language sql immutable parallel safe
      as $$ select timestamptz 'epoch' + ms * interval '1 millisecond' $$;
    create function ${SCHEMA}.iso(ms bigint) returns text language sql immutable parallel safe
      as $$ select to_char((timestamptz 'epoch' + ms * interval '1 millisecond') at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') $$;
  `;
}

/**
 * One row per subscriber: its kind of history and its timeline (milliseconds). Kinds:
 *   1 event:  lifetime purchase (40%), or a yearly subscription bought in the window, or (a third
 *             of those) renewed in the window after a purchase retention dropped (a checkpoint);
 *   2+ events: monthly (30% starting with a 7-day trial), ending
 *             A renewing (last renewal in the last 4 weeks), B cancelled, C cancelled and expired
 *             (40% of them long-time subscribers whose start retention dropped: a checkpoint),
 *             D in a billing issue (grace on the App Store and Play, none on Stripe).
 */
function historiesSql(s: SeedParameters): string {
  const { billingEvents: E, subscribers: S } = s.sizes;
  const F = (x: string) => `${E}::float8 * (${s.a} * (${x}) + ${1 - s.a} * power(${x}, ${s.p}))`;
  const hour = 3_600_000;
  return `${helpersSql()}
    create unlogged table ${SCHEMA}.subs as
    with base as (
      select i, (i::bigint * ${s.prime}) % ${S} as j from generate_series(0, ${S - 1}) i
    ), sized as (
      select i, (case when j + 1 = ${S} then ${E} else floor(${F(`(j + 1)::float8 / ${S}`)}) end - floor(${F(`j::float8 / ${S}`)}))::int as n
      from base
    ), kinds as (
      select i, n,
        case when n = 1 then case when ${SCHEMA}.u(i, 1) < 0.4 then 'lifetime' else 'yearly' end else 'monthly' end as plan_kind,
        case when n < 2 then 'A'
             when ${SCHEMA}.u(i, 2) < 0.55 then 'A' when ${SCHEMA}.u(i, 2) < 0.70 then 'B'
             when ${SCHEMA}.u(i, 2) < 0.88 then case when n >= 3 then 'C' else 'A' end
             else 'D' end as ending,
        case when ${SCHEMA}.u(i, 3) < 0.6 then 'APP_STORE' when ${SCHEMA}.u(i, 3) < 0.95 then 'PLAY_STORE' else 'STRIPE' end as store,
        ${SCHEMA}.u(i, 4) as u4, ${SCHEMA}.u(i, 5) as u5, ${SCHEMA}.u(i, 6) as u6
      from sized
    ), shaped as (
      select k.*,
        case when plan_kind = 'yearly' then u5 < 0.33
             when ending = 'C' then u5 < 0.4 else false end as checkpointed,
        plan_kind = 'monthly' and ${SCHEMA}.u(i, 7) < 0.3 as trial_wanted,
        n - case ending when 'B' then 1 when 'C' then 2 when 'D' then 1 else 0 end as g
      from kinds k
    ), timed as (
      select sh.*, sh.trial_wanted and not sh.checkpointed as trial,
        case plan_kind when 'yearly' then 365::bigint * ${DAY} when 'lifetime' then 0 else 30::bigint * ${DAY} end as period_ms
      from shaped sh
    ), spans as (
      select t.*,
        case when trial then 7::bigint * ${DAY} else period_ms end as first_ms,
        -- From the first in-window purchase (t0) to the last grant's purchase, and to the last event.
        case when g = 1 then 0 else (case when trial then 7::bigint * ${DAY} else period_ms end) + (g - 2) * period_ms end as span_last
      from timed t
    ), placed as (
      select sp.*,
        case
          when checkpointed and plan_kind = 'yearly' then
            -- Bought in the two months before the kept ones (that month was dropped), renewed a year later.
            ${s.cutoffMs}::bigint - ${hour} - (u6 * 60 * ${DAY})::bigint + period_ms
          when checkpointed then ${s.windowStartMs}::bigint + (u6 * 28 * ${DAY})::bigint
          when plan_kind <> 'monthly' then ${s.windowStartMs}::bigint + (u6 * (${s.nowMs}::bigint - ${hour} - ${s.windowStartMs}))::bigint
          when ending = 'A' then ${s.nowMs}::bigint - ${hour} - (u6 * 28 * ${DAY})::bigint - span_last
          else ${s.windowStartMs}::bigint + (u6 * (${s.nowMs}::bigint - 2 * ${hour} - ${s.windowStartMs} - span_last
                 - case ending when 'B' then (case when g = 1 then first_ms else period_ms end) else (case when g = 1 then first_ms else period_ms end) + 3600000 end))::bigint
        end as t0
      from spans sp
    )
    select i, n, plan_kind, ending, store, checkpointed, trial, g, period_ms, first_ms, span_last, t0,
      md5('seed-user:' || i)::uuid::text as user_id,
      case when ${SCHEMA}.u(i, 8) < 0.6 then '$RCAnonymousID:' || md5('seed-anon:' || i) end as anon,
      case when ${SCHEMA}.u(i, 9) < 0.1 then array['pro', 'ads_free'] else array['pro'] end as entitlement_ids,
      case store
        when 'APP_STORE' then case plan_kind when 'monthly' then 'com.example.pro.monthly' when 'yearly' then 'com.example.pro.yearly' else 'com.example.pro.lifetime' end
        when 'PLAY_STORE' then case plan_kind when 'monthly' then 'pro_monthly:monthly-autorenew' when 'yearly' then 'pro_yearly:yearly-autorenew' else 'pro_lifetime' end
        else case plan_kind when 'monthly' then 'prod_ProMonthly' when 'yearly' then 'prod_ProYearly' else 'prod_ProLifetime' end
      end as product_id,
      case store
        when 'APP_STORE' then (2000000100000000 + i::bigint * 100)::text
        when 'PLAY_STORE' then 'GPA.' || lpad((3300 + i % 600)::text, 4, '0') || '-' || substr(md5('gpa' || i), 1, 4) || '-' || lpad((i % 10000)::text, 4, '0') || '-' || lpad(((i * 7) % 100000)::text, 5, '0')
        else 'sub_' || substr(md5('stripe' || i), 1, 24)
      end as otx,
      (array['US', 'GB', 'DE', 'BR', 'JP', 'FR', 'CA', 'IN'])[1 + i % 8] as country,
      (array['USD', 'GBP', 'EUR', 'BRL', 'JPY', 'EUR', 'CAD', 'INR'])[1 + i % 8] as currency,
      (array[9.99, 8.99, 9.99, 29.90, 1500, 9.99, 12.99, 799])[1 + i % 8] as price
    from placed;
    alter table ${SCHEMA}.subs add primary key (i);
  `;
}

/**
 * One row per event (scalars only): type, rank, times, period, transaction. Event k of a subscriber:
 * grants first (k < g), then the ending's events. Times: the purchase (grants: at the period start),
 * the event a few seconds after, received a moment later.
 */
function eventsSql(s: SeedParameters, part: number, parts: number): string {
  const table = `${SCHEMA}.events_${part}`;
  return `
    create unlogged table ${table} as
    select e.*, e.event_ms + 100 + (${SCHEMA}.u(e.i * 16 + e.k, 11) * 1900)::bigint as received_ms
    from (
      select s.i, k,
        md5('seed-event:' || s.i || ':' || k)::uuid::text as event_id,
        case when k < s.g then
               case when s.plan_kind = 'lifetime' then 'NON_RENEWING_PURCHASE' when k = 0 and not s.checkpointed then 'INITIAL_PURCHASE' else 'RENEWAL' end
             when s.ending = 'D' then 'BILLING_ISSUE'
             when k = s.g then 'CANCELLATION'
             else 'EXPIRATION' end as type,
        g.purchased_ms, g.expires_ms, g.tx, g.period_type,
        case when k < s.g then g.purchased_ms + 2000 + (${SCHEMA}.u(s.i * 16 + k, 12) * 58000)::bigint
             when s.ending = 'D' then g.expires_ms + 5000 + (${SCHEMA}.u(s.i * 16 + k, 12) * 55000)::bigint
             when k = s.g then g.purchased_ms + ((0.1 + 0.8 * ${SCHEMA}.u(s.i, 13)) * (g.expires_ms - g.purchased_ms))::bigint
             else g.expires_ms + 60000 + (${SCHEMA}.u(s.i * 16 + k, 12) * 240000)::bigint end as event_ms,
        case when k >= s.g and s.ending = 'D' and s.store <> 'STRIPE'
             then g.expires_ms + case s.store when 'APP_STORE' then 16 else 7 end * ${DAY}::bigint end as grace_ms
      from ${SCHEMA}.subs s
      cross join lateral generate_series(0, s.n - 1) k
      -- The grant this event is about: its own (k < g), else the last one.
      cross join lateral (
        select s.t0 + case when gk = 0 then 0 else s.first_ms + (gk - 1) * s.period_ms end as purchased_ms,
               case when s.plan_kind = 'lifetime' then null
                    else s.t0 + case when gk = 0 then 0 else s.first_ms + (gk - 1) * s.period_ms end + case when gk = 0 then s.first_ms else s.period_ms end
               end as expires_ms,
               case when s.plan_kind = 'lifetime' or (gk = 0 and not s.checkpointed) then s.otx
                    when s.store = 'APP_STORE' then (s.otx::bigint + 1 + gk + case when s.checkpointed then 40 else 0 end)::text
                    when s.store = 'PLAY_STORE' then s.otx || '..' || (gk - 1 + case when s.checkpointed then 40 else 0 end)
                    else 'in_' || substr(md5('stripe-invoice' || s.i || ':' || gk), 1, 24) end as tx,
               case when gk = 0 and s.trial then 'TRIAL' else 'NORMAL' end as period_type
        from (select least(k, s.g - 1) as gk) gg
      ) g
      where s.i % ${parts} = ${part}
    ) e;
  `;
}

/** The stored rows of billing_events: the request body RevenueCat sends, and the plan the service computes of it. */
function billingEventsSql(part: number): string {
  const events = `${SCHEMA}.events_${part}`;
  const iso = (ms: string) => `${SCHEMA}.iso(${ms})`;
  // The effect on an entitlement (lib/billing/event-effects.ts), per type of the seed.
  const effect = (id: string) => `case e.type
      when 'INITIAL_PURCHASE' then jsonb_build_object('entitlementId', ${id}, 'action', 'grant', 'status', 'active', 'statusFrom', null, 'renewal', 'on', 'expiry', 'max', 'expiresAt', ${iso('e.expires_ms')}, 'createsRow', false, 'graceExpiresAt', null, 'pendingProductId', null, 'autoResumeAt', null)
      when 'RENEWAL' then jsonb_build_object('entitlementId', ${id}, 'action', 'grant', 'status', 'active', 'statusFrom', null, 'renewal', 'continue', 'expiry', 'max', 'expiresAt', ${iso('e.expires_ms')}, 'createsRow', false, 'graceExpiresAt', null, 'pendingProductId', null, 'autoResumeAt', null, 'resumesRenewal', true)
      when 'NON_RENEWING_PURCHASE' then jsonb_build_object('entitlementId', ${id}, 'action', 'grant', 'status', 'active', 'statusFrom', null, 'renewal', 'off', 'expiry', 'max', 'expiresAt', null, 'createsRow', false, 'graceExpiresAt', null, 'pendingProductId', null, 'autoResumeAt', null)
      when 'CANCELLATION' then jsonb_build_object('entitlementId', ${id}, 'action', 'flag', 'status', 'cancelled_active', 'statusFrom', jsonb_build_array('active'), 'renewal', 'off', 'expiry', 'extend', 'expiresAt', ${iso('e.expires_ms')}, 'createsRow', true, 'graceExpiresAt', null, 'pendingProductId', null, 'autoResumeAt', null)
        -- (An App Store subscription cancelled in its last 24 hours: cancelsWithinChargeWindow in event-effects.ts.)
        || case when s.store in ('APP_STORE', 'MAC_APP_STORE') and e.expires_ms - e.event_ms < ${APPLE_CHARGE_WINDOW_MS}
                then '{"cancelsWithinChargeWindow": true}'::jsonb else '{}'::jsonb end
      when 'BILLING_ISSUE' then jsonb_build_object('entitlementId', ${id}, 'action', 'flag', 'status', case when e.grace_ms is null then 'billing_issue' else 'grace' end,
        -- (With a grace period it also ends a pause in effect.)
        'statusFrom', case when e.grace_ms is null then jsonb_build_array('active', 'cancelled_active', 'billing_issue', 'grace')
                           else jsonb_build_array('active', 'cancelled_active', 'billing_issue', 'grace', 'paused') end, 'renewal', 'off', 'expiry', 'extend', 'expiresAt', ${iso('e.expires_ms')}, 'createsRow', true, 'graceExpiresAt', ${iso('e.grace_ms')}, 'pendingProductId', null, 'autoResumeAt', null)
      else jsonb_build_object('entitlementId', ${id}, 'action', 'revoke', 'status', 'expired', 'statusFrom', null, 'renewal', 'off', 'expiry', 'set', 'expiresAt', ${iso('e.expires_ms')}, 'createsRow', true, 'graceExpiresAt', null, 'pendingProductId', null, 'autoResumeAt', null)
    end`;
  // (The seed's customers have one or two entitlements.)
  const effects = `case when cardinality(s.entitlement_ids) = 1 then jsonb_build_array(${effect('s.entitlement_ids[1]')})
    else jsonb_build_array(${effect('s.entitlement_ids[1]')}, ${effect('s.entitlement_ids[2]')}) end`;
  const rank = `case e.type when 'CANCELLATION' then 1 when 'BILLING_ISSUE' then 1 when 'EXPIRATION' then 2 else 0 end`;
  const named = `case when s.anon is null then jsonb_build_array(s.user_id) else jsonb_build_array(s.user_id, s.anon) end`;
  return `
    insert into public.billing_events (event_id, type, app_user_id, event_at, received_at, outcome, environment, owner_id, moved_ids, body, subject_id, sort_rank, plan)
    select e.event_id, e.type, s.user_id, ${SCHEMA}.ts(e.event_ms), ${SCHEMA}.ts(e.received_ms), 'applied', 'PRODUCTION', s.user_id,
      case when s.anon is null then '{}'::text[] else array[s.user_id, s.anon] end,
      jsonb_build_object('api_version', '1.0', 'event',
        jsonb_build_object(
          'event_timestamp_ms', e.event_ms, 'product_id', s.product_id, 'period_type', e.period_type,
          'purchased_at_ms', e.purchased_ms, 'expiration_at_ms', e.expires_ms, 'environment', 'PRODUCTION',
          'entitlement_id', null, 'entitlement_ids', to_jsonb(s.entitlement_ids), 'presented_offering_id', 'default',
          'transaction_id', e.tx, 'original_transaction_id', s.otx, 'is_family_share', false, 'country_code', s.country,
          'app_user_id', s.user_id, 'aliases', case when s.anon is null then jsonb_build_array(s.user_id) else jsonb_build_array(s.anon, s.user_id) end,
          'original_app_user_id', coalesce(s.anon, s.user_id),
          'currency', s.currency, 'price', case when e.type in ('INITIAL_PURCHASE', 'RENEWAL', 'NON_RENEWING_PURCHASE') and e.period_type <> 'TRIAL'
                                           then s.price * case s.plan_kind when 'yearly' then 10 when 'lifetime' then 25 else 1 end else 0 end,
          'price_in_purchased_currency', case when e.type in ('INITIAL_PURCHASE', 'RENEWAL', 'NON_RENEWING_PURCHASE') and e.period_type <> 'TRIAL'
                                           then s.price * case s.plan_kind when 'yearly' then 10 when 'lifetime' then 25 else 1 end else 0 end,
          'subscriber_attributes', jsonb_build_object(
            '$email', jsonb_build_object('updated_at_ms', s.t0 - 86400000, 'value', 'user' || s.i || '@example.test'),
            '$displayName', jsonb_build_object('updated_at_ms', s.t0 - 86400000, 'value', 'Player ' || s.i),
            '$appsflyerId', jsonb_build_object('updated_at_ms', s.t0 - 3600000, 'value', (1700000000000 + s.i)::text || '-' || (s.i % 9999999)::text)),
          'store', s.store, 'takehome_percentage', case s.store when 'STRIPE' then 0.97 else 0.85 end, 'tax_percentage', 0.0833,
          'commission_percentage', case s.store when 'STRIPE' then 0.03 else 0.15 end, 'offer_code', null, 'metadata', null,
          'type', e.type, 'id', e.event_id, 'app_id', 'app7c1d2e3f4a')
        || case e.type
             when 'INITIAL_PURCHASE' then jsonb_build_object('experiments', jsonb_build_array(jsonb_build_object('experiment_id', 'prexp7f3a', 'experiment_variant', case when s.i % 2 = 0 then 'a' else 'b' end, 'enrolled_at_ms', s.t0 - 3600000)))
             when 'RENEWAL' then jsonb_build_object('is_trial_conversion', s.trial and e.k = 1, 'renewal_number', e.k + 1 + case when s.checkpointed then 40 else 0 end)
             when 'CANCELLATION' then jsonb_build_object('cancel_reason', 'UNSUBSCRIBE')
             when 'EXPIRATION' then jsonb_build_object('expiration_reason', 'UNSUBSCRIBE')
             when 'BILLING_ISSUE' then jsonb_build_object('grace_period_expiration_at_ms', e.grace_ms)
             else '{}'::jsonb end),
      s.user_id, ${rank},
      jsonb_build_object(
        'eventId', e.event_id, 'type', e.type, 'appUserId', s.user_id, 'eventAt', ${iso('e.event_ms')}, 'rank', ${rank},
        'environment', 'PRODUCTION', 'subjectId', s.user_id, 'linkedIds', ${named}, 'ownerCandidates', jsonb_build_array(s.user_id),
        'movedIds', case when s.anon is null then '[]'::jsonb else ${named} end, 'move', case when s.anon is null then null else 'merge' end,
        'period', jsonb_build_object('productId', s.product_id, 'purchasedAt', ${iso('e.purchased_ms')}, 'expiresAt', ${iso('e.expires_ms')},
          'transactionId', e.tx, 'originalTransactionId', case when e.type = 'NON_RENEWING_PURCHASE' then null else s.otx end,
          'store', s.store, 'periodType', e.period_type),
        'effects', ${effects},
        'ignoredReason', null, 'syncReason', null)
    from ${events} e join ${SCHEMA}.subs s on s.i = e.i;
  `;
}

const eventsOf = (parts: number) => `(${Array.from({ length: parts }, (_, part) => `select * from ${SCHEMA}.events_${part}`).join(' union all ')})`;

/** Every event's dedupe key. */
function eventIdsSql(parts: number): string {
  return `insert into public.billing_event_ids (event_id, received_at) select e.event_id, ${SCHEMA}.ts(e.received_ms) from ${eventsOf(parts)} e`;
}

/**
 * What the fold of each history leaves: groups and watermarks (a customer with an anonymous id is
 * one group, named after its smallest id, as billing_lock_group names it), checkpoints where the
 * history began before the kept months, and the entitlement rows.
 */
function billingStateSql(parts: number): string {
  const eventsUnion = eventsOf(parts);
  return `

    -- Per subscriber: its last grant and its last event.
    create unlogged table ${SCHEMA}.last as
    select s.i,
      lg.event_id as grant_id, lg.event_ms as grant_ms, lg.purchased_ms, lg.expires_ms, lg.tx, lg.period_type,
      le.event_id as last_id, le.event_ms as last_ms, le.received_ms as last_received_ms, le.type as last_type, le.grace_ms,
      case le.type when 'CANCELLATION' then 1 when 'BILLING_ISSUE' then 1 when 'EXPIRATION' then 2 else 0 end as last_rank
    from ${SCHEMA}.subs s
    join ${eventsUnion} lg on lg.i = s.i and lg.k = s.g - 1
    join ${eventsUnion} le on le.i = s.i and le.k = s.n - 1;

    insert into public.billing_subscribers (app_user_id, group_id, folded_key, customer_id, base_key, base_rows, base_customer)
    select id.app_user_id, least(s.user_id collate "C", coalesce(s.anon, s.user_id) collate "C"),
      case when id.app_user_id = least(s.user_id collate "C", coalesce(s.anon, s.user_id) collate "C")
           then public.billing_sort_key(${SCHEMA}.ts(l.last_ms), l.last_rank::smallint, l.last_id) end,
      null,
      case when s.checkpointed then public.billing_sort_key(${SCHEMA}.ts(c.event_ms), 0::smallint, c.event_id) end,
      case when s.checkpointed then
        case when id.app_user_id = s.user_id then (
          select jsonb_agg(jsonb_build_object(
            'app_user_id', s.user_id, 'entitlement_id', ent.id, 'product_id', s.product_id,
            'source_key', public.billing_source_key('PRODUCTION', s.store, s.product_id, s.otx, c.tx),
            'status', 'active', 'will_renew', true, 'expires_at', ${SCHEMA}.ts(c.purchased_ms + s.period_ms), 'grace_expires_at', null,
            'pending_product_id', null, 'store', s.store, 'environment', 'PRODUCTION', 'period_type', 'NORMAL',
            'original_transaction_id', s.otx, 'transaction_id', c.tx, 'period_purchased_at', ${SCHEMA}.ts(c.purchased_ms),
            'auto_resume_at', null, 'last_event_id', c.event_id, 'last_event_at', ${SCHEMA}.ts(c.event_ms),
            'updated_at', ${SCHEMA}.ts(c.event_ms + 500), 'granted_at', ${SCHEMA}.ts(c.event_ms), 'origin', 'webhook', 'synced_at', null)
            order by ent.id collate "C")
          from unnest(s.entitlement_ids) as ent(id))
        else '[]'::jsonb end
      end,
      null
    from ${SCHEMA}.subs s
    join ${SCHEMA}.last l on l.i = s.i
    -- The grant before the kept months that a checkpoint was taken at (its event is gone).
    cross join lateral (
      select md5('seed-event:' || s.i || ':-1')::uuid::text as event_id, s.t0 - s.period_ms as purchased_ms,
             s.t0 - s.period_ms + 3000 as event_ms,
             case s.store when 'APP_STORE' then (s.otx::bigint + 40)::text when 'PLAY_STORE' then s.otx || '..' || 38
                          else 'in_' || substr(md5('stripe-invoice' || s.i || ':-1'), 1, 24) end as tx
    ) c
    cross join lateral (select s.user_id as app_user_id union all select s.anon where s.anon is not null) id;

    -- Subscribers marked for a sync from RevenueCat (2%): new products, refunds, the sweep's
    -- ends-soon marks; some waiting out a failure's backoff.
    insert into public.billing_sync_queue (app_user_id, reason, requested_at, attempts, next_attempt_at, last_error)
    select s.user_id, (array['new_source', 'refund', 'ends_soon', 'transfer'])[1 + s.i % 4], ${SCHEMA}.ts(l.last_received_ms),
      (s.i / 50) % 4, ${SCHEMA}.ts(l.last_received_ms + ((s.i / 50) % 4) * 3600000),
      case when (s.i / 50) % 4 > 0 then 'RevenueCat answered 503' end
    from ${SCHEMA}.subs s join ${SCHEMA}.last l on l.i = s.i
    where s.i % 50 = 7;

    insert into public.entitlements (app_user_id, entitlement_id, product_id, source_key, status, will_renew, expires_at, grace_expires_at,
      pending_product_id, store, environment, period_type, original_transaction_id, transaction_id, period_purchased_at, auto_resume_at,
      last_event_id, last_event_at, updated_at, granted_at, origin, synced_at)
    select s.user_id, ent.id, s.product_id,
      public.billing_source_key('PRODUCTION', s.store, s.product_id, case when s.plan_kind = 'lifetime' then null else s.otx end, l.tx),
      case l.last_type when 'CANCELLATION' then 'cancelled_active' when 'EXPIRATION' then 'expired'
                       when 'BILLING_ISSUE' then case when l.grace_ms is null then 'billing_issue' else 'grace' end
                       else 'active' end,
      -- (A billing issue turns renewal off until a payment recovers it.)
      case when s.plan_kind = 'lifetime' then false when l.last_type in ('CANCELLATION', 'EXPIRATION', 'BILLING_ISSUE') then false else true end,
      ${SCHEMA}.ts(l.expires_ms), ${SCHEMA}.ts(l.grace_ms), null, s.store, 'PRODUCTION', l.period_type,
      case when s.plan_kind = 'lifetime' then null else s.otx end, l.tx, ${SCHEMA}.ts(l.purchased_ms), null,
      l.last_id, ${SCHEMA}.ts(l.last_ms), ${SCHEMA}.ts(l.last_received_ms), ${SCHEMA}.ts(l.grant_ms), 'webhook', null
    from ${SCHEMA}.subs s
    join ${SCHEMA}.last l on l.i = s.i
    cross join unnest(s.entitlement_ids) as ent(id);

    -- Each group's tail (the events after its checkpoint) and when the oldest of them was received,
    -- counted from the log as the service keeps them.
    select public.billing_recount_tails();
  `;
}

/**
 * Wallet links: users of the app (half of them subscribers), about one in six with two wallets;
 * 90% EVM (mainnet, Base; 2% smart-contract accounts), 10% Solana; made over the 13 months. The
 * challenges retention keeps (it deletes them a day after they expire): the used ones of the last
 * day's links, and prompts never signed (one for every ten links), open or expired.
 */
function walletsSql(s: SeedParameters): string {
  const W = s.sizes.walletLinks;
  const span = s.nowMs - s.windowStartMs;
  const base58 = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz';
  return `
    create unlogged table ${SCHEMA}.links as
    select w, md5('seed-user:' || (${Math.floor(s.sizes.subscribers / 2)} + floor(w * 0.85)::bigint))::uuid as user_id,
      case when ${SCHEMA}.u(w, 21) < 0.9 then 'evm' else 'solana' end as chain,
      ${SCHEMA}.ts(${s.nowMs}::bigint - (${SCHEMA}.u(w, 22) * ${span})::bigint) as created_at,
      case when ${SCHEMA}.u(w, 21) >= 0.9 then null when ${SCHEMA}.u(w, 23) < 0.75 then 1 else 8453 end as chain_id,
      md5('seed-challenge:' || w)::uuid as challenge_id,
      ${SCHEMA}.u(w, 23) as u
    from generate_series(0, ${W - 1}) w;
    create unlogged table ${SCHEMA}.addresses as
    select w, case when chain = 'evm' then '0x' || substr(md5('seed-wallet:' || w), 1, 32) || substr(md5('seed-wallet2:' || w), 1, 8)
              else (select string_agg(substr('${base58}', 1 + get_byte(decode(md5('seed-sol:' || w) || md5('seed-sol2:' || w), 'hex'), b) % 58, 1), '' order by b)
                    from generate_series(0, 31) b) || 'x' end as address
    from ${SCHEMA}.links;
    insert into public.wallet_links (id, user_id, chain, address, address_key, chain_id, cluster, challenge_id, created_at, kind)
    select md5('seed-link:' || l.w)::uuid, l.user_id, l.chain, a.address, case when l.chain = 'evm' then lower(a.address) else a.address end,
      l.chain_id, case when l.chain = 'solana' then 'mainnet-beta' end,
      l.challenge_id, l.created_at,
      case when l.chain = 'evm' and l.u > 0.98 then 'erc1271' else 'eoa' end
    from ${SCHEMA}.links l join ${SCHEMA}.addresses a on a.w = l.w
    on conflict do nothing;

    -- The last day: every link of the last day's challenge (used), and as many open or expired ones.
    insert into public.wallet_challenges (id, user_id, chain, address, address_key, chain_id, cluster, nonce, message, issued_at, expires_at, created_at, used_at)
    select l.challenge_id, l.user_id, l.chain, a.address, case when l.chain = 'evm' then lower(a.address) else a.address end,
      l.chain_id, case when l.chain = 'solana' then 'mainnet-beta' end,
      substr(md5('nonce' || l.w), 1, 17),
      'app.example.com wants you to sign in with your ' || case when l.chain = 'evm' then 'Ethereum' else 'Solana' end || ' account:' || chr(10) || a.address || chr(10) || chr(10)
        || 'Link this wallet to your account.' || chr(10) || chr(10) || 'URI: https://app.example.com' || chr(10) || 'Version: 1' || chr(10)
        || coalesce('Chain ID: ' || l.chain_id, 'Cluster: mainnet-beta') || chr(10) || 'Nonce: ' || substr(md5('nonce' || l.w), 1, 17) || chr(10) || 'Issued At: ' || to_char((l.created_at - interval '1 minute') at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
        || chr(10) || 'Expiration Time: ' || to_char((l.created_at + interval '9 minutes') at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
        || chr(10) || 'Request ID: ' || l.challenge_id,
      l.created_at - interval '1 minute', l.created_at + interval '9 minutes', l.created_at - interval '1 minute', l.created_at
    from ${SCHEMA}.links l join ${SCHEMA}.addresses a on a.w = l.w
    where l.created_at > ${SCHEMA}.ts(${s.nowMs}::bigint - ${DAY}::bigint)
    union all
    select md5('seed-open-challenge:' || c)::uuid, md5('seed-user:' || c)::uuid, 'evm', '0x' || substr(md5('seed-open:' || c), 1, 40),
      '0x' || substr(md5('seed-open:' || c), 1, 40), 1, null, substr(md5('open-nonce' || c), 1, 17),
      'app.example.com wants you to sign in with your Ethereum account:' || chr(10) || '0x' || substr(md5('seed-open:' || c), 1, 40) || chr(10) || chr(10)
        || 'Link this wallet to your account.' || chr(10) || chr(10) || 'URI: https://app.example.com' || chr(10) || 'Version: 1' || chr(10)
        || 'Chain ID: 1' || chr(10) || 'Nonce: ' || substr(md5('open-nonce' || c), 1, 17),
      at, at + interval '10 minutes', at, null
    from generate_series(1, ${s.sizes.walletChallenges ?? Math.max(10, Math.floor(W / 10))}) c
    cross join lateral (select ${SCHEMA}.ts(${s.nowMs}::bigint - (${SCHEMA}.u(c, 24) * ${DAY} * 1.9)::bigint) as at) t;
  `;
}

/**
 * Leagues from one sync source, updated over the 13 months, each of membersPerLeague members (the
 * first the commissioner; 40% of members are users of the app, some in several leagues), and the
 * deliveries of the last 7 days (retention deletes older ones): one a minute by default.
 */
function leaguesSql(s: SeedParameters): string {
  const L = s.sizes.leagues;
  const M = s.sizes.membersPerLeague;
  const span = s.nowMs - s.windowStartMs;
  return `
    insert into public.leagues (source, external_id, name, sport, season, status, settings, updated_at, synced_at)
    select 'sleeper', 'lg-' || lpad(g::text, 7, '0'), 'League ' || g || ' ' || (array['Dynasty', 'Redraft', 'Keepers', 'Best Ball'])[1 + g % 4],
      (array['nfl', 'nba', 'mlb', 'nhl'])[1 + (g / 7) % 4], '2026', (array['pre_draft', 'drafting', 'in_season', 'complete'])[1 + (g / 3) % 4],
      jsonb_build_object('scoring', (array['ppr', 'half_ppr', 'standard'])[1 + g % 3], 'teams', ${M}, 'playoffTeams', 6, 'waiverType', 'faab', 'tradeDeadlineWeek', 11),
      ${SCHEMA}.ts(${s.nowMs}::bigint - (${SCHEMA}.u(g, 31) * ${span})::bigint), ${SCHEMA}.ts(${s.nowMs}::bigint - (${SCHEMA}.u(g, 31) * ${span})::bigint)
    from generate_series(0, ${L - 1}) g;
    insert into public.league_members (league_id, external_user_id, display_name, role, app_user_id)
    select l.id, 'su-' || substr(md5('member:' || g || ':' || m), 1, 12), 'Manager ' || substr(md5('member:' || g || ':' || m), 1, 6),
      case when m = 0 then 'commissioner' else 'member' end,
      case when ${SCHEMA}.u(g * 64 + m, 32) < 0.4 then md5('seed-user:' || ((g * ${M} + m) * 7919 % ${Math.max(1, Math.floor(s.sizes.subscribers * 1.2))}))::uuid end
    from public.leagues l
    cross join lateral (select substr(l.external_id, 4)::int as g) gg
    cross join generate_series(0, ${M - 1}) m
    where l.source = 'sleeper' and l.external_id like 'lg-%';
    insert into public.league_sync_deliveries (source, delivery_id, sent_at, received_at, upserted, unchanged, stale, deleted)
    select 'sleeper', 'delivery-' || d, at, at + interval '150 milliseconds', 50, 0, 0, 0
    from generate_series(0, ${s.sizes.leagueDeliveries ?? 7 * 24 * 60} - 1) d
    cross join lateral (select ${SCHEMA}.ts(${s.nowMs}::bigint - (d::float8 * ${7 * DAY} / ${s.sizes.leagueDeliveries ?? 7 * 24 * 60})::bigint) as at) t;
  `;
}

export async function tableSizes(client: pg.Client): Promise<SeedReport['tables']> {
  const { rows } = await client.query(`
    select c.relname as table,
      case when c.relkind = 'p' then (select coalesce(sum(greatest(p.reltuples, 0)), 0) from pg_inherits i join pg_class p on p.oid = i.inhrelid where i.inhparent = c.oid)
           else greatest(c.reltuples, 0) end::bigint as rows,
      case when c.relkind = 'p' then (select coalesce(sum(pg_total_relation_size(i.inhrelid)), 0) from pg_inherits i where i.inhparent = c.oid)
           else pg_total_relation_size(c.oid) end::bigint as bytes
    from pg_class c join pg_namespace n on n.oid = c.relnamespace
    where n.nspname = 'public' and c.relkind in ('r', 'p') and not c.relispartition
    order by bytes desc`);
  return rows.map((row) => ({ table: String(row.table), rows: Number(row.rows), bytes: Number(row.bytes) }));
}

export function formatSeedReport(report: SeedReport): string {
  const lines = [`seeded in ${(report.ms / 1000).toFixed(1)} s (histories end ${report.now})`, '', '| table | rows | size |', '|---|---:|---:|'];
  for (const table of report.tables.filter((t) => t.rows > 0 || t.bytes > 65_536)) {
    lines.push(`| ${table.table} | ${table.rows.toLocaleString('en-US')} | ${(table.bytes / 2 ** 20).toFixed(1)} MiB |`);
  }
  return lines.join('\n');
}

/** A seeded customer, for requests about an existing subscriber (bench, tests). */
export interface SeededSubscriber {
  appUserId: string;
  /** Its anonymous id, when it has one (RevenueCat sends it as original_app_user_id and in aliases). */
  anonymousId: string | null;
  productId: string;
  store: string;
  originalTransactionId: string | null;
  entitlementIds: string[];
  /** The latest event of its history (a new event must be later to fold on top). */
  lastEventAt: string;
  checkpointed: boolean;
}

/** `count` seeded subscribers with a subscription (not lifetime purchases), drawn evenly. */
export async function seededSubscribers(sql: (text: string, values?: unknown[]) => Promise<Record<string, unknown>[]>, count: number, where = 'true'): Promise<SeededSubscriber[]> {
  const rows = await sql(`
    select s.app_user_id, a.app_user_id as anonymous_id, e.product_id, e.store, e.original_transaction_id,
      array_agg(e.entitlement_id order by e.entitlement_id) as entitlement_ids, max(e.last_event_at) as last_event_at,
      bool_or(s.base_key is not null) as checkpointed
    from public.billing_subscribers s
    join public.entitlements e on e.app_user_id = s.app_user_id
    left join public.billing_subscribers a on a.group_id = s.group_id and a.app_user_id like '$RCAnonymousID:%'
    where s.app_user_id not like '$RCAnonymousID:%' and e.original_transaction_id is not null and ${where}
    group by 1, 2, 3, 4, 5
    order by md5(s.app_user_id)
    limit $1`, [count]);
  return rows.map((row) => ({
    appUserId: String(row.app_user_id), anonymousId: (row.anonymous_id as string | null) ?? null, productId: String(row.product_id), store: String(row.store),
    originalTransactionId: (row.original_transaction_id as string | null) ?? null, entitlementIds: row.entitlement_ids as string[],
    lastEventAt: new Date(row.last_event_at as string).toISOString(), checkpointed: row.checkpointed === true,
  }));
}

export interface SeedValidation {
  plansChecked: number;
  groupsRefolded: number;
  mismatches: string[];
}

/**
 * Whether the seed is what the service would have written: the stored plan of sampled events of
 * every type equals describeEventEffects() of the stored body, and folding sampled groups again
 * (billing_refold_group: from their checkpoints, replaying their events) gives exactly the stored
 * entitlement rows and watermark (in a transaction rolled back, so nothing changes).
 */
export async function validateSeed(connectionString: string, options: { plansPerType?: number; groups?: number } = {}): Promise<SeedValidation> {
  const client = new pg.Client({ connectionString, application_name: 'scale-seed-validate' });
  await client.connect();
  const mismatches: string[] = [];
  try {
    // A sample of pages of every partition (3%: at 1% a small seed sometimes held fewer than ten
    // events of a type), then the first few events of each type in it.
    const plans = await client.query(`
      select event_id, body, plan, event_at from (
        select event_id, body, plan, event_at, row_number() over (partition by type order by event_id) as n
        from public.billing_events tablesample system (3) repeatable (7) where plan is not null
      ) e where n <= $1`, [options.plansPerType ?? 20]);
    for (const row of plans.rows) {
      const expected = describeEventEffects(row.body.event as BillingEvent, new Date(row.event_at));
      if (JSON.stringify(sortKeys(expected)) !== JSON.stringify(sortKeys(row.plan))) {
        mismatches.push(`plan of ${row.event_id}: stored ${JSON.stringify(row.plan)}, the service computes ${JSON.stringify(expected)}`);
      }
    }
    const groups = await client.query(`
      select group_id from (
        select distinct s.group_id, s.base_key is not null as checkpointed from public.billing_subscribers s
      ) g order by checkpointed desc, md5(group_id) limit $1`, [options.groups ?? 200]);
    const rowsOf = `select coalesce(jsonb_agg(to_jsonb(e) - 'updated_at' order by e.app_user_id collate "C", e.entitlement_id collate "C", e.source_key), '[]'::jsonb) as rows
      from public.entitlements e where e.app_user_id in (select app_user_id from public.billing_subscribers where group_id = $1)`;
    const watermark = 'select folded_key from public.billing_subscribers where app_user_id = $1';
    await client.query('begin');
    try {
      for (const { group_id: group } of groups.rows) {
        const before = (await client.query(rowsOf, [group])).rows[0].rows;
        const key = (await client.query(watermark, [group])).rows[0]?.folded_key;
        await client.query(`select public.billing_refold_group($1, '')`, [group]);
        const after = (await client.query(rowsOf, [group])).rows[0].rows;
        const keyAfter = (await client.query(watermark, [group])).rows[0]?.folded_key;
        if (JSON.stringify(before) !== JSON.stringify(after)) mismatches.push(`group ${group}: stored ${JSON.stringify(before)}, the fold gives ${JSON.stringify(after)}`);
        if (key !== keyAfter) mismatches.push(`group ${group}: watermark ${key}, the fold gives ${keyAfter}`);
      }
    } finally {
      await client.query('rollback');
    }
    return { plansChecked: plans.rows.length, groupsRefolded: groups.rows.length, mismatches };
  } finally {
    await client.end();
  }
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).sort(([a], [b]) => (a < b ? -1 : 1)).map(([k, v]) => [k, sortKeys(v)]));
  return value;
}
