-- The account: what GET /api/me reads in one call, the reads a signed-in user may make directly
-- (select-own policies, views, has_entitlement(), the access-token hook), live updates as private
-- Realtime broadcasts, and what happens when a user is deleted. docs/app-reads.md.

-- The caller's links, oldest first, as a JSON array of the public link shape. GET /api/wallet-link
-- answers with it, and GET /api/me embeds it as `wallets`.
create or replace function public.account_wallets(p_user_id uuid)
returns json
language plpgsql
stable
security definer
set search_path = ''
as $$
begin
  -- json, not jsonb: the keys in the API's order (as the wallet routes answer a link).
  return (select coalesce(json_agg(public.wallet_link_api_json(l) order by l.created_at, l.id), '[]'::json)
    from public.wallet_links l
    where l.user_id = p_user_id);
end;
$$;
revoke all on function public.account_wallets(uuid) from public, anon, authenticated;
grant execute on function public.account_wallets(uuid) to service_role;

-- A deleted Supabase user takes their wallet links and challenges along.
--
-- The trigger function of `wallets_delete_user_rows` (after delete on auth.users), now for every domain.
create or replace function public.wallets_delete_user_rows()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  perform public.forget_user(old.id);
  return old;
end;
$$;
revoke all on function public.wallets_delete_user_rows() from public, anon, authenticated;
grant execute on function public.wallets_delete_user_rows() to service_role;

-- GET /api/me: the caller's leagues (not deleted), with the caller's role in each, newest first.
-- A user linked to two members of one league gets the league once, as commissioner if either is.
-- Read through member_leagues (as my_leagues reads them). As the API answers them: its keys, and
-- updatedAt in UTC without trailing zero fractions ("2026-11-21T17:59:00Z", "...:00.25Z").
create or replace function public.account_leagues(p_user_id uuid)
returns json
language plpgsql
stable
security definer
set search_path = ''
as $$
begin
  return (select coalesce(
      json_agg(
        json_build_object(
          'source', l.source,
          'externalId', l.external_id,
          'name', l.name,
          'sport', l.sport,
          'season', l.season,
          'status', l.status,
          'role', l.role,
          'updatedAt', regexp_replace(to_char(l.updated_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), '\.?0+$', '') || 'Z'
        )
        order by l.updated_at desc, l.source, l.external_id
      ),
      '[]'::json
    )
    from public.member_leagues(p_user_id) l);
end;
$$;
revoke all on function public.account_leagues(uuid) from public, anon, authenticated;
grant execute on function public.account_leagues(uuid) to service_role;

