-- The operator's reads: the status of each part, the record of background runs, and billing's
-- explain (why a subscriber has what they have). docs/operations.md.

create table public.operator_runs (
  name text primary key check (name in ('billing_sweep', 'maintenance')),
  started_at timestamptz not null,
  finished_at timestamptz not null,
  result jsonb not null check (jsonb_typeof(result) = 'object')
);
alter table public.operator_runs enable row level security;
revoke all on table public.operator_runs from public, anon, authenticated;

-- What an operator asks before reading any table: did the webhooks land, is the sync queue
-- moving, did maintenance run and what is it behind, is the schema the code's
-- (GET /api/admin/status, `npm run status`: lib/operations/status.ts). One call reads it all.
--
-- The sweep and maintenance record their last run here (one row each, replaced by the next run):
-- when it started and ended and what it did, so the status can say it without a log search.
--
-- The end of a sweep or maintenance run: what it did replaces the previous run's.
create or replace function public.operator_record_run(p_name text, p_started_at timestamptz, p_result jsonb)
returns void
language sql
volatile
security definer
set search_path = ''
as $$
  insert into public.operator_runs as r (name, started_at, finished_at, result)
  values (p_name, p_started_at, greatest(p_started_at, now()), p_result)
  on conflict (name) do update set started_at = excluded.started_at, finished_at = excluded.finished_at, result = excluded.result
$$;
revoke all on function public.operator_record_run(text,timestamp with time zone,jsonb) from public, anon, authenticated;
grant execute on function public.operator_record_run(text,timestamp with time zone,jsonb) to service_role;

-- The status as of p_now. Every part is read through an index or a table of a few rows, except
-- the day's counts, which look up each event of the last 24 hours once (billing_event_ids by
-- received_at, then its row in the month it was received), and the sync queue's counts (one row
-- per subscriber waiting). Duplicates (a redelivery of an event already recorded) are answered and
-- not stored, so they are not counted; snapshots of RevenueCat's record are not deliveries.
create or replace function public.operator_status(p_now timestamptz, p_retention_months integer)
returns jsonb
language plpgsql
stable
security definer
set search_path = ''
as $$
declare
  v_day timestamptz := p_now - interval '24 hours';
  -- As billing_maintain counts it: months before this leave the event log.
  v_cutoff timestamptz := date_trunc('month', p_now) - make_interval(months => greatest(p_retention_months, 1));
