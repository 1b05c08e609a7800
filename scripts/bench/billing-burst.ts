// Does gathering billing events into one database call pay at RevenueCat's month-start burst?
//
// `node scripts/bench/billing-burst.ts` (about 3 minutes): one Postgres server of its own (the
// tests': fsync off; FSYNC=1 turns it on), one migrated database, SUBSCRIBERS (default 10,000)
// subscribers' purchases, then renewals offered OPEN-LOOP at each of RATES (default 300 and 3,000
// events a second: a month-start burst for about 1M and 10M subscribers), SECONDS (default 10) a
// run, through the service's own database port with a pool of POOL connections (default: the
// deployed pool, lib/config.ts). Arrivals come at the fixed rate whatever the answers do (a slow
// database does not slow the sender, as RevenueCat's delivery does not), sent as:
//   one call each - the service's path: callDb('record_billing_event') through the pool;
//   gathered      - the rule the service used to have: while a call is in flight, arrivals wait
//                   in the process, then go by up to ten as one call of a procedure that commits
//                   each event on its own and flushes once at its end; a second call beside the
//                   first only when ten wait or the first has been in flight 20 ms. (The
//                   procedure is made in this scratch database only: gathered-procedure.ts.)
// The ways take turns, in a different order each round, after a warm-up run of each. Prints, per
// event: the CPU time of this Postgres server's processes (its backends, those that ended, and its
// background processes, from /proc: other processes on the machine are not counted), this
// process's CPU time, and what the run held: events applied a second, p50/p99, failures, the calls
// a gathered run made. Every event must be applied (not a duplicate, not stale), or the run stops.
// ROUNDS (default 3) sets the rounds.
import { describeEventEffects } from '../../lib/billing/event-effects.ts';
import { databasePoolFor } from '../../lib/config.ts';
import { callDb, closeDatabase, dbCallCount, replaceDatabase } from '../../lib/db/index.ts';
import { openPostgres } from '../../lib/db/postgres.ts';
import { createDatabase, startPostgresServer } from '../support/postgres-server.ts';
import { postgresCpuMs } from './cpu.ts';
import { GATHERED_CALL, GATHERED_PROCEDURE } from './gathered-procedure.ts';

const RATES = (process.env.RATES ?? '300,3000').split(',').map(Number);
const SECONDS = Number(process.env.SECONDS ?? 10);
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const SUBSCRIBERS = Number(process.env.SUBSCRIBERS ?? 10_000);
const POOL = Number(process.env.POOL ?? databasePoolFor(true, undefined).max);
if (![SECONDS, ROUNDS, SUBSCRIBERS, POOL, ...RATES].every((value) => Number.isSafeInteger(value) && value >= 1)) {
  console.error('RATES, SECONDS, ROUNDS, SUBSCRIBERS and POOL must be whole numbers of at least 1');
  process.exit(2);
}
const LOCK_TIMEOUT_MS = 5_000; // the service's (lib/db/postgres.ts)
/** The gathering rule as the service had it. */
const MOST_CALLS_GATHERED = 10;
const MOST_GATHERED_CALLS_AT_ONCE = 2;
const SLOW_CALL_MS = 20;

type RecordArgs = Record<string, unknown>;
interface Answer { duplicate?: boolean; outcome?: string }
type Way = (args: RecordArgs) => Promise<Answer>;

const DAY_MS = 86_400_000;
/** Event times start a day back, a millisecond apart: every subscriber's renewals arrive in order. */
const firstEventAt = Date.now() - DAY_MS;
const runId = Date.now().toString(36);

