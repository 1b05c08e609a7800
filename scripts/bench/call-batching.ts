// What would applying several billing events in one database call save? A measurement for the
// design of batched deliveries; the service does not batch today (one call per delivery).
//
// `node scripts/bench/call-batching.ts` (a minute or two): one Postgres server, one migrated
// database, the same 1,000 subscribers' purchases, then rounds of in-order renewals shaped like the
// bench's (sql-profile.ts), sent in turn as:
//   one call each      - as the service sends them;
//   prepared           - the same call as a named prepared statement (parsed once per connection;
//                        the service uses unnamed ones, which Supabase's transaction pooler takes);
//   K in a transaction - begin, K calls, commit;
//   K in one call      - one statement that applies K events, each in a savepoint of its own (a
//                        PL/pgSQL exception block, so one refused event would not refuse the
//                        others): a prototype made in this scratch database only;
//   K in one call, commits - the same as a procedure that commits after each event (Postgres
//                        only), so each event stays a transaction of its own;
//   a bare round trip  - a statement with the same two parameters that does nothing with them.
// Prints Postgres CPU, this process's CPU and wall time per event, for each round. K (default 10),
// ROUNDS (default 5) and N (events a round and way, default 1,000) change the run.
// `--embedded` asks the embedded database instead (PGlite on its thread, in this process): one
// call each as the service makes it (one statement, values as literals), K in one call likewise,
// and the bare round trip; its CPU is this process's, the database's thread included.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { describeEventEffects } from '../../lib/billing/event-effects.ts';
import { openPglite } from '../../lib/db/pglite.ts';
import { openPostgres } from '../../lib/db/postgres.ts';
import { createDatabase, startPostgresServer } from '../../tests/support/postgres-server.ts';
import { postgresCpuMs } from './cpu.ts';
import { renewalBody, SUBSCRIBERS } from './sql-profile.ts';

const batchSize = Number(process.env.K ?? 10);
const rounds = Number(process.env.ROUNDS ?? 5);
const perRound = Number(process.env.N ?? 1_000);
if (![batchSize, rounds, perRound].every((value) => Number.isSafeInteger(value) && value >= 1)) {
  console.error('K, ROUNDS and N must be whole numbers of at least 1');
  process.exit(2);
}

const CALL = 'select public.record_billing_event(p_body => $1, p_plan => $2) as result';
// The prototype: each event in its own savepoint, each answer (or its SQLSTATE) in its place. The
// events and their plans come as two JSON arrays (one parameter each, or one literal each).
const BATCH_FUNCTION = `create function public.record_billing_events_prototype(p_bodies jsonb, p_plans jsonb)
  returns jsonb language plpgsql set search_path = '' as $f$
  declare v_answers jsonb := '[]'; v_i integer;
  begin
    for v_i in 0 .. jsonb_array_length(p_bodies) - 1 loop
      begin
        v_answers := v_answers || jsonb_build_array(public.record_billing_event(p_body => p_bodies->v_i, p_plan => p_plans->v_i));
      exception when others then
        v_answers := v_answers || jsonb_build_array(jsonb_build_object('sqlstate', sqlstate));
      end;
    end loop;
    return v_answers;
  end $f$`;
const BATCH_CALL = 'select public.record_billing_events_prototype(p_bodies => $1, p_plans => $2) as answers';
// The same as a procedure that commits after each event: each event its own transaction, as today,
// so no batch holds one customer's lock while it applies another's. (A procedure that commits may
// not carry a SET clause, so its operators are named with their schema.)
const COMMITTING_PROCEDURE = `create procedure public.record_billing_events_committing(p_bodies jsonb, p_plans jsonb, inout p_answers jsonb default null)
  language plpgsql as $f$
  declare v_i integer;
  begin
    p_answers := '[]';
    for v_i in 0 .. pg_catalog.jsonb_array_length(p_bodies) - 1 loop
      begin
        p_answers := p_answers operator(pg_catalog.||) pg_catalog.jsonb_build_array(public.record_billing_event(
          p_body => p_bodies operator(pg_catalog.->) v_i, p_plan => p_plans operator(pg_catalog.->) v_i));
      exception when others then
        p_answers := p_answers operator(pg_catalog.||) pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object('sqlstate', sqlstate));
      end;
      commit;
    end loop;
  end $f$`;
const COMMITTING_CALL = 'call public.record_billing_events_committing($1, $2)';
const BARE = 'select length($1::text) + length($2::text)';
type Parameters = readonly [body: string, plan: string];

/** A batch's two parameters: its events' bodies and plans, each as one JSON array. */
const batchParameters = (batch: Parameters[]) => [`[${batch.map((values) => values[0]).join(',')}]`, `[${batch.map((values) => values[1]).join(',')}]`];
function refusedIn(answers: { sqlstate?: string }[]): void {
  const refused = answers.find((answer) => answer.sqlstate);
  if (refused) throw new Error(`an event was refused: ${refused.sqlstate}`);
}
const embedded = process.argv.includes('--embedded');