begin
  return jsonb_build_object(
    'billingWebhook', jsonb_build_object(
      'last', (
        select jsonb_build_object('receivedAt', e.received_at, 'eventId', e.event_id, 'type', e.type, 'outcome', e.outcome,
                                  'reason', e.plan->>'ignoredReason', 'environment', e.environment, 'appUserId', e.app_user_id)
        from (select d.event_id, d.received_at from public.billing_event_ids d
              where d.event_id not like 'sync:%' order by d.received_at desc limit 1) d
        join public.billing_events e on e.event_id = d.event_id and e.received_at = d.received_at),
      'last24h', (
        select coalesce(jsonb_object_agg(c.outcome, c.n), '{}'::jsonb)
        from (select e.outcome, count(*) as n
              from public.billing_event_ids d join public.billing_events e on e.event_id = d.event_id and e.received_at = d.received_at
              where d.received_at > v_day and d.received_at <= p_now and d.event_id not like 'sync:%'
              group by e.outcome) c)),
    'leaguesWebhook', jsonb_build_object(
      'last', (
        select jsonb_build_object('receivedAt', d.received_at, 'source', d.source, 'deliveryId', d.delivery_id,
                                  'upserted', d.upserted, 'unchanged', d.unchanged, 'stale', d.stale, 'deleted', d.deleted)
        from public.league_sync_deliveries d order by d.received_at desc limit 1),
      -- applied: it changed a league; stale: only older snapshots than stored; unchanged: the rest.
      'last24h', (
        select coalesce(jsonb_object_agg(c.outcome, c.n), '{}'::jsonb)
        from (select case when d.upserted + d.deleted > 0 then 'applied' when d.stale > 0 then 'stale' else 'unchanged' end as outcome, count(*) as n
              from public.league_sync_deliveries d where d.received_at > v_day and d.received_at <= p_now
              group by 1) c)),
    'syncQueue', (
      select jsonb_build_object(
        'depth', count(*),
        'due', count(*) filter (where q.next_attempt_at <= p_now),
        'oldestDueAt', min(q.next_attempt_at) filter (where q.next_attempt_at <= p_now),
        'nextDueAt', min(q.next_attempt_at) filter (where q.next_attempt_at > p_now),
        'oldestRequestedAt', min(q.requested_at),
        'failing', count(*) filter (where q.attempts > 0))
      from public.billing_sync_queue q),
    'lastSyncFailure', (
      select jsonb_build_object('appUserId', q.app_user_id, 'reason', q.reason, 'attempts', q.attempts, 'error', q.last_error, 'nextAttemptAt', q.next_attempt_at)
      from public.billing_sync_queue q where q.last_error is not null
      order by q.attempts desc, q.next_attempt_at desc limit 1),
    'runs', (
      select coalesce(jsonb_object_agg(r.name, jsonb_build_object('startedAt', r.started_at, 'finishedAt', r.finished_at, 'result', r.result)), '{}'::jsonb)
      from public.operator_runs r),
    'billingRetention', jsonb_build_object(
      'cutoff', v_cutoff,
      -- Months past the retention still there (each waits for its customers' checkpoints).
      'monthsToDrop', (
        select coalesce(jsonb_agg(right(c.relname, 7) order by c.relname), '[]'::jsonb)
        from pg_catalog.pg_inherits i join pg_catalog.pg_class c on c.oid = i.inhrelid
        where i.inhparent = 'public.billing_events'::regclass and c.relname ~ '^billing_events_[0-9]{4}_[0-9]{2}$'
          and to_date(right(c.relname, 7), 'YYYY_MM') + interval '1 month' <= v_cutoff),
      'customersWaiting', (select count(*) from public.billing_subscribers s where s.pending_since < v_cutoff),
      -- Events of customers whose checkpoint failed, kept aside when their month was dropped.
      'heldEvents', (select count(*) from public.billing_events_default e where e.received_at < v_cutoff)),
    -- Outbound events: each endpoint's backlog and last failure (10_events.sql).
    'outbound', public.outbound_status(),
    'schemaVersions', to_jsonb(public.schema_versions()));
end;
$$;
revoke all on function public.operator_status(timestamp with time zone,integer) from public, anon, authenticated;
grant execute on function public.operator_status(timestamp with time zone,integer) to service_role;

-- "Why does this user (not) have pro?" (GET /api/admin/billing/subscribers/{appUserId},
-- `npm run billing:explain`: lib/billing/explain.ts turns this into words). One call reads the
-- customer's ids, every entry of their log (events and snapshots, in event order, with what was
-- stored when each arrived), their rows as stored, and their sync mark; and replays their history
-- the way the fold does (public.billing_refold_group: from the checkpoints, each step by
-- public.billing_apply_event), recording what each step did to which row. The replay runs in a
-- subtransaction that is rolled back: it writes nothing, and the group's lock is held for the call,
-- as a webhook holds it, so the log and the rows are read as one.
--
-- And the record the local RevenueCat stand-in answers from (lib/revenuecat/stand-in.ts): the rows
-- a customer's events left, as GET /v1/subscribers/{id} would show them.
--
-- A group's rows as one object, keyed by owner, entitlement and source (for the step diffs).
create or replace function public.billing_explain_rows(p_members text[])
returns jsonb
language sql
stable
set search_path = ''
as $$
  select coalesce(jsonb_object_agg(e.app_user_id || ' ' || e.entitlement_id || ' ' || e.source_key, to_jsonb(e) - 'updated_at'), '{}'::jsonb)
  from public.entitlements e where e.app_user_id = any (p_members)
$$;
revoke all on function public.billing_explain_rows(text[]) from public, anon, authenticated;
grant execute on function public.billing_explain_rows(text[]) to service_role;

-- p_plans: plans for entries stored without one (by an older version), keyed by event id, which
-- the service computes when the first call answers {plansMissing: [entries]}.
create or replace function public.billing_explain(p_app_user_id text, p_now timestamptz, p_plans jsonb default null)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_group text;
  v_members text[];
  v_from timestamptz;
  v_entries jsonb;
  v_missing jsonb;
  v_stored jsonb;
  v_replayed jsonb;
  v_steps jsonb := '[]'::jsonb;
  v_event record;
  v_plan jsonb;
  v_result jsonb;
  v_before jsonb;
  v_after jsonb;
