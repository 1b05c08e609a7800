// What does applying several billing events in one database call save, one connection, calls back
// to back? The measurement behind the gathered calls the service had (docs/decisions/gathered-calls.md;
// billing-burst.ts measures them at a burst's arrival rates).
//
// `node scripts/bench/call-batching.ts` (a minute or two): one Postgres server (the tests' own:
// fsync off, so a commit waits on no disk; FSYNC=1 turns it on, so each commit that waits for the
// log waits for this machine's disk too), one migrated database, the same 1,000 subscribers'
// purchases, then rounds of in-order renewals shaped like the bench's (sql-profile.ts), sent in
// turn as:
//   one call each          - as the service sends them (with its lock timeout);
//   prepared               - the same call as a named prepared statement (parsed once per
//                            connection; the service uses unnamed ones, which Supabase's
//                            transaction pooler takes);
//   K in a transaction     - begin, K calls, commit;
//   K in one call          - one statement that applies K events, each in a savepoint of its own (a
//                            PL/pgSQL exception block, so one refused event would not refuse the
//                            others), the lock timeout set for each: a prototype made in this
//                            scratch database only;
//   K in one call, commits - the procedure the service's gathered calls used (gathered-procedure.ts),
//                            which commits after each event, so each stays a transaction of its own;
//   a bare round trip      - a statement with the same two values that does nothing with them.
// Every way must find every event applied (not a duplicate, not stale), or the script stops. The
// ways take turns in a different order each round, after one warm-up round that is not printed.
// Prints, per event: the CPU of the connection's own backend (from /proc), this process's CPU and
// the wall time. K (default 10), ROUNDS (default 5) and N (events a round and way, default 1,000)
// change the run.
//
// `--embedded` asks the embedded database instead (PGlite on its thread, in this process): one call
// each as the service makes it (one statement, values as literals), K in one call and K in one call
// that commits likewise, and the bare statement likewise. Its CPU is this process's, the
// database's thread included; the wall time of calls made one at a time is about that thread's
// time.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { openPglite } from '../../lib/db/pglite.ts';
import { openPostgres } from '../../lib/db/postgres.ts';
import { buildFunctionCall } from '../../lib/db/sql-call.ts';
import { createDatabase, startPostgresServer } from '../support/postgres-server.ts';
import { cpuMsOf } from './cpu.ts';
import { GATHERED_CALL, GATHERED_PROCEDURE } from './gathered-procedure.ts';
import { renewalArgs, renewalBody, SUBSCRIBERS } from './sql-profile.ts';

const batchSize = Number(process.env.K ?? 10);
const rounds = Number(process.env.ROUNDS ?? 5);
const perRound = Number(process.env.N ?? 1_000);
const fsync = process.env.FSYNC === '1';
if (![batchSize, rounds, perRound].every((value) => Number.isSafeInteger(value) && value >= 1)) {
  console.error('K, ROUNDS and N must be whole numbers of at least 1');
  process.exit(2);
}
const embedded = process.argv.includes('--embedded');
const LOCK_TIMEOUT_MS = 5_000; // the service's (lib/db/postgres.ts)

/** The service's call, as lib/db/postgres.ts builds it. */
const CALL = buildFunctionCall('record_billing_event', { p_body: '$1', p_plan: '$2' }, { lockTimeoutMs: LOCK_TIMEOUT_MS }).text;
// The prototype takes the batch's bodies and plans as two JSON arrays, and answers one JSON array:
// each event's answer, or the SQLSTATE that refused it.
const BATCH_FUNCTION = `create function public.record_billing_events_prototype(p_bodies jsonb, p_plans jsonb)
  returns jsonb language plpgsql as $f$
  declare v_i integer; p_answers jsonb := '[]';
  begin
    for v_i in 0 .. pg_catalog.jsonb_array_length(p_bodies) operator(pg_catalog.-) 1 loop
      begin
        perform pg_catalog.set_config('lock_timeout', '${LOCK_TIMEOUT_MS}ms', true);
        p_answers := p_answers operator(pg_catalog.||) pg_catalog.jsonb_build_array(public.record_billing_event(
          p_body => p_bodies operator(pg_catalog.->) v_i, p_plan => p_plans operator(pg_catalog.->) v_i));
      exception when others then
        p_answers := p_answers operator(pg_catalog.||) pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object('sqlstate', sqlstate));
      end;
    end loop;
    return p_answers;
  end $f$`;
const BATCH_CALL = 'select public.record_billing_events_prototype(p_bodies => $1, p_plans => $2) as answers';

/** An event's two values, as the service sends them: the body and its plan, as JSON text. */
type EventArgs = readonly [body: string, plan: string];
interface Answer { sqlstate?: string; duplicate?: boolean; outcome?: string }

const start = Date.now();
const eventArgs = (index: number): EventArgs => renewalArgs(renewalBody(index, start));
/** A batch's two values: its events' bodies and plans, each as one JSON array. */
const batchArgs = (batch: EventArgs[]) => [`[${batch.map((args) => args[0]).join(',')}]`, `[${batch.map((args) => args[1]).join(',')}]`];
/** The service's procedure's argument: each event's named arguments, as JSON text. */
const procedureCalls = (batch: EventArgs[]) => `[${batch.map(([body, plan]) => `{"p_body":${body},"p_plan":${plan}}`).join(',')}]`;
/** The procedure's answers, as the prototype's: an error becomes its SQLSTATE. */
const procedureAnswers = (answers: { result?: Answer; error?: { sqlstate: string } }[]) =>
  answers.map((answer) => answer.result ?? { sqlstate: answer.error?.sqlstate ?? 'no answer' });
