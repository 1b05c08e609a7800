// Does a change to the SQL make a billing event cheaper? An A/B on one Postgres server.
//
// `node scripts/bench/sql-ab.ts change.sql` (a minute or two): two databases migrated alike, the
// SQL of change.sql (a `create or replace function`, an `alter table`) run on B only, the same
// 1,000 subscribers' purchases in each, then rounds of in-order renewals shaped like the bench's
// (sql-profile.ts), A and B alternating (and which goes first alternating too), each through a
// connection of its own. Prints each round's Postgres CPU per renewal and the medians, and every
// renewal whose answer differs between A and B (they get the same events, so a change that keeps
// the behaviour answers alike). The CPU is the calling backend's only (from /proc: a 10 ms tick
// over 2,000 renewals, so ~0.005 ms): work a change moves to the WAL writer, the checkpointer or
// autovacuum is not counted. On a machine whose speed drifts a difference under ~0.02 ms is noise.
// ROUNDS (default 7) and N (renewals a round, default 2,000) change the run. CHECKPOINT=1 makes every
// renewal take a checkpoint first (as a monthly subscriber's does about every other month): the
// events are dated 40 days back, and before each round (untimed) every subscriber's unfolded events
// are made a month old; a round then renews each subscriber at most once (N defaults to 1,000).
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { openPostgres } from '../../lib/db/postgres.ts';
import { createDatabase, startPostgresServer } from '../support/postgres-server.ts';
import { cpuMsOf } from './cpu.ts';
import { DAY_MS, recordRenewal, renewalBody, SUBSCRIBERS } from './sql-profile.ts';

const changeFile = process.argv[2];
if (!changeFile) {
  console.error('usage: node scripts/bench/sql-ab.ts <change.sql>');
  process.exit(2);
}
const rounds = Number(process.env.ROUNDS ?? 7);
const checkpointEach = process.env.CHECKPOINT === '1';
const perRound = Number(process.env.N ?? (checkpointEach ? SUBSCRIBERS : 2_000));
if (!Number.isSafeInteger(rounds) || rounds < 1 || !Number.isSafeInteger(perRound) || perRound < 1) {
  console.error('ROUNDS and N must be whole numbers of at least 1');
  process.exit(2);
}
if (checkpointEach && perRound > SUBSCRIBERS) {
  console.error(`with CHECKPOINT=1, N is at most ${SUBSCRIBERS} (one renewal a subscriber a round)`);
  process.exit(2);
}

const server = await startPostgresServer();
try {
  const clients = new Map<'A' | 'B', pg.Client>();
  for (const side of ['A', 'B'] as const) {
    const name = `sql_ab_${side.toLowerCase()}_${Date.now()}`;
    await createDatabase(server.url(), name);
    await (await openPostgres({ connectionString: server.url(name) })).close(); // migrates
    const client = new pg.Client({ connectionString: server.url(name) });
    await client.connect();
    if (side === 'B') await client.query(readFileSync(changeFile, 'utf8'));
    clients.set(side, client);
  }
  const start = Date.now() - (checkpointEach ? 40 * DAY_MS : 0);
  for (const client of clients.values()) for (let i = 0; i < SUBSCRIBERS; i++) await recordRenewal(client, renewalBody(i, start));

  const perRenewal = { A: [] as number[], B: [] as number[] };
  let next = SUBSCRIBERS;
  let differing = 0;
  for (let round = 0; round < rounds; round++) {
    const bodies = Array.from({ length: perRound }, () => renewalBody(next++, start));
    const answers = { A: [] as string[], B: [] as string[] };
    for (const side of round % 2 ? (['B', 'A'] as const) : (['A', 'B'] as const)) {
      const client = clients.get(side)!;
      if (checkpointEach) await client.query(`update public.billing_subscribers set pending_since = pending_since - interval '40 days' where pending_since is not null`);
      const backend = (await client.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
      const before = cpuMsOf(backend);
      for (const body of bodies) answers[side].push(JSON.stringify(await recordRenewal(client, body)));
      perRenewal[side].push((cpuMsOf(backend) - before) / perRound);
    }
    for (const [index, answer] of answers.A.entries()) {
      if (answer === answers.B[index]) continue;
      if (differing++ < 5) console.log(`event ${bodies[index]!.event.id}: A answered ${answer}, B ${answers.B[index]}`);
    }
  }
  if (checkpointEach) {
    for (const [side, client] of clients) {
      const { rows: [{ tails }] } = await client.query<{ tails: string }>('select count(*) as tails from public.billing_subscribers where tail_events > 1');
      console.log(`${side}: ${tails} groups with more than one event since their checkpoint (0: every renewal took one)`);
    }
  }
  console.log(differing === 0 ? 'A and B answered every renewal alike' : `A and B answered ${differing} renewals differently`);
  const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
  for (const side of ['A', 'B'] as const) {
    console.log(`${side}: Postgres CPU per renewal ${perRenewal[side].map((ms) => ms.toFixed(3)).join(' ')}; median ${median(perRenewal[side]).toFixed(3)} ms`);
  }
  for (const client of clients.values()) await client.end();
} finally {
  await server.stop();
}
