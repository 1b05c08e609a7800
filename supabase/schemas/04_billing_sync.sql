-- Billing, syncs from RevenueCat's REST API: the queue of subscribers to refresh, the pace shared by
-- every instance, user-requested refreshes and the runs' records, and the calls that turn a
-- subscriber's record into a snapshot event the fold applies like any other. docs/sync.md.

-- Subscribers to fetch from RevenueCat's REST API (lib/billing/sync.ts): marked by the webhook in
-- the same transaction as an event that cannot say everything (a TRANSFER, a refund, a product or
-- entitlement not seen before; every event with BILLING_SYNC_AFTER=all), cleared by the snapshot
-- that answers it. The sweep (GET /api/cron/billing-sync) works through what is due.
create table public.billing_sync_queue (
  app_user_id text primary key check (char_length(app_user_id) between 1 and 256),
  reason text not null,
  requested_at timestamptz not null default now(),
  attempts integer not null default 0,
  -- Not before this (a failure's backoff, or a sweep's lease while it works on it).
  next_attempt_at timestamptz not null default now(),
  last_error text
);
alter table public.billing_sync_queue enable row level security;
create index billing_sync_queue_due_idx on public.billing_sync_queue (next_attempt_at);
create index if not exists billing_sync_queue_app_user_id_c_idx on public.billing_sync_queue (app_user_id collate "C");
revoke all on table public.billing_sync_queue from public, anon, authenticated;

-- The calls every instance makes to RevenueCat share one budget: the next free slot, for the
-- sweep's calls and for the refreshes users ask for.
create table public.billing_sync_rate (
  id boolean primary key default true check (id),
  next_slot_at timestamptz not null default '-infinity',
  user_next_slot_at timestamptz not null default '-infinity'
);
alter table public.billing_sync_rate enable row level security;
revoke all on table public.billing_sync_rate from public, anon, authenticated;

-- The one row of the shared pace.
insert into public.billing_sync_rate default values;

-- When each user last asked for a refresh (POST /api/me/billing/sync), and the per-user day: when
-- its window started and how many refreshes reached RevenueCat in it.
create table public.billing_sync_requests (
  app_user_id text primary key check (char_length(app_user_id) between 1 and 256),
  requested_at timestamptz not null,
  day_started_at timestamptz,
  day_count integer not null default 0 check (day_count >= 0)
);
alter table public.billing_sync_requests enable row level security;
revoke all on table public.billing_sync_requests from public, anon, authenticated;

-- Where a resumable run (npm run billing:sync -- --all) got to.
create table public.billing_sync_runs (
  name text primary key,
  last_id text,
  updated_at timestamptz not null default now()
);
alter table public.billing_sync_runs enable row level security;
revoke all on table public.billing_sync_runs from public, anon, authenticated;

-- A sync that failed (RevenueCat down, slow or refusing): leave the subscriber marked, due again
-- after p_retry_after_seconds or a backoff that doubles per attempt (1 minute to 6 hours).
create or replace function public.billing_sync_failed(p_app_user_id text, p_reason text, p_error text, p_retry_after_seconds integer)
returns void
language sql
volatile
security definer
set search_path = ''
as $$
  insert into public.billing_sync_queue (app_user_id, reason, attempts, next_attempt_at, last_error)
  values (p_app_user_id, p_reason, 1, now() + make_interval(secs => greatest(coalesce(p_retry_after_seconds, 0), 60)), left(p_error, 500))
  on conflict (app_user_id) do update set
    attempts = public.billing_sync_queue.attempts + 1,
    next_attempt_at = now() + make_interval(secs => greatest(coalesce(p_retry_after_seconds, 0),
                                                             least(21600, 60 * power(2, least(public.billing_sync_queue.attempts, 10)))::integer)),
    last_error = left(p_error, 500)
$$;
revoke all on function public.billing_sync_failed(text,text,text,integer) from public, anon, authenticated;
grant execute on function public.billing_sync_failed(text,text,text,integer) to service_role;

