// Where the billing webhook's Postgres time goes.
//
// Used by `npm run bench` (Postgres mode): functionStats() before and after the profiled billing run,
// functionCosts() per event from the difference (pg_stat_user_functions: the bench's server tracks
// PL/pgSQL functions, track_functions=pl).
//
// Run alone (`node scripts/bench/sql-profile.ts`, about a minute): a Postgres server of its own with
// pg_stat_statements, 1,000 subscribers' purchases, then N (default 3,000) in-order renewals shaped
// like the bench's, one at a time through one connection: their time and the server's CPU time
// each, the same for the store floor's INSERT; then N more with every statement tracked: the time of
// every statement the functions ran per renewal (nested ones included) with its planning time and how
// often it was planned, the functions' times, and a
// `select 1` for comparison. EXPLAIN=1 also prints one renewal's plans (auto_explain); CHANGE=file.sql
// applies a change (functions replaced, say) after the migrations, to compare with a run without it.
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { describeEventEffects } from '../../lib/billing/event-effects.ts';
import { openPostgres } from '../../lib/db/postgres.ts';
import { createDatabase, startPostgresServer } from '../support/postgres-server.ts';
import { postgresCpuMs } from './cpu.ts';

export interface FunctionStat {
  calls: number;
  totalMs: number;
  selfMs: number;
}

/** The database's PL/pgSQL functions' cumulative calls and times (pg_stat_user_functions). */
export async function functionStats(databaseUrl: string): Promise<Record<string, FunctionStat>> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ funcname: string; calls: string; total_time: number; self_time: number }>(
      'select funcname, calls, total_time, self_time from pg_stat_user_functions');
    return Object.fromEntries(rows.map((row) => [row.funcname, { calls: Number(row.calls), totalMs: row.total_time, selfMs: row.self_time }]));
  } finally {
    await client.end();
  }
}

export interface FunctionCost {
  name: string;
  callsPerEvent: number;
  /** Time in the function itself (not in the functions it calls), per event. */
  selfMsPerEvent: number;
  /** Time per call, the functions it calls included. */
  totalMsPerCall: number;
}

/**
 * What each function cost per event between two functionStats() readings, heaviest first. An event
 * is a call of `root`: a backend reports its counts at most once a second while busy (and some
 * seconds after it goes idle), so the view may lack the last moments of a run, but every function's
 * figures lack the same moments.
 */
export function functionCosts(before: Record<string, FunctionStat>, after: Record<string, FunctionStat>, root = 'record_billing_event'): FunctionCost[] {
  const round = (value: number, digits: number) => Math.round(value * 10 ** digits) / 10 ** digits;
  const events = Math.max(1, (after[root]?.calls ?? 0) - (before[root]?.calls ?? 0));
  return Object.entries(after).flatMap(([name, stat]) => {
    const calls = stat.calls - (before[name]?.calls ?? 0);
    if (calls <= 0) return [];
    const self = stat.selfMs - (before[name]?.selfMs ?? 0);
    const total = stat.totalMs - (before[name]?.totalMs ?? 0);
    return [{ name, callsPerEvent: round(calls / events, 3), selfMsPerEvent: round(self / events, 4), totalMsPerCall: round(total / calls, 4) }];
  }).sort((a, b) => b.selfMsPerEvent - a.selfMsPerEvent);
}

export const DAY_MS = 86_400_000;
/** Subscribers of the profiled renewals: the first SUBSCRIBERS events are their purchases. */
export const SUBSCRIBERS = 1_000;

