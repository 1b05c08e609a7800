import { expect } from 'vitest';
import { toEntitlementViews, type EntitlementRow, type EntitlementView } from '../../lib/billing/entitlement-view.ts';
import type { TestDatabase } from './databases.ts';

type Sql = TestDatabase['sql'];

/** The claims PostgREST sets for a signed-in user's request (what auth.uid() reads). */
export function userClaims(userId: string): Record<string, unknown> {
  return { sub: userId, role: 'authenticated', aud: 'authenticated', is_anonymous: false };
}

/**
 * Run `work` in a transaction as `role` with these JWT claims, as PostgREST runs a request
 * (`set local role`, `request.jwt.claims`), then roll it back. `settings` are more transaction-local
 * settings (Realtime sets `realtime.topic`).
 */
export async function asRole<T>(db: TestDatabase, role: string, claims: Record<string, unknown> | null, work: (sql: Sql) => Promise<T>,
  settings: Record<string, string> = {}): Promise<T> {
  return db.connection(async (sql) => {
    await sql('begin');
    try {
      await sql(`select set_config('role', $1, true), set_config('request.jwt.claims', $2, true)`, [role, claims ? JSON.stringify(claims) : '']);
      for (const [name, value] of Object.entries(settings)) await sql('select set_config($1, $2, true)', [name, value]);
      return await work(sql);
    } finally {
      await sql('rollback');
    }
  });
}

/** As the signed-in user `userId` (role authenticated). */
export function asUser<T>(db: TestDatabase, userId: string, work: (sql: Sql) => Promise<T>, settings: Record<string, string> = {}): Promise<T> {
  return asRole(db, 'authenticated', userClaims(userId), work, settings);
}

/** A view's rows as JSON, the way PostgREST answers supabase-js (`json_agg` of the rows, in their order). */
export async function viewAsJson(sql: Sql, view: string): Promise<Record<string, unknown>[]> {
  const [{ rows }] = (await sql(`select coalesce(jsonb_agg(v), '[]'::jsonb) as rows from public.${view} v`)) as [{ rows: Record<string, unknown>[] }];
  return rows;
}

/** What the user reads through Supabase: the three views, as supabase-js gets them. */
export function readAppViews(db: TestDatabase, userId: string) {
  return asUser(db, userId, async (sql) => ({
    entitlements: await viewAsJson(sql, 'my_entitlements'),
    wallets: await viewAsJson(sql, 'my_wallet_links'),
    leagues: await viewAsJson(sql, 'my_leagues'),
  }));
}

/** A row with its null fields left out (an item of GET /api/me leaves out what a view row has as null). */
export function withoutNulls(row: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(row).filter(([, value]) => value !== null));
}

/** When access to the entitlement shown ends, by the rule of `grants_until` (null: never). */
function accessEnds(view: EntitlementView): number | null {
  const times = [view.expiresAt, view.status === 'grace' ? view.graceExpiresAt : null].filter((t): t is string => t !== null).map(Date.parse);
  if (view.status === 'grace') return times.length === 0 ? null : Math.max(...times);
  return view.expiresAt === null ? null : Date.parse(view.expiresAt);
}

/**
 * What the app reads of `userId`'s entitlements, compared with what GET /api/me shows, as of `at`:
 * `my_entitlements` (as the user), `has_entitlement()` of each entitlement (and of one they do not
 * have), and the access token's `entitlements` claim and `exp` (the hook, as supabase_auth_admin).
 * The views and functions judge access at the database's now(), so inside a transaction that is
 * rolled back the user's rows are first moved in time by (now() - at): the state as of `at` is then
 * the state as of now, and GET /api/me's function is asked at now() too.
 */
export async function expectAppReadsMatchAccount(db: TestDatabase, userId: string, at: Date, label: string): Promise<void> {
  const seen = await db.connection(async (sql) => {
    await sql('begin');
    try {
      await sql(`
        update public.entitlements set expires_at = expires_at + (now() - $2::timestamptz), grace_expires_at = grace_expires_at + (now() - $2::timestamptz),
          synced_at = synced_at + (now() - $2::timestamptz), last_event_at = last_event_at + (now() - $2::timestamptz)
        where app_user_id = any (public.entitlement_owner_ids($1))`, [userId, at.toISOString()]);
      const [{ api, now }] = (await sql(`select public.account_entitlements($1, now()) as api, now() as now`, [userId])) as [{ api: EntitlementRow[]; now: Date }];
      const account = toEntitlementViews(api);
      const iat = Math.floor(new Date(now).getTime() / 1000);
      await sql(`select set_config('role', 'supabase_auth_admin', true)`);
      const event = { user_id: userId, claims: { sub: userId, role: 'authenticated', iat, exp: iat + 3600 } };
      const [{ result: hook }] = (await sql('select public.custom_access_token_hook($1) as result', [event])) as [{ result: { claims: Record<string, unknown> } }];
      await sql(`select set_config('role', 'authenticated', true), set_config('request.jwt.claims', $1, true)`, [JSON.stringify(userClaims(userId))]);
      const view = await viewAsJson(sql, 'my_entitlements');
      const ids = [...account.map((item) => item.id), 'never-granted'];
      const has = await sql<{ id: string; has: boolean }>('select id, public.has_entitlement(id) as has from unnest($1::text[]) as ids(id)', [ids]);
      return { account, view, has, hook: hook.claims, iat };
    } finally {
      await sql('rollback');
    }
  });

  expect({ label, user: userId, view: seen.view }).toEqual({ label, user: userId, view: seen.account });
  expect({ label, has: Object.fromEntries(seen.has.map((row) => [row.id, row.has])) })
    .toEqual({ label, has: Object.fromEntries([...seen.account.map((item) => [item.id, item.active]), ['never-granted', false]]) });
  // The token claims what grants for at least a minute more, each with its end; exp is the earliest.
  const claimed = seen.account.filter((item) => item.active && (accessEnds(item) ?? Infinity) > (seen.iat + 60) * 1000);
  const ends = claimed.map(accessEnds).filter((end): end is number => end !== null);
  expect({ label, entitlements: seen.hook.entitlements, exp: seen.hook.exp }).toEqual({
    label,
    entitlements: Object.fromEntries(claimed.map((item) => {
      const end = accessEnds(item);
      return [item.id, { expires_at: end === null ? null : Math.floor(end / 1000) }];
    })),
    exp: Math.min(seen.iat + 3600, ...ends.map((end) => Math.floor(end / 1000))),
  });
}