-- Record a snapshot of RevenueCat's record for p_plan.appUserId (lib/billing/snapshot.ts) and fold
-- it like an event, then clear the marks it answers (those made before the fetch began). Returns
-- {outcome, ownerId, entitlements}: the synced id's entitlements as GET /api/me shows them.
--
-- Record a snapshot of RevenueCat's record for p_plan.appUserId (lib/billing/snapshot.ts) and fold
-- it like an event, then clear the marks it answers (those made before the fetch began). A snapshot
-- that says what the group's last entry, a snapshot after its checkpoint, said (the same plan but
-- for its id and time) is not stored: that one is confirmed at this one's time instead, and so are
-- the rows it wrote (synced_at shows that time, as if it had been stored). Returns {outcome, ownerId,
-- entitlements}: the synced id's entitlements as GET /api/me shows them; outcome stale when nothing changed.
create or replace function public.record_billing_snapshot(p_body jsonb, p_plan jsonb, p_fetch_started_at timestamptz)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_app_user_id text := p_plan->>'appUserId';
  v_at timestamptz;
  v_group text;
  v_folded text;
  v_last record;
  v_result jsonb;
begin
  if v_app_user_id is null or p_plan->>'eventId' not like 'sync:%' or p_plan->>'eventAt' is null
     or jsonb_typeof(p_plan->'snapshot'->'sources') is distinct from 'array'
     -- v1's record (`subscriber`, v2's items beside it under `v2`), or v2's alone (`v2`): lib/billing/sync.ts.
     or (jsonb_typeof(p_body->'subscriber') is distinct from 'object' and jsonb_typeof(p_body->'v2') is distinct from 'object') then
    raise exception 'invalid_request' using errcode = 'PT400', detail = 'The billing snapshot plan does not match the body.';
  end if;
  v_at := (p_plan->>'eventAt')::timestamptz;
  -- An erased id's record is not stored again (public.billing_erased_event).
  if public.billing_ids_erased(v_app_user_id || array(select jsonb_array_elements_text(coalesce(p_plan->'linkedIds', '[]'::jsonb)))) then
    delete from public.billing_sync_queue where app_user_id = v_app_user_id;
    return jsonb_build_object('outcome', 'ignored', 'ownerId', null, 'entitlements', '[]'::jsonb);
  end if;

  v_group := public.billing_lock_group(array(select jsonb_array_elements_text(coalesce(p_plan->'linkedIds', '[]'::jsonb))));
  select folded_key into v_folded from public.billing_subscribers where app_user_id = v_group;
  -- The group's last entry (its watermark names it), when that is a snapshot.
  select e.event_id, e.received_at, e.owner_id into v_last
  from public.billing_events e
  where public.billing_key_event(v_folded) like 'sync:%' and e.event_id = public.billing_key_event(v_folded)
    and public.billing_sort_key(e.event_at, e.sort_rank, e.event_id) = v_folded
    and (e.plan - 'eventId' - 'eventAt') = (p_plan - 'eventId' - 'eventAt')
    and public.billing_sort_key(v_at, coalesce((p_plan->>'rank')::smallint, 1::smallint), p_plan->>'eventId') collate "C" > v_folded collate "C"
    and not exists (select 1 from public.billing_subscribers s where s.group_id = v_group and s.base_key collate "C" >= v_folded collate "C")
  limit 1;
  if v_last.event_id is not null then
    update public.billing_events set confirmed_at = greatest(confirmed_at, v_at)
    where event_id = v_last.event_id and received_at = v_last.received_at;
    update public.entitlements set synced_at = v_at
    where app_user_id in (select s.app_user_id from public.billing_subscribers s where s.group_id = v_group)
      and last_event_id = v_last.event_id and synced_at is distinct from v_at;
    v_result := jsonb_build_object('outcome', 'stale', 'ownerId', v_last.owner_id);
  else
    v_result := public.billing_log_and_fold(p_body, p_plan);
  end if;
  delete from public.billing_sync_queue where app_user_id = v_app_user_id and requested_at <= p_fetch_started_at;
  return jsonb_build_object('outcome', v_result->>'outcome', 'ownerId', v_result->>'ownerId',
                            'entitlements', public.account_entitlements(v_app_user_id, now()));
end;
$$;
revoke all on function public.record_billing_snapshot(jsonb,jsonb,timestamp with time zone) from public, anon, authenticated;
grant execute on function public.record_billing_snapshot(jsonb,jsonb,timestamp with time zone) to service_role;

