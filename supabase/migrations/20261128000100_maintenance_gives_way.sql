-- Maintenance gives way to live traffic.
--
-- A retention call checkpoints quiet customers for up to its budget (500 ms from the service's
-- job). On a database with few cores, that call keeps one of them busy, and the webhooks and app
-- reads that arrive meanwhile share the rest. Now, once a call has taken a checkpoint and worked a
-- hundredth of its budget, it looks every 2 ms of work for another client of this database running
-- a statement it began in the last second (`maintenance_should_give_way`); if it sees one, it stops
-- where it is, as at its deadline, and says so (`gaveWay`); the job rests a quarter of a second
-- before the next call (lib/billing/maintenance.ts). So under traffic the backlog still moves, at
-- least a checkpoint per call, and the calls keep out of the way of bursts. A statement running for over a
-- second (a report, an idle-in-transaction client) is not traffic this protects and does not stop
-- maintenance.
--
-- What it sees of the others: pg_stat_activity as the function's owner (security definer: the role
-- that runs the migrations) may see it: the sessions of roles it is a member of in full (the
-- service's webhooks connect as that role), everyone's with pg_read_all_stats
-- (https://www.postgresql.org/docs/current/monitoring-stats.html).
-- Everything else in billing_maintain is as in 20261127000100_billing_log_bounds.sql.

create or replace function public.maintenance_should_give_way()
returns boolean
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  -- A transaction reads pg_stat_activity once and keeps it unless the snapshot is cleared.
  perform pg_catalog.pg_stat_clear_snapshot();
  return exists (
    select 1 from pg_catalog.pg_stat_activity a
    where a.datname = pg_catalog.current_database() and a.pid <> pg_catalog.pg_backend_pid()
      and a.backend_type = 'client backend' and a.state = 'active'
      and a.query_start > pg_catalog.clock_timestamp() - interval '1 second');
end;
$$;
revoke all on function public.maintenance_should_give_way() from public, anon, authenticated;
grant execute on function public.maintenance_should_give_way() to service_role;

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
  -- Live traffic is looked for every 2 ms of checkpoints, once at least one was taken and a
  -- hundredth of the budget spent on them (set as they begin, below).
  v_give_way_after timestamptz;
  v_looked timestamptz;
  v_gave_way boolean := false;
  v_cutoff timestamptz := date_trunc('month', p_now) - make_interval(months => greatest(p_retention_months, 1));
  -- Every group pending since before this was tried in this call.
  v_tried_before timestamptz := 'infinity';
  v_made integer;
  v_checkpoints integer := 0;
  v_dropped text[] := '{}';
  v_pruned integer := 0;
  v_pending integer := 0;
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
  v_give_way_after := clock_timestamp() + make_interval(secs => p_budget_ms / 100000.0);
  v_looked := clock_timestamp();
  for v_candidate in
    select s.app_user_id as group_id, s.pending_since from public.billing_subscribers s
    where s.pending_since < v_cutoff
    order by s.pending_since, s.app_user_id
  loop
    if clock_timestamp() > v_deadline then
      v_tried_before := v_candidate.pending_since;
      exit;
    end if;
    -- Live traffic first: a call that has taken a checkpoint (not merely tried one: a group a
    -- webhook holds fails after its lock wait) and a hundredth of its budget, and sees another
    -- client of this database at work, stops here; the job rests before the next one
    -- (lib/billing/maintenance.ts). So every call that gives way has moved the backlog.
    if v_checkpoints > 0 and clock_timestamp() > v_give_way_after and clock_timestamp() - v_looked > interval '2 milliseconds' then
      v_looked := clock_timestamp();
      if public.maintenance_should_give_way() then
        v_tried_before := v_candidate.pending_since;
        v_gave_way := true;
        exit;
      end if;
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
  -- (Not in a call that gave way: the next call goes on.)
  while not v_gave_way loop
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
  if not v_gave_way then
    delete from public.billing_content_keys k
    where k.digest = any (array(select c.digest from public.billing_content_keys c
                                where c.received_at < p_now - public.billing_content_window() order by c.received_at limit 10000));
    get diagnostics v_content = row_count;
  end if;

  -- Done: no month before the cutoff is left, no dedupe key of one, and no group waits for a checkpoint.
  v_done := not v_gave_way and v_pending < 10000 and v_content < 10000
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
    'plansMissing', to_jsonb(v_plans_missing), 'busy', v_busy, 'gaveWay', v_gave_way, 'failedGroups', v_failed,
    'cutoff', v_cutoff, 'ms', round(extract(epoch from clock_timestamp() - v_started) * 1000));
end;
$$;