/** Event `index` (the first SUBSCRIBERS are the purchases): RevenueCat's sample shape, an anonymous alias. */
function eventArgs(index: number): RecordArgs {
  const n = index % SUBSCRIBERS;
  const subscriber = `burst-subscriber-${n}`;
  const anonymous = `$RCAnonymousID:${n.toString(16).padStart(32, '0')}`;
  const at = firstEventAt + index;
  const event = {
    id: `burst-${runId}-${index}`, type: index < SUBSCRIBERS ? 'INITIAL_PURCHASE' : 'RENEWAL', app_user_id: subscriber,
    original_app_user_id: anonymous, aliases: [anonymous, subscriber],
    subscriber_attributes: { $email: { value: `${subscriber}@example.test`, updated_at_ms: firstEventAt } },
    country_code: 'US', presented_offering_id: 'default', takehome_percentage: 0.7, product_id: 'pro_monthly', entitlement_ids: ['pro'],
    period_type: 'NORMAL', purchased_at_ms: at, expiration_at_ms: at + 30 * DAY_MS, event_timestamp_ms: at, environment: 'PRODUCTION',
    store: 'APP_STORE', transaction_id: `tx-${runId}-${index}`, original_transaction_id: `otx-${subscriber}`, price: 9.99, currency: 'USD',
  };
  // As lib/billing/record-event.ts sends it (no RevenueCat key: no syncs; an event with an id: no digest).
  return { p_body: { api_version: '1.0', event }, p_plan: describeEventEffects(event as never, new Date(), { ignoreSandbox: false }), p_sync_after: 'none', p_content_digest: null };
}

const server = await startPostgresServer({ fsync: process.env.FSYNC === '1' });
const database = `billing_burst_${Date.now()}`;
await createDatabase(server.url(), database);
const db = await openPostgres({ connectionString: server.url(database), max: POOL, idleTimeoutMillis: 600_000 });
replaceDatabase(db);
await db.pool.query(GATHERED_PROCEDURE);

const oneCallEach: Way = (args) => callDb<Answer>('record_billing_event', args);
/** Procedure calls the bench's gatherer made (callDb counts the rest: dbCallCount). */
let procedureCalls = 0;
const gathered = gatherer();

try {
  // The purchases, POOL at a time.
  for (let i = 0; i < SUBSCRIBERS; i += POOL) {
    await Promise.all(Array.from({ length: Math.min(POOL, SUBSCRIBERS - i) }, (_, j) => oneCallEach(eventArgs(i + j)).then(assertApplied)));
  }
  let next = SUBSCRIBERS;
  const ways: Record<string, Way> = { 'one call each': oneCallEach, gathered };
  const names = Object.keys(ways);
  const figures: Record<string, string[]> = {};
  for (let round = 0; round <= ROUNDS; round++) {
    for (const rate of RATES) {
      const order = names.map((_, i) => names[(i + round) % names.length]!);
      for (const way of order) {
        const events = rate * (round === 0 ? 2 : SECONDS); // round 0: a short warm-up, not printed
        const run = await offer(rate, events, next, ways[way]!);
        next += events;
        if (round === 0) continue;
        (figures[`${way} at ${rate}/s`] ??= []).push(run);
        console.log(`  round ${round}, ${way} at ${rate}/s: ${run}`);
      }
    }
  }
  console.log(`\nPostgres: ms of CPU per event applied (this server's processes) / this process's ms of CPU per event applied; events applied a second; p50/p99 ms; failures; database calls per event (arrivals ${process.env.EVEN === '1' ? 'evenly spaced' : 'at random (Poisson)'}, pool ${POOL}, ${SUBSCRIBERS} subscribers, ${SECONDS} s runs, fsync ${process.env.FSYNC === '1' ? 'on' : 'off'}):`);
  for (const [name, runs] of Object.entries(figures)) console.log(`  ${name.padEnd(26)} ${runs.join('\n  '.padEnd(30))}`);
} finally {
  await closeDatabase();
  await server.stop();
}

/** Offer `events` events from `first` at `rate` a second, open-loop; the run's figures. */
async function offer(rate: number, events: number, first: number, way: Way): Promise<string> {
  const latencies: number[] = [];
  let failures = 0;
  let firstFailure: unknown;
  const callsBefore = dbCallCount() + procedureCalls;
  const postgresBefore = postgresCpuMs(server.pid());
  const ownBefore = process.cpuUsage();
  const began = performance.now();
  await new Promise<void>((resolve) => {
    let sent = 0;
    let answered = 0;
    const send = (index: number) => {
      const sentAt = performance.now();
      way(eventArgs(index)).then(assertApplied).catch((error: unknown) => {
        failures++;
        firstFailure ??= error;
      }).finally(() => {
        latencies.push(performance.now() - sentAt);
        if (++answered === events) resolve();
      });
    };
    // Each tick sends every event due by now (a timer fires a millisecond or more apart).
    let dueAt = 0;
    const tick = () => {
      const now = performance.now() - began;
      while (sent < events && dueAt <= now) {
        send(first + sent++);
        dueAt += arrivalGapMs(rate);
      }
      if (sent < events) setTimeout(tick, Math.max(0, dueAt - now));
    };
    tick();
  });
  const wallMs = performance.now() - began;
  const own = process.cpuUsage(ownBefore);
  if (firstFailure) console.log(`  (first failure: ${String(firstFailure)})`);
  latencies.sort((a, b) => a - b);
  const at = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))]!.toFixed(1);
  // Per event applied: one that failed unsent (no connection within the pool's wait) cost the database nothing.
  const perEvent = (ms: number) => (ms / Math.max(1, events - failures)).toFixed(3);
  const calls = ` ${((dbCallCount() + procedureCalls - callsBefore) / events).toFixed(2)} calls/event`;
  return `${perEvent(postgresCpuMs(server.pid()) - postgresBefore)} / ${perEvent((own.user + own.system) / 1000)} ms CPU, ` +
    `${Math.round(((events - failures) * 1000) / wallMs)}/s applied, p50 ${at(0.5)} p99 ${at(0.99)} ms, ${failures} failed${calls}`;
}