-- A sync that found RevenueCat has no record of the id (v1 answered 201: it created an empty
-- customer just now): nothing to fold, but the marks it answers are done. Returns the id's
-- entitlements as GET /api/me shows them.
create or replace function public.billing_sync_found_nothing(p_app_user_id text, p_fetch_started_at timestamptz)
returns jsonb
language sql
volatile
security definer
set search_path = ''
as $$
  with cleared as (
    delete from public.billing_sync_queue where app_user_id = p_app_user_id and requested_at <= p_fetch_started_at
  )
  select public.account_entitlements(p_app_user_id, now())
$$;
revoke all on function public.billing_sync_found_nothing(text,timestamp with time zone) from public, anon, authenticated;
grant execute on function public.billing_sync_found_nothing(text,timestamp with time zone) to service_role;

-- Whether RevenueCat told this service about the id (an event named it), so a sync may ask for it
-- without creating a customer (v1 creates unknown ones).
create or replace function public.billing_subscriber_known(p_app_user_id text)
returns boolean
language sql
stable
security definer
set search_path = ''
as $$
  select exists (select 1 from public.billing_subscribers where app_user_id = p_app_user_id)
      or exists (select 1 from public.entitlements where app_user_id = p_app_user_id)
$$;
revoke all on function public.billing_subscriber_known(text) from public, anon, authenticated;
grant execute on function public.billing_subscriber_known(text) to service_role;

-- The sweep's work: mark known subscribers whose access ends within a day or ended in the last
-- three days (a renewal, a recovery in grace, an uncancellation or the real purchase after a
-- temporary grant may be lost: every status that grants for a while, renewing or not) and that no
-- snapshot confirmed in the last 12 hours, and those never synced or not for 30 days that still
-- grant; at most p_limit. Then claim up to p_limit due marks (oldest first) with a lease, so two
-- sweeps at once never take the same subscriber. Returns the claimed ids.
create or replace function public.billing_sync_claim(p_limit integer, p_lease_seconds integer)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_claimed jsonb;
begin
  insert into public.billing_sync_queue (app_user_id, reason)
  select distinct e.app_user_id, 'ends_soon'
  from public.entitlements e
  where e.status in ('active', 'cancelled_active', 'temporary', 'billing_issue', 'grace')
    and e.grants_until between now() - interval '3 days' and now() + interval '1 day'
    and coalesce(e.synced_at, '-infinity') < now() - interval '12 hours'
  limit p_limit
  on conflict (app_user_id) do nothing;
  insert into public.billing_sync_queue (app_user_id, reason)
  select distinct e.app_user_id, 'stale'
  from public.entitlements e
  where e.grants_until > now() and coalesce(e.synced_at, '-infinity') < now() - interval '30 days'
    and not exists (select 1 from public.billing_sync_queue q where q.app_user_id = e.app_user_id)
  limit p_limit
  on conflict (app_user_id) do nothing;

  with claimed as (
    update public.billing_sync_queue q set next_attempt_at = now() + make_interval(secs => p_lease_seconds)
    where q.app_user_id = any (array(
      select app_user_id from public.billing_sync_queue
      where next_attempt_at <= now()
      order by next_attempt_at, app_user_id
      limit p_limit
      for update skip locked))
    returning q.app_user_id, q.reason
  )
  select coalesce(jsonb_agg(jsonb_build_object('appUserId', app_user_id, 'reason', reason) order by app_user_id), '[]'::jsonb)
  into v_claimed from claimed;
  return jsonb_build_object('claimed', v_claimed, 'due', (select count(*) from public.billing_sync_queue where next_attempt_at <= now()));
end;
$$;
revoke all on function public.billing_sync_claim(integer,integer) from public, anon, authenticated;
grant execute on function public.billing_sync_claim(integer,integer) to service_role;

-- npm run billing:rebuild: fold one customer's history again with plans the current decision code
-- computed (p_plans: [{eventId, plan}] for its events), and report the rows before and after.
-- Applied, or (p_apply false) rolled back, so a dry run shows exactly what --apply would write.
-- Takes the group's lock like a webhook, so it is safe while deliveries keep arriving.
create or replace function public.billing_rebuild_group(p_ids jsonb, p_plans jsonb, p_apply boolean)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_group text;
  v_before jsonb;
  v_after jsonb;
begin
  v_group := public.billing_lock_group(array(select jsonb_array_elements_text(p_ids)));
  v_before := public.billing_group_rows(v_group);
  begin
    perform public.billing_store_plans(p_plans);
    perform public.billing_refold_group(v_group, '');
    v_after := public.billing_group_rows(v_group);
    if not p_apply then
      raise exception 'billing_rebuild_dry_run';
    end if;
  exception when raise_exception then
    if sqlerrm <> 'billing_rebuild_dry_run' then raise; end if;
  end;
  return jsonb_build_object('groupId', v_group, 'before', v_before, 'after', v_after);
