-- What an operator asks before reading any table: did the webhooks land, is the sync queue
-- moving, did maintenance run and what is it behind, is the schema the code's
-- (GET /api/admin/status, `npm run status`: lib/operations/status.ts). One call reads it all.
--
-- The sweep and maintenance record their last run here (one row each, replaced by the next run):
-- when it started and ended and what it did, so the status can say it without a log search.

create table public.operator_runs (
  name text primary key check (name in ('billing_sweep', 'maintenance')),
  started_at timestamptz not null,
  finished_at timestamptz not null,
  result jsonb not null check (jsonb_typeof(result) = 'object')
);
alter table public.operator_runs enable row level security;
revoke all on table public.operator_runs from public, anon, authenticated;

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
    'schemaVersions', to_jsonb(public.schema_versions()));
end;
$$;

revoke all on function public.operator_record_run(text, timestamptz, jsonb) from public, anon, authenticated;
grant execute on function public.operator_record_run(text, timestamptz, jsonb) to service_role;
revoke all on function public.operator_status(timestamptz, integer) from public, anon, authenticated;
grant execute on function public.operator_status(timestamptz, integer) to service_role;
