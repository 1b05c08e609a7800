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

-- The ids whose entitlement rows a user reads: their own, and the customer RevenueCat merged them
-- into (billing_subscribers.customer_id), as GET /api/me reads them. Security invoker: as
-- `authenticated` the subscriber row is read under its select-own policy, so another user's id
-- yields that id alone (whose rows the caller cannot read either).
create or replace function public.entitlement_owner_ids(p_user_id text)
returns text[]
language sql
stable
set search_path = ''
as $$
  select array[p_user_id] || array(
    select s.customer_id from public.billing_subscribers s where s.app_user_id = p_user_id and s.customer_id is not null)
$$;

-- Every source (a product's row) of the entitlements of `p_owner_ids` as of p_now: whether it grants
-- then (`grants_until`, the one rule for "grants"), its effective status (a granting status whose
-- access has ended reads `expired`), its place among its entitlement's sources (1: the one shown,
-- which grants longest, then the latest news, then renewing), and whether the entitlement will renew
-- (a source that grants then renews). Security invoker: what a caller may read of the rows decides.
create or replace function public.entitlement_sources(p_owner_ids text[], p_now timestamptz)
returns table (
  entitlement_id text, place bigint, grants_now boolean, effective_status text, entitlement_renews boolean,
  product_id text, pending_product_id text, store text, environment text, period_type text, will_renew boolean,
  expires_at timestamptz, grace_expires_at timestamptz, last_event_at timestamptz, synced_at timestamptz
)
language sql
stable
set search_path = ''
as $$
  select e.entitlement_id,
         row_number() over (partition by e.entitlement_id
                            order by e.grants_until desc, e.last_event_at desc, e.will_renew desc, e.source_key),
         e.grants_until > p_now,
         case when e.grants_until <= p_now and e.status in ('active', 'cancelled_active', 'temporary', 'billing_issue', 'grace')
              then 'expired' else e.status end,
         bool_or(e.grants_until > p_now and e.will_renew) over (partition by e.entitlement_id),
         e.product_id, e.pending_product_id, e.store, e.environment, e.period_type, e.will_renew,
         e.expires_at, e.grace_expires_at, e.last_event_at, e.synced_at
  from public.entitlements e
  where e.app_user_id = any (p_owner_ids)
$$;

-- GET /api/me: the caller's entitlements at p_now, ONE item per entitlement id, ordered by it: the
-- source shown (place 1) with every source (20261123000100_billing_fold.sql, now read through
-- entitlement_sources and entitlement_owner_ids, which my_entitlements reads through too).
create or replace function public.account_entitlements(p_user_id text, p_now timestamptz default now())
returns jsonb
language sql
stable
security definer
set search_path = ''
as $$
  with sources as (
    select * from public.entitlement_sources(public.entitlement_owner_ids(p_user_id), p_now)
  )
  select coalesce(jsonb_agg(jsonb_build_object(
    'entitlement_id', s.entitlement_id,
    'active', s.grants_now,
    'status', s.effective_status,
    'will_renew', s.entitlement_renews,
    'expires_at', s.expires_at,
    'grace_expires_at', s.grace_expires_at,
    'product_id', s.product_id,
    'pending_product_id', s.pending_product_id,
    'store', s.store,
    'environment', s.environment,
    'period_type', s.period_type,
    'last_event_at', s.last_event_at,
    'synced_at', s.synced_at,
    'sources', (
      select jsonb_agg(jsonb_build_object(
        'product_id', r.product_id,
        'store', r.store,
        'environment', r.environment,
        'status', r.effective_status,
        'active', r.grants_now,
        'expires_at', r.expires_at,
        'grace_expires_at', r.grace_expires_at,
        'will_renew', r.will_renew and r.grants_now
      ) order by r.place)
      from sources r where r.entitlement_id = s.entitlement_id)
  ) order by s.entitlement_id collate "C"), '[]'::jsonb)
  from sources s
  where s.place = 1
