-- Maintenance: the bounded, idempotent work the maintenance cron runs (expired challenges, old
-- deliveries, the billing log's months and checkpoints, finished sync rows), each part giving way to
-- live traffic. docs/operations.md.

-- 5. Retention deletes a batch of at most 1000 rows, picked oldest first through the index, and
--    the sync sweep claims a batch of due marks: `id in (batch)` (or a join with it) let the
--    planner hash the batch and read the whole table to find its rows; `id = any (array(batch))`
--    looks each one up by its primary key.
--
-- Retention of challenges, and of the contract checks' rate rows: a check older
-- than the 10-minute window counts for nothing. Both in batches of 1000 until the deadline.
create or replace function public.wallets_maintain(p_now timestamptz, p_deadline timestamptz)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_batch integer;
  v_deleted integer := 0;
  v_checks_batch integer := 0;
  v_checks_deleted integer := 0;
begin
  loop
    delete from public.wallet_challenges c
    where c.id = any (array(
      select x.id from public.wallet_challenges x
      where x.expires_at < p_now - interval '1 day'
      order by x.expires_at
      limit 1000
      for update skip locked));
    get diagnostics v_batch = row_count;
    v_deleted := v_deleted + v_batch;
    exit when v_batch < 1000 or clock_timestamp() >= p_deadline;
  end loop;
  if v_batch < 1000 then
    loop
      delete from public.wallet_contract_checks c
      where c.id = any (array(
        select x.id from public.wallet_contract_checks x
        where x.checked_at <= p_now - interval '10 minutes'
        order by x.checked_at
        limit 1000
        for update skip locked));
      get diagnostics v_checks_batch = row_count;
      v_checks_deleted := v_checks_deleted + v_checks_batch;
      exit when v_checks_batch < 1000 or clock_timestamp() >= p_deadline;
    end loop;
  end if;
  return jsonb_build_object(
    'challengesDeleted', v_deleted, 'contractChecksDeleted', v_checks_deleted,
    'done', v_batch < 1000 and v_checks_batch < 1000);
end;
$$;
revoke all on function public.wallets_maintain(timestamp with time zone,timestamp with time zone) from public, anon, authenticated;
grant execute on function public.wallets_maintain(timestamp with time zone,timestamp with time zone) to service_role;

create or replace function public.leagues_maintain(p_now timestamptz, p_deadline timestamptz)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_batch integer;
  v_deleted integer := 0;
begin
  loop
    delete from public.league_sync_deliveries d
    where d.id = any (array(
      select x.id from public.league_sync_deliveries x
      where x.received_at < p_now - interval '7 days'
      order by x.received_at
      limit 1000
      for update skip locked));
    get diagnostics v_batch = row_count;
    v_deleted := v_deleted + v_batch;
    exit when v_batch < 1000 or clock_timestamp() >= p_deadline;
  end loop;
  return jsonb_build_object('deliveriesDeleted', v_deleted, 'done', v_batch < 1000);
end;
$$;
revoke all on function public.leagues_maintain(timestamp with time zone,timestamp with time zone) from public, anon, authenticated;
grant execute on function public.leagues_maintain(timestamp with time zone,timestamp with time zone) to service_role;

-- The table holds one row per user who refreshed; pruned daily it keeps about a day's refreshers,
-- so a scan is cheap and an index would only slow every refresh down.
--
-- The table holds one row per user who refreshed: a row is kept while it limits something (the
-- interval, looked back 5 seconds, with a margin: 10 minutes; the day's count: until its window
-- ends), so a scan is cheap and an index would only slow every refresh down. Pruned daily, it keeps
-- about a day's refreshers.
create or replace function public.billing_sync_maintain(p_now timestamptz, p_deadline timestamptz)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_batch integer;
  v_deleted integer := 0;
begin
  loop
    delete from public.billing_sync_requests r
    where r.app_user_id in (
      select x.app_user_id from public.billing_sync_requests x
      where x.requested_at < p_now - interval '10 minutes'
        and (x.day_started_at is null or x.day_started_at <= p_now - interval '1 day')
      limit 1000
      for update skip locked);
    get diagnostics v_batch = row_count;
    v_deleted := v_deleted + v_batch;
    exit when v_batch < 1000 or clock_timestamp() >= p_deadline;
  end loop;
  return jsonb_build_object('refreshRequestsDeleted', v_deleted, 'done', v_batch < 1000);
end;
$$;
revoke all on function public.billing_sync_maintain(timestamp with time zone,timestamp with time zone) from public, anon, authenticated;
grant execute on function public.billing_sync_maintain(timestamp with time zone,timestamp with time zone) to service_role;

-- Retention and maintenance: every table that grows with traffic gets a rule, and one
-- entry point applies them all, public.run_maintenance, called by GET /api/cron/maintenance
-- (Vercel Cron) and `npm run db:maintain`.
--
-- The rules (the README's "Retention and maintenance" lists every table, these and the others):
--   wallet_challenges       deleted one day after they expire (10 minutes after issue). Until then
--                           a late submission still gets challenge_expired rather than
--                           challenge_not_found; the rate limit counts only the last minute.
--   league_sync_deliveries  deleted 7 days after they arrived. A delivery id is recognised as a
--                           repeat for those 7 days (far more than any sender's retries); a copy
--                           sent later is applied again, which changes nothing: newest-wins makes
--                           each of its leagues unchanged or stale.
--   billing_sync_requests   deleted 10 minutes after the refresh they record: the per-user limit
--                           looks back 5 seconds (USER_SYNC_INTERVAL_SECONDS, lib/billing/sync.ts).
--   billing (events, dedupe, partitions): public.billing_maintain, owned by the billing migrations
--                           (*_billing_retention.sql); lib/maintenance.ts runs it first, from
--                           lib/billing/maintenance.ts, because it needs the service (the retention
--                           setting, and plans for events an older version stored without one).
--
-- Every rule deletes in batches of 1000 rows claimed with `for update skip locked`, so two runs at
-- once share the work instead of waiting on each other, and checks the clock between batches: one
-- call works for about p_budget_ms (at least one batch per rule) and says whether it finished
-- (`done`); what is left is taken by the next call. Idempotent: a second run finds nothing to do.
-- A run holds the rows it deleted until it commits, so keep p_budget_ms well under the service's
-- lock wait (5 s, lib/db/postgres.ts): the service calls it with 2 s.
--
-- The entry point of these rules. p_now: the time the rules count from (the server's clock when
-- null); p_budget_ms: how long to work (1 ms to 60 s). Returns {wallets, leagues, billingSync, events, done, ms}.
create or replace function public.run_maintenance(p_now timestamptz default null, p_budget_ms integer default 2000)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_started timestamptz := clock_timestamp();
  v_now timestamptz := coalesce(p_now, now());
  v_deadline timestamptz;
  v_part jsonb;
  v_result jsonb := '{}'::jsonb;
  v_done boolean := true;
begin
  if p_budget_ms is null or p_budget_ms < 1 or p_budget_ms > 60000 then
    raise exception 'invalid_request' using errcode = 'PT400', detail = 'p_budget_ms must be between 1 and 60000.';
  end if;
  v_deadline := v_started + make_interval(secs => p_budget_ms / 1000.0);

  v_part := public.wallets_maintain(v_now, v_deadline);
  v_result := v_result || jsonb_build_object('wallets', v_part);
  v_done := v_done and (v_part ->> 'done')::boolean;

  v_part := public.leagues_maintain(v_now, v_deadline);
  v_result := v_result || jsonb_build_object('leagues', v_part);
  v_done := v_done and (v_part ->> 'done')::boolean;

  v_part := public.billing_sync_maintain(v_now, v_deadline);
  v_result := v_result || jsonb_build_object('billingSync', v_part);
  v_done := v_done and (v_part ->> 'done')::boolean;

  v_part := public.outbound_maintain(v_now, v_deadline);
  v_result := v_result || jsonb_build_object('events', v_part);
  v_done := v_done and (v_part ->> 'done')::boolean;

  return v_result || jsonb_build_object(
    'done', v_done,
    'ms', round(extract(epoch from clock_timestamp() - v_started) * 1000)::integer);
end;
$$;
revoke all on function public.run_maintenance(timestamp with time zone,integer) from public, anon, authenticated;
grant execute on function public.run_maintenance(timestamp with time zone,integer) to service_role;

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
--
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
  -- The pending groups are read 100 at a time in index order, after the last one read: each read
  -- is a short index range whatever the planner guesses of the cutoff.
  v_after_since timestamptz := '-infinity';
  v_after_id text := '';
  v_batch integer;
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
  <<batches>>
  loop
  v_batch := 0;
  for v_candidate in
    select s.app_user_id as group_id, s.pending_since from public.billing_subscribers s
    where s.pending_since < v_cutoff and (s.pending_since, s.app_user_id) > (v_after_since, v_after_id)
    order by s.pending_since, s.app_user_id
    limit 100
  loop
    v_batch := v_batch + 1;
    v_after_since := v_candidate.pending_since;
    v_after_id := v_candidate.group_id;
    -- The budget holds once a group was worked on (checkpointed, or failed): a call whose partitions
    -- took all of it (a slow or busy database) still takes up the backlog's first group, so the job
    -- never ends a run on a call that had work and did none. (A group a webhook checkpointed
    -- meanwhile is passed over below and does not count.)
    -- (A busy group is among the failed ones too.)
    if v_checkpoints + jsonb_array_length(v_failed) + cardinality(v_plans_missing) > 0 and clock_timestamp() > v_deadline then
      v_tried_before := v_candidate.pending_since;
      exit batches;
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
        exit batches;
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
  exit batches when v_batch < 100;
  end loop batches;
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
revoke all on function public.billing_maintain(timestamp with time zone,integer,integer) from public, anon, authenticated;
grant execute on function public.billing_maintain(timestamp with time zone,integer,integer) to service_role;

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