-- GET /api/me's wallets and leagues kept per user between reads (get_account_json), as the API's JSON
-- text: building them was most of the call for a user in 50 leagues (docs/benchmarks.md), and they
-- change only when a wallet is linked or unlinked, a leagues sync writes, or an erasure. Never stale: every write that changes
-- what account_wallets or account_leagues returns for a user (a link made, changed or removed; a
-- membership added, changed or removed; a league's snapshot or deletion) empties the user's row and
-- gives it a new version, in the writing transaction (the triggers below). A read that built them
-- stores them only if the row still has the version it read: a write that committed meanwhile, or
-- is still open (its row lock makes the store wait for it), wins. A user's first read makes the row
-- before it builds, so a write that commits from then on is seen too (one that leaves no row, an
-- erasure, included). Versions come from a sequence, never reused. A TRUNCATE of any of the three
-- tables empties every row (it takes the table's lock, so it waits for the reads under way). A
-- user with no wallet and in no league has no row (an erased user among them: nothing names them
-- here). The entitlements are kept apart (account_entitlements_cache, below). What the
-- triggers cannot see must empty the table itself: a migration that changes what
-- account_wallets or account_leagues return (or wallet_link_api_json, member_leagues, which they
-- read) deletes its rows (tests/db/account-cache-migrations.unit.test.ts holds migrations to
-- that), and so does a bulk load run with triggers off (session_replication_role = replica).
create sequence public.account_cache_version;
revoke all on sequence public.account_cache_version from public, anon, authenticated;

create table public.account_cache (
  user_id uuid primary key,
  -- GET /api/me's `wallets` and `leagues`, JSON text as answered; both null: emptied by a write,
  -- built again by the next read.
  wallets text,
  leagues text,
  version bigint not null default nextval('public.account_cache_version')
);
alter table public.account_cache enable row level security;
revoke all on table public.account_cache from public, anon, authenticated;
grant select, insert, update, delete on table public.account_cache to service_role;

-- Empty the kept wallets and leagues of these users (a row for each, so a read already under way
-- cannot store what it built before this write).
create or replace function public.account_changed(p_user_ids uuid[])
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  -- (In id order: two writes naming the same users lock their rows in one order.)
  insert into public.account_cache as c (user_id)
  select id from (select distinct id from unnest(p_user_ids) as ids(id) where id is not null) ids order by id
  on conflict (user_id) do update set wallets = null, leagues = null, version = nextval('public.account_cache_version');
end;
$$;
revoke all on function public.account_changed(uuid[]) from public, anon, authenticated;
grant execute on function public.account_changed(uuid[]) to service_role;

-- The trigger function of the cache's triggers: on wallet_links and league_members, the users of
-- the rows the statement wrote; on leagues, the app users among the members of the leagues it
-- changed; a TRUNCATE of any of them, everyone.
create or replace function public.account_cache_stale()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  if tg_op = 'TRUNCATE' then
    delete from public.account_cache;
  elsif tg_table_name = 'leagues' then
    perform public.account_changed(array(
      select m.app_user_id from public.league_members m where m.league_id in (select o.id from old_rows o)));
  elsif tg_table_name = 'wallet_links' then
    if tg_op = 'INSERT' then
      perform public.account_changed(array(select n.user_id from new_rows n));
    elsif tg_op = 'DELETE' then
      perform public.account_changed(array(select o.user_id from old_rows o));
    else
      perform public.account_changed(array(select n.user_id from new_rows n union select o.user_id from old_rows o));
    end if;
  elsif tg_op = 'INSERT' then
    perform public.account_changed(array(select n.app_user_id from new_rows n));
  elsif tg_op = 'DELETE' then
    perform public.account_changed(array(select o.app_user_id from old_rows o));
  else
    perform public.account_changed(array(select n.app_user_id from new_rows n union select o.app_user_id from old_rows o));
  end if;
  return null;
end;
$$;
revoke all on function public.account_cache_stale() from public, anon, authenticated;
grant execute on function public.account_cache_stale() to service_role;

create trigger wallet_links_account_cache_insert after insert on public.wallet_links
  referencing new table as new_rows for each statement execute function public.account_cache_stale();
create trigger wallet_links_account_cache_update after update on public.wallet_links
  referencing old table as old_rows new table as new_rows for each statement execute function public.account_cache_stale();
create trigger wallet_links_account_cache_delete after delete on public.wallet_links
  referencing old table as old_rows for each statement execute function public.account_cache_stale();
create trigger league_members_account_cache_insert after insert on public.league_members
  referencing new table as new_rows for each statement execute function public.account_cache_stale();
create trigger league_members_account_cache_update after update on public.league_members
  referencing old table as old_rows new table as new_rows for each statement execute function public.account_cache_stale();
create trigger league_members_account_cache_delete after delete on public.league_members
  referencing old table as old_rows for each statement execute function public.account_cache_stale();
-- (A league's insert has no members yet: their insert empties the rows.)
create trigger leagues_account_cache_update after update on public.leagues
  referencing old table as old_rows for each statement execute function public.account_cache_stale();
create trigger leagues_account_cache_delete after delete on public.leagues
  referencing old table as old_rows for each statement execute function public.account_cache_stale();
create trigger wallet_links_account_cache_truncate after truncate on public.wallet_links
  for each statement execute function public.account_cache_stale();
create trigger league_members_account_cache_truncate after truncate on public.league_members
  for each statement execute function public.account_cache_stale();
create trigger leagues_account_cache_truncate after truncate on public.leagues
  for each statement execute function public.account_cache_stale();

-- GET /api/me: the caller's entitlements at p_now, ONE item per entitlement id, ordered by it: the
-- source shown (place 1) with every source, read through entitlement_sources and
-- entitlement_owner_ids, which my_entitlements reads through too.
create or replace function public.account_entitlements(p_user_id text, p_now timestamptz default now())
returns jsonb
language plpgsql
stable
security definer
set search_path = ''
as $$
begin
  return (
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
    where s.place = 1);
end;
$$;
revoke all on function public.account_entitlements(text,timestamp with time zone) from public, anon, authenticated;
grant execute on function public.account_entitlements(text,timestamp with time zone) to service_role;

-- GET /api/me's entitlements kept per user between reads, as the JSON text account_entitlements
-- returns. Unlike the wallets and leagues, no write empties them: a read uses what it kept only while
-- what it was built from still holds, and otherwise builds and keeps it again.
--   - The same rows: the user's owners (entitlement_owner_ids: the user and the customers merged
--     into them), and a digest of their entitlement rows' contents, every column as text
--     (account_entitlements_digest). Any write shows, whoever makes it: the billing fold, a sync, a
--     transfer, an operator's SQL.
--   - The same time: account_entitlements depends on the time asked only through whether each
--     row's grants_until is past, so its answer holds from the last grants_until at or before the
--     time it was built to the first one after it (valid_from, valid_until). An access that ends
--     by time is read afresh at its end, with no write to tell.
--   - The same code: account_entitlements_format(), below.
-- All of it is read in the one statement that builds the answer, so it describes exactly what the
-- answer was built from: a write that commits during a read makes the next read build again.
create table public.account_entitlements_cache (
  user_id uuid primary key,
  format integer not null,
  owner_ids text[] not null,
  rows_digest bytea not null,
  valid_from timestamptz not null,
  valid_until timestamptz not null,
  entitlements text not null
);
alter table public.account_entitlements_cache enable row level security;
-- Whose rows each kept answer shows: an erasure forgets every answer that shows the erased rows.
create index account_entitlements_cache_owners_idx on public.account_entitlements_cache using gin (owner_ids) with (fastupdate = off);
revoke all on table public.account_entitlements_cache from public, anon, authenticated;
grant select, insert, update, delete on table public.account_entitlements_cache to service_role;

-- The version of what is kept: a migration that changes what account_entitlements_keep builds
-- (account_entitlements, entitlement_sources, or the function itself) gives this a new number, so
-- nothing kept before it is used, not even by a read that was under way while it ran
-- (tests/db/account-cache-migrations.unit.test.ts holds migrations to that).
create or replace function public.account_entitlements_format()
returns integer
language sql
immutable
set search_path = ''
as $$
  select 2
$$;
revoke all on function public.account_entitlements_format() from public, anon, authenticated;
grant execute on function public.account_entitlements_format() to service_role;

-- The contents of these owners' entitlement rows, as a digest (and the session's time zone, which
-- the kept JSON's times are written in). Every account read asks it: planned once per connection, as
-- public.entitlement_sources is (below, which says why).
create or replace function public.account_entitlements_digest(p_owner_ids text[])
returns bytea
language plpgsql
stable
set search_path = ''
-- (The rows' text in one style whatever the session's: every instant written with its offset.)
set datestyle = 'ISO, YMD'
set intervalstyle = 'postgres'
set plan_cache_mode = force_generic_plan
as $$
begin
  return (
    select sha256(convert_to(current_setting('TimeZone') || ';'
      || coalesce(string_agg(e::text, ',' order by e.app_user_id, e.entitlement_id, e.source_key), ''), 'UTF8'))
    from public.entitlements e where e.app_user_id = any (p_owner_ids));
end;
$$;
revoke all on function public.account_entitlements_digest(text[]) from public, anon, authenticated;
grant execute on function public.account_entitlements_digest(text[]) to service_role;

-- The advisory lock of one billing id (a user or a customer merged into one) that serializes keeping
-- the entitlements that show its rows (shared) with their erasure (exclusive).
create or replace function public.account_entitlements_lock_key(p_id text)
returns bigint
language plpgsql
immutable
set search_path = ''
as $$
begin
  return hashtextextended('account_entitlements:' || p_id, 0);
end;
$$;
revoke all on function public.account_entitlements_lock_key(text) from public, anon, authenticated;
grant execute on function public.account_entitlements_lock_key(text) to service_role;

-- Build a user's entitlements at p_now, and keep them with what they were built from (above). A
-- user with none keeps no row (an erased user among them), nor does a time that is not one.
-- Serialized with forget_user by the owners' locks: an erasure waits for a read that is keeping rows
-- it erases, and a read that waits for an erasure builds from what it left (a statement after the
-- lock sees what committed before it: READ COMMITTED; at another isolation nothing is kept).
-- Its statements planned once per connection, as public.entitlement_sources's (below, which says why).
create or replace function public.account_entitlements_keep(p_user_id uuid, p_now timestamptz)
returns text
language plpgsql
volatile
security definer
set search_path = ''
set plan_cache_mode = force_generic_plan
as $$
declare
  v_kept public.account_entitlements_cache;
  v_locked text[];
begin
  if p_user_id is null or p_now is null or not isfinite(p_now) or current_setting('transaction_isolation') <> 'read committed' then
    return public.account_entitlements(p_user_id::text, p_now)::text;
  end if;
  v_locked := public.entitlement_owner_ids(p_user_id::text);
  perform pg_advisory_xact_lock_shared(public.account_entitlements_lock_key(id)) from unnest(v_locked) as ids(id) order by id;
  -- One statement, one snapshot: the answer, its owners, their rows' digest and the times it
  -- holds between.
  select p_user_id, public.account_entitlements_format(), o.ids, public.account_entitlements_digest(o.ids),
         coalesce(max(e.grants_until) filter (where e.grants_until <= p_now), '-infinity'),
         coalesce(min(e.grants_until) filter (where e.grants_until > p_now), 'infinity'),
         public.account_entitlements(p_user_id::text, p_now)::text
    into v_kept
  from (select public.entitlement_owner_ids(p_user_id::text) as ids) o
  left join public.entitlements e on e.app_user_id = any (o.ids)
  group by o.ids;
  if v_kept.owner_ids is distinct from v_locked then
    -- A merge committed between the locks and the answer: answered, not kept.
    return v_kept.entitlements;
  elsif v_kept.entitlements = '[]' then
    delete from public.account_entitlements_cache where user_id = p_user_id;
  else
    insert into public.account_entitlements_cache as c values (v_kept.*)
      on conflict (user_id) do update set format = excluded.format, owner_ids = excluded.owner_ids, rows_digest = excluded.rows_digest,
        valid_from = excluded.valid_from, valid_until = excluded.valid_until, entitlements = excluded.entitlements;
  end if;
  return v_kept.entitlements;
end;
$$;
revoke all on function public.account_entitlements_keep(uuid,timestamp with time zone) from public, anon, authenticated;
grant execute on function public.account_entitlements_keep(uuid,timestamp with time zone) to service_role;


create or replace function public.get_account_json(p_user_id uuid, p_now timestamptz default now())
returns text
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_wallets text;
  v_leagues text;
  v_version bigint;
  v_entitlements text;
begin
  -- The wallets and leagues as kept (account_cache, above), else built, and kept for the next read
  -- if no write moved the row's version on meanwhile; the entitlements as kept if they still hold
  -- (account_entitlements_cache, above: the same code, owners and rows, a time they hold at).
  select c.wallets, c.leagues, c.version, k.entitlements into v_wallets, v_leagues, v_version, v_entitlements
  from (select) one
  left join public.account_cache c on c.user_id = p_user_id
  left join public.account_entitlements_cache k on k.user_id = p_user_id
    and p_now >= k.valid_from and p_now < k.valid_until
    and k.format = public.account_entitlements_format()
    and k.owner_ids = public.entitlement_owner_ids(p_user_id::text)
    and k.rows_digest = public.account_entitlements_digest(k.owner_ids);
  if v_wallets is null or v_leagues is null then
    v_wallets := public.account_wallets(p_user_id)::text;
    v_leagues := public.account_leagues(p_user_id)::text;
    if v_version is null and (v_wallets <> '[]' or v_leagues <> '[]') then
      -- The first read: the row first (a write committing from here on gives it a new version, and
      -- one still open is waited for), then both built again from what is committed by then.
      insert into public.account_cache (user_id) values (p_user_id) on conflict (user_id) do nothing;
      select c.version into v_version from public.account_cache c where c.user_id = p_user_id;
      v_wallets := public.account_wallets(p_user_id)::text;
      v_leagues := public.account_leagues(p_user_id)::text;
    end if;
    if v_wallets <> '[]' or v_leagues <> '[]' then
      update public.account_cache set wallets = v_wallets, leagues = v_leagues where user_id = p_user_id and version = v_version;
    elsif v_version is not null then
      -- (No wallet and in no league by then, an erasure among the ways: no row.)
      delete from public.account_cache where user_id = p_user_id and version = v_version and wallets is null;
    end if;
  end if;
  -- The account as JSON text: the wallets and leagues as kept (the API's shape already), and the
  -- entitlements as of p_now as rows the server maps (lib/account.ts). Text, not jsonb: what is
  -- kept is copied into the answer, never parsed or escaped again (a third of the call's cost).
  return '{"wallets":' || v_wallets || ',"entitlements":' || coalesce(v_entitlements, public.account_entitlements_keep(p_user_id, p_now))
    || ',"leagues":' || v_leagues || '}';
end;
$$;
revoke all on function public.get_account_json(uuid,timestamp with time zone) from public, anon, authenticated;
grant execute on function public.get_account_json(uuid,timestamp with time zone) to service_role;

-- get_account_json as jsonb: what the service's code before get_account_json called. Kept so that
-- code answers as it did while a deployment migrates before it deploys (docs/deploy.md); a later
-- release drops it.
create or replace function public.get_account(p_user_id uuid, p_now timestamptz default now())
returns jsonb
language sql
volatile
security definer
set search_path = ''
as $$
  select public.get_account_json(p_user_id, p_now)::jsonb
$$;
revoke all on function public.get_account(uuid,timestamp with time zone) from public, anon, authenticated;
grant execute on function public.get_account(uuid,timestamp with time zone) to service_role;

-- Forget one user in every domain, in one transaction. Called by the trigger below; an operator
-- can also call it for a user who never had an auth.users row (dev tokens, self-hosted Auth).
-- Idempotent: forgetting a forgotten user changes nothing. Returns what each domain did.
create or replace function public.forget_user(p_user_id uuid)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_result jsonb;
  v_owners text[];
begin
  if p_user_id is null then
    raise exception 'invalid_request' using errcode = 'PT400', detail = 'A user id is required.';
  end if;
  -- Outbound events: one customer.deleted, not a revoke or an unlink for each row that goes.
  perform public.outbound_begin_erasure(p_user_id::text);
  -- The entitlements GET /api/me keeps that show rows erased here (the user's, and those of every
  -- user merged into the user or their customers), once the reads keeping them end (the locks; at
  -- READ COMMITTED, as the service and Supabase Auth call it, the delete then sees what they kept).
  v_owners := public.entitlement_owner_ids(p_user_id::text);
  perform pg_advisory_xact_lock(public.account_entitlements_lock_key(id)) from unnest(v_owners) as ids(id) order by id;
  delete from public.account_entitlements_cache k where k.user_id = p_user_id or k.owner_ids && v_owners;
  v_result := public.wallets_forget_user(p_user_id) || public.leagues_forget_user(p_user_id);
  -- The billing module's part, looked up by name so its migrations can add or replace it in any order.
  if to_regprocedure('public.billing_forget_user(uuid)') is not null then
    execute 'select public.billing_forget_user($1)' using p_user_id;
    v_result := v_result || jsonb_build_object('billing', true);
  end if;
  -- The wallets and leagues kept for GET /api/me (emptied by the unlinking above) go with the rest.
  delete from public.account_cache where user_id = p_user_id;
  perform public.outbound_tell_erasure(p_user_id::text);
  return v_result;
end;
$$;
revoke all on function public.forget_user(uuid) from public, anon, authenticated;
grant execute on function public.forget_user(uuid) to service_role;

-- Everything stored about one user, as JSON: GET /api/me/export (the caller) and the operator's
-- export (GET /api/admin/users/{id}/export, npm run user:export). The rows as stored, every column:
-- wallet links and challenges (with the contract checks they spent), the billing ids filed under
-- the user (their own and the customer RevenueCat merged them into, as billing_forget_user erases
-- them): billing_subscribers rows, entitlement rows, sync marks and requests, every billing event
-- and snapshot with its whole stored body, oldest first; league memberships with their league.
-- Checkpoint bookkeeping (billing_subscribers.base_rows: copies of entitlement rows) is left out.
create or replace function public.account_export(p_user_id uuid)
returns jsonb
language plpgsql
stable
security definer
set search_path = ''
as $$
declare
  v_ids text[];
begin
  if p_user_id is null then
    raise exception 'invalid_request' using errcode = 'PT400', detail = 'A user id is required.';
  end if;
  v_ids := array_remove(array[p_user_id::text, (select customer_id from public.billing_subscribers where app_user_id = p_user_id::text)], null);
  return jsonb_build_object(
    'userId', p_user_id,
    'exportedAt', now(),
    'wallets', jsonb_build_object(
      'links', (select coalesce(jsonb_agg(to_jsonb(l) order by l.created_at, l.id), '[]'::jsonb) from public.wallet_links l where l.user_id = p_user_id),
      'challenges', (select coalesce(jsonb_agg(to_jsonb(c) order by c.seq), '[]'::jsonb) from public.wallet_challenges c where c.user_id = p_user_id),
      'contractChecks', (select coalesce(jsonb_agg(to_jsonb(k)), '[]'::jsonb) from public.wallet_contract_checks k where k.user_id = p_user_id)),
    'billing', jsonb_build_object(
      'ids', to_jsonb(v_ids),
      'subscribers', (select coalesce(jsonb_agg(to_jsonb(s) - 'base_rows' order by s.app_user_id), '[]'::jsonb)
                      from public.billing_subscribers s where s.app_user_id = any (v_ids)),
      'entitlements', (select coalesce(jsonb_agg(to_jsonb(e) order by e.app_user_id, e.entitlement_id, e.source_key), '[]'::jsonb)
                       from public.entitlements e where e.app_user_id = any (v_ids)),
      'syncQueue', (select coalesce(jsonb_agg(to_jsonb(q)), '[]'::jsonb) from public.billing_sync_queue q where q.app_user_id = any (v_ids)),
      'syncRequests', (select coalesce(jsonb_agg(to_jsonb(r)), '[]'::jsonb) from public.billing_sync_requests r where r.app_user_id = any (v_ids)),
      -- The same rows billing_forget_user erases (each arm an index).
      'events', (select coalesce(jsonb_agg(jsonb_build_object(
                   'eventId', e.event_id, 'type', e.type, 'appUserId', e.app_user_id, 'ownerId', e.owner_id, 'eventAt', e.event_at,
                   'receivedAt', e.received_at, 'outcome', e.outcome, 'environment', e.environment, 'body', e.body)
                   order by e.event_at, e.received_at, e.event_id), '[]'::jsonb)
                 from public.billing_events e
                 where e.subject_id = any (v_ids)
                    or (e.app_user_id = any (v_ids) and e.app_user_id is distinct from e.subject_id)
                    or (e.owner_id = any (v_ids) and e.owner_id is distinct from e.subject_id))),
    'leagues', (select coalesce(jsonb_agg(jsonb_build_object(
                  'league', to_jsonb(l), 'member', to_jsonb(m)) order by l.id, m.external_user_id), '[]'::jsonb)
                from public.league_members m join public.leagues l on l.id = m.league_id
                where m.app_user_id = p_user_id));
end;
$$;
revoke all on function public.account_export(uuid) from public, anon, authenticated;
grant execute on function public.account_export(uuid) to service_role;

-- A new auth.users row: an id erased before (public.billing_erased_ids) is the same person signing
-- up again, and billing events for it count again. Looked up by name, as forget_user does.
create or replace function public.account_user_created()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  if to_regprocedure('public.billing_unerase_user(uuid)') is not null then
    execute 'select public.billing_unerase_user($1)' using new.id;
  end if;
  return new;
end;
$$;
revoke all on function public.account_user_created() from public, anon, authenticated;
grant execute on function public.account_user_created() to service_role;

-- The ids whose entitlement rows a user reads: their own, and the customer RevenueCat merged them
-- into (billing_subscribers.customer_id), as GET /api/me reads them. Security invoker: as
-- `authenticated` the subscriber row is read under its select-own policy, so another user's id
-- yields that id alone (whose rows the caller cannot read either). An anonymous id
-- ($RCAnonymousID:...) is never signed in as: it reads its own rows only (its customer_id says
-- where a TRANSFER naming it finds the customer's purchases, not what it shows).
create or replace function public.entitlement_owner_ids(p_user_id text)
returns text[]
language plpgsql
stable
set search_path = ''
as $$
begin
  return array[p_user_id] || array(
    select s.customer_id from public.billing_subscribers s
    where s.app_user_id = p_user_id and s.customer_id is not null and not starts_with(p_user_id, '$RCAnonymousID:'));
end;
$$;
revoke all on function public.entitlement_owner_ids(text) from public, anon, authenticated;
grant execute on function public.entitlement_owner_ids(text) to authenticated, service_role, supabase_auth_admin;

-- Every source (a product's row) of the entitlements of `p_owner_ids` as of p_now: whether it grants
-- then (`grants_until`, the one rule for "grants"), its effective status (a granting status whose
-- access has ended reads `expired`), its place among its entitlement's sources (1: the one shown,
-- which grants longest, then the latest news, then renewing; last, by its keys, so that two rows
-- alike otherwise always come in one order), and whether the entitlement will renew (a source that
-- grants then renews). Security invoker: what a caller may read of the rows decides.
-- Planned once per connection (plan_cache_mode): for an array of ids Postgres never trusts the
-- generic plan (it guesses ten ids where there are one or two) and planned the query again on every
-- call, 0.07 ms of every renewal's outbound reconcile and of every account read built afresh; the
-- generic plan is the same lookup by key, and on Postgres autovacuum's ANALYZE has it made again.
-- (The embedded database never analyzes: a connection keeps the plan its first calls made, with
-- this setting or without.)
create or replace function public.entitlement_sources(p_owner_ids text[], p_now timestamptz)
returns table (
  entitlement_id text, place bigint, grants_now boolean, effective_status text, entitlement_renews boolean,
  product_id text, pending_product_id text, store text, environment text, period_type text, will_renew boolean,
  expires_at timestamptz, grace_expires_at timestamptz, last_event_at timestamptz, synced_at timestamptz
)
language plpgsql
stable
set search_path = ''
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
begin
  return query
  select e.entitlement_id,
         row_number() over (partition by e.entitlement_id
                            order by e.grants_until desc, e.last_event_at desc, e.will_renew desc, e.source_key, e.app_user_id),
         e.grants_until > p_now,
         case when e.grants_until <= p_now and e.status in ('active', 'cancelled_active', 'temporary', 'billing_issue', 'grace')
              then 'expired' else e.status end,
         bool_or(e.grants_until > p_now and e.will_renew) over (partition by e.entitlement_id),
         e.product_id, e.pending_product_id, e.store, e.environment, e.period_type, e.will_renew,
         e.expires_at, e.grace_expires_at, e.last_event_at, e.synced_at
  from public.entitlements e
  where e.app_user_id = any (p_owner_ids);
end;
$$;
revoke all on function public.entitlement_sources(text[],timestamp with time zone) from public, anon, authenticated;
grant execute on function public.entitlement_sources(text[],timestamp with time zone) to authenticated, service_role;

-- A user's leagues (not deleted), with their role in each: a user linked to two members of one
-- league gets the league once, as commissioner if either is. Security invoker, like the above.
create or replace function public.member_leagues(p_user_id uuid)
returns table (source text, external_id text, name text, sport text, season text, status text, role text, updated_at timestamptz)
language plpgsql
stable
set search_path = ''
as $$
begin
  return query
  select l.source, l.external_id, l.name, l.sport, l.season, l.status, r.member_role, l.updated_at
  from (
    select m.league_id,
           case when bool_or(m.role = 'commissioner') then 'commissioner' else 'member' end as member_role
    from public.league_members m
    where m.app_user_id = p_user_id
    group by m.league_id
  ) r
  join public.leagues l on l.id = r.league_id
  where l.deleted_at is null;
end;
$$;
revoke all on function public.member_leagues(uuid) from public, anon, authenticated;
grant execute on function public.member_leagues(uuid) to authenticated, service_role;

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
revoke all on function public.has_entitlement(text) from public, anon, authenticated;
grant execute on function public.has_entitlement(text) to authenticated, service_role;

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
revoke all on function public.custom_access_token_hook(jsonb) from public, anon, authenticated, service_role;
grant execute on function public.custom_access_token_hook(jsonb) to supabase_auth_admin;

-- Live updates from the database: a change to what a user reads in GET /api/me (their entitlements,
-- wallet links or leagues) sends them a private Supabase Realtime broadcast, so the app refetches
-- without polling.
--
--   topic   'user:<user id>' (the Supabase user id, lower-case)
--   event   'account_changed'
--   payload { "what": "entitlements" | "wallets" | "leagues", "at": "<ISO time of the change>" }
--           (Realtime adds an "id"); nothing of the rows, no secrets: the app reads them itself.
--
-- Sent by `realtime.send(payload, event, topic, private => true)` (Supabase's "Broadcast from the
-- database": the message is a row of realtime.messages, delivered once the transaction commits,
-- never if it rolls back), from statement-level AFTER triggers that read the statement's changed
-- rows from its transition tables: one trigger call per statement, however many rows it touched (a
-- refold rewrites a customer's rows in a few statements). A user gets ONE broadcast per kind of
-- change per transaction: later statements of the same transaction that touch the same user's rows
-- again send nothing more (remembered in a transaction-local setting).
--
-- Where the `realtime` schema does not exist (embedded, plain Postgres) the same migrations apply,
-- the triggers exist, and each returns after one catalog lookup, before reading any row: nothing is
-- sent. The policy that lets a user receive their own topic is made only where realtime.messages
-- exists (add it by hand, from docs/app-reads.md, if Realtime comes later).
--
-- Whether broadcasts can be sent here: Supabase's realtime.send exists and may be called. Catalog
-- lookups only (no privilege error can come from asking).
create or replace function public.can_broadcast()
returns boolean
language plpgsql
stable
security definer
set search_path = ''
as $$
declare
  v_schema oid := to_regnamespace('realtime');
  v_send regprocedure;
begin
  if v_schema is null or not has_schema_privilege(v_schema, 'usage') then
    return false;
  end if;
  v_send := to_regprocedure('realtime.send(jsonb, text, text, boolean)');
  return v_send is not null and has_function_privilege(v_send, 'execute');
end;
$$;
revoke all on function public.can_broadcast() from public, anon, authenticated;
grant execute on function public.can_broadcast() to service_role;

-- Send 'account_changed' ({ what, at }) to each user of p_user_ids (ids that are not a lower-case
-- uuid are no Supabase user: RevenueCat's anonymous ids, custom app user ids), once per transaction
-- for each (what, user). Called by the triggers below after can_broadcast().
create or replace function public.send_account_changed(p_what text, p_user_ids text[])
returns void
language plpgsql
security definer
set search_path = ''
as $$
declare
  v_sent jsonb := coalesce(nullif(current_setting('account_link.account_changed', true), ''), '{}')::jsonb;
  v_users text[];
  v_user text;
  v_payload jsonb;
begin
  v_users := array(
    select distinct id from unnest(p_user_ids) as ids(id)
    where public.is_user_id(id) and not v_sent ? (p_what || ' ' || id));
  if cardinality(v_users) = 0 then
    return;
  end if;
  v_payload := jsonb_build_object('what', p_what, 'at', to_char(now() at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'));
  foreach v_user in array v_users loop
    perform realtime.send(v_payload, 'account_changed', 'user:' || v_user, true);
  end loop;
  perform set_config('account_link.account_changed',
    (v_sent || (select jsonb_object_agg(p_what || ' ' || u, true) from unnest(v_users) as u))::text, true);
end;
$$;
revoke all on function public.send_account_changed(text,text[]) from public, anon, authenticated;
grant execute on function public.send_account_changed(text,text[]) to service_role;

-- The users whose rows a statement changed, told `what` changed: TG_ARGV[0] is the kind of change,
-- TG_ARGV[1] the column that holds the user's id. The rows are read from the statement's transition
-- tables (new_rows for an insert, old_rows for a delete, both for an update). (Entitlements have
-- their own trigger, public.entitlements_changed in 10_events.sql: their readers include the ids
-- merged into a row's owner, and are noted for outbound events too.)
create or replace function public.account_rows_broadcast()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
declare
  v_what text := tg_argv[0];
  v_rows text;
  v_ids text[];
begin
  if not public.can_broadcast() then
    return null;
  end if;
  v_rows := case tg_op when 'INSERT' then 'select %1$I::text as id from new_rows'
                       when 'DELETE' then 'select %1$I::text as id from old_rows'
                       else 'select %1$I::text as id from new_rows union select %1$I::text from old_rows' end;
  execute format('select array(select distinct id from (' || v_rows || ') r where id is not null)', tg_argv[1]) into v_ids;
  perform public.send_account_changed(v_what, v_ids);
  return null;
end;
$$;
revoke all on function public.account_rows_broadcast() from public, anon, authenticated;
grant execute on function public.account_rows_broadcast() to service_role;

-- billing_subscribers: an id merged into another customer (or unmerged by a refold) reads other
-- rows from now on. Rare, so a row trigger, and only when customer_id changed.
create or replace function public.billing_subscribers_broadcast()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  if public.can_broadcast() then
    perform public.send_account_changed('entitlements', array[new.app_user_id]);
  end if;
  return null;
end;
$$;
revoke all on function public.billing_subscribers_broadcast() from public, anon, authenticated;
grant execute on function public.billing_subscribers_broadcast() to service_role;

-- A league's members, when its snapshot changed.
create or replace function public.leagues_broadcast()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  if not public.can_broadcast() then
    return null;
  end if;
  perform public.send_account_changed('leagues', array(
    select distinct m.app_user_id::text from public.league_members m
    where m.league_id in (select id from old_rows) and m.app_user_id is not null));
  return null;
end;
$$;
revoke all on function public.leagues_broadcast() from public, anon, authenticated;
grant execute on function public.leagues_broadcast() to service_role;

create trigger wallets_delete_user_rows
after delete on auth.users
for each row execute function public.wallets_delete_user_rows();

create trigger account_user_created
after insert on auth.users
for each row execute function public.account_user_created();

create policy billing_subscribers_select_own on public.billing_subscribers
  for select to authenticated
  using (app_user_id = (select auth.uid())::text);

create policy entitlements_select_own on public.entitlements
  for select to authenticated
  using (app_user_id = any ((select public.entitlement_owner_ids((select auth.uid())::text))::text[]));

create policy wallet_links_select_own on public.wallet_links
  for select to authenticated
  using (user_id = (select auth.uid()));

create policy league_members_select_own on public.league_members
  for select to authenticated
  using (app_user_id = (select auth.uid()));

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

create policy billing_subscribers_read_by_auth on public.billing_subscribers
  for select to supabase_auth_admin
  using (true);

create policy entitlements_read_by_auth on public.entitlements
  for select to supabase_auth_admin
  using (true);

create trigger wallet_links_broadcast_insert after insert on public.wallet_links
  referencing new table as new_rows for each statement execute function public.account_rows_broadcast('wallets', 'user_id');

create trigger wallet_links_broadcast_update after update on public.wallet_links
  referencing old table as old_rows new table as new_rows for each statement execute function public.account_rows_broadcast('wallets', 'user_id');

create trigger wallet_links_broadcast_delete after delete on public.wallet_links
  referencing old table as old_rows for each statement execute function public.account_rows_broadcast('wallets', 'user_id');

-- Leagues: the members linked to an app user whose membership changed (here), and the members of a
-- league whose snapshot changed, its name, status or season, or its deletion (below).
create trigger league_members_broadcast_insert after insert on public.league_members
  referencing new table as new_rows for each statement execute function public.account_rows_broadcast('leagues', 'app_user_id');

create trigger league_members_broadcast_update after update on public.league_members
  referencing old table as old_rows new table as new_rows for each statement execute function public.account_rows_broadcast('leagues', 'app_user_id');

create trigger league_members_broadcast_delete after delete on public.league_members
  referencing old table as old_rows for each statement execute function public.account_rows_broadcast('leagues', 'app_user_id');

create trigger billing_subscribers_broadcast after update of customer_id on public.billing_subscribers
  for each row when (old.customer_id is distinct from new.customer_id) execute function public.billing_subscribers_broadcast();

-- (A league is inserted before its members are: the members' insert tells them.)
create trigger leagues_broadcast_update after update on public.leagues
  referencing old table as old_rows for each statement execute function public.leagues_broadcast();

create trigger leagues_broadcast_delete after delete on public.leagues
  referencing old table as old_rows for each statement execute function public.leagues_broadcast();

-- Who executes what. The views and the functions they read through: signed-in users (the service
-- role reads through get_account_json). has_entitlement: signed-in users and the service role. The hook:
-- Supabase Auth alone. On Supabase, default privileges hand every new object to anon and
-- authenticated: everything is revoked first.
revoke all on public.my_entitlements, public.my_wallet_links, public.my_leagues from public, anon, authenticated, service_role;
grant select on public.my_entitlements, public.my_wallet_links, public.my_leagues to authenticated;

-- What the access-token hook reads, for supabase_auth_admin (Supabase Auth's role; it has no BYPASSRLS).
grant usage on schema public to supabase_auth_admin;

-- Who receives a topic: a signed-in user, their own (`user:<their id>`) and no other. Realtime asks
-- when a client joins a private channel, as the client's role with realtime.topic() set to the
-- channel's topic (https://supabase.com/docs/guides/realtime/authorization). On Supabase the
-- migrating role may add policies to realtime.messages; where it may not (a self-hosted Realtime
-- whose owner is another role), the rest applies and a warning says to add it as that owner: the
-- broadcasts are sent either way, and clients receive them once the policy exists.
do $$
begin
  if to_regclass('realtime.messages') is not null then
    begin
      create policy account_changed_own_topic on realtime.messages
        for select to authenticated
        using ((select realtime.topic()) = 'user:' || (select auth.uid())::text and realtime.messages.topic = (select realtime.topic()));
    exception when insufficient_privilege then
      raise warning 'account_changed_own_topic: no right to add a policy to realtime.messages here; add it as its owner (docs/app-reads.md, Live updates)';
    end;
  end if;
end;
$$;