$$;

-- A user's leagues (not deleted), with their role in each: a user linked to two members of one
-- league gets the league once, as commissioner if either is. Security invoker, like the above.
create or replace function public.member_leagues(p_user_id uuid)
returns table (source text, external_id text, name text, sport text, season text, status text, role text, updated_at timestamptz)
language sql
stable
set search_path = ''
as $$
  select l.source, l.external_id, l.name, l.sport, l.season, l.status, r.member_role, l.updated_at
  from (
    select m.league_id,
           case when bool_or(m.role = 'commissioner') then 'commissioner' else 'member' end as member_role
    from public.league_members m
    where m.app_user_id = p_user_id
    group by m.league_id
  ) r
  join public.leagues l on l.id = r.league_id
  where l.deleted_at is null
$$;

-- GET /api/me: the caller's leagues, newest first (20261122000300_leagues.sql, now read through
-- member_leagues). Keys are those of the API; updatedAt is UTC with microseconds (lib/leagues trims
-- the zeros).
create or replace function public.account_leagues(p_user_id uuid)
returns jsonb
language sql
stable
security definer
set search_path = ''
as $$
  select coalesce(
    jsonb_agg(
      jsonb_build_object(
        'source', l.source,
        'externalId', l.external_id,
        'name', l.name,
        'sport', l.sport,
        'season', l.season,
        'status', l.status,
        'role', l.role,
        'updatedAt', to_char(l.updated_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
      )
      order by l.updated_at desc, l.source, l.external_id
    ),
    '[]'::jsonb
  )
  from public.member_leagues(p_user_id) l
$$;

-- A time as GET /api/me writes it (JavaScript's toISOString: UTC, milliseconds).
create or replace function public.api_timestamp(p_at timestamptz)
returns text
language sql
stable
set search_path = ''
as $$
  select to_char(p_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

-- 1. What `authenticated` may read, row by row and column by column. Each policy's auth.uid() is
--    wrapped in a select, so it is evaluated once per statement (Supabase's advice, and its lint
--    auth_rls_initplan), not once per row.
grant select (app_user_id, customer_id) on public.billing_subscribers to authenticated;
create policy billing_subscribers_select_own on public.billing_subscribers
  for select to authenticated
  using (app_user_id = (select auth.uid())::text);

grant select (app_user_id, entitlement_id, source_key, product_id, pending_product_id, status, will_renew, expires_at,
              grace_expires_at, store, environment, period_type, last_event_at, synced_at, grants_until)
  on public.entitlements to authenticated;
create policy entitlements_select_own on public.entitlements
  for select to authenticated
  using (app_user_id = any ((select public.entitlement_owner_ids((select auth.uid())::text))::text[]));

-- Every column: a link is shaped by wallet_link_json, which takes the whole row.
grant select on public.wallet_links to authenticated;
create policy wallet_links_select_own on public.wallet_links
  for select to authenticated
  using (user_id = (select auth.uid()));

grant select (league_id, app_user_id, role) on public.league_members to authenticated;
create policy league_members_select_own on public.league_members
  for select to authenticated
  using (app_user_id = (select auth.uid()));

grant select (id, source, external_id, name, sport, season, status, updated_at, deleted_at) on public.leagues to authenticated;
create policy leagues_select_member on public.leagues
  for select to authenticated
  using (exists (select 1 from public.league_members m where m.league_id = leagues.id and m.app_user_id = (select auth.uid())));

-- 2. The views. A row of each is an item of GET /api/me's list of the same name, with its keys
--    (quoted camelCase columns) and values (times as /api/me writes them); a field /api/me leaves
--    out of an item (a Solana link's chainId, scope and accountId) is null here. Ordered as /api/me.
--    Anyone but a signed-in user (anon, the service role) reads no rows: auth.uid() is null.
create view public.my_entitlements with (security_invoker = true) as
  with sources as (
    select * from public.entitlement_sources(public.entitlement_owner_ids((select auth.uid())::text), now())
  )
  select s.entitlement_id as id,
         s.grants_now as active,
         s.effective_status as status,
         s.product_id as "productId",
         public.api_timestamp(s.expires_at) as "expiresAt",
         s.entitlement_renews as "willRenew",
         public.api_timestamp(s.grace_expires_at) as "graceExpiresAt",
         s.store,
         s.environment,
         s.period_type as "periodType",
         public.api_timestamp(s.synced_at) as "syncedAt",
         (select jsonb_agg(jsonb_build_object(
            'productId', r.product_id,
            'store', r.store,
            'environment', r.environment,
            'status', r.effective_status,
            'active', r.grants_now,
            'expiresAt', public.api_timestamp(r.expires_at),
            'graceExpiresAt', public.api_timestamp(r.grace_expires_at),
            'willRenew', r.will_renew and r.grants_now
          ) order by r.place)
          from sources r where r.entitlement_id = s.entitlement_id) as sources
  from sources s
  where s.place = 1
  order by s.entitlement_id collate "C";

create view public.my_wallet_links with (security_invoker = true) as
  select w.id, w.chain, w.address, w."chainId", w.cluster, w.kind, w.scope, w."accountId", w."createdAt"
  from public.wallet_links l
  cross join lateral jsonb_to_record(public.wallet_link_json(l))
    as w(id uuid, chain text, address text, "chainId" bigint, cluster text, kind text, scope text, "accountId" text, "createdAt" text)
  where l.user_id = (select auth.uid())
  order by l.created_at, l.id;

create view public.my_leagues with (security_invoker = true) as
  select l.source,
         l.external_id as "externalId",
         l.name,
         l.sport,
         l.season,
         l.status,
         l.role,
         -- UTC, without trailing zero fractions, as GET /api/me writes it.
         regexp_replace(to_char(l.updated_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), '\.?0+$', '') || 'Z' as "updatedAt"
  from public.member_leagues((select auth.uid())) l
  order by l.updated_at desc, l.source, l.external_id;

-- 3. Whether the caller (auth.uid()) has access to `entitlement` now, by GET /api/me's rule (one of
--    its sources grants: grants_until > now()). Security definer: an app's policy calling it reads
--    two index entries, not the entitlements table under its own policy. Wrap it as
--    `(select public.has_entitlement('pro'))` in a policy so it runs once per statement.
create or replace function public.has_entitlement(entitlement text)
returns boolean
language sql
stable
security definer
set search_path = ''
as $$
  select exists (
    select 1 from public.entitlements e
    where e.app_user_id = any (public.entitlement_owner_ids((select auth.uid())::text))
      and e.entitlement_id = has_entitlement.entitlement
      and e.grants_until > now())
$$;

-- Supabase Auth's Custom Access Token Hook (https://supabase.com/docs/guides/auth/auth-hooks/custom-access-token-hook):
-- adds `entitlements` to the claims, `{ "<id>": { "expires_at": <epoch seconds, or null: never> } }`
-- for every entitlement the user has access to when the token is issued (by GET /api/me's rule; the
-- time is when access ends, a grace period's end included), and lowers `exp` to the earliest of those
-- ends, so the token never claims access past it. An entitlement that ends within 60 s of `iat` is
-- left out rather than made the token's `exp` (a token that short would be refreshed over and over);
-- so `exp` is never below iat + 60 s unless Supabase Auth made it so. Claims are a cache of the
-- table: policies and has_entitlement() read the table. Should reading fail, the token is issued
-- with the claims Supabase Auth made (no `entitlements`) and a warning in the database log:
-- signing in never depends on it. Security invoker, run as supabase_auth_admin, which reads the two
-- tables under policies of its own (as Supabase's documentation shows).
create or replace function public.custom_access_token_hook(event jsonb)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  v_claims jsonb := coalesce(event->'claims', '{}'::jsonb);
  v_iat numeric := coalesce((event->'claims'->>'iat')::numeric, extract(epoch from now()));
  v_entitlements jsonb;
  v_earliest timestamptz;
begin
  begin
    select coalesce(jsonb_object_agg(a.entitlement_id, jsonb_build_object(
             'expires_at', case when a.ends_at < 'infinity' then floor(extract(epoch from a.ends_at))::bigint end)), '{}'::jsonb),
           min(a.ends_at)
    into v_entitlements, v_earliest
    from (
      select e.entitlement_id, max(e.grants_until) as ends_at
      from public.entitlements e
      where e.app_user_id = any (public.entitlement_owner_ids(event->>'user_id'))
        and e.grants_until > greatest(now(), to_timestamp(v_iat + 60))
      group by e.entitlement_id
    ) a;
  exception when others then
    raise warning 'custom_access_token_hook: entitlements left out of the token: %', sqlerrm;
    return jsonb_build_object('claims', v_claims);
  end;
  v_claims := v_claims || jsonb_build_object('entitlements', v_entitlements);
  if v_earliest < 'infinity' and (v_claims->>'exp')::numeric > floor(extract(epoch from v_earliest)) then
    v_claims := v_claims || jsonb_build_object('exp', floor(extract(epoch from v_earliest))::bigint);
  end if;
  return jsonb_build_object('claims', v_claims);
end;
$$;

-- What the hook reads, for supabase_auth_admin (Supabase Auth's role; it has no BYPASSRLS).
grant usage on schema public to supabase_auth_admin;
grant select (app_user_id, customer_id) on public.billing_subscribers to supabase_auth_admin;
create policy billing_subscribers_read_by_auth on public.billing_subscribers
  for select to supabase_auth_admin
  using (true);
grant select (app_user_id, entitlement_id, grants_until) on public.entitlements to supabase_auth_admin;
create policy entitlements_read_by_auth on public.entitlements
  for select to supabase_auth_admin
  using (true);

-- Who executes what. The views and the functions they read through: signed-in users (the service
-- role reads through get_account). has_entitlement: signed-in users and the service role. The hook:
-- Supabase Auth alone. On Supabase, default privileges hand every new object to anon and
-- authenticated: everything is revoked first.
revoke all on public.my_entitlements, public.my_wallet_links, public.my_leagues from public, anon, authenticated, service_role;
grant select on public.my_entitlements, public.my_wallet_links, public.my_leagues to authenticated;

do $$
declare
  v_fn text;
begin
  foreach v_fn in array array[
    'public.entitlement_owner_ids(text)', 'public.entitlement_sources(text[], timestamptz)', 'public.member_leagues(uuid)',
    'public.api_timestamp(timestamptz)', 'public.wallet_link_json(public.wallet_links)', 'public.has_entitlement(text)',
    'public.account_entitlements(text, timestamptz)', 'public.account_leagues(uuid)', 'public.custom_access_token_hook(jsonb)'
  ] loop
    execute format('revoke all on function %s from public, anon, authenticated, service_role, supabase_auth_admin', v_fn);
  end loop;
end;
$$;
grant execute on function public.entitlement_owner_ids(text) to authenticated, service_role, supabase_auth_admin;
grant execute on function public.entitlement_sources(text[], timestamptz) to authenticated, service_role;
grant execute on function public.member_leagues(uuid) to authenticated, service_role;
grant execute on function public.api_timestamp(timestamptz) to authenticated, service_role;
grant execute on function public.wallet_link_json(public.wallet_links) to authenticated, service_role;
grant execute on function public.has_entitlement(text) to authenticated, service_role;
grant execute on function public.account_entitlements(text, timestamptz) to service_role;
grant execute on function public.account_leagues(uuid) to service_role;
grant execute on function public.custom_access_token_hook(jsonb) to supabase_auth_admin;