end;
$$;
revoke all on function public.billing_rebuild_group(jsonb,jsonb,boolean) from public, anon, authenticated;
grant execute on function public.billing_rebuild_group(jsonb,jsonb,boolean) to service_role;

-- The rows of a group as the rebuild compares them (without bookkeeping columns). Which purchase a
-- row is counts (its source key, and the purchase's id for people): a rebuild that keys a row
-- anew (a row kept from before sources were purchases, which stood for every purchase of its
-- product) reports it.
create or replace function public.billing_group_rows(p_group text)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select coalesce(jsonb_agg(jsonb_build_object(
    'appUserId', e.app_user_id, 'entitlementId', e.entitlement_id, 'productId', e.product_id, 'environment', e.environment,
    'sourceKey', e.source_key, 'purchase', coalesce(e.original_transaction_id, e.transaction_id),
    'status', e.status, 'willRenew', e.will_renew, 'expiresAt', e.expires_at, 'graceExpiresAt', e.grace_expires_at)
    order by e.app_user_id collate "C", e.entitlement_id collate "C", e.source_key), '[]'::jsonb)
  from public.entitlements e
  where e.app_user_id in (select s.app_user_id from public.billing_subscribers s where s.group_id = p_group)
$$;
revoke all on function public.billing_group_rows(text) from public, anon, authenticated;
grant execute on function public.billing_group_rows(text) to service_role;

-- npm run billing:sync -- --all: the subscribers that hold rows or are marked, a page at a time in
-- id order after p_after (the run's saved place, so it can resume).
create or replace function public.billing_subscribers_page(p_after text, p_limit integer)
returns jsonb
language sql
stable
security definer
set search_path = ''
as $$
  select coalesce(jsonb_agg(id order by id collate "C"), '[]'::jsonb)
  from (
    select id from (
      (select distinct e.app_user_id collate "C" as id from public.entitlements e
       where e.status <> 'transferred' and e.app_user_id collate "C" > coalesce(p_after, '') collate "C"
       order by 1
       limit p_limit)
      union
      (select q.app_user_id collate "C" from public.billing_sync_queue q
       where q.app_user_id collate "C" > coalesce(p_after, '') collate "C"
       order by 1
       limit p_limit)
    ) ids
    order by id collate "C"
    limit p_limit
  ) page
$$;
revoke all on function public.billing_subscribers_page(text,integer) from public, anon, authenticated;
grant execute on function public.billing_subscribers_page(text,integer) to service_role;

create or replace function public.billing_subscribers_count()
returns integer
language sql
stable
security definer
set search_path = ''
as $$
  select count(*)::integer from (
    select app_user_id from public.entitlements where status <> 'transferred'
    union
    select app_user_id from public.billing_sync_queue
  ) ids
$$;
revoke all on function public.billing_subscribers_count() from public, anon, authenticated;
grant execute on function public.billing_subscribers_count() to service_role;

create or replace function public.billing_sync_run_place(p_name text, p_last_id text, p_save boolean)
returns text
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  if p_save then
    insert into public.billing_sync_runs (name, last_id) values (p_name, p_last_id)
    on conflict (name) do update set last_id = excluded.last_id, updated_at = now();
  end if;
  return (select last_id from public.billing_sync_runs where name = p_name);
end;
$$;
revoke all on function public.billing_sync_run_place(text,text,boolean) from public, anon, authenticated;
grant execute on function public.billing_sync_run_place(text,text,boolean) to service_role;

-- Deleting a user (public.forget_user, called when an auth.users row goes): their entitlements and
-- sync marks are deleted; their billing events and snapshots stay only as what deduplication needs
-- (the event id and type, so a RevenueCat retry of one never applies again) and leave every fold:
-- bodies (subscriber attributes, e-mail, aliases, products, prices) and plans are erased, and the
-- ids they were filed under are cleared. The ids are listed as erased (billing_erased_ids): later
-- events about them keep nothing and grant nothing. RevenueCat keeps its own record: the service
-- deletes it there when the operator opted in (billing_revenuecat_deletions).
create or replace function public.billing_forget_user(p_user_id uuid)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  -- The user's id, and the id that holds their rows when RevenueCat merged theirs into it.
  v_ids text[] := array_remove(array[p_user_id::text, (select customer_id from public.billing_subscribers where app_user_id = p_user_id::text)], null);
  v_rows integer;
  v_events integer;
begin
  delete from public.entitlements where app_user_id = any (v_ids);
  get diagnostics v_rows = row_count;
  -- The erased ids' own rows point at no customer any more (now and in their checkpoints): should
  -- the same id sign up again (public.billing_unerase_user), its events are its own, never those of
  -- the customer it was merged into.
  update public.billing_subscribers set base_rows = case when base_rows is not null then '[]'::jsonb end, customer_id = null, base_customer = null
  where app_user_id = any (v_ids) and (base_rows is not null or customer_id is not null or base_customer is not null);
  -- Another id RevenueCat merged into the user's (legacy aliasing: the user held its rows) holds its
  -- own again, now and in its group's checkpoints: an event naming only that id is its own, never
  -- the erased user's, whose rows, events and outbound events end here (customer.deleted is their
  -- last). An event that names the erased id too still keeps nothing and grants nothing (below).
  update public.billing_subscribers s set
    customer_id = case when s.customer_id = any (v_ids) then null else s.customer_id end,
    base_customer = case when s.base_customer = any (v_ids) then null else s.base_customer end
  where s.group_id in (select g.group_id from public.billing_subscribers g where g.app_user_id = any (v_ids))
    and not s.app_user_id = any (v_ids)
    and (s.customer_id = any (v_ids) or s.base_customer = any (v_ids));
  delete from public.billing_sync_queue where app_user_id = any (v_ids);
  delete from public.billing_sync_requests where app_user_id = any (v_ids);
  update public.billing_events set
    body = jsonb_build_object('event', jsonb_build_object('id', event_id, 'type', type)),
    plan = null,
    subject_id = null,
    app_user_id = null,
    owner_id = null,
    moved_ids = '{}'
  -- The same rows as "subject_id, app_user_id or owner_id is one of v_ids", each arm an index:
  -- an event's app_user_id and owner are nearly always its subject, so only the events where they
  -- are not are indexed by them.
  where subject_id = any (v_ids)
     or (app_user_id = any (v_ids) and app_user_id is distinct from subject_id)
     or (owner_id = any (v_ids) and owner_id is distinct from subject_id);
  get diagnostics v_events = row_count;
  -- Erased for good: later events and syncs naming these ids keep nothing and grant nothing.
  insert into public.billing_erased_ids (id_hash)
  select public.billing_id_hash(id) from unnest(v_ids) as ids(id)
  on conflict (id_hash) do update set erased_at = now();
  -- RevenueCat's own record of the customer: the service deletes it there when the operator opted
  -- in (REVENUECAT_DELETE_ON_ERASE), and drops the row otherwise (lib/billing/erasure.ts).
  insert into public.billing_revenuecat_deletions (app_user_id) values (p_user_id::text)
  on conflict (app_user_id) do nothing;
  return jsonb_build_object('entitlements', v_rows, 'billingEventsErased', v_events);
end;
$$;
revoke all on function public.billing_forget_user(uuid) from public, anon, authenticated;
grant execute on function public.billing_forget_user(uuid) to service_role;

-- Erasure that lasts. RevenueCat keeps renewing a deleted user's store subscription (deleting an
-- account cancels nothing at the store), and each renewal names the same app user id again, with
-- subscriber_attributes ($email...). Every id billing_forget_user erased is listed here as the
-- sha256 of the id (never the id itself) with the time of the erasure; an event or a sync that
-- names a listed id is answered as usual, stored without personal data and grants nothing
-- (public.billing_erased_event). A new auth.users row with the same id lifts it (07_account.sql,
-- public.billing_unerase_user): "until the same person signs up again". docs/security.md.
create table public.billing_erased_ids (
  id_hash bytea primary key,
  erased_at timestamptz not null default now()
);
alter table public.billing_erased_ids enable row level security;
revoke all on table public.billing_erased_ids from public, anon, authenticated;

