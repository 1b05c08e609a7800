-- Billing sync (issue 14): entitlements that converge on RevenueCat's own record.
--
-- A snapshot of the customer from RevenueCat's REST API (lib/billing/sync.ts) is one more entry of
-- the log the entitlements are folded from (public.billing_log_and_fold): filed at its
-- request_date_ms, authoritative for the customer as of then, overtaken by every webhook event after
-- it. What a sync needs besides: a shared budget of calls to RevenueCat, a per-user limit on
-- "Refresh purchases", a queue the webhook marks and the sweep works through, and a way to fold
-- a customer's history again with the current decision code (npm run billing:rebuild).

-- The calls every instance makes to RevenueCat share one budget: the next free slot.
create table public.billing_sync_rate (
  id boolean primary key default true check (id),
  next_slot_at timestamptz not null default '-infinity'
);
insert into public.billing_sync_rate default values;

-- When each user last asked for a refresh (POST /api/me/billing/sync).
create table public.billing_sync_requests (
  app_user_id text primary key check (char_length(app_user_id) between 1 and 256),
  requested_at timestamptz not null
);

-- Which known subscribers the sweep has already enqueued because their access ends soon or they
-- were never synced is told by billing_sync_queue and entitlements.synced_at; this index finds
-- rows that grant for a while by the end of their access.
create index entitlements_grants_until_idx on public.entitlements (grants_until)
  where status in ('active', 'cancelled_active', 'temporary', 'billing_issue', 'grace');

alter table public.billing_sync_rate enable row level security;
alter table public.billing_sync_requests enable row level security;
revoke all on table public.billing_sync_rate, public.billing_sync_requests from public, anon, authenticated;

-- Before a call to RevenueCat: for a user's own refresh, at most one per p_user_interval_seconds
-- (else {retryAfterSeconds, limitedBy: 'user'}); then a slot in the shared budget, p_slot_ms apart.
-- Returns {waitMs}: how long to wait for the slot, or {retryAfterSeconds, limitedBy: 'budget'} when
-- that would be more than p_max_wait_ms (nothing reserved). One call, so a refresh costs one round
-- trip before RevenueCat.
create or replace function public.billing_sync_begin(
  p_user_id text,
  p_user_interval_seconds integer,
  p_slot_ms integer,
  p_max_wait_ms integer
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_last timestamptz;
  v_slot timestamptz;
  v_wait_ms integer;
begin
  if p_user_id is not null then
    select requested_at into v_last from public.billing_sync_requests where app_user_id = p_user_id for update;
    if v_last is not null and v_last > now() - make_interval(secs => p_user_interval_seconds) then
      return jsonb_build_object('limitedBy', 'user', 'retryAfterSeconds',
        greatest(1, ceil(extract(epoch from v_last + make_interval(secs => p_user_interval_seconds) - now()))::integer));
    end if;
    insert into public.billing_sync_requests (app_user_id, requested_at) values (p_user_id, now())
    on conflict (app_user_id) do update set requested_at = excluded.requested_at;
  end if;
  select greatest(next_slot_at, now()) into v_slot from public.billing_sync_rate for update;
  v_wait_ms := greatest(0, ceil(extract(epoch from v_slot - now()) * 1000))::integer;
  if v_wait_ms > p_max_wait_ms then
    -- No refresh happened: the user may ask again as soon as a slot is free.
    if p_user_id is not null then
      update public.billing_sync_requests set requested_at = v_last where app_user_id = p_user_id and v_last is not null;
      delete from public.billing_sync_requests where app_user_id = p_user_id and v_last is null;
    end if;
    return jsonb_build_object('limitedBy', 'budget', 'retryAfterSeconds', greatest(1, ceil(v_wait_ms / 1000.0))::integer);
  end if;
  update public.billing_sync_rate set next_slot_at = v_slot + make_interval(secs => p_slot_ms / 1000.0);
  return jsonb_build_object('waitMs', v_wait_ms);
end;
$$;

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

-- Record a snapshot of RevenueCat's record for p_plan.appUserId (lib/billing/snapshot.ts) and fold
-- it like an event, then clear the marks it answers (those made before the fetch began). Returns
-- {outcome, ownerId, entitlements}: the synced id's entitlements as GET /api/me shows them.
create or replace function public.record_billing_snapshot(p_body jsonb, p_plan jsonb, p_fetch_started_at timestamptz)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_app_user_id text := p_plan->>'appUserId';
  v_result jsonb;
begin
  if v_app_user_id is null or p_plan->>'eventId' not like 'sync:%' or p_plan->>'eventAt' is null
     or jsonb_typeof(p_plan->'snapshot'->'sources') is distinct from 'array'
     or jsonb_typeof(p_body->'subscriber') is distinct from 'object' then
    raise exception 'invalid_request' using errcode = 'PT400', detail = 'The billing snapshot plan does not match the body.';
  end if;
  v_result := public.billing_log_and_fold(p_body, p_plan);
  delete from public.billing_sync_queue where app_user_id = v_app_user_id and requested_at <= p_fetch_started_at;
  return jsonb_build_object('outcome', v_result->>'outcome', 'ownerId', v_result->>'ownerId',
                            'entitlements', public.account_entitlements(v_app_user_id, now()));
end;
$$;

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

  with due as (
    select app_user_id from public.billing_sync_queue
    where next_attempt_at <= now()
    order by next_attempt_at, app_user_id
    limit p_limit
    for update skip locked
  ), claimed as (
    update public.billing_sync_queue q set next_attempt_at = now() + make_interval(secs => p_lease_seconds)
    from due where q.app_user_id = due.app_user_id
    returning q.app_user_id, q.reason
  )
  select coalesce(jsonb_agg(jsonb_build_object('appUserId', app_user_id, 'reason', reason) order by app_user_id), '[]'::jsonb)
  into v_claimed from claimed;
  return jsonb_build_object('claimed', v_claimed, 'due', (select count(*) from public.billing_sync_queue where next_attempt_at <= now()));
end;
$$;

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

-- The rows of a group as the rebuild compares them (without bookkeeping columns).
create or replace function public.billing_group_rows(p_group text)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select coalesce(jsonb_agg(jsonb_build_object(
    'appUserId', e.app_user_id, 'entitlementId', e.entitlement_id, 'productId', e.product_id, 'environment', e.environment,
    'status', e.status, 'willRenew', e.will_renew, 'expiresAt', e.expires_at, 'graceExpiresAt', e.grace_expires_at)
    order by e.app_user_id collate "C", e.entitlement_id collate "C", e.source_key), '[]'::jsonb)
  from public.entitlements e
  where e.app_user_id in (select s.app_user_id from public.billing_subscribers s where s.group_id = p_group)
$$;

-- The log the rebuild walks: every entry, a page at a time after p_after_event_id (event id order).
create or replace function public.billing_events_page(p_after_event_id text, p_limit integer)
returns jsonb
language sql
stable
security definer
set search_path = ''
as $$
  select coalesce(jsonb_agg(jsonb_build_object('eventId', e.event_id, 'eventAt', e.event_at, 'type', e.type, 'appUserId', e.app_user_id,
                                               'subjectId', e.subject_id, 'body', e.body) order by e.event_id collate "C"), '[]'::jsonb)
  from (
    select event_id, event_at, type, app_user_id, subject_id, body from public.billing_events
    where event_id collate "C" > coalesce(p_after_event_id, '') collate "C"
    order by event_id collate "C"
    limit p_limit
  ) e
$$;

-- The entries of the log with these ids (the rebuild reads one customer's at a time).
create or replace function public.billing_events_by_id(p_event_ids jsonb)
returns jsonb
language sql
stable
security definer
set search_path = ''
as $$
  select coalesce(jsonb_agg(jsonb_build_object('eventId', e.event_id, 'eventAt', e.event_at, 'type', e.type, 'appUserId', e.app_user_id,
                                               'subjectId', e.subject_id, 'body', e.body)), '[]'::jsonb)
  from public.billing_events e
  where e.event_id in (select jsonb_array_elements_text(p_event_ids))
$$;

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
      select app_user_id as id from public.entitlements where status <> 'transferred'
      union
      select app_user_id from public.billing_sync_queue
    ) ids
    where id collate "C" > coalesce(p_after, '') collate "C"
    order by id collate "C"
    limit p_limit
  ) page
