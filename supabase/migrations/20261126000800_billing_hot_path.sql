-- The billing webhook's hot path (issue 15), the same rules with less work per event. A profile of
-- record_billing_event (pg_stat_user_functions and auto_explain, one in-order event at a time) put
-- a third of its time in billing_lock_group and most of the rest in writing the event twice:
--
-- 1. billing_lock_group (as 20261126000500_flat_cost_at_scale.sql left it) looked up the event's ids with a join of unnest() and billing_subscribers,
--    which Postgres may plan as a scan of the whole table (it did at a thousand subscribers:
--    0.1 ms a call, twice per event, and growing with the table). Each id is now one index lookup
--    (a scalar subquery can only be planned that way), and the usual case (every id known, one
--    group) returns after one statement and one lock.
-- 2. billing_log_and_fold inserted the event with a provisional outcome and updated it once the
--    fold had decided. An event folded on top of its group's history (the usual case) is now
--    inserted once, with its outcome and owner; only an event that makes the history be folded
--    again is inserted first (the refold reads it from the log) and updated after.
-- 3. billing_events_event_id_idx duplicated the primary key's leading column (event_id,
--    received_at): a lookup by event_id uses the key; one index fewer to write per event.

drop index if exists public.billing_events_event_id_idx;

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
  v_legacy timestamptz;
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
  select max(folded_key collate "C") into v_key from public.billing_subscribers where app_user_id = any (v_known);
  -- Only events recorded before groups existed can be filed under an id that has no group: looked
  -- for only in the months that can hold them, none on a database that never had any
  -- (billing_legacy_horizon, 20261126000500_flat_cost_at_scale.sql).
  if cardinality(v_new) > 0 then
    select received_before into v_legacy from public.billing_legacy_horizon;
    if v_legacy is not null then
      v_key := greatest(v_key collate "C", (
        select max(public.billing_sort_key(e.event_at, e.sort_rank, e.event_id) collate "C")
        from public.billing_events e where e.subject_id = any (v_new) and e.received_at <= v_legacy));
    end if;
  end if;
  update public.billing_subscribers set group_id = v_group, folded_key = null
  where group_id = any (v_known) and group_id <> v_group;
  insert into public.billing_subscribers (app_user_id, group_id)
  select distinct ids.id, v_group from unnest(v_new) as ids(id)
  on conflict (app_user_id) do nothing;
  update public.billing_subscribers set folded_key = v_key where app_user_id = v_group;
  return v_group;
end;
$$;

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
  if v_ignored then
    perform public.billing_log_event(p_body, p_plan, v_received, 'ignored', v_candidates[1], true);
    return jsonb_build_object('duplicate', false, 'outcome', 'ignored', 'ownerId', v_candidates[1]);
  end if;

  -- 2. Lock the group, then fold.
  v_group := public.billing_lock_group(v_linked);
  v_key := public.billing_sort_key(v_event_at, v_rank, v_event_id);
  -- Older than a checkpoint of an id it names: its place in the history is gone (maintenance
  -- dropped that month); it changes nothing, and RevenueCat's record is fetched instead.
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
  select folded_key into v_folded from public.billing_subscribers where app_user_id = v_group;
  -- (Equal: the watermark of a new id already counted an event of this key, filed under it.)
  if v_folded is null or v_key collate "C" >= v_folded collate "C" then
    -- On top of the history: one step, and the event is written once, with what it did.
    v_result := public.billing_apply_event(p_plan, v_event_id, v_event_at);
    v_outcome := v_result->>'outcome';
    v_owner := v_result->>'ownerId';
    update public.billing_subscribers set folded_key = v_key where app_user_id = v_group;
    perform public.billing_log_event(p_body, p_plan, v_received, v_outcome, v_owner, false);
  else
    -- Inside the history: the fold reads the event from the log, so it goes in first.
    perform public.billing_log_event(p_body, p_plan, v_received, 'stale', v_candidates[1], false);
    v_before := public.billing_group_state(v_group);
    v_owner := public.billing_refold_group(v_group, v_event_id);
    v_outcome := case when public.billing_group_state(v_group) is distinct from v_before then 'applied' else 'stale' end;
    update public.billing_events set outcome = v_outcome, owner_id = v_owner where event_id = v_event_id and received_at = v_received;
  end if;
  return jsonb_build_object('duplicate', false, 'outcome', v_outcome, 'ownerId', v_owner, 'groupId', v_group, 'newSource', v_new_source);
end;
$$;

-- One row of the event log, as billing_log_and_fold files it (an ignored event takes part in no
-- fold: no subject, no moves).
create or replace function public.billing_log_event(p_body jsonb, p_plan jsonb, p_received timestamptz, p_outcome text, p_owner text, p_ignored boolean)
returns void
language sql
volatile
set search_path = ''
as $$
  insert into public.billing_events (event_id, type, app_user_id, event_at, received_at, outcome, environment, owner_id, moved_ids, body, plan, subject_id, sort_rank)
  values (p_plan->>'eventId', coalesce(p_plan->>'type', ''), p_plan->>'appUserId', (p_plan->>'eventAt')::timestamptz, p_received,
          p_outcome, p_plan->>'environment', p_owner,
          case when p_ignored then '{}'::text[] else array(select jsonb_array_elements_text(coalesce(p_plan->'movedIds', '[]'::jsonb))) end,
          p_body, p_plan, case when not p_ignored then p_plan->>'subjectId' end, coalesce((p_plan->>'rank')::smallint, 1))
$$;
revoke all on function public.billing_log_event(jsonb, jsonb, timestamptz, text, text, boolean) from public, anon, authenticated;
grant execute on function public.billing_log_event(jsonb, jsonb, timestamptz, text, text, boolean) to service_role;
