-- RevenueCat's budget, shared fairly: users' own refreshes get a bounded share of it and a daily cap.
--
-- Every call to RevenueCat takes a slot of one budget (REVENUECAT_REQUESTS_PER_SECOND, spaced
-- p_slot_ms apart, billing_sync_rate.next_slot_at). Refreshes were limited per user only (one per
-- 5 s), so five accounts refreshing every 5 s took every slot at the default of one a second: every
-- other user's refresh waited in vain (503), and each of those 503s queued the user for the sweep,
-- which then spent its own slots on them. Now:
--   * users' refreshes are also counted on a second clock, the users' lane (user_next_slot_at, the
--     generic cell rate algorithm): each moves it p_slot_ms / p_user_share on, and a refresh whose
--     slot would come before it less a tolerance (the longest a refresh waits, p_max_wait_ms, at
--     least one lane slot: users who ask together all get in, up to a few seconds' worth) is
--     refused. Users together never take more than that share of the budget over time (a burst of
--     at most the tolerance aside), and the sweep, the syncs after webhooks and the operator's
--     syncs always keep the rest. A refresh still takes the next free slot of the budget itself,
--     so no slot is left unused behind it;
--   * a user's refreshes that reached RevenueCat are counted per day (a window that starts at the
--     first of them): past p_user_daily_limit the answer is limitedBy 'day' until the window ends;
--   * a refresh the budget refused writes nothing: no interval used up, nothing counted (and the
--     service no longer queues the user for the sweep: lib/billing/sync.ts).

alter table public.billing_sync_rate add column user_next_slot_at timestamptz not null default '-infinity';

-- The per-user day: when its window started and how many refreshes reached RevenueCat in it.
alter table public.billing_sync_requests
  add column day_started_at timestamptz,
  add column day_count integer not null default 0 check (day_count >= 0);

drop function public.billing_sync_begin(text, integer, integer, integer);

-- Before a call to RevenueCat. For a user's own refresh (p_user_id set): at most one per
-- p_user_interval_seconds (else {retryAfterSeconds, limitedBy: 'user'}) and at most
-- p_user_daily_limit a day (else {retryAfterSeconds, limitedBy: 'day'}); then the next slot in the
-- shared budget, p_slot_ms apart, which a user's refresh may take only when the users' lane allows
-- it (see above). Returns {waitMs}: how long to wait for the slot, or {retryAfterSeconds,
-- limitedBy: 'budget'} when the lane is spent or the wait would be more than p_max_wait_ms (nothing
-- reserved, nothing counted). p_user_share and p_user_daily_limit null: no lane, no cap (what the previous version
-- did, for a caller that does not pass them). One call, so a refresh costs one round trip before
-- RevenueCat.
create function public.billing_sync_begin(
  p_user_id text,
  p_user_interval_seconds integer,
  p_slot_ms integer,
  p_max_wait_ms integer,
  p_user_share numeric default null,
  p_user_daily_limit integer default null
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_last timestamptz;
  v_day_started timestamptz;
  v_day_count integer;
  v_slot timestamptz;
  v_user_next timestamptz;
  v_lane_ms numeric;
  v_tolerance interval;
  v_in_user_lane boolean := p_user_id is not null and p_user_share is not null;
  v_wait_ms integer;
begin
  if p_user_share is not null and (p_user_share <= 0 or p_user_share > 1) then
    raise exception 'invalid_request' using errcode = 'PT400', detail = 'The users'' share of the budget must be in (0, 1].';
  end if;
  if p_user_id is not null then
    -- The row exists before it is locked, so two first refreshes of one user at once take turns.
    insert into public.billing_sync_requests (app_user_id, requested_at) values (p_user_id, '-infinity')
    on conflict (app_user_id) do nothing;
    select requested_at, day_started_at, day_count into v_last, v_day_started, v_day_count
    from public.billing_sync_requests where app_user_id = p_user_id for update;
    if v_last > now() - make_interval(secs => p_user_interval_seconds) then
      return jsonb_build_object('limitedBy', 'user', 'retryAfterSeconds',
        greatest(1, ceil(extract(epoch from v_last + make_interval(secs => p_user_interval_seconds) - now()))::integer));
    end if;
    if v_day_started is null or v_day_started <= now() - interval '1 day' then
      v_day_started := now();
      v_day_count := 0;
    end if;
    if p_user_daily_limit is not null and v_day_count >= p_user_daily_limit then
      return jsonb_build_object('limitedBy', 'day', 'retryAfterSeconds',
        greatest(1, ceil(extract(epoch from v_day_started + interval '1 day' - now()))::integer));
    end if;
  end if;

  select greatest(next_slot_at, now()), user_next_slot_at into v_slot, v_user_next
  from public.billing_sync_rate for update;
  if v_in_user_lane then
    v_lane_ms := p_slot_ms / p_user_share;
    v_tolerance := make_interval(secs => greatest(v_lane_ms, p_max_wait_ms) / 1000.0);
    if v_slot < v_user_next - v_tolerance then
      -- The users' share is spent for now: ask again when the lane comes round.
      return jsonb_build_object('limitedBy', 'budget', 'retryAfterSeconds',
        greatest(1, ceil(extract(epoch from v_user_next - v_tolerance - now())))::integer);
    end if;
  end if;
  v_wait_ms := greatest(0, ceil(extract(epoch from v_slot - now()) * 1000))::integer;
  if v_wait_ms > p_max_wait_ms then
    -- No refresh happened: the user may ask again as soon as a slot is free.
    return jsonb_build_object('limitedBy', 'budget', 'retryAfterSeconds', greatest(1, ceil(v_wait_ms / 1000.0))::integer);
  end if;
  update public.billing_sync_rate set
    next_slot_at = v_slot + make_interval(secs => p_slot_ms / 1000.0),
    user_next_slot_at = case when v_in_user_lane then greatest(user_next_slot_at, v_slot) + make_interval(secs => v_lane_ms / 1000.0) else user_next_slot_at end;
  if p_user_id is not null then
    update public.billing_sync_requests set requested_at = now(), day_started_at = v_day_started, day_count = v_day_count + 1
    where app_user_id = p_user_id;
  end if;
  return jsonb_build_object('waitMs', v_wait_ms);
end;
$$;

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

do $$
declare
  v_fn text;
begin
  foreach v_fn in array array[
    'public.billing_sync_begin(text, integer, integer, integer, numeric, integer)',
    'public.billing_sync_maintain(timestamptz, timestamptz)'
  ] loop
    execute format('revoke all on function %s from public, anon, authenticated', v_fn);
    execute format('grant execute on function %s to service_role', v_fn);
  end loop;
end;
$$;