/** The bench's event (scripts/bench.ts): RevenueCat's sample shape, an anonymous alias, ~1 KB. */
export function renewalBody(index: number, start: number, supabaseUsers = process.env.SUPABASE_USERS === '1') {
  // SUPABASE_USERS=1: the subscribers are Supabase users (uuid ids), so each change is told as an outbound event.
  const subscriber = supabaseUsers
    ? `00000000-0000-4000-8000-${(index % SUBSCRIBERS).toString(16).padStart(12, '0')}`
    : `profile-subscriber-${index % SUBSCRIBERS}`;
  const anonymous = `$RCAnonymousID:${(index % SUBSCRIBERS).toString(16).padStart(32, '0')}`;
  const at = start + index;
  return {
    api_version: '1.0',
    event: {
      id: `profile-${start}-${index}`, type: index < SUBSCRIBERS ? 'INITIAL_PURCHASE' : 'RENEWAL', app_user_id: subscriber,
      original_app_user_id: anonymous, aliases: [anonymous, subscriber],
      subscriber_attributes: { $email: { value: `${subscriber}@example.test`, updated_at_ms: start } },
      country_code: 'US', presented_offering_id: 'default', takehome_percentage: 0.7, product_id: 'pro_monthly', entitlement_ids: ['pro'],
      period_type: 'NORMAL', purchased_at_ms: at, expiration_at_ms: at + 30 * DAY_MS, event_timestamp_ms: at, environment: 'PRODUCTION',
      store: 'APP_STORE', transaction_id: `tx-${start}-${index}`, original_transaction_id: `otx-${subscriber}`, price: 9.99, currency: 'USD',
    },
  };
}

/** An event's two values as the service sends them: its body and its plan (computed here), as JSON text. */
export function renewalArgs(body: ReturnType<typeof renewalBody>): [body: string, plan: string] {
  return [JSON.stringify(body), JSON.stringify(describeEventEffects(body.event as never, new Date()))];
}

/** One event through `record_billing_event`, as the service calls it; the function's answer. */
export async function recordRenewal(client: pg.Client, body: ReturnType<typeof renewalBody>): Promise<unknown> {
  const { rows } = await client.query<{ result: unknown }>('select public.record_billing_event(p_body => $1, p_plan => $2) as result', renewalArgs(body));
  return rows[0]!.result;
}

