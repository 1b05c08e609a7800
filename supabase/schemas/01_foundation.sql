-- Foundation: what every other file of this folder builds on, and the conventions they follow.
--
-- This folder is the schema as it is now, declared once (Supabase's "declarative database schemas":
-- https://supabase.com/docs/guides/local-development/declarative-database-schemas). Its files are
-- applied in name order to an empty database that already has what Supabase provides (the API
-- roles, `auth`; lib/db/bootstrap.ts makes them elsewhere), with check_function_bodies off, as
-- pg_dump does: a function may name one declared in a later file. supabase/migrations/ is how a
-- deployed database gets here; `npm run db:diff -- <name>` writes the next migration from an edit
-- in this folder, and tests/db/schemas.test.ts fails when the two disagree. Edit here, never copy a
-- whole function into a migration by hand.
--
-- Conventions for every SQL function in this folder:
--   * `set search_path = ''` so it sees exactly the objects it names (and `security definer` where
--     it is called through the Data API);
--   * executable only by service_role (and the owner), never by anon or authenticated, or a
--     signed-in user could skip the checks done in Next.js by calling it through the Data API; the
--     few a signed-in user or Supabase Auth may call say so where they are granted;
--   * domain errors raised as `raise exception '<problem_code>' using errcode = 'PT<http status>'`,
--     which PostgREST maps to that status and the pg/PGlite adapters read from the SQLSTATE.
--   * every table has row-level security enabled; reads a signed-in user may make are the
--     select-own policies of 07_account.sql.
--   * a function that every webhook or GET /api/me calls is PL/pgSQL, even when its body is one
--     query: Postgres 17 and 15, which Supabase runs, plan a SQL function's query on every call
--     (its `set search_path` keeps it from being inlined), where PL/pgSQL keeps its plans for the
--     session. On 17 a renewal with events on went from 2.2 to 1.4-1.7 ms of Postgres CPU, and
--     GET /api/me's call from 0.3 to 0.19 (scripts/bench/NOTES.md); on 18, which keeps SQL
--     functions' plans too, the two cost the same. tests/db/hot-functions.test.ts holds every
--     function those requests and the triggers reach to it (a constant, an immutable function
--     without arguments, may stay SQL: it is evaluated once, as its caller's plan is made).

-- GET /api/health: one round trip that proves the database answers and the schema is in place.
create or replace function public.health_check()
returns jsonb
language sql
stable
security definer
set search_path = ''
as $$
  select jsonb_build_object('ok', true, 'now', now())
$$;
revoke all on function public.health_check() from public, anon, authenticated;
grant execute on function public.health_check() to service_role;

-- The migrations this database has applied, by the one ledger (the Supabase CLI's own,
-- supabase_migrations.schema_migrations, which `supabase db push` and `npm run migrate` both write).
-- A deployed instance never migrates: it asks this before it serves, and answers 503 until the
-- database has every migration of its code. Through the Data API (Supabase mode) this function is
-- the only way to read the ledger, whose schema the API does not expose.
create or replace function public.schema_versions()
returns text[]
language sql
stable
security definer
set search_path = ''
as $$
  select coalesce(array_agg(version order by version), '{}') from supabase_migrations.schema_migrations
$$;
revoke all on function public.schema_versions() from public, anon, authenticated;
grant execute on function public.schema_versions() to service_role;

-- Reads for the app itself, where it already looks: a signed-in user reads their own entitlements,
-- wallet links and leagues through Supabase (supabase-js with the anon or publishable key and the
-- user's session), asks `has_entitlement('pro')` in its own row-level security policies, and finds
-- its entitlements in its access token's claims (Supabase Auth's Custom Access Token Hook).
--
-- 1. Select-own policies for `authenticated` on the tables GET /api/me reads, with SELECT granted on
--    the columns it reads and nothing else; no INSERT, UPDATE or DELETE for anyone but the service,
--    whose writes stay behind its security definer functions.
-- 2. Views named for the app, `my_entitlements`, `my_wallet_links`, `my_leagues`
--    (`security_invoker`: they read as the caller, under the policies), whose rows are the items of
--    GET /api/me's lists: the same fields and values, access judged at read time. One definition
--    serves both: GET /api/me's functions (account_entitlements, account_leagues) and the views read
--    through the same SQL (entitlement_sources, member_leagues; wallets through wallet_link_json).
-- 3. `has_entitlement(text)`: whether the caller has access to an entitlement now, for the app's own
--    policies; `custom_access_token_hook(jsonb)`: the entitlements in the access token, for
--    `supabase_auth_admin` alone.
--
-- A time as GET /api/me writes it (JavaScript's toISOString: UTC, milliseconds).
create or replace function public.api_timestamp(p_at timestamptz)
returns text
language sql
stable
set search_path = ''
as $$
  select to_char(p_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;
revoke all on function public.api_timestamp(timestamp with time zone) from public, anon, authenticated;
grant execute on function public.api_timestamp(timestamp with time zone) to authenticated, service_role;
