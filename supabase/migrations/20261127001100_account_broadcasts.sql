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
    where id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' and not v_sent ? (p_what || ' ' || id));
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

-- The users whose rows a statement changed, told `what` changed: TG_ARGV[0] is the kind of change,
-- TG_ARGV[1] the column that holds the user's id. The rows are read from the statement's transition
-- tables (new_rows for an insert, old_rows for a delete, both for an update). For entitlements, the
-- ids merged into a changed row's owner read it too (billing_subscribers.customer_id).
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
  if v_what = 'entitlements' and cardinality(v_ids) > 0 then
    v_ids := v_ids || array(select s.app_user_id from public.billing_subscribers s where s.customer_id = any (v_ids));
  end if;
  perform public.send_account_changed(v_what, v_ids);
  return null;
end;
$$;

create trigger entitlements_broadcast_insert after insert on public.entitlements
  referencing new table as new_rows for each statement execute function public.account_rows_broadcast('entitlements', 'app_user_id');
create trigger entitlements_broadcast_update after update on public.entitlements
  referencing old table as old_rows new table as new_rows for each statement execute function public.account_rows_broadcast('entitlements', 'app_user_id');
create trigger entitlements_broadcast_delete after delete on public.entitlements
  referencing old table as old_rows for each statement execute function public.account_rows_broadcast('entitlements', 'app_user_id');

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

create trigger billing_subscribers_broadcast after update of customer_id on public.billing_subscribers
  for each row when (old.customer_id is distinct from new.customer_id) execute function public.billing_subscribers_broadcast();

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

-- (A league is inserted before its members are: the members' insert tells them.)
create trigger leagues_broadcast_update after update on public.leagues
  referencing old table as old_rows for each statement execute function public.leagues_broadcast();
create trigger leagues_broadcast_delete after delete on public.leagues
  referencing old table as old_rows for each statement execute function public.leagues_broadcast();

do $$
declare
  v_fn text;
begin
  foreach v_fn in array array[
    'public.can_broadcast()', 'public.send_account_changed(text, text[])', 'public.account_rows_broadcast()',
    'public.billing_subscribers_broadcast()', 'public.leagues_broadcast()'
  ] loop
    execute format('revoke all on function %s from public, anon, authenticated', v_fn);
    execute format('grant execute on function %s to service_role', v_fn);
  end loop;
end;
$$;

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