async function profileAlone(): Promise<void> {
  const events = Number(process.env.N ?? 3_000);
  const server = await startPostgresServer();
  try {
    const admin = new pg.Client({ connectionString: server.url() });
    await admin.connect();
    await admin.query("alter system set shared_preload_libraries = 'pg_stat_statements'");
    await admin.query("alter system set pg_stat_statements.track = 'all'");
    await admin.query('alter system set pg_stat_statements.track_planning = on');
    await admin.end();
    await server.pause();
    await server.resume();
    const name = `sql_profile_${Date.now()}`;
    await createDatabase(server.url(), name);
    await (await openPostgres({ connectionString: server.url(name) })).close(); // migrates
    const client = new pg.Client({ connectionString: server.url(name) });
    await client.connect();
    // CHANGE=file.sql: a change to try (functions replaced), applied after the migrations.
    if (process.env.CHANGE) await client.query(readFileSync(process.env.CHANGE, 'utf8'));
    // With Supabase users, one endpoint to send their events to (each event gets its delivery row).
    if (process.env.SUPABASE_USERS === '1') await client.query(`select public.outbound_set_endpoints('[{"id": "profile", "types": null}]'::jsonb)`);
    const start = Date.now();
    const record = (body: ReturnType<typeof renewalBody>) => recordRenewal(client, body);
    // The subscribers' first purchases (a new group each, so not the in-order shortcut: the bench's
    // first run of a scenario sends as many), timed as a figure of their own.
    let cpu = postgresCpuMs(server.pid());
    let began = performance.now();
    for (let i = 0; i < SUBSCRIBERS; i++) await record(renewalBody(i, start));
    console.log(`${SUBSCRIBERS} first purchases: ${((performance.now() - began) / SUBSCRIBERS).toFixed(3)} ms each (round trip, one at a time), Postgres CPU ${((postgresCpuMs(server.pid()) - cpu) / SUBSCRIBERS).toFixed(3)} ms each`);
    // What autovacuum does within a minute of the writes. Without it the functions' plans, made
    // while the tables were nearly empty, scan entitlements whole for a user's rows (0.33 ms a read
    // of 1,000 rows against 0.07 by its key), which no database serving for longer does.
    await client.query('analyze');
    await client.query('create extension if not exists pg_stat_statements');
    // First the cost as it is (statements not tracked): wall time and the server's CPU time.
    await client.query("set pg_stat_statements.track = 'none'");
    const bodies = Array.from({ length: events }, (_, i) => renewalBody(SUBSCRIBERS + i, start));
    const args = bodies.map(renewalArgs);
    cpu = postgresCpuMs(server.pid());
    began = performance.now();
    for (let i = 0; i < events; i++) await client.query('select public.record_billing_event(p_body => $1, p_plan => $2) as result', args[i]);
    console.log(`${events} in-order renewals: ${((performance.now() - began) / events).toFixed(3)} ms each (round trip, one at a time), Postgres CPU ${((postgresCpuMs(server.pid()) - cpu) / events).toFixed(3)} ms each`);
    cpu = postgresCpuMs(server.pid());
    began = performance.now();
    await client.query('create table public.bench_store_floor (event_id text primary key, body jsonb not null)');
    for (let i = 0; i < events; i++) {
      await client.query('insert into public.bench_store_floor (event_id, body) values ($1, $2) on conflict do nothing', [`floor-${i}`, JSON.stringify(bodies[i])]);
    }
    console.log(`the store floor's INSERT: ${((performance.now() - began) / events).toFixed(3)} ms each, Postgres CPU ${((postgresCpuMs(server.pid()) - cpu) / events).toFixed(3)} ms each`);
    // Then every statement's time, nested ones included.
    await client.query("set pg_stat_statements.track = 'all'");
    await client.query('select pg_stat_statements_reset()');
    const before = await functionStats(server.url(name));
    began = performance.now();
    for (let i = SUBSCRIBERS + events; i < SUBSCRIBERS + 2 * events; i++) await record(renewalBody(i, start));
    console.log(`${events} more, statements tracked: ${((performance.now() - began) / events).toFixed(3)} ms each`);
    console.table(functionCosts(before, await functionStats(server.url(name))));
    const { rows } = await client.query<{ ms: number; planMs: number; calls: string; plans: string; query: string }>(
      `select total_exec_time / $1 as ms, total_plan_time / $1 as "planMs", calls, plans, left(regexp_replace(query, '\\s+', ' ', 'g'), 110) as query
       from pg_stat_statements where dbid = (select oid from pg_database where datname = current_database()) and query not like '%pg_stat%'
       order by total_exec_time + total_plan_time desc limit 30`, [events]);
    // A nested statement planned on (nearly) every call is one whose generic plan Postgres judged
    // dearer than planning for each call's values (an array parameter, typically): rewrite it as a
    // lookup by key (public.billing_fold_in_order). The top-level call is always planned.
    console.log('statements by time per renewal (ms run, ms planning; calls, plans; the first is the whole call):');
    for (const row of rows) {
      console.log(`${row.ms.toFixed(4).padStart(8)} ${row.planMs.toFixed(4).padStart(7)}  ${String(row.calls).padStart(6)} ${String(row.plans).padStart(6)}  ${row.query}`);
    }
    if (process.env.EXPLAIN) {
      const notices: string[] = [];
      client.on('notice', (notice) => notices.push(notice.message ?? ''));
      for (const setting of ["load 'auto_explain'", 'set auto_explain.log_min_duration = 0', 'set auto_explain.log_nested_statements = on',
        'set auto_explain.log_analyze = on', "set auto_explain.log_level = 'notice'"]) await client.query(setting);
      await record(renewalBody(SUBSCRIBERS + 2 * events, start));
      await client.query('set auto_explain.log_min_duration = -1');
      console.log(notices.join('\n----\n'));
    }
    const selectBegan = performance.now();
    for (let i = 0; i < events; i++) await client.query('select 1');
    console.log(`select 1: ${((performance.now() - selectBegan) / events).toFixed(3)} ms each`);
    await client.end();
  } finally {
    await server.stop();
  }
}

if (import.meta.main) await profileAlone();