-- The key of an id in billing_erased_ids: sha256 of its UTF-8 text.
create or replace function public.billing_id_hash(p_id text)
returns bytea
language plpgsql
immutable
set search_path = ''
as $$
begin
  return pg_catalog.sha256(pg_catalog.convert_to(p_id, 'UTF8'));
end;
$$;
revoke all on function public.billing_id_hash(text) from public, anon, authenticated;
grant execute on function public.billing_id_hash(text) to service_role;

-- Whether any of these ids was erased (and not lifted since).
create or replace function public.billing_ids_erased(p_ids text[])
returns boolean
language plpgsql
stable
set search_path = ''
as $$
begin
  return exists (
    select 1 from public.billing_erased_ids
    -- (billing_id_hash's rule written in: every billing event asks this for each id it names, and a
    -- call of that function per id cost more than the check itself.)
    where id_hash = any (array(select sha256(convert_to(id, 'UTF8')) from unnest(p_ids) as ids(id) where id is not null)));
end;
$$;
revoke all on function public.billing_ids_erased(text[]) from public, anon, authenticated;
grant execute on function public.billing_ids_erased(text[]) to service_role;

-- Whether a webhook event names an erased id: app_user_id, original_app_user_id, aliases,
-- transferred_from, transferred_to, or any id of its plan.
create or replace function public.billing_event_names_erased(p_body jsonb, p_plan jsonb)
returns boolean
language plpgsql
stable
set search_path = ''
as $$
begin
  return public.billing_ids_erased(array(
    select p_body->'event'->>'app_user_id'
    union all select p_body->'event'->>'original_app_user_id'
    union all select p_plan->>'appUserId'
    union all select p_plan->>'subjectId'
    union all
    select jsonb_array_elements_text(case when jsonb_typeof(p_body->'event'->f) = 'array' then p_body->'event'->f else '[]'::jsonb end)
    from unnest(array['aliases', 'transferred_from', 'transferred_to']) as fields(f)
    union all
    select jsonb_array_elements_text(case when jsonb_typeof(p_plan->f) = 'array' then p_plan->f else '[]'::jsonb end)
    from unnest(array['linkedIds', 'ownerCandidates', 'movedIds']) as fields(f)));