const inBatches = (events: EventArgs[]) =>
  Array.from({ length: Math.ceil(events.length / batchSize) }, (_, i) => events.slice(i * batchSize, (i + 1) * batchSize));
/** Each answer an applied event: a way that did less work would otherwise just look cheaper. */
function assertAllApplied(answers: Answer[]): void {
  const other = answers.find((answer) => answer.sqlstate || answer.duplicate || answer.outcome !== 'applied');
  if (other) throw new Error(`an event was not applied: ${JSON.stringify(other)}`);
}

/** Each way of sending a round's events, the CPU counter of the database's side (if apart), and the end. */
interface Target {
  ways: Record<string, (events: EventArgs[]) => Promise<void>>;
  databaseCpuMs?: () => number;
  close(): Promise<void>;
}

async function postgresTarget(): Promise<Target> {
  const server = await startPostgresServer({ fsync });
  const name = `call_batching_${Date.now()}`;
  await createDatabase(server.url(), name);
  await (await openPostgres({ connectionString: server.url(name) })).close(); // migrates
  const client = new pg.Client({ connectionString: server.url(name) });
  await client.connect();
  await client.query(BATCH_FUNCTION);
  await client.query(GATHERED_PROCEDURE);
  const backend = (await client.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
  const call = async (args: EventArgs, name?: string) =>
    assertAllApplied([(await client.query<{ result: Answer }>({ name, text: CALL, values: [...args, String(LOCK_TIMEOUT_MS)] })).rows[0]!.result]);
  for (let i = 0; i < SUBSCRIBERS; i++) await client.query({ text: CALL, values: [...eventArgs(i), String(LOCK_TIMEOUT_MS)] });
  return {
    ways: {
      'one call each': async (events) => {
        for (const args of events) await call(args);
      },
      prepared: async (events) => {
        for (const args of events) await call(args, 'record_billing_event');
      },
      [`${batchSize} in a transaction`]: async (events) => {
        for (const batch of inBatches(events)) {
          await client.query('begin');
          for (const args of batch) await call(args);
          await client.query('commit');
        }
      },
      [`${batchSize} in one call`]: async (events) => {
        for (const batch of inBatches(events)) {
          assertAllApplied((await client.query<{ answers: Answer[] }>(BATCH_CALL, batchArgs(batch))).rows[0]!.answers);
        }
      },
      [`${batchSize} in one call, commits`]: async (events) => {
        for (const batch of inBatches(events)) {
          assertAllApplied(procedureAnswers((await client.query(GATHERED_CALL, [procedureCalls(batch), LOCK_TIMEOUT_MS, null])).rows[0]!.p_answers));
        }
      },
      'a bare round trip': async (events) => {
        for (const args of events) await client.query('select length($1::text) + length($2::text)', [...args]);
      },
    },
    databaseCpuMs: () => cpuMsOf(backend),
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
  await db.session.exec(GATHERED_PROCEDURE);
  // As the service calls it: the adapter's call (one statement, its values as literals).
  const record = async (args: EventArgs) =>
    assertAllApplied([(await db.call('record_billing_event', { p_body: JSON.parse(args[0]), p_plan: JSON.parse(args[1]) })) as Answer]);
  for (let i = 0; i < SUBSCRIBERS; i++) await record(eventArgs(i));
  return {
    ways: {
      'one call each': async (events) => {
        for (const args of events) await record(args);
      },
      [`${batchSize} in one call`]: async (events) => {
        for (const batch of inBatches(events)) {
          const [bodies, plans] = batchArgs(batch);
          assertAllApplied((await db.call('record_billing_events_prototype', { p_bodies: JSON.parse(bodies!), p_plans: JSON.parse(plans!) })) as Answer[]);
        }
      },
      [`${batchSize} in one call, commits`]: async (events) => {
        for (const batch of inBatches(events)) {
          const { rows } = await db.session.query(GATHERED_CALL, [procedureCalls(batch), null, null]);
          assertAllApplied(procedureAnswers((rows[0] as { p_answers: never }).p_answers));
        }
      },
      'a bare round trip': async (events) => {
        for (const args of events) await db.session.exec(`select length(${pg.escapeLiteral(args[0])}) + length(${pg.escapeLiteral(args[1])})`);
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
  const names = Object.keys(target.ways);
  const figures: Record<string, string[]> = Object.fromEntries(names.map((way) => [way, []]));
  let next = SUBSCRIBERS;
  for (let round = 0; round <= rounds; round++) {
    // Round 0 warms up; then each round starts with another way, so none always follows the same one.
    const order = names.map((_, i) => names[(i + round) % names.length]!);
    for (const way of order) {
      const events = Array.from({ length: perRound }, () => eventArgs(next++));
      const databaseBefore = target.databaseCpuMs?.() ?? 0;
      const ownBefore = process.cpuUsage();
      const began = performance.now();
      await target.ways[way]!(events);
      const own = process.cpuUsage(ownBefore);
      const perEvent = [(own.user + own.system) / 1000 / perRound, (performance.now() - began) / perRound];
      if (target.databaseCpuMs) perEvent.unshift((target.databaseCpuMs() - databaseBefore) / perRound);
      if (round > 0) figures[way]!.push(perEvent.map((ms) => ms.toFixed(3)).join('/'));
    }
  }
  const columns = target.databaseCpuMs ? "the backend's CPU / this process's CPU / wall" : "this process's CPU, the database's thread included / wall";
  console.log(`${embedded ? 'embedded' : `postgres${fsync ? ' (fsync on)' : ''}`}: ms per event (${columns}), ${rounds} rounds of ${perRound}:`);
  for (const [way, rows] of Object.entries(figures)) console.log(`  ${way.padEnd(26)} ${rows.join('  ')}`);
} finally {
  await target.close();
}
