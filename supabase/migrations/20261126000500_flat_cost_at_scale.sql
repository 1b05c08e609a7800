-- Flat cost as the tables grow (issue 15): what tests/db/query-plans.test.ts found reading a big
-- table whole, at the volume of `npm run bench -- --scale` (1M billing events over 13 months, 300k
-- subscribers, 200k wallets, 20k leagues), each fixed with an index or a query change. Every
-- statement of the SQL functions is now an index lookup at that size (the test shows each plan).
--
-- 1. The webhook: an event naming an anonymous id (most of RevenueCat's, whose aliases carry the
--    $RCAnonymousID the app started with) merges it into the owner, and the merge looks for the
--    ids that read another id's rows, `app_user_id = any (v_moved) or customer_id = any (v_moved)`:
--    without an index on customer_id that read every billing_subscribers row, on every such event.
create index if not exists billing_subscribers_customer_idx on public.billing_subscribers (customer_id)
  where customer_id is not null;

-- 2. Deleting a user erases their events found by subject, app_user_id or owner; only the subject
--    was indexed, so every deletion read the whole event log. An event's app_user_id and owner are
--    its subject but for a few (ignored events, an anonymous app_user_id, a second real id of one
--    customer): those few are indexed, and billing_forget_user asks for exactly the same rows.
create index if not exists billing_events_app_user_id_idx on public.billing_events (app_user_id)
  where app_user_id is distinct from subject_id;
create index if not exists billing_events_owner_id_idx on public.billing_events (owner_id)
  where owner_id is distinct from subject_id;

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
  -- The same rows as "subject_id, app_user_id or owner_id is one of v_ids", each arm an index:
  -- an event's app_user_id and owner are nearly always its subject, so only the events where they
  -- are not are indexed by them.
  where subject_id = any (v_ids)
     or (app_user_id = any (v_ids) and app_user_id is distinct from subject_id)
     or (owner_id = any (v_ids) and owner_id is distinct from subject_id);
  get diagnostics v_events = row_count;
  return jsonb_build_object('entitlements', v_rows, 'billingEventsErased', v_events);
end;
$$;

-- 3. Monthly maintenance: checkpointing a month's customers folded each group with the key in the
--    "C" collation, which PL/pgSQL gives to every text parameter and variable of the called
--    function, so none of the fold's lookups could use an index (default collation): each group's
--    checkpoint read billing_subscribers, entitlements and the whole log. And pruning the dedupe
--    keys of dropped months hashed the whole log to find which keys' events are gone.
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
      -- The key in the default collation: a collatable argument in "C" would make every text
      -- parameter and variable of the fold "C" for this call, and no index (default collation)
      -- could serve its lookups: each checkpoint would read the subscribers and the whole log.
      perform public.billing_refold_group(v_group_id, '', v_group.checkpoint_key collate "default");
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
    -- Oldest first through billing_event_ids_received_idx, each key's event looked up in the one
    -- partition its receive time names (a subquery per key, not an anti join: the planner would
    -- hash the whole log for it).
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

