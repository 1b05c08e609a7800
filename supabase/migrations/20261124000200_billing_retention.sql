-- Billing retention (issue 15): the event log kept by month, for a limited time, without changing
-- what any subscriber's entitlements are.
--
-- * public.billing_events is partitioned by the month an event was RECEIVED (received_at: always
--   "now", so a new event never needs a partition far in the past or the future). Partitions are
--   made twelve months ahead; a default partition takes anything else, so inserts succeed even if
--   maintenance never ran for a year (maintenance moves such rows into their month when it makes it).
-- * Deduplication by event id needs a unique key, which a partitioned table cannot have without the
--   partition key: public.billing_event_ids holds every recorded id with its received_at, and is
--   pruned with the partitions, so a redelivery is recognised exactly for as long as its event is kept.
-- * Folds need history. Before a month is dropped, every customer group with events in it gets a
--   CHECKPOINT: the fold of its history up to (and including) the newest of those events, kept per
--   subscriber id (billing_subscribers.base_key, base_rows, base_customer). Folding again starts from
--   the checkpoint and replays only later events, so dropping the month changes nothing. An event
--   older than a checkpoint that arrives afterwards (a dashboard resend of a very old event) cannot be
--   put in its place: it is recorded (dedupe), changes nothing, and marks the subscriber for a sync
--   from RevenueCat's own record (when a RevenueCat key is configured).
-- * public.billing_maintain(p_now, p_budget_ms, p_retention_months) does the monthly work: partitions
--   ahead, checkpoints, then drops what is older than the retention (BILLING_EVENTS_RETENTION_MONTHS,
--   default 13) and the matching dedupe keys. Bounded in time, safe to run twice at once.

-- 1. Dedupe keys.
create table public.billing_event_ids (
  event_id text primary key check (char_length(event_id) between 1 and 256),
  received_at timestamptz not null
);
create index billing_event_ids_received_idx on public.billing_event_ids (received_at);
alter table public.billing_event_ids enable row level security;
revoke all on table public.billing_event_ids from public, anon, authenticated;

-- 2. Checkpoints, per subscriber id: the sort key they were taken at, the id's entitlement rows then
-- (as JSON, without the generated column), and the id its rows were merged into (customer_id) then.
alter table public.billing_subscribers
  add column base_key text,
  add column base_rows jsonb,
  add column base_customer text;

-- 3. The partitioned log. Months are named billing_events_YYYY_MM.
create or replace function public.billing_events_partition_name(p_month date)
returns text
language sql
immutable
set search_path = ''
as $$
  select 'billing_events_' || to_char(p_month, 'YYYY_MM')
$$;

