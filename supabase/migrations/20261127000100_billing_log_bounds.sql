-- The billing log with bounded work (issue 19): what one customer does can no longer grow the
-- work of a fold or stall retention for everyone, and an event without an id is never taken for an
-- older one.
--
-- 1. A snapshot of RevenueCat's record that says what the customer's last entry (a snapshot) said
--    is not stored again: the earlier one is marked confirmed at the new request time
--    (billing_events.confirmed_at), and the rows it wrote show that time as synced_at, which
--    GET /api/me shows and the sync sweep reads. A fold replays the confirmation with the snapshot.
--    An event that arrives late, generated between a snapshot and its confirmation, marks its
--    customer for a sync: RevenueCat's record had already moved past it.
-- 2. Every customer group counts the events after its checkpoint (billing_subscribers.tail_events)
--    and when the oldest of them was received (pending_since). Checkpoints are taken as events
--    arrive, so neither a fold nor retention ever replays much:
--      * when the group's state is a month old (pending_since) and its last event is at least
--        billing_checkpoint_lag() old, the next event first checkpoints the group where it stands:
--        a copy of its rows, no replay (RevenueCat's retries are long over for anything before it);
--      * when its tail reaches billing_tail_bound() events, it is checkpointed so that only the
--        newest half stays unfolded: a late event replays fewer than the bound.
-- 3. Retention (billing_maintain) finds the groups a month's drop waits for through pending_since,
--    never by reading the month; each group is checkpointed in a subtransaction of its own, and one
--    that fails (its lock held, an error) is reported and tried again by the next run, while the
--    month is dropped anyway: that group's events of the month are kept aside (in the default
--    partition) until its checkpoint succeeds.
-- 4. An event without an id is identified by a digest of its content for RevenueCat's retry window
--    (billing_content_window(): its retries come 5, 10, 20, 40 and 80 minutes apart): the same
--    content within it is a duplicate, later it is a new event. Its stored id is the digest and a
--    random part, so no explicit id can claim it, and explicit ids never take part in the digests.

-- The settings of the bounds, one place each.
create or replace function public.billing_tail_bound()
returns integer
language sql
immutable
set search_path = ''
as $$ select 200 $$;

create or replace function public.billing_checkpoint_lag()
returns interval
language sql
immutable
set search_path = ''
as $$ select interval '3 days' $$;

create or replace function public.billing_content_window()
returns interval
language sql
immutable
set search_path = ''
as $$ select interval '3 hours' $$;

-- The event time of a sort key (public.billing_sort_key); null when it does not read as one.
create or replace function public.billing_key_time(p_key text)
returns timestamptz
language sql
stable
set search_path = ''
as $$
  select case when p_key ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}:'
              then (left(p_key, 26) || '+00')::timestamptz end
$$;

-- The event id of a sort key (what follows its time and rank).
create or replace function public.billing_key_event(p_key text)
returns text
language sql
immutable
set search_path = ''
as $$
  select substring(p_key from '^[^:]*:[^:]*:[^:]*:[^:]*:(.*)$')
$$;

-- 1. Schema.
alter table public.billing_subscribers
  -- On a group's own row: how many of its events a fold replays (those after the checkpoints), and
  -- when the oldest of them was received (null: none; retention drops a month only when every group
  -- with such an event received in it has been checkpointed past it).
  add column tail_events integer not null default 0,
  add column pending_since timestamptz;
create index billing_subscribers_pending_idx on public.billing_subscribers (pending_since) where pending_since is not null;

-- A snapshot that later snapshots said again: when RevenueCat's record last said the same.
alter table public.billing_events add column confirmed_at timestamptz;

-- Events without an id: the first delivery of each content within the window.
create table public.billing_content_keys (
  digest text primary key check (digest ~ '^[0-9a-f]{64}$'),
  event_id text not null,
  received_at timestamptz not null
);
create index billing_content_keys_received_idx on public.billing_content_keys (received_at);
alter table public.billing_content_keys enable row level security;
revoke all on table public.billing_content_keys from public, anon, authenticated;

-- 2. Where a fold of the group starts reading the log: the earliest checkpoint of its ids
--    ('-infinity' when one has none). Every event a fold replays is at or after it.
create or replace function public.billing_group_from(p_group text)
returns timestamptz
language sql
stable
set search_path = ''
as $$
  select coalesce(case when bool_and(public.billing_key_time(s.base_key) is not null) then min(public.billing_key_time(s.base_key)) end, '-infinity')
  from public.billing_subscribers s where s.group_id = p_group
