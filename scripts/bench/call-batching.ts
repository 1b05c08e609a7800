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
//   a bare round trip  - a statement with the same two parameters that does nothing with them.
// Prints Postgres CPU, this process's CPU and wall time per event, for each round. K (default 10),
// ROUNDS (default 5) and N (events a round and way, default 1,000) change the run.
import pg from 'pg';
import { describeEventEffects } from '../../lib/billing/event-effects.ts';
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
// The prototype: each event in its own savepoint, each answer (or its SQLSTATE) in its place.
const BATCH_FUNCTION = `create function public.record_billing_events_prototype(p_bodies jsonb[], p_plans jsonb[])
  returns jsonb[] language plpgsql set search_path = '' as $f$
  declare v_answers jsonb[] := '{}'; v_i integer;
  begin
    for v_i in 1 .. cardinality(p_bodies) loop
      begin
        v_answers := v_answers || public.record_billing_event(p_body => p_bodies[v_i], p_plan => p_plans[v_i]);
      exception when others then
        v_answers := v_answers || jsonb_build_object('sqlstate', sqlstate);
      end;
    end loop;
    return v_answers;
  end $f$`;

const server = await startPostgresServer();
try {
  const name = `call_batching_${Date.now()}`;
  await createDatabase(server.url(), name);
  await (await openPostgres({ connectionString: server.url(name) })).close(); // migrates
  const client = new pg.Client({ connectionString: server.url(name) });
  await client.connect();
  await client.query(BATCH_FUNCTION);
  const start = Date.now();
  /** An event's two parameters, as the service sends them: the body and its plan, as JSON text. */
  const parameters = (index: number) => {
    const body = renewalBody(index, start);
    return [JSON.stringify(body), JSON.stringify(describeEventEffects(body.event as never, new Date()))] as const;
  };
  for (let i = 0; i < SUBSCRIBERS; i++) await client.query(CALL, [...parameters(i)]);

  const inBatches = (events: (readonly [string, string])[]) =>
    Array.from({ length: Math.ceil(events.length / batchSize) }, (_, i) => events.slice(i * batchSize, (i + 1) * batchSize));
  const ways: Record<string, (events: (readonly [string, string])[]) => Promise<void>> = {
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
      for (const batch of inBatches(events)) {
        const { rows } = await client.query<{ answers: { sqlstate?: string }[] }>('select public.record_billing_events_prototype($1::jsonb[], $2::jsonb[]) as answers',
          [batch.map((values) => values[0]), batch.map((values) => values[1])]);
        const refused = rows[0]!.answers.find((answer) => answer.sqlstate);
        if (refused) throw new Error(`an event was refused: ${refused.sqlstate}`);
      }
    },
    'a bare round trip': async (events) => {
      for (const values of events) await client.query('select length($1::text) + length($2::text)', [...values]);
    },
  };
  const figures: Record<string, string[]> = Object.fromEntries(Object.keys(ways).map((way) => [way, []]));
  let next = SUBSCRIBERS;
  for (let round = 0; round < rounds; round++) {
    for (const [way, send] of Object.entries(ways)) {
      const events = Array.from({ length: perRound }, () => parameters(next++));
      const postgresBefore = postgresCpuMs(server.pid());
      const ownBefore = process.cpuUsage();
      const began = performance.now();
      await send(events);
      const own = process.cpuUsage(ownBefore);
      figures[way]!.push([(postgresCpuMs(server.pid()) - postgresBefore) / perRound, (own.user + own.system) / 1000 / perRound,
        (performance.now() - began) / perRound].map((ms) => ms.toFixed(3)).join('/'));
    }
  }
  console.log(`ms per event (Postgres CPU / this process's CPU / wall), ${rounds} rounds of ${perRound}:`);
  for (const [way, rows] of Object.entries(figures)) console.log(`  ${way.padEnd(20)} ${rows.join('  ')}`);
  await client.end();
} finally {
  await server.stop();
}
