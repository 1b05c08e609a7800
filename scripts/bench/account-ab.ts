// Does a change to the SQL make GET /api/me's read cheaper? An A/B of `get_account_json` on one Postgres
// server, as sql-ab.ts does for a renewal.
//
// `node scripts/bench/account-ab.ts [change.sql]` (under a minute): two databases migrated alike,
// change.sql run on B only (none: A against itself, the noise), the bench's account in each (3
// wallets, the entitlements `pro` and `plus` bought through record_billing_event, 50 leagues
// naming the user through apply_leagues_sync), then rounds of N (default 2,000) calls of
// get_account_json as the service makes them (the same statement, with lock_timeout), A and B
// alternating, each through a connection of its own. Prints each round's Postgres CPU per call
// (the calling backend's, from /proc), the medians, and whether A and B answered alike.
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { openPostgres } from '../../lib/db/postgres.ts';
import { buildFunctionCall } from '../../lib/db/sql-call.ts';
import { createDatabase, startPostgresServer } from '../support/postgres-server.ts';
import { median } from './cold-start.ts';
import { cpuMsOf } from './cpu.ts';
import { DAY_MS, recordRenewal, renewalBody } from './sql-profile.ts';

const changeFile = process.argv[2];
const rounds = Number(process.env.ROUNDS ?? 7);
const perRound = Number(process.env.N ?? 2_000);
const userId = crypto.randomUUID();

/** The bench's account for `userId`: 3 wallets, `pro` and `plus` bought, 50 leagues of 12 naming them. */
async function seedAccount(client: pg.Client, start: number): Promise<void> {
  for (const [index, entitlement] of ['pro', 'plus'].entries()) {
    const body = renewalBody(index, start);
    Object.assign(body.event, { id: `${body.event.id}-${entitlement}`, app_user_id: userId, original_app_user_id: userId, aliases: [userId], entitlement_ids: [entitlement], product_id: `${entitlement}_monthly`, original_transaction_id: `otx-${entitlement}` });
    await recordRenewal(client, body);
  }
  for (let index = 0; index < 3; index++) {
    const address = `0x${String(index + 1).padStart(40, 'a')}`;
    await client.query(`insert into public.wallet_links (user_id, chain, address, address_key, chain_id, challenge_id) values ($1, 'evm', $2, lower($2), 1, gen_random_uuid())`, [userId, address]);
  }
  const updatedAt = new Date(start).toISOString();
  const leagues = Array.from({ length: 50 }, (_, league) => ({
    externalId: `ab-${league}`, name: `League ${league}`, sport: 'nfl', season: '2026', status: 'in_season', updatedAt, settings: { scoring: 'ppr', teams: 12 },
    members: Array.from({ length: 12 }, (_, member) => ({ externalUserId: `m-${member}`, displayName: `Member ${member}`, role: member === 0 ? 'commissioner' : 'member', ...(member === 0 ? { appUserId: userId } : {}) })),
  }));
  const call = buildFunctionCall('apply_leagues_sync', { p_source: 'bench', p_sent_at: updatedAt, p_leagues: leagues, p_deleted: [], p_delivery_id: `ab-${start}` });
  await client.query(call.text, call.values);
}

const server = await startPostgresServer();
try {
  const clients = new Map<'A' | 'B', pg.Client>();
  const start = Date.now() - DAY_MS;
  for (const side of ['A', 'B'] as const) {
    const name = `account_ab_${side.toLowerCase()}_${Date.now()}`;
    await createDatabase(server.url(), name);
    await (await openPostgres({ connectionString: server.url(name) })).close(); // migrates
    const client = new pg.Client({ connectionString: server.url(name) });
    await client.connect();
    if (side === 'B' && changeFile) await client.query(readFileSync(changeFile, 'utf8'));
    await seedAccount(client, start);
    await client.query('analyze');
    clients.set(side, client);
  }
  const now = new Date();
  const call = buildFunctionCall('get_account_json', { p_user_id: userId, p_now: now }, { lockTimeoutMs: 5_000 });
  const answers = new Map<'A' | 'B', string>();
  const perCall = { A: [] as number[], B: [] as number[] };
  for (let round = 0; round < rounds; round++) {
    for (const side of round % 2 ? (['B', 'A'] as const) : (['A', 'B'] as const)) {
      const client = clients.get(side)!;
      const backend = (await client.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
      const before = cpuMsOf(backend);
      let answer: unknown;
      for (let i = 0; i < perRound; i++) answer = (await client.query(call.text, call.values)).rows[0]!.result;
      perCall[side].push((cpuMsOf(backend) - before) / perRound);
      // (JSON text; written again compactly, as the server answers it.)
      answers.set(side, JSON.stringify(typeof answer === 'string' ? JSON.parse(answer) : answer));
    }
  }
  const a = JSON.parse(answers.get('A')!) as { wallets: unknown[]; entitlements: unknown[]; leagues: unknown[] };
  console.log(`the account: ${a.wallets.length} wallets, ${a.entitlements.length} entitlements, ${a.leagues.length} leagues (${answers.get('A')!.length} bytes of JSON)`);
  // Wallet ids and the times they were made differ between the two databases; the rest must not.
  const comparable = (text: string) => text.replace(/"id":"[0-9a-f-]{36}"/g, '"id":""').replace(/"createdAt":"[^"]*"/g, '"createdAt":""');
  console.log(comparable(answers.get('A')!) === comparable(answers.get('B')!) ? 'A and B answered alike' : `A and B answered differently:\nA ${answers.get('A')}\nB ${answers.get('B')}`);
  for (const side of ['A', 'B'] as const) {
    console.log(`${side}: Postgres CPU per get_account_json call ${perCall[side].map((ms) => ms.toFixed(3)).join(' ')}; median ${median(perCall[side]).toFixed(3)} ms`);
  }
  for (const client of clients.values()) await client.end();
} finally {
  await server.stop();
}