$$;

-- The answer to a delivery of an event already recorded: the first delivery's outcome.
create or replace function public.billing_recorded_event(p_event_id text)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select coalesce((
    select jsonb_build_object('duplicate', true, 'outcome', e.outcome, 'ownerId', e.owner_id)
    from public.billing_event_ids d join public.billing_events e on e.event_id = d.event_id and e.received_at = d.received_at
    where d.event_id = p_event_id), jsonb_build_object('duplicate', true, 'outcome', 'stale', 'ownerId', null))
$$;

-- Lock the groups of p_ids, join them into one, and return its name (as before); joining adds up
-- the groups' tails and keeps the oldest pending receive time.
create or replace function public.billing_lock_group(p_ids text[])
returns text
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_locked text[] := '{}';
  v_groups text[];
  v_known text[];
  v_new text[];
  v_group text;
  v_key text;
  v_tail integer;
  v_pending timestamptz;
  v_legacy timestamptz;
  v_legacy_tail record;
begin
  for i in 1..20 loop
    -- Each id's group (an id without one stands for itself): one index lookup per id.
    v_groups := array(
      select distinct coalesce((select s.group_id from public.billing_subscribers s where s.app_user_id = ids.id), ids.id) collate "C"
      from unnest(p_ids) as ids(id)
      order by 1);
    exit when v_groups <@ v_locked;
    foreach v_group in array v_groups loop
      if not v_group = any (v_locked) then
        perform pg_advisory_xact_lock(hashtextextended('billing_group:' || v_group, 0));
        v_locked := v_locked || v_group;
      end if;
    end loop;
  end loop;
  if not v_groups <@ v_locked then
    raise exception 'billing_group_busy' using errcode = 'PT503', detail = 'The subscriber group kept changing; retry.';
  end if;

  v_new := array(select ids.id from unnest(p_ids) as ids(id)
                 where (select 1 from public.billing_subscribers s where s.app_user_id = ids.id) is null);
  -- The usual case: every id known, one group.
  if cardinality(v_new) = 0 and cardinality(v_groups) = 1 then
    return v_groups[1];
  end if;
  v_known := array(select g from unnest(v_groups) as g where not g = any (v_new) order by g collate "C");

  -- Name the joined group after an existing group when there is one (fewer rows to rename).
  v_group := coalesce(v_known[1], (select min(id collate "C") from unnest(v_new) as ids(id)));
  select max(folded_key collate "C"), coalesce(sum(tail_events), 0), min(pending_since) into v_key, v_tail, v_pending
  from public.billing_subscribers where app_user_id = any (v_known);
  -- Only events recorded before groups existed can be filed under an id that has no group: looked
  -- for only in the months that can hold them, none on a database that never had any
  -- (billing_legacy_horizon, 20261126000500_flat_cost_at_scale.sql).
  if cardinality(v_new) > 0 then
    select received_before into v_legacy from public.billing_legacy_horizon;
    if v_legacy is not null then
      select max(public.billing_sort_key(e.event_at, e.sort_rank, e.event_id) collate "C") as key, count(*)::integer as n, min(e.received_at) as since
      into v_legacy_tail
      from public.billing_events e where e.subject_id = any (v_new) and e.received_at <= v_legacy;
      v_key := greatest(v_key collate "C", v_legacy_tail.key);
      v_tail := v_tail + v_legacy_tail.n;
      v_pending := least(v_pending, v_legacy_tail.since);
    end if;
  end if;
  update public.billing_subscribers set group_id = v_group, folded_key = null, tail_events = 0, pending_since = null
  where group_id = any (v_known) and group_id <> v_group;
  insert into public.billing_subscribers (app_user_id, group_id)
  select distinct ids.id, v_group from unnest(v_new) as ids(id)
  on conflict (app_user_id) do nothing;
  update public.billing_subscribers set folded_key = v_key, tail_events = v_tail, pending_since = v_pending where app_user_id = v_group;
  return v_group;
end;
$$;