const start = Date.now();
/** An event's two parameters, as the service sends them: the body and its plan, as JSON text. */
function parameters(index: number): Parameters {
  const body = renewalBody(index, start);
  return [JSON.stringify(body), JSON.stringify(describeEventEffects(body.event as never, new Date()))];
}
const inBatches = (events: Parameters[]) =>
  Array.from({ length: Math.ceil(events.length / batchSize) }, (_, i) => events.slice(i * batchSize, (i + 1) * batchSize));

/** Each way of sending a round's events, the database's CPU counter (if apart), and the end. */
interface Target {
  ways: Record<string, (events: Parameters[]) => Promise<void>>;
  databaseCpuMs?: () => number;
  close(): Promise<void>;
}

async function postgresTarget(): Promise<Target> {
  const server = await startPostgresServer();
  const name = `call_batching_${Date.now()}`;
  await createDatabase(server.url(), name);
  await (await openPostgres({ connectionString: server.url(name) })).close(); // migrates
  const client = new pg.Client({ connectionString: server.url(name) });
  await client.connect();
  await client.query(BATCH_FUNCTION);
  await client.query(COMMITTING_PROCEDURE);
  for (let i = 0; i < SUBSCRIBERS; i++) await client.query(CALL, [...parameters(i)]);
  return {
    ways: {
      'one call each': async (events) => {
        for (const values of events) await client.query(CALL, [...values]);
      },
      prepared: async (events) => {
        for (const values of events) await client.query({ name: 'record_billing_event', text: CALL, values: [...values] });
      },
      [`${batchSize} in a transaction`]: async (events) => {
        for (const batch of inBatches(events)) {
          await client.query('begin');
          for (const values of batch) await client.query(CALL, [...values]);
          await client.query('commit');
        }
      },
      [`${batchSize} in one call`]: async (events) => {
        for (const batch of inBatches(events)) refusedIn((await client.query<{ answers: { sqlstate?: string }[] }>(BATCH_CALL, batchParameters(batch))).rows[0]!.answers);
      },
      [`${batchSize} in one call, commits`]: async (events) => {
        for (const batch of inBatches(events)) refusedIn((await client.query<{ p_answers: { sqlstate?: string }[] }>(COMMITTING_CALL, batchParameters(batch))).rows[0]!.p_answers);
      },
      'a bare round trip': async (events) => {
        for (const values of events) await client.query(BARE, [...values]);
      },
    },
    databaseCpuMs: () => postgresCpuMs(server.pid()),
    close: async () => {
      await client.end();
      await server.stop();
    },
  };
}

async function embeddedTarget(): Promise<Target> {
  const folder = mkdtempSync(path.join(os.tmpdir(), 'call-batching-'));
  const db = await openPglite(path.join(folder, 'db'));
  await db.session.exec(BATCH_FUNCTION);
  // As the service calls it: the adapter's call (one statement, its values as literals).
  const record = (values: Parameters) => db.call('record_billing_event', { p_body: JSON.parse(values[0]), p_plan: JSON.parse(values[1]) });
  for (let i = 0; i < SUBSCRIBERS; i++) await record(parameters(i));
  return {
    ways: {
      'one call each': async (events) => {
        for (const values of events) await record(values);
      },
      [`${batchSize} in one call`]: async (events) => {
        for (const batch of inBatches(events)) {
          const [bodies, plans] = batchParameters(batch);
          refusedIn((await db.call('record_billing_events_prototype', { p_bodies: JSON.parse(bodies!), p_plans: JSON.parse(plans!) })) as { sqlstate?: string }[]);
        }
      },
      'a bare round trip': async (events) => {
        for (const values of events) await db.session.query(BARE, [...values]);
      },
    },
    close: async () => {
      await db.close();
      rmSync(folder, { recursive: true, force: true });
    },
  };
}

const target = embedded ? await embeddedTarget() : await postgresTarget();
try {
  const figures: Record<string, string[]> = Object.fromEntries(Object.keys(target.ways).map((way) => [way, []]));
  let next = SUBSCRIBERS;
  for (let round = 0; round < rounds; round++) {
    for (const [way, send] of Object.entries(target.ways)) {
      const events = Array.from({ length: perRound }, () => parameters(next++));
      const databaseBefore = target.databaseCpuMs?.() ?? 0;
      const ownBefore = process.cpuUsage();
      const began = performance.now();
      await send(events);
      const own = process.cpuUsage(ownBefore);
      const perEvent = [(own.user + own.system) / 1000 / perRound, (performance.now() - began) / perRound];
      if (target.databaseCpuMs) perEvent.unshift((target.databaseCpuMs() - databaseBefore) / perRound);
      figures[way]!.push(perEvent.map((ms) => ms.toFixed(3)).join('/'));
    }
  }
  const columns = target.databaseCpuMs ? "Postgres CPU / this process's CPU / wall" : "this process's CPU, the database's thread included / wall";
  console.log(`${embedded ? 'embedded' : 'postgres'}: ms per event (${columns}), ${rounds} rounds of ${perRound}:`);
  for (const [way, rows] of Object.entries(figures)) console.log(`  ${way.padEnd(26)} ${rows.join('  ')}`);
} finally {
  await target.close();
}
