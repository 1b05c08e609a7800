// What a broadcast costs (`npm run bench`, Postgres mode): the billing webhook and a leagues delivery
// from Supabase users (uuid app user ids, so every event's user has a topic `user:<id>`), on two fresh
// databases of one Postgres server, one with Supabase Realtime's schema (made before the migrations,
// as on Supabase: the triggers send with realtime.send) and one without (the triggers return after
// one catalog lookup); a server on each, the same requests on both. Each scenario runs four times,
// without, with, with, without (drift on a shared machine cancels out), and the figures are the
// mean of each pair.
import pg from 'pg';
import type { NextServer } from '../support/next-server.ts';
import { createDatabase, type PostgresServer } from '../support/postgres-server.ts';
import { REALTIME_SQL } from '../support/supabase-realtime.ts';

/** What the bench lends this module (its scenario runner and request builders). */
export interface BroadcastBench<Spec, Result extends { name: string; requests: number }> {
  postgres: PostgresServer;
  startServer(databaseUrl: string): Promise<NextServer>;
  /** Runs a scenario on a server, Postgres CPU counted. */
  run(server: NextServer, name: string, spec: Spec): Promise<Result>;
  /**
   * The billing webhook at `connections` for user index % users.length of `users` (amount: a fixed
   * number of requests instead of a duration), event ids unique to `tag`, a day later per `round`.
   */
  billing(users: string[], tag: string, round: number, connections: number, amount?: number): Spec;
  /** Leagues deliveries of 50 leagues x 12 members, every member one of `users`, ids unique to `tag`. */
  leagues(users: string[], tag: string, connections: number): Spec;
}

export interface BroadcastCost<Result> {
  results: Result[];
  /** Broadcasts stored per request with Realtime's schema, by scenario (what Realtime then delivers). */
  broadcastsPerRequest: Record<string, number>;
}

const USERS = 1_000;

export async function measureBroadcastCost<Spec, Result extends { name: string; requests: number }>(
  bench: BroadcastBench<Spec, Result>, names: { billing: string; billingFew: string; leagues: string },
): Promise<BroadcastCost<Result>> {
  const users = Array.from({ length: USERS }, () => crypto.randomUUID());
  const stamp = Date.now();
  const variants: { realtime: boolean; label: string; server: NextServer; client: pg.Client }[] = [];
  try {
    for (const realtime of [false, true]) {
      const name = `bench_broadcasts_${realtime ? 'realtime' : 'plain'}_${stamp}`;
      await createDatabase(bench.postgres.url(), name);
      const client = new pg.Client({ connectionString: bench.postgres.url(name) });
      await client.connect();
      if (realtime) await client.query(REALTIME_SQL);
      variants.push({ realtime, label: realtime ? 'with Realtime' : 'no Realtime', server: await bench.startServer(bench.postgres.url(name)), client });
    }
    // Warm-up, untimed: every user's first purchase on both (the timed runs are renewals, as in the main scenarios).
    for (const variant of variants) await bench.run(variant.server, 'warm-up', bench.billing(users, `warm${Number(variant.realtime)}`, 0, 10, USERS));

    const results: Result[] = [];
    const broadcastsPerRequest: Record<string, number> = {};
    const scenarios = [
      { name: names.billing, what: 'entitlements', spec: (tag: string, round: number) => bench.billing(users, tag, round, 50) },
      { name: names.billingFew, what: 'entitlements', spec: (tag: string, round: number) => bench.billing(users, tag, round, 10) },
      { name: names.leagues, what: 'leagues', spec: (tag: string) => bench.leagues(users, tag, 4) },
    ];
    let round = 0;
    for (const scenario of scenarios) {
      const runs = new Map<boolean, Result[]>([[false, []], [true, []]]);
      let sent = 0;
      let requests = 0;
      for (const realtime of [false, true, true, false]) {
        const variant = variants.find((v) => v.realtime === realtime)!;
        round++;
        const before = realtime ? await broadcasts(variant.client, scenario.what) : 0;
        const result = await bench.run(variant.server, `${scenario.name}, ${variant.label}`, scenario.spec(`b${round}`, round));
        runs.get(realtime)!.push(result);
        if (realtime) {
          sent += (await broadcasts(variant.client, scenario.what)) - before;
          requests += result.requests;
        }
      }
      results.push(mean(runs.get(false)!), mean(runs.get(true)!));
      broadcastsPerRequest[scenario.name] = Math.round((sent / Math.max(1, requests)) * 100) / 100;
    }
    return { results, broadcastsPerRequest };
  } finally {
    for (const variant of variants) {
      await variant.server.stop();
      await variant.client.end();
    }
  }
}

/** The mean of each numeric figure of the runs (the first run's other fields). */
function mean<Result extends object>(runs: Result[]): Result {
  const out = { ...runs[0]! } as Record<string, unknown>;
  for (const [key, value] of Object.entries(runs[0]!)) {
    if (typeof value !== 'number') continue;
    out[key] = Math.round((runs.reduce((sum, run) => sum + ((run as Record<string, number>)[key] ?? 0), 0) / runs.length) * 100) / 100;
  }
  return out as Result;
}

async function broadcasts(client: pg.Client, what: string): Promise<number> {
  const { rows } = await client.query(`select count(*)::int as n from realtime.messages where payload->>'what' = $1`, [what]);
  return rows[0].n;
}