-- Fold the group's history again: from each member's checkpoint (or from nothing), replaying the
-- events after it in event order, each snapshot's confirmation with it. With p_checkpoint_key, take
-- a new checkpoint of every member at that key on the way (the end state is the same). Leaves the
-- group's watermark, tail and pending receive time as the fold found them. Returns the owner the
-- step of p_event_id chose. Events recorded before plans were stored have none yet: the caller
-- computes them (billing_plans_missing) and calls again.
create or replace function public.billing_refold_group(p_group text, p_event_id text, p_checkpoint_key text default null)
returns text
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_members text[] := array(select app_user_id from public.billing_subscribers where group_id = p_group);
  -- Every event replayed is at or after it, so the log is read from there, not from its start.
  v_from timestamptz := public.billing_group_from(p_group);
  v_event record;
  v_result jsonb;
  v_owner text;
  v_key text;
  v_last text;
  v_checkpointed boolean := p_checkpoint_key is null;
  v_tail integer := 0;
  v_pending timestamptz;
begin
  if exists (
    select 1 from public.billing_events e left join public.billing_subscribers s on s.app_user_id = e.subject_id
    where e.subject_id = any (v_members) and e.event_at >= v_from and e.plan is null
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
    select e.event_id, e.event_at, e.sort_rank, e.plan, e.received_at, e.confirmed_at,
           public.billing_sort_key(e.event_at, e.sort_rank, e.event_id) as sort_key
    from public.billing_events e join public.billing_subscribers s on s.app_user_id = e.subject_id
    where e.subject_id = any (v_members) and e.event_at >= v_from and e.plan->>'ignoredReason' is null
      and public.billing_sort_key(e.event_at, e.sort_rank, e.event_id) collate "C" > coalesce(s.base_key, '') collate "C"
    order by e.event_at, e.sort_rank, e.event_id collate "C"
  loop
    if not v_checkpointed and v_event.sort_key collate "C" > p_checkpoint_key collate "C" then
      perform public.billing_take_checkpoint(v_members, p_checkpoint_key);
      v_checkpointed := true;
      v_tail := 0;
      v_pending := null;
    end if;
    v_result := public.billing_apply_event(v_event.plan, v_event.event_id, v_event.event_at);
    -- A snapshot later snapshots said again: the rows it wrote were confirmed then (as when they came).
    if v_event.confirmed_at is not null then
      update public.entitlements set synced_at = v_event.confirmed_at
      where app_user_id = any (v_members) and last_event_id = v_event.event_id and synced_at is distinct from v_event.confirmed_at;
    end if;
    if v_event.event_id = p_event_id then v_owner := v_result->>'ownerId'; end if;
    v_last := v_event.sort_key;
    v_tail := v_tail + 1;
    v_pending := least(v_pending, v_event.received_at);
  end loop;
  if not v_checkpointed then
    perform public.billing_take_checkpoint(v_members, p_checkpoint_key);
    v_tail := 0;
    v_pending := null;
  end if;
  select max(k collate "C") into v_key from (
    select v_last as k union all select base_key from public.billing_subscribers where group_id = p_group) keys;
  update public.billing_subscribers set folded_key = v_key, tail_events = v_tail, pending_since = v_pending where app_user_id = p_group;
  return v_owner;
end;
$$;

-- Checkpoint the group where it stands: its rows are the fold of its history up to its watermark,
-- so they are the checkpoint at it, for the price of a copy (nothing is replayed). Not over events
-- an older version stored without plans (their rows came from older rules; a fold computes them):
-- false then, and nothing is done.
create or replace function public.billing_checkpoint_here(p_group text)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_folded text;
  v_pending timestamptz;
  v_legacy timestamptz := (select received_before from public.billing_legacy_horizon);
begin
  select folded_key, pending_since into v_folded, v_pending from public.billing_subscribers where app_user_id = p_group;
  if v_folded is null or (v_legacy is not null and v_pending <= v_legacy) then
    return false;
  end if;
  perform public.billing_take_checkpoint(array(select app_user_id from public.billing_subscribers where group_id = p_group), v_folded);
  update public.billing_subscribers set tail_events = 0, pending_since = null where app_user_id = p_group;
  return true;
end;
$$;

-- The tail bound: checkpoint the group so that only the newest half of billing_tail_bound() events
-- stays after its checkpoint (one replay of the tail now; every later fold replays less than the bound).
create or replace function public.billing_checkpoint_tail(p_group text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_members text[] := array(select app_user_id from public.billing_subscribers where group_id = p_group);
  v_from timestamptz := public.billing_group_from(p_group);
  v_key text;
begin
  -- A tail far past the bound (a history from before tails were bounded): replaying it would take
  -- seconds, so the group is checkpointed where it stands; an event older than that can no longer
  -- take its place (it marks the customer for a sync instead).
  if (select tail_events from public.billing_subscribers where app_user_id = p_group) > 2 * public.billing_tail_bound() then
    if public.billing_checkpoint_here(p_group) then
      return;
    end if;
  end if;
  select k.sort_key into v_key from (
    select public.billing_sort_key(e.event_at, e.sort_rank, e.event_id) as sort_key
    from public.billing_events e join public.billing_subscribers s on s.app_user_id = e.subject_id
    where e.subject_id = any (v_members) and e.event_at >= v_from and e.plan->>'ignoredReason' is null
      and public.billing_sort_key(e.event_at, e.sort_rank, e.event_id) collate "C" > coalesce(s.base_key, '') collate "C"
  ) k
  order by k.sort_key collate "C" desc
  offset public.billing_tail_bound() / 2 limit 1;
  if v_key is not null then
    -- (In the default collation: a "C" argument would make every text of the fold "C", and no index could serve it.)
    perform public.billing_refold_group(p_group, '', v_key collate "default");
  else
    -- The count ran ahead of the log (a user's deletion erased events of the tail): count again.
    perform public.billing_refold_group(p_group, '');
  end if;
end;
$$;

-- Record one entry of the log (a webhook event, or a snapshot of RevenueCat's record) and bring its
-- group's entitlements to the fold of its history: on top when it is the newest, else the history
-- since the checkpoint again. Returns {duplicate, outcome, ownerId, groupId, newSource,
-- afterSnapshot}: afterSnapshot, the event was generated between a snapshot and a later confirmation
-- of it (RevenueCat's record had already moved past it). Checkpoints the group on the way when its
-- tail is old or long (see the top of this file).
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
  v_after_snapshot boolean := false;
  v_group text;
  v_folded text;
  v_tail integer;
  v_pending timestamptz;
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
    return public.billing_recorded_event(v_event_id);
  end if;
  if v_ignored then
    perform public.billing_log_event(p_body, p_plan, v_received, 'ignored', v_candidates[1], true);
    return jsonb_build_object('duplicate', false, 'outcome', 'ignored', 'ownerId', v_candidates[1]);
  end if;

  -- 2. Lock the group, then fold.
  v_group := public.billing_lock_group(v_linked);
  v_key := public.billing_sort_key(v_event_at, v_rank, v_event_id);
  -- Older than a checkpoint of an id it names: its place in the history is gone; it changes
  -- nothing, and RevenueCat's record is fetched instead.
  select max(base_key collate "C") into v_base from public.billing_subscribers where app_user_id = any (v_linked);
  if v_base is not null and v_key collate "C" <= v_base collate "C" then
    perform public.billing_log_event(p_body, p_plan, v_received, 'stale', v_candidates[1], false);
    return jsonb_build_object('duplicate', false, 'outcome', 'stale', 'ownerId', v_candidates[1], 'groupId', v_group,
                              'newSource', false, 'beforeHistory', true);
  end if;
  v_new_source := jsonb_array_length(coalesce(p_plan->'effects', '[]'::jsonb)) > 0 and not exists (
    select 1 from public.entitlements
    where app_user_id = any (v_candidates)
      and source_key = public.billing_source_key(p_plan->>'environment', p_plan->'period'->>'store', p_plan->'period'->>'productId',
                                                 p_plan->'period'->>'originalTransactionId', p_plan->'period'->>'transactionId'));
  select folded_key, tail_events, pending_since into v_folded, v_tail, v_pending from public.billing_subscribers where app_user_id = v_group;
  -- (Equal: the watermark of a new id already counted an event of this key, filed under it.)
  if v_folded is null or v_key collate "C" >= v_folded collate "C" then
    -- Checkpointed where it stands (a copy) when that state is old enough: its tail is long or a
    -- month old, and its last event so far back that nothing before it can still be on its way
    -- (RevenueCat's retries end within hours).
    -- (Nested: SQL does not promise to evaluate the terms of an "and" in order.)
    if v_folded is not null and (v_tail >= public.billing_tail_bound() or v_pending < v_received - interval '30 days')
       and public.billing_key_time(v_folded) < v_received - public.billing_checkpoint_lag() then
      if public.billing_checkpoint_here(v_group) then
        v_tail := 0;
        v_pending := null;
      end if;
    end if;
    -- On top of the history: one step, and the event is written once, with what it did.
    v_result := public.billing_apply_event(p_plan, v_event_id, v_event_at);
    v_outcome := v_result->>'outcome';
    v_owner := v_result->>'ownerId';
    v_tail := v_tail + 1;
    update public.billing_subscribers set folded_key = v_key, tail_events = v_tail, pending_since = coalesce(v_pending, v_received)
    where app_user_id = v_group;
    perform public.billing_log_event(p_body, p_plan, v_received, v_outcome, v_owner, false);
    -- Generated before a later snapshot confirmed the last one (the group's last entry): that one already knew of it.
    if public.billing_key_event(v_folded) like 'sync:%' then
      v_after_snapshot := exists (
        select 1 from public.billing_events e where e.event_id = public.billing_key_event(v_folded) and e.confirmed_at > v_event_at);
    end if;
  else
    -- Inside the history: the fold reads the event from the log, so it goes in first.
    perform public.billing_log_event(p_body, p_plan, v_received, 'stale', v_candidates[1], false);
    v_before := public.billing_group_state(v_group);
    v_owner := public.billing_refold_group(v_group, v_event_id);
    v_outcome := case when public.billing_group_state(v_group) is distinct from v_before then 'applied' else 'stale' end;
    update public.billing_events set outcome = v_outcome, owner_id = v_owner where event_id = v_event_id and received_at = v_received;
    select tail_events into v_tail from public.billing_subscribers where app_user_id = v_group;
    -- Generated between a snapshot and a later one that said the same (a confirmation): that one already knew of it.
    v_after_snapshot := exists (
      select 1 from public.billing_events e
      where e.subject_id in (select s.app_user_id from public.billing_subscribers s where s.group_id = v_group)
        and e.event_at >= public.billing_group_from(v_group) and e.event_at < v_event_at and e.confirmed_at > v_event_at);
  end if;
  -- Never more than the bound after a call: a late event replays at most that many.
  if v_tail >= public.billing_tail_bound() then
    perform public.billing_checkpoint_tail(v_group);
  end if;
  return jsonb_build_object('duplicate', false, 'outcome', v_outcome, 'ownerId', v_owner, 'groupId', v_group, 'newSource', v_new_source,
                            'afterSnapshot', v_after_snapshot);
end;
$$;

-- POST /api/webhooks/subscription-billing: record one event and apply it (billing_log_and_fold).
-- p_sync_after: which events mark their subscribers for a sync from RevenueCat in the same
-- transaction ('gaps', 'all' or 'none'). p_content_digest: for an event that came without an id,
-- the digest of its content: the same content received within billing_content_window() of its
-- first delivery is that delivery again (a duplicate); later, it is a new event. Returns
-- {duplicate, outcome, ownerId, syncIds}: the ids to sync after the response.
drop function if exists public.record_billing_event(jsonb, jsonb, text);
create or replace function public.record_billing_event(p_body jsonb, p_plan jsonb, p_sync_after text default 'none', p_content_digest text default null)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_event_id text := p_plan->>'eventId';
  v_first text;
  v_result jsonb;
  v_owner text;
  v_sync text[] := '{}';
begin
  if v_event_id is null or char_length(v_event_id) not between 1 and 256
     or jsonb_typeof(p_body->'event') is distinct from 'object'
     or p_body->'event'->>'id' is distinct from v_event_id
     or p_plan->>'eventAt' is null
     or p_plan ? 'snapshot'
     or (p_content_digest is not null and p_content_digest !~ '^[0-9a-f]{64}$')
     or jsonb_typeof(coalesce(p_plan->'effects', '[]'::jsonb)) <> 'array'
     or jsonb_typeof(coalesce(p_plan->'movedIds', '[]'::jsonb)) <> 'array'
     or jsonb_typeof(coalesce(p_plan->'linkedIds', '[]'::jsonb)) <> 'array'
     or jsonb_typeof(coalesce(p_plan->'ownerCandidates', '[]'::jsonb)) <> 'array' then
    raise exception 'invalid_request' using errcode = 'PT400', detail = 'The billing event plan does not match the body.';
  end if;
  if p_content_digest is not null then
    -- The first delivery of this content in the window takes the digest; a concurrent one waits
    -- here for it to commit, then finds it.
    insert into public.billing_content_keys as k (digest, event_id, received_at) values (p_content_digest, v_event_id, now())
    on conflict (digest) do update set event_id = excluded.event_id, received_at = excluded.received_at
      where k.received_at <= excluded.received_at - public.billing_content_window()
    returning k.event_id into v_first;
    if v_first is null then
      return public.billing_recorded_event((select event_id from public.billing_content_keys where digest = p_content_digest))
             || jsonb_build_object('syncIds', '[]'::jsonb);
    end if;
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
  elsif coalesce((v_result->>'afterSnapshot')::boolean, false) and p_sync_after <> 'none' then
    v_sync := public.billing_mark_sync(array[v_owner], 'after_snapshot');
  end if;
  return v_result - 'groupId' - 'newSource' - 'beforeHistory' - 'afterSnapshot' || jsonb_build_object('syncIds', to_jsonb(v_sync));
end;
$$;

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
     or jsonb_typeof(p_body->'subscriber') is distinct from 'object' then
    raise exception 'invalid_request' using errcode = 'PT400', detail = 'The billing snapshot plan does not match the body.';
  end if;
  v_at := (p_plan->>'eventAt')::timestamptz;

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

-- 3. Maintenance: partitions ahead, checkpoints, retention, and the content keys of id-less events.
-- Returns what it did; {skipped: true} when another run holds the maintenance lock.
--
-- The groups a month's drop waits for are those with an event after their checkpoint received in
-- it or before (pending_since, indexed): each is checkpointed in a subtransaction of its own, oldest
-- first, within p_budget_ms. A quiet group (its last event older than billing_checkpoint_lag()) is
-- checkpointed where it stands, by a copy of its rows; a busy one by a fold of its tail up to the
-- newest of its events received before the cutoff. A group that fails (its lock held past the
-- short lock_timeout, an error) is reported in failedGroups and tried again by the next call. A
-- month goes once every group it waits for was tried: the events of those that failed are kept
-- aside first (moved to the default partition, with their dedupe keys still valid) until a later
-- run checkpoints them and deletes them.
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
  v_deadline timestamptz := clock_timestamp() + make_interval(secs => p_budget_ms / 1000.0);
  v_cutoff timestamptz := date_trunc('month', p_now) - make_interval(months => greatest(p_retention_months, 1));
  -- Every group pending since before this was tried in this call.
  v_tried_before timestamptz := 'infinity';
  v_made integer;
  v_checkpoints integer := 0;
  v_dropped text[] := '{}';
  v_pruned integer := 0;
  v_pending integer;
  v_held integer := 0;
  v_content integer := 0;
  v_plans_missing text[] := '{}';
  v_failed jsonb := '[]'::jsonb;
  v_busy integer := 0;
  v_done boolean;
  v_partition record;
  v_candidate record;
  v_group text;
  v_state record;
  v_copied boolean;
  v_members text[];
  v_key text;
  v_month_end timestamptz;
  v_rows jsonb;
begin
  if not pg_try_advisory_xact_lock(hashtextextended('billing_maintain', 0)) then
    return jsonb_build_object('skipped', true, 'done', false);
  end if;
  v_made := public.billing_ensure_partitions(p_now::date, (p_now + interval '12 months')::date);

  -- 1. Checkpoints. A group a webhook holds is not waited for long: it is tried again later.
  perform set_config('lock_timeout', '200ms', true);
  for v_candidate in
    select s.app_user_id as group_id, s.pending_since from public.billing_subscribers s
    where s.pending_since < v_cutoff
    order by s.pending_since, s.app_user_id
  loop
    if clock_timestamp() > v_deadline then
      v_tried_before := v_candidate.pending_since;
      exit;
    end if;
    v_group := null;
    begin
      v_group := public.billing_lock_group(array[v_candidate.group_id]);
      -- As it is now, under its lock (a webhook may have checkpointed or joined it meanwhile).
      select folded_key, pending_since, tail_events into v_state from public.billing_subscribers where app_user_id = v_group and group_id = v_group;
      continue when v_state.pending_since is null or v_state.pending_since >= v_cutoff;
      v_members := array(select app_user_id from public.billing_subscribers where group_id = v_group);
      -- Quiet (or with a tail far past the bound): checkpointed where it stands, a copy of its rows.
      v_copied := false;
      if public.billing_key_time(v_state.folded_key) < p_now - public.billing_checkpoint_lag()
         or v_state.tail_events > 2 * public.billing_tail_bound() then
        v_copied := public.billing_checkpoint_here(v_group);
      end if;
      if not v_copied then
        select max(public.billing_sort_key(e.event_at, e.sort_rank, e.event_id) collate "C") into v_key
        from public.billing_events e
        where e.subject_id = any (v_members) and e.event_at >= public.billing_group_from(v_group) and e.received_at < v_cutoff
          and e.plan->>'ignoredReason' is null;
        -- (The key in the default collation: a "C" argument would make every text of the fold "C".)
        perform public.billing_refold_group(v_group, '', v_key collate "default");
      end if;
      -- Its events kept aside when a month went without it: covered now.
      delete from public.billing_events_default where subject_id = any (v_members) and received_at < v_cutoff;
      v_checkpoints := v_checkpoints + 1;
    exception
      when lock_not_available then
        v_busy := v_busy + 1;
        v_failed := v_failed || jsonb_build_object('groupId', v_candidate.group_id, 'error', 'lock_not_available');
      when others then
        if sqlerrm = 'billing_plans_missing' then
          -- Events an older version stored without plans: the service computes them (their ids here).
          v_plans_missing := v_plans_missing || array(select app_user_id from public.billing_subscribers where group_id = coalesce(v_group, v_candidate.group_id));
        else
          v_failed := v_failed || jsonb_build_object('groupId', v_candidate.group_id, 'error', sqlstate || ': ' || sqlerrm);
        end if;
    end;
  end loop;
  perform set_config('lock_timeout', '2s', true);

  -- 2. Drop the months before the cutoff, oldest first, once every group they wait for was tried.
  for v_partition in
    select c.relname as name, to_date(right(c.relname, 7), 'YYYY_MM')::timestamptz as month_start
    from pg_catalog.pg_inherits i join pg_catalog.pg_class c on c.oid = i.inhrelid
    where i.inhparent = 'public.billing_events'::regclass and c.relname ~ '^billing_events_[0-9]{4}_[0-9]{2}$'
      and to_date(right(c.relname, 7), 'YYYY_MM') + interval '1 month' <= v_cutoff
    order by c.relname
  loop
    v_month_end := v_partition.month_start + interval '1 month';
    exit when v_month_end > v_tried_before;
    -- Groups still waiting (their checkpoint failed above): their events of the month are kept aside.
    v_members := array(
      select m.app_user_id from public.billing_subscribers m
      where m.group_id = any (array(select g.app_user_id from public.billing_subscribers g where g.pending_since < v_month_end order by g.pending_since)));
    begin
      -- Locked first, so nothing changes in it between the copy and the drop (a user's deletion erasing events).
      execute format('lock table public.%I in access exclusive mode', v_partition.name);
      v_rows := '[]'::jsonb;
      if cardinality(v_members) > 0 then
        execute format('select coalesce(jsonb_agg(to_jsonb(e)), ''[]''::jsonb) from public.%I e where e.subject_id = any ($1)', v_partition.name)
        into v_rows using v_members;
      end if;
      execute format('drop table public.%I', v_partition.name);
      -- (Its month has no partition now: they go to the default one.)
      insert into public.billing_events select * from jsonb_populate_recordset(null::public.billing_events, v_rows);
      v_held := v_held + jsonb_array_length(v_rows);
      v_dropped := v_dropped || v_partition.name::text;
    exception when lock_not_available then
      v_busy := v_busy + 1;
      exit;
    end;
  end loop;

  -- 3. The dedupe keys of events no longer kept, a batch at a time within the budget: oldest first
  --    through billing_event_ids_received_idx, each key's event looked up in the one partition its
  --    receive time names (a subquery per key, not an anti join: the planner would hash the whole log).
  loop
    with doomed as (
      select d.event_id from public.billing_event_ids d
      where d.received_at < v_cutoff
        and (select true from public.billing_events e where e.event_id = d.event_id and e.received_at = d.received_at limit 1) is null
      order by d.received_at
      limit 10000
    )
    delete from public.billing_event_ids d using doomed where d.event_id = doomed.event_id;
    get diagnostics v_pending = row_count;
    v_pruned := v_pruned + v_pending;
    exit when v_pending < 10000 or clock_timestamp() > v_deadline;
  end loop;
  -- The content digests of id-less events past their window.
  delete from public.billing_content_keys k
  where k.digest = any (array(select c.digest from public.billing_content_keys c
                              where c.received_at < p_now - public.billing_content_window() order by c.received_at limit 10000));
  get diagnostics v_content = row_count;

  -- Done: no month before the cutoff is left, no dedupe key of one, and no group waits for a checkpoint.
  v_done := v_pending < 10000 and v_content < 10000
    -- (The oldest pending receive time, by the index: an exists would be planned as a read of the table.)
    and coalesce((select pending_since from public.billing_subscribers where pending_since is not null order by pending_since limit 1) >= v_cutoff, true)
    and not exists (
      select 1 from pg_catalog.pg_inherits i join pg_catalog.pg_class c on c.oid = i.inhrelid
      where i.inhparent = 'public.billing_events'::regclass and c.relname ~ '^billing_events_[0-9]{4}_[0-9]{2}$'
        and to_date(right(c.relname, 7), 'YYYY_MM') + interval '1 month' <= v_cutoff);
  return jsonb_build_object(
    'done', v_done,
    'partitionsMade', v_made, 'checkpoints', v_checkpoints, 'partitionsDropped', to_jsonb(v_dropped),
    'heldEvents', v_held, 'dedupeKeysPruned', v_pruned, 'contentKeysPruned', v_content,
    'plansMissing', to_jsonb(v_plans_missing), 'busy', v_busy, 'failedGroups', v_failed,
    'cutoff', v_cutoff, 'ms', round(extract(epoch from clock_timestamp() - v_started) * 1000));
end;
$$;

-- Count every group's tail and its oldest receive time from the log (this migration, for the log
-- as it stands; the scale seed, for what it writes). Returns how many groups have a tail.
create or replace function public.billing_recount_tails()
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_groups integer;
begin
  update public.billing_subscribers set tail_events = 0, pending_since = null where tail_events <> 0 or pending_since is not null;
  with tails as (
    select s.group_id, count(*)::integer as n, min(e.received_at) as since
    from public.billing_events e join public.billing_subscribers s on s.app_user_id = e.subject_id
    where e.plan->>'ignoredReason' is null
      and public.billing_sort_key(e.event_at, e.sort_rank, e.event_id) collate "C" > coalesce(s.base_key, '') collate "C"
    group by s.group_id
  )
  update public.billing_subscribers g set tail_events = t.n, pending_since = t.since
  from tails t where g.app_user_id = t.group_id;
  get diagnostics v_groups = row_count;
  return v_groups;
end;
$$;

-- 4. The log as it stands. Ids that only events recorded before groups existed name get their own
--    group (as billing_lock_group would make it when they next appear), so retention sees them too;
--    then every group's tail is counted.
insert into public.billing_subscribers (app_user_id, group_id, folded_key)
select e.subject_id, e.subject_id, max(public.billing_sort_key(e.event_at, e.sort_rank, e.event_id) collate "C")
from public.billing_events e
where e.subject_id is not null and e.received_at <= (select received_before from public.billing_legacy_horizon)
  and not exists (select 1 from public.billing_subscribers s where s.app_user_id = e.subject_id)
group by e.subject_id
on conflict (app_user_id) do nothing;
select public.billing_recount_tails();
-- Events without an id recorded in the last hours, under the id their content made before
-- (sha256:<hex>): a redelivery of one within the window is still recognised.
insert into public.billing_content_keys (digest, event_id, received_at)
select distinct on (substring(e.event_id from 8)) substring(e.event_id from 8), e.event_id, e.received_at
from public.billing_events e
where e.received_at > now() - public.billing_content_window() and e.event_id ~ '^sha256:[0-9a-f]{64}$'
order by substring(e.event_id from 8), e.received_at
on conflict (digest) do nothing;

do $$
declare
  v_fn text;
begin
  foreach v_fn in array array[
    'public.billing_tail_bound()', 'public.billing_checkpoint_lag()', 'public.billing_content_window()',
    'public.billing_key_time(text)', 'public.billing_key_event(text)', 'public.billing_group_from(text)', 'public.billing_recorded_event(text)',
    'public.billing_lock_group(text[])', 'public.billing_refold_group(text, text, text)', 'public.billing_checkpoint_here(text)',
    'public.billing_checkpoint_tail(text)',
    'public.billing_log_and_fold(jsonb, jsonb)', 'public.record_billing_event(jsonb, jsonb, text, text)',
    'public.record_billing_snapshot(jsonb, jsonb, timestamptz)', 'public.billing_maintain(timestamptz, integer, integer)',
    'public.billing_recount_tails()'
  ] loop
    execute format('revoke all on function %s from public, anon, authenticated', v_fn);
    execute format('grant execute on function %s to service_role', v_fn);
  end loop;
end;
$$;