create table public.billing_events_partitioned (
  event_id text not null check (char_length(event_id) between 1 and 256),
  type text not null,
  -- event.app_user_id as sent (null for TRANSFER); owner_id is whose entitlements it changed.
  app_user_id text,
  event_at timestamptz not null,
  received_at timestamptz not null default now(),
  outcome text not null check (outcome in ('applied', 'stale', 'ignored')),
  environment text,
  owner_id text,
  moved_ids text[] not null default '{}',
  -- The whole request body, as received (for a snapshot: RevenueCat's record without attributes).
  body jsonb not null,
  -- The id the event is filed under for folds (null: it takes no part), its rank within an instant, its plan.
  subject_id text,
  sort_rank smallint,
  plan jsonb,
  primary key (event_id, received_at)
) partition by range (received_at);
create table public.billing_events_default partition of public.billing_events_partitioned default;
alter table public.billing_events_default enable row level security;
revoke all on table public.billing_events_default from public, anon, authenticated;

-- Make the month partitions from p_from to p_to (inclusive, months). A month whose rows went to the
-- default partition meanwhile gets them moved in. Returns how many partitions it made.
create or replace function public.billing_ensure_partitions(p_from date, p_to date)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_month date := date_trunc('month', p_from)::date;
  v_name text;
  v_made integer := 0;
  v_parent text := case when to_regclass('public.billing_events_partitioned') is not null then 'billing_events_partitioned' else 'billing_events' end;
begin
  while v_month <= date_trunc('month', p_to)::date loop
    v_name := public.billing_events_partition_name(v_month);
    if to_regclass('public.' || v_name) is null then
      if exists (select 1 from public.billing_events_default where received_at >= v_month and received_at < (v_month + interval '1 month')) then
        -- Postgres refuses a partition whose rows sit in the default one: move them through it.
        execute format('alter table public.%I detach partition public.billing_events_default', v_parent);
        execute format('create table public.%I partition of public.%I for values from (%L) to (%L)',
                       v_name, v_parent, v_month, v_month + interval '1 month');
        execute format('insert into public.%I select * from public.billing_events_default where received_at >= %L and received_at < %L',
                       v_name, v_month, v_month + interval '1 month');
        delete from public.billing_events_default where received_at >= v_month and received_at < (v_month + interval '1 month');
        execute format('alter table public.%I attach partition public.billing_events_default default', v_parent);
      else
        execute format('create table public.%I partition of public.%I for values from (%L) to (%L)',
                       v_name, v_parent, v_month, v_month + interval '1 month');
      end if;
      -- A partition is a table of its own: reachable only through the functions, like the rest.
      execute format('alter table public.%I enable row level security', v_name);
      execute format('revoke all on table public.%I from public, anon, authenticated', v_name);
      v_made := v_made + 1;
    end if;
    v_month := (v_month + interval '1 month')::date;
  end loop;
  return v_made;
end;
$$;

-- 4. Move the existing log in: months from its first received event to twelve months ahead.
select public.billing_ensure_partitions(
  coalesce((select min(received_at) from public.billing_events), now())::date,
  (now() + interval '12 months')::date);
insert into public.billing_events_partitioned
  (event_id, type, app_user_id, event_at, received_at, outcome, environment, owner_id, moved_ids, body, subject_id, sort_rank, plan)
select event_id, type, app_user_id, event_at, received_at, outcome, environment, owner_id, moved_ids, body, subject_id, sort_rank, plan
from public.billing_events;
insert into public.billing_event_ids (event_id, received_at) select event_id, received_at from public.billing_events;
drop table public.billing_events;
alter table public.billing_events_partitioned rename to billing_events;
alter index public.billing_events_partitioned_pkey rename to billing_events_pkey;
-- The fold reads a group's history by the id each event is filed under; the rebuild and the
-- redelivery of an old id find an event by its id.
create index billing_events_subject_idx on public.billing_events (subject_id, event_at) where subject_id is not null;
create index billing_events_event_id_idx on public.billing_events (event_id);
alter table public.billing_events enable row level security;
revoke all on table public.billing_events from public, anon, authenticated;

-- 5. Recording: the dedupe key first, then the event; folding starts from checkpoints.
create or replace function public.billing_log_and_fold(p_body jsonb, p_plan jsonb)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_event_id text := p_plan->>'eventId';
  v_event_at timestamptz := (p_plan->>'eventAt')::timestamptz;
  v_received timestamptz := now();
  v_rank smallint := coalesce((p_plan->>'rank')::smallint, 1);
  v_subject text := p_plan->>'subjectId';
  v_linked text[] := array(select distinct value from jsonb_array_elements_text(coalesce(p_plan->'linkedIds', '[]'::jsonb)));
  v_candidates text[] := array(select value from jsonb_array_elements_text(coalesce(p_plan->'ownerCandidates', '[]'::jsonb)));
  v_ignored boolean;
  v_new_source boolean := false;
  v_group text;
  v_folded text;
  v_base text;
  v_key text;
  v_before text;
  v_owner text;
  v_outcome text;
  v_result jsonb;
begin
  v_ignored := p_plan->>'ignoredReason' is not null or v_subject is null or not v_subject = any (v_linked);

  -- 1. Record, exactly once. A concurrent delivery of the same id waits here for this one to commit.
  insert into public.billing_event_ids (event_id, received_at) values (v_event_id, v_received) on conflict (event_id) do nothing;
  if not found then
    return coalesce((
      select jsonb_build_object('duplicate', true, 'outcome', e.outcome, 'ownerId', e.owner_id)
      from public.billing_event_ids d join public.billing_events e on e.event_id = d.event_id and e.received_at = d.received_at
      where d.event_id = v_event_id), jsonb_build_object('duplicate', true, 'outcome', 'stale', 'ownerId', null));
  end if;
  insert into public.billing_events (event_id, type, app_user_id, event_at, received_at, outcome, environment, owner_id, moved_ids, body, plan, subject_id, sort_rank)
  values (v_event_id, coalesce(p_plan->>'type', ''), p_plan->>'appUserId', v_event_at, v_received,
          case when v_ignored then 'ignored' else 'stale' end, p_plan->>'environment', v_candidates[1],
          case when v_ignored then '{}'::text[] else array(select jsonb_array_elements_text(coalesce(p_plan->'movedIds', '[]'::jsonb))) end,
          p_body, p_plan, case when not v_ignored then v_subject end, v_rank);
  if v_ignored then
    return jsonb_build_object('duplicate', false, 'outcome', 'ignored', 'ownerId', v_candidates[1]);
  end if;

  -- 2. Lock the group, then fold.
  v_group := public.billing_lock_group(v_linked);
  v_key := public.billing_sort_key(v_event_at, v_rank, v_event_id);
  -- Older than a checkpoint of an id it names: its place in the history is gone (maintenance
  -- dropped that month); it changes nothing, and RevenueCat's record is fetched instead.
  select max(base_key collate "C") into v_base from public.billing_subscribers where app_user_id = any (v_linked);
  if v_base is not null and v_key collate "C" <= v_base collate "C" then
    return jsonb_build_object('duplicate', false, 'outcome', 'stale', 'ownerId', v_candidates[1], 'groupId', v_group,
                              'newSource', false, 'beforeHistory', true);
  end if;
  v_new_source := jsonb_array_length(coalesce(p_plan->'effects', '[]'::jsonb)) > 0 and not exists (
    select 1 from public.entitlements
    where app_user_id = any (v_candidates)
      and source_key = public.billing_source_key(p_plan->>'environment', p_plan->'period'->>'store', p_plan->'period'->>'productId',
                                                 p_plan->'period'->>'originalTransactionId', p_plan->'period'->>'transactionId'));
  select folded_key into v_folded from public.billing_subscribers where app_user_id = v_group;
  -- (Equal: the watermark of a new id already counted this event, filed under it just above.)
  if v_folded is null or v_key collate "C" >= v_folded collate "C" then
    v_result := public.billing_apply_event(p_plan, v_event_id, v_event_at);
    v_outcome := v_result->>'outcome';
    v_owner := v_result->>'ownerId';
    update public.billing_subscribers set folded_key = v_key where app_user_id = v_group;
  else
    v_before := public.billing_group_state(v_group);
    v_owner := public.billing_refold_group(v_group, v_event_id);
    v_outcome := case when public.billing_group_state(v_group) is distinct from v_before then 'applied' else 'stale' end;
  end if;

  update public.billing_events set outcome = v_outcome, owner_id = v_owner where event_id = v_event_id and received_at = v_received;
  return jsonb_build_object('duplicate', false, 'outcome', v_outcome, 'ownerId', v_owner, 'groupId', v_group, 'newSource', v_new_source);
end;
$$;

-- Take a checkpoint of the group's members at p_key: each id's rows now (the fold up to p_key).
create or replace function public.billing_take_checkpoint(p_members text[], p_key text)
returns void
language sql
volatile
set search_path = ''
as $$
  update public.billing_subscribers s set
    base_key = p_key,
    base_customer = s.customer_id,
    base_rows = (
      select coalesce(jsonb_agg(to_jsonb(e) - 'grants_until' order by e.entitlement_id collate "C", e.source_key), '[]'::jsonb)
      from public.entitlements e where e.app_user_id = s.app_user_id)
  where s.app_user_id = any (p_members)
$$;

-- Fold the group's history again: from each member's checkpoint (or from nothing), replaying the
-- events after it in event order. With p_checkpoint_key, take a new checkpoint of every member at
-- that key on the way (the end state is the same). Returns the owner the step of p_event_id chose.
-- Events recorded before plans were stored have none yet: the caller computes them
-- (billing_plans_missing) and calls again.
drop function if exists public.billing_refold_group(text, text);
create or replace function public.billing_refold_group(p_group text, p_event_id text, p_checkpoint_key text default null)
returns text
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_members text[] := array(select app_user_id from public.billing_subscribers where group_id = p_group);
  v_event record;
  v_result jsonb;
  v_owner text;
  v_key text;
  v_last text;
  v_checkpointed boolean := p_checkpoint_key is null;
begin
  if exists (
    select 1 from public.billing_events e left join public.billing_subscribers s on s.app_user_id = e.subject_id
    where e.subject_id = any (v_members) and e.plan is null
      and public.billing_sort_key(e.event_at, coalesce(e.sort_rank, 1::smallint), e.event_id) collate "C" > coalesce(s.base_key, '') collate "C"
  ) then
    raise exception 'billing_plans_missing' using errcode = 'PT503',
      detail = (select jsonb_agg(to_jsonb(m))::text from unnest(v_members) as m);
  end if;
  delete from public.entitlements where app_user_id = any (v_members);
  -- Start from the checkpoints.
  insert into public.entitlements (
    app_user_id, entitlement_id, product_id, source_key, status, will_renew, expires_at, grace_expires_at, pending_product_id,
    store, environment, period_type, original_transaction_id, transaction_id, period_purchased_at, auto_resume_at,
    last_event_id, last_event_at, updated_at, granted_at, origin, synced_at
  )
  select r.app_user_id, r.entitlement_id, r.product_id, r.source_key, r.status, r.will_renew, r.expires_at, r.grace_expires_at, r.pending_product_id,
         r.store, r.environment, r.period_type, r.original_transaction_id, r.transaction_id, r.period_purchased_at, r.auto_resume_at,
         r.last_event_id, r.last_event_at, r.updated_at, r.granted_at, r.origin, r.synced_at
  from public.billing_subscribers s, jsonb_populate_recordset(null::public.entitlements, s.base_rows) r
  where s.group_id = p_group and s.base_rows is not null;
  update public.billing_subscribers set customer_id = base_customer where group_id = p_group and customer_id is distinct from base_customer;

  for v_event in
    select e.event_id, e.event_at, e.sort_rank, e.plan, public.billing_sort_key(e.event_at, e.sort_rank, e.event_id) as sort_key
    from public.billing_events e join public.billing_subscribers s on s.app_user_id = e.subject_id
    where e.subject_id = any (v_members) and e.plan->>'ignoredReason' is null
      and public.billing_sort_key(e.event_at, e.sort_rank, e.event_id) collate "C" > coalesce(s.base_key, '') collate "C"
    order by e.event_at, e.sort_rank, e.event_id collate "C"
  loop
    if not v_checkpointed and v_event.sort_key collate "C" > p_checkpoint_key collate "C" then
      perform public.billing_take_checkpoint(v_members, p_checkpoint_key);
      v_checkpointed := true;
    end if;
    v_result := public.billing_apply_event(v_event.plan, v_event.event_id, v_event.event_at);
    if v_event.event_id = p_event_id then v_owner := v_result->>'ownerId'; end if;
    v_last := v_event.sort_key;
  end loop;
  if not v_checkpointed then
    perform public.billing_take_checkpoint(v_members, p_checkpoint_key);
  end if;
  select max(k collate "C") into v_key from (
    select v_last as k union all select base_key from public.billing_subscribers where group_id = p_group) keys;
  update public.billing_subscribers set folded_key = v_key where app_user_id = p_group;
  return v_owner;
end;
$$;

-- The webhook: as before, and an event older than the kept history marks its subscriber for a sync.
create or replace function public.record_billing_event(p_body jsonb, p_plan jsonb, p_sync_after text default 'none')
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_event_id text := p_plan->>'eventId';
  v_result jsonb;
  v_owner text;
  v_sync text[] := '{}';
begin
  if v_event_id is null or char_length(v_event_id) not between 1 and 256
     or jsonb_typeof(p_body->'event') is distinct from 'object'
     or p_body->'event'->>'id' is distinct from v_event_id
     or p_plan->>'eventAt' is null
     or p_plan ? 'snapshot'
     or jsonb_typeof(coalesce(p_plan->'effects', '[]'::jsonb)) <> 'array'
     or jsonb_typeof(coalesce(p_plan->'movedIds', '[]'::jsonb)) <> 'array'
     or jsonb_typeof(coalesce(p_plan->'linkedIds', '[]'::jsonb)) <> 'array'
     or jsonb_typeof(coalesce(p_plan->'ownerCandidates', '[]'::jsonb)) <> 'array' then
    raise exception 'invalid_request' using errcode = 'PT400', detail = 'The billing event plan does not match the body.';
  end if;
  v_result := public.billing_log_and_fold(p_body, p_plan);
  if (v_result->>'duplicate')::boolean or p_plan->>'ignoredReason' is not null then
    return v_result || jsonb_build_object('syncIds', '[]'::jsonb);
  end if;
  v_owner := v_result->>'ownerId';
  if coalesce((v_result->>'beforeHistory')::boolean, false) then
    if p_sync_after <> 'none' then
      v_sync := public.billing_mark_sync(array[v_owner], 'before_history');
    end if;
  elsif p_sync_after = 'all' or (p_sync_after = 'gaps' and (p_plan->>'syncReason' is not null or (v_result->>'newSource')::boolean)) then
    v_sync := public.billing_mark_sync(
      case when p_plan->>'syncReason' = 'transfer'
           then array(select jsonb_array_elements_text(p_plan->'movedIds')) || v_owner
           else array[v_owner] end,
      coalesce(p_plan->>'syncReason', case when p_sync_after = 'all' then 'event' else 'new_source' end));
  end if;
  return v_result - 'groupId' - 'newSource' - 'beforeHistory' || jsonb_build_object('syncIds', to_jsonb(v_sync));
end;
$$;

-- 6. Maintenance: partitions ahead, checkpoints, retention. Returns what it did; {skipped: true}
-- when another run holds the maintenance lock. p_budget_ms bounds the checkpoint work (a drop waits
-- for the next run until every group in the month has its checkpoint); lock_timeout keeps it from
-- holding up webhooks behind a drop.
create or replace function public.billing_maintain(p_now timestamptz, p_budget_ms integer, p_retention_months integer default 13)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
set lock_timeout = '2s'
as $$
declare
  v_started timestamptz := clock_timestamp();
  v_cutoff timestamptz := date_trunc('month', p_now) - make_interval(months => greatest(p_retention_months, 1));
  v_made integer;
  v_checkpoints integer := 0;
  v_dropped text[] := '{}';
  v_pruned integer := 0;
  v_pending integer;
  v_plans_missing text[] := '{}';
  v_busy integer := 0;
  v_done boolean;
  v_partition record;
  v_group record;
  v_group_id text;
begin
  if not pg_try_advisory_xact_lock(hashtextextended('billing_maintain', 0)) then
    return jsonb_build_object('skipped', true, 'done', false);
  end if;
  v_made := public.billing_ensure_partitions(p_now::date, (p_now + interval '12 months')::date);

  -- Groups with events received before the cutoff that no checkpoint covers yet: checkpoint each at
  -- the newest of those events (within the budget).
  for v_group in
    select coalesce(s.group_id, e.subject_id) as group_id,
           max(public.billing_sort_key(e.event_at, e.sort_rank, e.event_id) collate "C") as checkpoint_key
    from public.billing_events e left join public.billing_subscribers s on s.app_user_id = e.subject_id
    where e.received_at < v_cutoff and e.subject_id is not null and e.plan->>'ignoredReason' is null
      and public.billing_sort_key(e.event_at, coalesce(e.sort_rank, 1::smallint), e.event_id) collate "C" > coalesce(s.base_key, '') collate "C"
    group by 1
  loop
    exit when clock_timestamp() - v_started > make_interval(secs => p_budget_ms / 1000.0);
    begin
      v_group_id := public.billing_lock_group(array[v_group.group_id]);
      perform public.billing_refold_group(v_group_id, '', v_group.checkpoint_key);
      v_checkpoints := v_checkpoints + 1;
    exception
      when lock_not_available then
        v_busy := v_busy + 1; -- webhooks hold the group: the next run takes it
      when others then
        if sqlerrm <> 'billing_plans_missing' then raise; end if;
        -- Events an older version stored without plans: the service computes them (their ids here).
        v_plans_missing := v_plans_missing || array(select app_user_id from public.billing_subscribers where group_id = v_group_id);
    end;
  end loop;

  -- Drop the months before the cutoff whose events every checkpoint covers; then their dedupe keys.
  for v_partition in
    select c.relname as name, pg_get_expr(c.relpartbound, c.oid) as bound
    from pg_catalog.pg_inherits i join pg_catalog.pg_class c on c.oid = i.inhrelid
    where i.inhparent = 'public.billing_events'::regclass and c.relname ~ '^billing_events_[0-9]{4}_[0-9]{2}$'
      and to_date(right(c.relname, 7), 'YYYY_MM') + interval '1 month' <= v_cutoff
    order by c.relname
  loop
    execute format(
      'select count(*) from public.%I e left join public.billing_subscribers s on s.app_user_id = e.subject_id
       where e.subject_id is not null and e.plan->>''ignoredReason'' is null
         and public.billing_sort_key(e.event_at, coalesce(e.sort_rank, 1::smallint), e.event_id) collate "C" > coalesce(s.base_key, '''') collate "C"',
      v_partition.name) into v_pending;
    continue when v_pending > 0;
    begin
      execute format('drop table public.%I', v_partition.name);
      v_dropped := v_dropped || v_partition.name::text;
    exception when lock_not_available then
      v_busy := v_busy + 1;
    end;
  end loop;
  -- The dedupe keys of events no longer kept, a batch at a time within the budget.
  loop
    with doomed as (
      select d.event_id from public.billing_event_ids d
      where d.received_at < v_cutoff
        and not exists (select 1 from public.billing_events e where e.event_id = d.event_id and e.received_at = d.received_at)
      limit 10000
    )
    delete from public.billing_event_ids d using doomed where d.event_id = doomed.event_id;
    get diagnostics v_pending = row_count;
    v_pruned := v_pruned + v_pending;
    exit when v_pending < 10000 or clock_timestamp() - v_started > make_interval(secs => p_budget_ms / 1000.0);
  end loop;

  -- Done: no month before the cutoff is left, and no dedupe key of one.
  v_done := v_pending < 10000 and not exists (
    select 1 from pg_catalog.pg_inherits i join pg_catalog.pg_class c on c.oid = i.inhrelid
    where i.inhparent = 'public.billing_events'::regclass and c.relname ~ '^billing_events_[0-9]{4}_[0-9]{2}$'
      and to_date(right(c.relname, 7), 'YYYY_MM') + interval '1 month' <= v_cutoff);
  return jsonb_build_object(
    'done', v_done,
    'partitionsMade', v_made, 'checkpoints', v_checkpoints, 'partitionsDropped', to_jsonb(v_dropped),
    'dedupeKeysPruned', v_pruned, 'plansMissing', to_jsonb(v_plans_missing), 'busy', v_busy,
    'cutoff', v_cutoff, 'ms', round(extract(epoch from clock_timestamp() - v_started) * 1000));
end;
$$;

-- Deleting a user also erases their rows from the checkpoints of their ids.
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
  update public.billing_subscribers set base_rows = '[]'::jsonb where app_user_id = any (v_ids) and base_rows is not null;
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
    'public.billing_events_partition_name(date)', 'public.billing_ensure_partitions(date, date)',
    'public.billing_log_and_fold(jsonb, jsonb)', 'public.billing_take_checkpoint(text[], text)',
    'public.billing_refold_group(text, text, text)', 'public.record_billing_event(jsonb, jsonb, text)',
    'public.billing_maintain(timestamptz, integer, integer)', 'public.billing_forget_user(uuid)'
  ] loop
    execute format('revoke all on function %s from public, anon, authenticated', v_fn);
    execute format('grant execute on function %s to service_role', v_fn);
  end loop;
end;
$$;