/**
 * Independent senders' arrivals at `rate` a second on average (a Poisson process: exponential
 * gaps), as deliveries for many subscribers come: EVEN=1 spaces them evenly instead, which never
 * lets two overlap below the rate at which one call's time fills the gap.
 */
function arrivalGapMs(rate: number): number {
  return process.env.EVEN === '1' ? 1000 / rate : (-Math.log(1 - Math.random()) * 1000) / rate;
}

/** Each event applied: a way that did less work would otherwise look cheaper. */
function assertApplied(answer: Answer): void {
  if (answer.duplicate || answer.outcome !== 'applied') throw new Error(`an event was not applied: ${JSON.stringify(answer)}`);
}

/**
 * The gathering rule the service had (lib/db/gathered-calls.ts until it was removed; see
 * docs/decisions/gathered-calls.md), without its error handling (every event here succeeds): a
 * call with no other in flight goes alone as the function; calls that arrive while one is in
 * flight wait and go by up to ten as one call of the procedure when it ends; a second call starts
 * beside it only when ten wait or it has been in flight SLOW_CALL_MS.
 */
function gatherer(): Way {
  const waiting: { args: RecordArgs; resolve(answer: Answer): void; reject(error: unknown): void }[] = [];
  const inFlightSince: number[] = [];
  let slowCheck: ReturnType<typeof setTimeout> | undefined;
  const mayStart = () => inFlightSince.length === 0 || (inFlightSince.length < Math.min(POOL, MOST_GATHERED_CALLS_AT_ONCE)
    && (waiting.length >= MOST_CALLS_GATHERED || performance.now() - Math.min(...inFlightSince) >= SLOW_CALL_MS));
  const send = async (calls: typeof waiting) => {
    if (calls.length === 1) return calls[0]!.resolve(await callDb<Answer>('record_billing_event', calls[0]!.args));
    procedureCalls++;
    // The bounds the service gave it: its lock timeout, and no event started past 20 - 2 x 5 s.
    const { rows } = await db.pool.query<{ p_answers: { result?: Answer; error?: unknown }[] }>(
      GATHERED_CALL, [JSON.stringify(calls.map((call) => call.args)), LOCK_TIMEOUT_MS, 10_000]);
    rows[0]!.p_answers.forEach((answer, i) => (answer.result ? calls[i]!.resolve(answer.result) : calls[i]!.reject(new Error(JSON.stringify(answer)))));
  };
  const pump = () => {
    while (waiting.length > 0 && mayStart()) {
      const calls = waiting.splice(0, MOST_CALLS_GATHERED);
      const started = performance.now();
      inFlightSince.push(started);
      void send(calls).catch((error: unknown) => calls.forEach((call) => call.reject(error))).finally(() => {
        inFlightSince.splice(inFlightSince.indexOf(started), 1);
        pump();
      });
    }
    if (waiting.length > 0 && inFlightSince.length === 1 && !slowCheck) {
      slowCheck = setTimeout(() => {
        slowCheck = undefined;
        pump();
      }, Math.max(0, inFlightSince[0]! + SLOW_CALL_MS - performance.now()) + 1);
    }
  };
  return (args) => new Promise<Answer>((resolve, reject) => {
    waiting.push({ args, resolve, reject });
    pump();
  });
}
