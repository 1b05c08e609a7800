// What a broadcast costs (`npm run bench`, Postgres mode): the billing webhook and a leagues delivery
// from Supabase users (uuid app user ids, so every event's user has a topic `user:<id>`), on two fresh
// databases of one Postgres server, one with Supabase Realtime's schema (made before the migrations,
// as on Supabase: the triggers send with realtime.send) and one without (the triggers return after
// one catalog lookup); a server on each, the same requests on both, in the order without, with.
import pg from 'pg';
import type { NextServer } from '../../tests/support/next-server.ts';
import { createDatabase, type PostgresServer } from '../../tests/support/postgres-server.ts';
import { REALTIME_SQL } from '../../tests/support/supabase-realtime.ts';

/** What the bench lends this module (its scenario runner and request builders). */
export interface BroadcastBench<Spec, Result extends { name: string; requests: number }> {
  postgres: PostgresServer;
  startServer(databaseUrl: string): Promise<NextServer>;
  /** Runs a scenario on a server, Postgres CPU counted. */
  run(server: NextServer, name: string, spec: Spec): Promise<Result>;
  /** The billing webhook at `connections` (amount: a fixed number, untimed warm-up) for user index % users of `users`, a day later per round. */
  billing(users: string[], tag: string, round: number, connections: number, amount?: number): Spec;
  /** A leagues delivery of 50 leagues x 12 members, every member one of `users`. */
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
  const results: Result[] = [];
  const broadcastsPerRequest: Record<string, number> = {};
  for (const realtime of [false, true]) {
    const label = realtime ? 'with Realtime' : 'no Realtime';
    const name = `bench_broadcasts_${realtime ? 'realtime' : 'plain'}_${Date.now()}`;
    await createDatabase(bench.postgres.url(), name);
    const client = new pg.Client({ connectionString: bench.postgres.url(name) });
    await client.connect();
    try {
      if (realtime) await client.query(REALTIME_SQL);
      const server = await bench.startServer(bench.postgres.url(name));
      try {
        const tag = `${label}-${Date.now()}`;
        // Warm-up, untimed: every user's first purchase (the timed runs are renewals, as in the main scenarios).
        await bench.run(server, 'warm-up', bench.billing(users, `${tag}-warm`, 0, 10, USERS));
        const counted = async (scenario: string, spec: Spec, what: string) => {
          const before = realtime ? await broadcasts(client, what) : 0;
          const result = await bench.run(server, `${scenario}, ${label}`, spec);
          results.push(result);
          if (realtime) broadcastsPerRequest[scenario] = Math.round(((await broadcasts(client, what)) - before) / Math.max(1, result.requests) * 100) / 100;
        };
        await counted(names.billing, bench.billing(users, tag, 1, 50), 'entitlements');
        await counted(names.billingFew, bench.billing(users, tag, 2, 10), 'entitlements');
        await counted(names.leagues, bench.leagues(users, tag, 4), 'leagues');
      } finally {
        await server.stop();
      }
    } finally {
      await client.end();
    }
  }
  return { results, broadcastsPerRequest };
}

async function broadcasts(client: pg.Client, what: string): Promise<number> {
  const { rows } = await client.query(`select count(*)::int as n from realtime.messages where payload->>'what' = $1`, [what]);
  return rows[0].n;
}