-- 4. Every challenge request sweeps a few long-expired challenges: asked oldest first, so the
--    expiry index answers it even when nothing is due.
create or replace function public.wallet_issue_challenge(
  p_user_id uuid,
  p_challenge_id uuid,
  p_chain text,
  p_address text,
  p_address_key text,
  p_chain_id bigint,
  p_cluster text,
  p_nonce text,
  p_message text,
  p_issued_at timestamptz,
  p_expires_at timestamptz
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_recent integer;
  v_oldest timestamptz;
  v_retired integer;
begin
  perform pg_advisory_xact_lock(4361, hashtext(p_user_id::text));

  select count(*), min(c.created_at) into v_recent, v_oldest
  from public.wallet_challenges c
  where c.user_id = p_user_id and c.created_at > now() - interval '1 minute';
  if v_recent >= 10 then
    return jsonb_build_object(
      'issued', false,
      'retryAfterSeconds', greatest(1, ceil(extract(epoch from (v_oldest + interval '1 minute' - now())))::integer));
  end if;

  insert into public.wallet_challenges
    (id, user_id, chain, address, address_key, chain_id, cluster, nonce, message, issued_at, expires_at)
  values
    (p_challenge_id, p_user_id, p_chain, p_address, p_address_key, p_chain_id, p_cluster, p_nonce, p_message, p_issued_at, p_expires_at);

  update public.wallet_challenges
  set retired_at = now()
  where id in (
    select c.id from public.wallet_challenges c
    where c.user_id = p_user_id and c.used_at is null and c.retired_at is null and c.expires_at > now()
    order by c.seq desc
    offset 5);
  get diagnostics v_retired = row_count;

  -- Oldest first, through wallet_challenges_expires: when nothing is due (the usual case), one
  -- index probe; without the order the planner may read the table hoping to meet 100 due rows.
  delete from public.wallet_challenges
  where id in (
    select c.id from public.wallet_challenges c
    where c.expires_at < now() - interval '1 day'
    order by c.expires_at
    limit 100);

  return jsonb_build_object('issued', true, 'challengeId', p_challenge_id, 'retiredChallenges', v_retired);
end;
$$;

-- 5. Retention deletes a batch of at most 1000 rows, picked oldest first through the index, and
--    the sync sweep claims a batch of due marks: `id in (batch)` (or a join with it) let the
--    planner hash the batch and read the whole table to find its rows; `id = any (array(batch))`
--    looks each one up by its primary key.
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
  return jsonb_build_object('challengesDeleted', v_deleted, 'done', v_batch < 1000);
end;
$$;

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

-- 6. The operator scripts walk a table a page at a time, each page after the last one's key: a
--    page must be read by an index from that key, or the walk reads the table once per page.
--    `npm run billing:rebuild` walks the log by event id: in the default collation, which its
--    indexes have (the walk only needs one total order, and it is not resumed across versions).
create or replace function public.billing_events_page(p_after_event_id text, p_limit integer)
returns jsonb
language sql
stable
security definer
set search_path = ''
as $$
  select coalesce(jsonb_agg(jsonb_build_object('eventId', e.event_id, 'eventAt', e.event_at, 'type', e.type, 'appUserId', e.app_user_id,
                                               'subjectId', e.subject_id, 'body', e.body) order by e.event_id), '[]'::jsonb)
  from (
    select event_id, event_at, type, app_user_id, subject_id, body from public.billing_events
    where event_id > coalesce(p_after_event_id, '')
    order by event_id
    limit p_limit
  ) e
$$;

--    `npm run billing:sync -- --all` walks the subscribers in "C" order and saves its place to
--    resume a later run, so the order stays, with indexes in it.
create index if not exists entitlements_app_user_id_c_idx on public.entitlements (app_user_id collate "C")
  where status <> 'transferred';
create index if not exists billing_sync_queue_app_user_id_c_idx on public.billing_sync_queue (app_user_id collate "C");

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

-- 7. A new customer's first event looked for events already filed under its ids in every month of
--    the log (one index probe per partition: 5 buffers on a new database, 85 at 13 months). Only
--    events recorded before groups existed (20261123000100_billing_fold.sql) can be: those without
--    a plan, or filed under an id that has no group. Every later event gets both when it is
--    recorded (and a rebuild locks the ids it files events under before it does), so the last
--    receive time of those old events bounds where to look: nothing to look at on a database that
--    never had any, the months up to it on one that did.
create table if not exists public.billing_legacy_horizon (
  id boolean primary key default true check (id),
  received_before timestamptz
);
alter table public.billing_legacy_horizon enable row level security;
revoke all on table public.billing_legacy_horizon from public, anon, authenticated;
insert into public.billing_legacy_horizon (received_before)
select max(e.received_at) from public.billing_events e
where e.subject_id is not null
  and (e.plan is null or not exists (select 1 from public.billing_subscribers s where s.app_user_id = e.subject_id))
on conflict (id) do nothing;

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
    v_groups := array(
      select distinct coalesce(s.group_id, ids.id) collate "C"
      from unnest(p_ids) as ids(id) left join public.billing_subscribers s on s.app_user_id = ids.id
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
                 where not exists (select 1 from public.billing_subscribers s where s.app_user_id = ids.id));
  v_known := array(select g from unnest(v_groups) as g where not g = any (v_new) order by g collate "C");
  -- The usual case: every id known, one group.
  if cardinality(v_new) = 0 and cardinality(v_known) = 1 then
    return v_known[1];
  end if;

  -- Name the joined group after an existing group when there is one (fewer rows to rename).
  v_group := coalesce(v_known[1], (select min(id collate "C") from unnest(v_new) as ids(id)));
  select max(folded_key collate "C") into v_key from public.billing_subscribers where app_user_id = any (v_known);
  -- Only events recorded before groups existed can be filed under an id that has no group (the
  -- event being recorded is one too, but folding it needs no watermark yet): looked for only in the
  -- months that can hold them, none on a database that never had any.
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

-- 8. The rows every billing event updates (a customer group's watermark, an entitlement) get room
--    on their page for the new version, so the update is HOT (no index entry to add): most are
--    updated again and again, and a page filled to the brim moves each update to another page.
alter table public.billing_subscribers set (fillfactor = 90);
alter table public.entitlements set (fillfactor = 90);

do $$
declare
  v_fn text;
begin
  foreach v_fn in array array[
    'public.billing_maintain(timestamptz, integer, integer)', 'public.billing_forget_user(uuid)',
    'public.wallet_issue_challenge(uuid, uuid, text, text, text, bigint, text, text, text, timestamptz, timestamptz)',
    'public.wallets_maintain(timestamptz, timestamptz)', 'public.leagues_maintain(timestamptz, timestamptz)',
    'public.billing_events_page(text, integer)', 'public.billing_subscribers_page(text, integer)',
    'public.billing_sync_claim(integer, integer)', 'public.billing_lock_group(text[])'
  ] loop
    execute format('revoke all on function %s from public, anon, authenticated', v_fn);
    execute format('grant execute on function %s to service_role', v_fn);
  end loop;
end;
$$;