begin
  if p_app_user_id is null or char_length(p_app_user_id) not between 1 and 256 then
    raise exception 'invalid_request' using errcode = 'PT400', detail = 'An app user id is 1 to 256 characters.';
  end if;
  -- Known: held like a webhook holds it (the group of a known id is never joined or made here).
  if exists (select 1 from public.billing_subscribers s where s.app_user_id = p_app_user_id) then
    v_group := public.billing_lock_group(array[p_app_user_id]);
  end if;
  v_members := case when v_group is null then array[p_app_user_id]
                    else array(select s.app_user_id from public.billing_subscribers s where s.group_id = v_group order by s.app_user_id collate "C") end;

  -- Every entry filed under the customer's ids, or naming one of them as its app user (a TEST, an
  -- ignored event) or owner; each through its index.
  select coalesce(jsonb_agg(jsonb_build_object(
           'eventId', e.event_id, 'type', e.type, 'eventAt', e.event_at, 'receivedAt', e.received_at, 'outcome', e.outcome,
           'ownerId', e.owner_id, 'subjectId', e.subject_id, 'appUserId', e.app_user_id, 'environment', e.environment,
           'movedIds', to_jsonb(e.moved_ids), 'confirmedAt', e.confirmed_at, 'plan', e.plan,
           'sortKey', public.billing_sort_key(e.event_at, e.sort_rank, e.event_id),
           -- What the words need from the body (snapshots keep theirs in the plan).
           'fields', case when e.type = 'SYNC' then '{}'::jsonb else jsonb_strip_nulls(jsonb_build_object(
             'cancelReason', e.body->'event'->'cancel_reason', 'expirationReason', e.body->'event'->'expiration_reason',
             'transferredFrom', e.body->'event'->'transferred_from', 'transferredTo', e.body->'event'->'transferred_to',
             'newProductId', e.body->'event'->'new_product_id', 'price', e.body->'event'->'price', 'currency', e.body->'event'->'currency',
             'aliases', e.body->'event'->'aliases', 'originalAppUserId', e.body->'event'->'original_app_user_id')) end)
         order by e.event_at, e.sort_rank, e.event_id collate "C"), '[]'::jsonb)
  into v_entries
  from public.billing_events e
  where e.subject_id = any (v_members)
     or (e.app_user_id = any (v_members) and e.app_user_id is distinct from e.subject_id)
     or (e.owner_id = any (v_members) and e.owner_id is distinct from e.subject_id);

  select coalesce(jsonb_agg((to_jsonb(e) - 'updated_at') || jsonb_build_object('grants', e.grants_until > p_now)
                            order by e.app_user_id collate "C", e.entitlement_id collate "C", e.source_key), '[]'::jsonb)
  into v_stored
  from public.entitlements e where e.app_user_id = any (v_members);

  if v_group is not null then
    v_from := public.billing_group_from(v_group);
    -- Entries an older version stored without a plan: the service computes them, then calls again.
    select jsonb_agg(jsonb_build_object('eventId', e.event_id, 'eventAt', e.event_at, 'type', e.type, 'appUserId', e.app_user_id,
                                        'subjectId', e.subject_id, 'body', e.body))
    into v_missing
    from public.billing_events e left join public.billing_subscribers s on s.app_user_id = e.subject_id
    where e.subject_id = any (v_members) and e.event_at >= v_from and e.plan is null and not coalesce(p_plans ? e.event_id, false)
      and public.billing_sort_key(e.event_at, coalesce(e.sort_rank, 1::smallint), e.event_id) collate "C" > coalesce(s.base_key, '') collate "C";
    if v_missing is not null then
      return jsonb_build_object('plansMissing', v_missing);
    end if;

    -- The replay, as billing_refold_group folds (keep the two in step), recording each step.
    begin
      delete from public.entitlements where app_user_id = any (v_members);
      insert into public.entitlements (
        app_user_id, entitlement_id, product_id, source_key, status, will_renew, expires_at, grace_expires_at, pending_product_id,
        store, environment, period_type, original_transaction_id, transaction_id, period_purchased_at, auto_resume_at,
        last_event_id, last_event_at, updated_at, granted_at, origin, synced_at, cancelled_in_charge_window_at, replaced_at
      )
      select r.app_user_id, r.entitlement_id, r.product_id, r.source_key, r.status, r.will_renew, r.expires_at, r.grace_expires_at, r.pending_product_id,
             r.store, r.environment, r.period_type, r.original_transaction_id, r.transaction_id, r.period_purchased_at, r.auto_resume_at,
             r.last_event_id, r.last_event_at, r.updated_at, r.granted_at, r.origin, r.synced_at, r.cancelled_in_charge_window_at,
             r.replaced_at
      from public.billing_subscribers s, jsonb_populate_recordset(null::public.entitlements, s.base_rows) r
      where s.group_id = v_group and s.base_rows is not null;
      update public.billing_subscribers set customer_id = base_customer where group_id = v_group and customer_id is distinct from base_customer;
      v_after := public.billing_explain_rows(v_members);

      for v_event in
        select e.event_id, e.event_at, coalesce(e.plan, p_plans->e.event_id) as plan, e.confirmed_at
        from public.billing_events e join public.billing_subscribers s on s.app_user_id = e.subject_id
        where e.subject_id = any (v_members) and e.event_at >= v_from
          and coalesce(e.plan, p_plans->e.event_id)->>'ignoredReason' is null
          and public.billing_sort_key(e.event_at, e.sort_rank, e.event_id) collate "C" > coalesce(s.base_key, '') collate "C"
        order by e.event_at, e.sort_rank, e.event_id collate "C"
      loop
        v_before := v_after;
        v_result := public.billing_apply_event(v_event.plan, v_event.event_id, v_event.event_at);
        if v_event.confirmed_at is not null then
          update public.entitlements set synced_at = v_event.confirmed_at
          where app_user_id = any (v_members) and last_event_id = v_event.event_id and synced_at is distinct from v_event.confirmed_at;
        end if;
        v_after := public.billing_explain_rows(v_members);
        v_steps := v_steps || jsonb_build_object(
          'eventId', v_event.event_id, 'outcome', v_result->>'outcome', 'ownerId', v_result->>'ownerId',
          'changes', (select coalesce(jsonb_agg(jsonb_build_object('key', k.key, 'before', v_before->k.key, 'after', v_after->k.key) order by k.key collate "C"), '[]'::jsonb)
                      from (select jsonb_object_keys(v_before) as key union select jsonb_object_keys(v_after)) k
                      where v_before->k.key is distinct from v_after->k.key));
      end loop;
      select coalesce(jsonb_agg(value || jsonb_build_object('grants', (value->>'grants_until')::timestamptz > p_now)
                                order by value->>'app_user_id' collate "C", value->>'entitlement_id' collate "C", value->>'source_key'), '[]'::jsonb)
      into v_replayed from jsonb_each(v_after);
      raise exception 'billing_explain_replayed';
    exception when raise_exception then
      if sqlerrm <> 'billing_explain_replayed' then raise; end if;
    end;
  end if;

  return jsonb_build_object(
    'appUserId', p_app_user_id,
    'known', v_group is not null or jsonb_array_length(v_entries) > 0,
    -- An erased id (its user deleted): its log keeps nothing filed under it, which the words say
    -- rather than calling it unknown.
    'erasedAt', (select x.erased_at from public.billing_erased_ids x where x.id_hash = public.billing_id_hash(p_app_user_id)),
    'groupId', v_group,
    'ids', (select coalesce(jsonb_agg(jsonb_build_object('appUserId', s.app_user_id, 'customerId', s.customer_id, 'checkpointKey', s.base_key)
                                      order by s.app_user_id collate "C"), '[]'::jsonb)
            from public.billing_subscribers s where s.app_user_id = any (v_members)),
    'entries', v_entries,
    'steps', v_steps,
    'stored', v_stored,
    'replayed', v_replayed,
    'syncMarks', (select coalesce(jsonb_agg(jsonb_build_object('appUserId', q.app_user_id, 'reason', q.reason, 'requestedAt', q.requested_at,
                                                               'attempts', q.attempts, 'nextAttemptAt', q.next_attempt_at, 'error', q.last_error)
                                            order by q.app_user_id collate "C"), '[]'::jsonb)
                  from public.billing_sync_queue q where q.app_user_id = any (v_members)));
end;
$$;
revoke all on function public.billing_explain(text,timestamp with time zone,jsonb) from public, anon, authenticated;
grant execute on function public.billing_explain(text,timestamp with time zone,jsonb) to service_role;

-- The stand-in's record of one app user id: the rows of the customer it belongs to (its own, or
-- those of the id RevenueCat merged it into), and whether any event named it.
create or replace function public.billing_stand_in_record(p_app_user_id text)
returns jsonb
language sql
stable
security definer
set search_path = ''
as $$
  select jsonb_build_object(
    'known', exists (select 1 from public.billing_subscribers s where s.app_user_id = p_app_user_id),
    'rows', (select coalesce(jsonb_agg(to_jsonb(e) - 'updated_at' order by e.entitlement_id collate "C", e.source_key), '[]'::jsonb)
             from public.entitlements e
             where e.app_user_id in (p_app_user_id, (select c.customer_id from public.billing_subscribers c where c.app_user_id = p_app_user_id))
               and e.status <> 'transferred'))
$$;
revoke all on function public.billing_stand_in_record(text) from public, anon, authenticated;
grant execute on function public.billing_stand_in_record(text) to service_role;
