-- Retention and maintenance (issue 15): every table that grows with traffic gets a rule, and one
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

-- Deliveries are pruned by age; without this index every run would read the whole table.
create index if not exists league_sync_deliveries_received_at_idx on public.league_sync_deliveries (received_at);

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
    where c.id in (
      select x.id from public.wallet_challenges x
      where x.expires_at < p_now - interval '1 day'
      order by x.expires_at
      limit 1000
      for update skip locked);
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
    where d.id in (
      select x.id from public.league_sync_deliveries x
      where x.received_at < p_now - interval '7 days'
      order by x.received_at
      limit 1000
      for update skip locked);
    get diagnostics v_batch = row_count;
    v_deleted := v_deleted + v_batch;
    exit when v_batch < 1000 or clock_timestamp() >= p_deadline;
  end loop;
  return jsonb_build_object('deliveriesDeleted', v_deleted, 'done', v_batch < 1000);
end;
$$;

-- The table holds one row per user who refreshed; pruned daily it keeps about a day's refreshers,
-- so a scan is cheap and an index would only slow every refresh down.
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
      limit 1000
      for update skip locked);
    get diagnostics v_batch = row_count;
    v_deleted := v_deleted + v_batch;
    exit when v_batch < 1000 or clock_timestamp() >= p_deadline;
  end loop;
  return jsonb_build_object('refreshRequestsDeleted', v_deleted, 'done', v_batch < 1000);
end;
$$;

-- The entry point of these rules. p_now: the time the rules count from (the server's clock when
-- null); p_budget_ms: how long to work (1 ms to 60 s). Returns {wallets, leagues, billingSync, done, ms}.
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

  return v_result || jsonb_build_object(
    'done', v_done,
    'ms', round(extract(epoch from clock_timestamp() - v_started) * 1000)::integer);
end;
$$;

do $$
declare
  v_fn text;
begin
  foreach v_fn in array array[
    'public.wallets_maintain(timestamptz, timestamptz)', 'public.leagues_maintain(timestamptz, timestamptz)',
    'public.billing_sync_maintain(timestamptz, timestamptz)', 'public.run_maintenance(timestamptz, integer)'
  ] loop
    execute format('revoke all on function %s from public, anon, authenticated', v_fn);
    execute format('grant execute on function %s to service_role', v_fn);
  end loop;
end;
$$;