end;
$$;
revoke all on function public.billing_event_names_erased(jsonb,jsonb) from public, anon, authenticated;
grant execute on function public.billing_event_names_erased(jsonb,jsonb) to service_role;

-- A webhook event as record_billing_event stores and applies it: unchanged, unless it names an
-- erased id (public.billing_event_names_erased). Then the body keeps only the event's id, type,
-- time and environment (what deduplication, ordering and the log need; every id, subscriber
-- attribute, transaction id, product, price, country and store detail is dropped) and the plan is
-- an ignored one (reason `erased`) that names no id, owner or effect: the event is logged as
-- ignored, filed under no one.
create or replace function public.billing_erased_event(p_body jsonb, p_plan jsonb)
returns table (body jsonb, plan jsonb)
language plpgsql
stable
set search_path = ''
as $$
declare
  v_event jsonb := p_body->'event';
begin
  if not public.billing_event_names_erased(p_body, p_plan) then
    return query select p_body, p_plan;
    return;
  end if;
  return query select
    jsonb_build_object('event', jsonb_strip_nulls(jsonb_build_object(
      'id', v_event->'id', 'type', v_event->'type', 'event_timestamp_ms', v_event->'event_timestamp_ms', 'environment', v_event->'environment'))),
    jsonb_build_object(
      'eventId', p_plan->'eventId', 'type', p_plan->'type', 'appUserId', null, 'eventAt', p_plan->'eventAt', 'rank', p_plan->'rank',
      'environment', p_plan->'environment', 'subjectId', null, 'linkedIds', '[]'::jsonb, 'ownerCandidates', '[]'::jsonb,
      'movedIds', '[]'::jsonb, 'move', null,
      'period', (select coalesce(jsonb_object_agg(k, 'null'::jsonb), '{}'::jsonb)
                 from jsonb_object_keys(case when jsonb_typeof(p_plan->'period') = 'object' then p_plan->'period' else '{}'::jsonb end) as keys(k)),
      'effects', '[]'::jsonb, 'ignoredReason', 'erased', 'syncReason', null);
end;
$$;
revoke all on function public.billing_erased_event(jsonb,jsonb) from public, anon, authenticated;
grant execute on function public.billing_erased_event(jsonb,jsonb) to service_role;

