// What the app's own reads cost in the database (`npm run bench`, Postgres mode; alone with
// `npm run bench -- --reads`): has_entitlement() in a row-level security policy of the app's own
// table, wrapped in a select as Supabase advises (once per statement) and not (once per row), against
// the same table without the call; has_entitlement() itself; reading my_entitlements beside
// get_account_json(); and the access token hook. Each timed by EXPLAIN ANALYZE (the server's own time,
// no round trip), the median of several runs, as the role PostgREST or Supabase Auth would use.
import pg from 'pg';
import { openPostgres } from '../../lib/db/postgres.ts';

export interface AppReadsCost {
  users: number;
  articles: number;
  /** Median execution time (ms) of `select count(*)` over the app's table, by policy. */
  policyMs: { none: number; wrapped: number; perRow: number };
  /** has_entitlement(), per call (µs): 10,000 calls in one statement. */
  hasEntitlementUs: number;
  /** Median execution time (ms) of one read. */
  myEntitlementsMs: number;
  getAccountMs: number;
  hookMs: number;
}

const USERS = 10_000;
const ARTICLES = 100_000;
const RUNS = 7;

export async function measureAppReads(databaseUrl: string): Promise<AppReadsCost> {
  const db = await openPostgres({ connectionString: databaseUrl, max: 1 });
  await db.close();
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    // Users with a monthly `pro` (half still running, half ended) and a lifetime `plus` for every tenth.
    await client.query(`
      insert into public.entitlements (app_user_id, entitlement_id, product_id, source_key, status, will_renew, expires_at, last_event_id, last_event_at, store, environment)
      select u.id, 'pro', 'pro_monthly', md5(u.id), 'active', true, now() + case when g % 2 = 0 then interval '20 days' else interval '-10 days' end, 'evt-' || g, now() - interval '10 days', 'APP_STORE', 'PRODUCTION'
      from generate_series(1, ${USERS}) g cross join lateral (select md5('bench-reads-user:' || g)::uuid::text as id) u;
      insert into public.entitlements (app_user_id, entitlement_id, product_id, source_key, status, will_renew, expires_at, last_event_id, last_event_at, store, environment)
      select md5('bench-reads-user:' || g)::uuid::text, 'plus', 'plus_lifetime', md5('plus' || g), 'active', false, null, 'evt-plus-' || g, now() - interval '30 days', 'APP_STORE', 'PRODUCTION'
      from generate_series(1, ${USERS}, 10) g;
      create table public.bench_articles (id int primary key, title text not null);
      insert into public.bench_articles select g, 'Article ' || g from generate_series(1, ${ARTICLES}) g;
      alter table public.bench_articles enable row level security;
      grant select on public.bench_articles to authenticated;
      analyze public.entitlements;
      analyze public.bench_articles;`);
    const user = (await client.query(`select md5('bench-reads-user:2')::uuid::text as id`)).rows[0].id as string;
    const claims = JSON.stringify({ sub: user, role: 'authenticated' });

    /** Median server time of a statement run as `role` (with the user's claims), after `setup` in the same transaction. */
    const time = async (sql: string, role: string, setup: string[] = [], values: unknown[] = []) => {
      const times: number[] = [];
      for (let run = 0; run < RUNS; run++) {
        await client.query('begin');
        try {
          for (const statement of setup) await client.query(statement);
          await client.query(`select set_config('role', $1, true), set_config('request.jwt.claims', $2, true)`, [role, claims]);
          const { rows } = await client.query(`explain (analyze, format json) ${sql}`, values);
          times.push(rows[0]['QUERY PLAN'][0]['Execution Time']);
        } finally {
          await client.query('rollback');
        }
      }
      return Math.round(times.sort((a, b) => a - b)[Math.floor(RUNS / 2)]! * 1000) / 1000;
    };
    const withPolicy = (using: string) => [`create policy bench on public.bench_articles for select to authenticated using (${using})`];
    const count = 'select count(*) from public.bench_articles';
    const none = await time(count, 'authenticated', withPolicy('true'));
    const wrapped = await time(count, 'authenticated', withPolicy(`(select public.has_entitlement('pro'))`));
    const perRow = await time(count, 'authenticated', withPolicy(`public.has_entitlement('pro')`));
    const calls = await time(`select count(*) filter (where public.has_entitlement('pro')) from generate_series(1, 10000)`, 'authenticated');
    const myEntitlementsMs = await time('select * from public.my_entitlements', 'authenticated');
    const getAccountMs = await time('select public.get_account_json($1, now())', 'service_role', [], [user]);
    const iat = Math.floor(Date.now() / 1000);
    const hookMs = await time('select public.custom_access_token_hook($1)', 'supabase_auth_admin', [], [{ user_id: user, claims: { sub: user, iat, exp: iat + 3600 } }]);
    await client.query('drop table public.bench_articles');
    return {
      users: USERS, articles: ARTICLES,
      policyMs: { none, wrapped, perRow },
      hasEntitlementUs: Math.round(calls * 1000 / 10_000 * 100) / 100,
      myEntitlementsMs, getAccountMs, hookMs,
    };
  } finally {
    await client.end();
  }
}

export function formatAppReads(cost: AppReadsCost): string {
  return [
    `App reads in the database (Postgres, ${cost.users} subscribers; median server time of ${RUNS} runs):`,
    '',
    '| read | ms |',
    '|---|---:|',
    `| \`select count(*)\` of an app table of ${cost.articles} rows, policy \`using (true)\` | ${cost.policyMs.none} |`,
    `| the same, policy \`using ((select public.has_entitlement('pro')))\` (once per statement) | ${cost.policyMs.wrapped} |`,
    `| the same, policy \`using (public.has_entitlement('pro'))\` (once per row) | ${cost.policyMs.perRow} |`,
    `| \`select * from my_entitlements\` (as the user) | ${cost.myEntitlementsMs} |`,
    `| \`get_account_json()\` (GET /api/me's call) | ${cost.getAccountMs} |`,
    `| \`custom_access_token_hook()\` (as supabase_auth_admin) | ${cost.hookMs} |`,
    '',
    `has_entitlement() itself: ${cost.hasEntitlementUs} µs a call.`,
  ].join('\n');
}