$$;

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

-- Where a resumable run (npm run billing:sync -- --all) got to.
create table public.billing_sync_runs (
  name text primary key,
  last_id text,
  updated_at timestamptz not null default now()
);
alter table public.billing_sync_runs enable row level security;
revoke all on table public.billing_sync_runs from public, anon, authenticated;

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

-- Deleting a user (public.forget_user, called when an auth.users row goes): their entitlements and
-- sync marks are deleted; their billing events and snapshots stay only as what deduplication needs
-- (the event id and type, so a RevenueCat retry of one never applies again) and leave every fold:
-- bodies (subscriber attributes, e-mail, aliases, products, prices) and plans are erased, and the
-- ids they were filed under are cleared. RevenueCat keeps its own record: delete the customer there
-- too (DELETE /v1/subscribers/{id}), or a later event about them starts a new history here.
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
  delete from public.billing_sync_queue where app_user_id = any (v_ids);
  delete from public.billing_sync_requests where app_user_id = any (v_ids);
  update public.billing_events set
    body = jsonb_build_object('event', jsonb_build_object('id', event_id, 'type', type)),
    plan = null,
    subject_id = null,
    app_user_id = null,
    owner_id = null,
    moved_ids = '{}'
  where subject_id = any (v_ids) or app_user_id = any (v_ids) or owner_id = any (v_ids);
  get diagnostics v_events = row_count;
  return jsonb_build_object('entitlements', v_rows, 'billingEventsErased', v_events);
end;
$$;

do $$
declare
  v_fn text;
begin
  foreach v_fn in array array[
    'public.billing_sync_begin(text, integer, integer, integer)', 'public.billing_sync_failed(text, text, text, integer)',
    'public.record_billing_snapshot(jsonb, jsonb, timestamptz)', 'public.billing_sync_found_nothing(text, timestamptz)',
    'public.billing_subscriber_known(text)',
    'public.billing_sync_claim(integer, integer)', 'public.billing_rebuild_group(jsonb, jsonb, boolean)',
    'public.billing_group_rows(text)', 'public.billing_events_page(text, integer)', 'public.billing_events_by_id(jsonb)',
    'public.billing_subscribers_page(text, integer)', 'public.billing_subscribers_count()', 'public.billing_forget_user(uuid)', 'public.billing_sync_run_place(text, text, boolean)'
  ] loop
    execute format('revoke all on function %s from public, anon, authenticated', v_fn);
    execute format('grant execute on function %s to service_role', v_fn);
  end loop;
end;
$$;