-- Customers to delete at RevenueCat after an erasure (REST v2 DELETE, REVENUECAT_DELETE_ON_ERASE):
-- the one place an erased id is kept as itself, until the next billing sweep sends the deletion
-- (or, not opted in, drops the row). A failed deletion is tried again, later each time.
create table public.billing_revenuecat_deletions (
  app_user_id text primary key check (char_length(app_user_id) between 1 and 256),
  erased_at timestamptz not null default now(),
  attempts integer not null default 0,
  next_attempt_at timestamptz not null default now()
);
alter table public.billing_revenuecat_deletions enable row level security;
revoke all on table public.billing_revenuecat_deletions from public, anon, authenticated;

-- Take up to p_limit due deletions (each is not due again for a while: a crash retries it later).
create or replace function public.billing_revenuecat_deletions_claim(p_limit integer)
returns text[]
language sql
volatile
security definer
set search_path = ''
as $$
  with due as (
    select app_user_id from public.billing_revenuecat_deletions
    where next_attempt_at <= now()
    order by next_attempt_at, app_user_id
    limit greatest(p_limit, 0)
    for update skip locked
  ), claimed as (
    update public.billing_revenuecat_deletions d
    set attempts = d.attempts + 1, next_attempt_at = now() + least(interval '1 hour' * power(2, d.attempts), interval '1 day')
    from due where d.app_user_id = due.app_user_id
    returning d.app_user_id
  )
  select coalesce(array_agg(app_user_id order by app_user_id), '{}') from claimed
$$;
revoke all on function public.billing_revenuecat_deletions_claim(integer) from public, anon, authenticated;
grant execute on function public.billing_revenuecat_deletions_claim(integer) to service_role;

-- Deletions done (or dropped, not opted in), a JSON array of ids: forgotten here too. Returns how many.
create or replace function public.billing_revenuecat_deletions_done(p_ids jsonb)
returns integer
language sql
volatile
security definer
set search_path = ''
as $$
  with done as (delete from public.billing_revenuecat_deletions where app_user_id in (select jsonb_array_elements_text(p_ids)) returning 1)
  select count(*)::integer from done
$$;
revoke all on function public.billing_revenuecat_deletions_done(jsonb) from public, anon, authenticated;
grant execute on function public.billing_revenuecat_deletions_done(jsonb) to service_role;

-- The same person signed up again under an erased id (a new auth.users row with it): billing
-- events for it count again from now on. What was erased stays erased.
create or replace function public.billing_unerase_user(p_user_id uuid)
returns boolean
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  delete from public.billing_erased_ids where id_hash = public.billing_id_hash(p_user_id::text);
  return found;
end;
$$;
revoke all on function public.billing_unerase_user(uuid) from public, anon, authenticated;
grant execute on function public.billing_unerase_user(uuid) to service_role;

-- RevenueCat's budget, shared fairly: users' own refreshes get a bounded share of it and a daily cap.
--
-- Every call to RevenueCat takes a slot of one budget (REVENUECAT_REQUESTS_PER_SECOND, spaced
-- p_slot_ms apart, billing_sync_rate.next_slot_at). Refreshes were limited per user only (one per
-- 5 s), so five accounts refreshing every 5 s took every slot at the default of one a second: every
-- other user's refresh waited in vain (503), and each of those 503s queued the user for the sweep,
-- which then spent its own slots on them. Now:
--   * users' refreshes are also counted on a second clock, the users' lane (user_next_slot_at, the
--     generic cell rate algorithm): each moves it p_slot_ms / p_user_share on, and a refresh whose
--     slot would come before it less a tolerance (the longest a refresh waits, p_max_wait_ms, at
--     least one lane slot: users who ask together all get in, up to a few seconds' worth) is
--     refused. Users together never take more than that share of the budget over time (a burst of
--     at most the tolerance aside), and the sweep, the syncs after webhooks and the operator's
--     syncs always keep the rest. A refresh still takes the next free slot of the budget itself,
--     so no slot is left unused behind it;
--   * a user's refreshes that reached RevenueCat are counted per day (a window that starts at the
--     first of them): past p_user_daily_limit the answer is limitedBy 'day' until the window ends;
--   * a refresh the budget refused writes nothing: no interval used up, nothing counted (and the
--     service no longer queues the user for the sweep: lib/billing/sync.ts).
--
-- Before a call to RevenueCat. For a user's own refresh (p_user_id set): at most one per
-- p_user_interval_seconds (else {retryAfterSeconds, limitedBy: 'user'}) and at most
-- p_user_daily_limit a day (else {retryAfterSeconds, limitedBy: 'day'}); then the next slot in the
-- shared budget, p_slot_ms apart, which a user's refresh may take only when the users' lane allows
-- it (see above). Returns {waitMs}: how long to wait for the slot, or {retryAfterSeconds,
-- limitedBy: 'budget'} when the lane is spent or the wait would be more than p_max_wait_ms (nothing
-- reserved, nothing counted). p_user_share and p_user_daily_limit null: no lane, no cap (what the previous version
-- did, for a caller that does not pass them). One call, so a refresh costs one round trip before
-- RevenueCat.
create function public.billing_sync_begin(
  p_user_id text,
  p_user_interval_seconds integer,
  p_slot_ms integer,
  p_max_wait_ms integer,
  p_user_share numeric default null,
  p_user_daily_limit integer default null
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_last timestamptz;
  v_day_started timestamptz;
  v_day_count integer;
  v_slot timestamptz;
  v_user_next timestamptz;
  v_lane_ms numeric;
  v_tolerance interval;
  v_in_user_lane boolean := p_user_id is not null and p_user_share is not null;
  v_wait_ms integer;
begin
  if p_user_share is not null and (p_user_share <= 0 or p_user_share > 1) then
    raise exception 'invalid_request' using errcode = 'PT400', detail = 'The users'' share of the budget must be in (0, 1].';
  end if;
  if p_user_id is not null then
    -- The row exists before it is locked, so two first refreshes of one user at once take turns.
    insert into public.billing_sync_requests (app_user_id, requested_at) values (p_user_id, '-infinity')
    on conflict (app_user_id) do nothing;
    select requested_at, day_started_at, day_count into v_last, v_day_started, v_day_count
    from public.billing_sync_requests where app_user_id = p_user_id for update;
    if v_last > now() - make_interval(secs => p_user_interval_seconds) then
      return jsonb_build_object('limitedBy', 'user', 'retryAfterSeconds',
        greatest(1, ceil(extract(epoch from v_last + make_interval(secs => p_user_interval_seconds) - now()))::integer));
    end if;
    if v_day_started is null or v_day_started <= now() - interval '1 day' then
      v_day_started := now();
      v_day_count := 0;
    end if;
    if p_user_daily_limit is not null and v_day_count >= p_user_daily_limit then
      return jsonb_build_object('limitedBy', 'day', 'retryAfterSeconds',
        greatest(1, ceil(extract(epoch from v_day_started + interval '1 day' - now()))::integer));
    end if;
  end if;

  select greatest(next_slot_at, now()), user_next_slot_at into v_slot, v_user_next
  from public.billing_sync_rate for update;
  if v_in_user_lane then
    v_lane_ms := p_slot_ms / p_user_share;
    v_tolerance := make_interval(secs => greatest(v_lane_ms, p_max_wait_ms) / 1000.0);
    if v_slot < v_user_next - v_tolerance then
      -- The users' share is spent for now: ask again when the lane comes round.
      return jsonb_build_object('limitedBy', 'budget', 'retryAfterSeconds',
        greatest(1, ceil(extract(epoch from v_user_next - v_tolerance - now())))::integer);
    end if;
  end if;
  v_wait_ms := greatest(0, ceil(extract(epoch from v_slot - now()) * 1000))::integer;
  if v_wait_ms > p_max_wait_ms then
    -- No refresh happened: the user may ask again as soon as a slot is free.
    return jsonb_build_object('limitedBy', 'budget', 'retryAfterSeconds', greatest(1, ceil(v_wait_ms / 1000.0))::integer);
  end if;
  update public.billing_sync_rate set
    next_slot_at = v_slot + make_interval(secs => p_slot_ms / 1000.0),
    user_next_slot_at = case when v_in_user_lane then greatest(user_next_slot_at, v_slot) + make_interval(secs => v_lane_ms / 1000.0) else user_next_slot_at end;
  if p_user_id is not null then
    update public.billing_sync_requests set requested_at = now(), day_started_at = v_day_started, day_count = v_day_count + 1
    where app_user_id = p_user_id;
  end if;
  return jsonb_build_object('waitMs', v_wait_ms);
end;
$$;
revoke all on function public.billing_sync_begin(text,integer,integer,integer,numeric,integer) from public, anon, authenticated;
grant execute on function public.billing_sync_begin(text,integer,integer,integer,numeric,integer) to service_role;
