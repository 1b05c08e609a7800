-- Billing, the event log: every RevenueCat event as it arrived (the raw body and the plan the
-- service made of it), deduplicated by id, kept by the month it was received, and the sort keys the
-- fold orders events by. The fold (03_billing_fold.sql) reads it; maintenance (08_maintenance.sql)
-- checkpoints and drops old months. The model: docs/billing.md.

-- 1. Dedupe keys.
create table public.billing_event_ids (
  event_id text primary key check (char_length(event_id) between 1 and 256),
  received_at timestamptz not null
);
alter table public.billing_event_ids enable row level security;
create index billing_event_ids_received_idx on public.billing_event_ids (received_at);
revoke all on table public.billing_event_ids from public, anon, authenticated;

-- Billing retention: the event log kept by month, for a limited time, without changing
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
create table public.billing_events (
  -- The checks keep the names the table had when it was made (as billing_events_partitioned).
  event_id text not null constraint billing_events_partitioned_event_id_check check (char_length(event_id) between 1 and 256),
  type text not null,
  -- event.app_user_id as sent (null for TRANSFER); owner_id is whose entitlements it changed.
  app_user_id text,
  event_at timestamptz not null,
  received_at timestamptz not null default now(),
  outcome text not null constraint billing_events_partitioned_outcome_check check (outcome in ('applied', 'stale', 'ignored')),
  environment text,
  owner_id text,
  moved_ids text[] not null default '{}',
  -- The whole request body, as received (for a snapshot: RevenueCat's record without attributes).
  body jsonb not null,
  -- The id the event is filed under for folds (null: it takes no part), its rank within an instant, its plan.
  subject_id text,
  sort_rank smallint,
  plan jsonb,
  -- A snapshot that later snapshots said again: when RevenueCat's record last said the same.
  confirmed_at timestamptz,
  primary key (event_id, received_at)
) partition by range (received_at);
alter table public.billing_events enable row level security;
revoke all on table public.billing_events from public, anon, authenticated;
-- The fold reads a group's history by the id each event is filed under; the rebuild and the
-- redelivery of an old id find an event by its id.
create index billing_events_subject_idx on public.billing_events (subject_id, event_at) where subject_id is not null;
-- Deleting a user erases their events found by subject, app_user_id or owner. An event's
-- app_user_id and owner are its subject but for a few (ignored events, an anonymous app_user_id, a
-- second real id of one customer): those few are indexed, and billing_forget_user asks for exactly
-- the same rows.
create index billing_events_app_user_id_idx on public.billing_events (app_user_id)
  where app_user_id is distinct from subject_id;
create index billing_events_owner_id_idx on public.billing_events (owner_id)
  where owner_id is distinct from subject_id;

create table public.billing_events_default partition of public.billing_events default;
alter table public.billing_events_default enable row level security;
revoke all on table public.billing_events_default from public, anon, authenticated;

-- Events without an id: the first delivery of each content within the window.
create table public.billing_content_keys (
  digest text primary key check (digest ~ '^[0-9a-f]{64}$'),
  event_id text not null,
  received_at timestamptz not null
);
alter table public.billing_content_keys enable row level security;
create index billing_content_keys_received_idx on public.billing_content_keys (received_at);
revoke all on table public.billing_content_keys from public, anon, authenticated;

-- The billing webhook's small SQL functions, planned once per connection on every Postgres.
--
-- Postgres 18 keeps the plans of a LANGUAGE sql function's statements in its plan cache; Postgres 17
-- and 15 (what Supabase runs: https://github.com/supabase/postgres, "Primary Features") parse and
-- plan them again on every call that is not inlined, and a function with its own `set search_path`
-- never is. On Postgres 17, `sql-profile.ts` found an in-order renewal at 0.57 ms of Postgres CPU
-- against 0.45 on 18: the event's INSERT (public.billing_log_event) planned on every call (0.105 ms
-- against 0.046), and the sort and source keys likewise. PL/pgSQL keeps a plan per statement for the
-- connection's life on every version, so each of these is now PL/pgSQL: the same statement or
-- expression, the same volatility, the same `search_path`. What they return is unchanged (the whole
-- test suite, run on 17 and 18). Measured: docs/benchmarks.md.
--
-- The fold order as one comparable text: time (UTC, microseconds), rank, event id.
create or replace function public.billing_sort_key(p_event_at timestamptz, p_rank smallint, p_event_id text)
returns text
language plpgsql
stable
set search_path = ''
as $$
begin
  return to_char(p_event_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') || ':' || coalesce(p_rank, 1)::text || ':' || p_event_id;
end;
$$;
revoke all on function public.billing_sort_key(timestamp with time zone,smallint,text) from public, anon, authenticated;
grant execute on function public.billing_sort_key(timestamp with time zone,smallint,text) to service_role;

-- Billing, the model that holds in any delivery order.
--
-- A subscriber's entitlements are the FOLD of their events in event order: start from nothing,
-- apply each stored event's plan (what describeEventEffects() said it means) in the order RevenueCat
-- generated them. So the state depends on which events arrived, never on the order they arrived in:
--
--   * an event newer than everything its subscriber group has folded is applied on top (the common
--     case: one call of public.billing_apply_event, the same step as below);
--   * an event older than that (out of order, a lost delivery sent again, a late member of a bundle)
--     makes the group's history be folded again from the start, with it in its place.
--
-- Order: event_timestamp_ms (RevenueCat keeps it on retries), then a rank for events of one instant
-- (grants, then flags and moves, then refunds and revocations: RevenueCat's same-instant bundles,
-- such as a first payment that fails, end as the last word says), then the event id.
--
-- Groups: the ids whose events are folded together. One RevenueCat customer's ids (app_user_id,
-- original_app_user_id, aliases) are one group; a TRANSFER joins its two sides, because it moves
-- rows between them. public.billing_subscribers maps each id to its group, and the group's own row
-- holds the sort key of the last event folded (the watermark). Every call takes the advisory locks
-- of the groups it touches, in one order, so a group's events serialise.
--
-- What one step does (public.billing_apply_event) is the table in lib/billing/event-effects.ts;
-- the rules that need the stored rows are here, written once:
--   * owner: the first of the event's candidate ids that already holds rows, else the first (its
--     app_user_id, when that is not anonymous); the other ids it names merge into the owner;
--   * "grants": a row grants until grants_until (a generated column: the one rule, also used when
--     the API reads); a grant whose period starts while the row still grants continues it (later
--     expiry of the two, will_renew kept), else it starts afresh (its own expiry; renewing);
--   * flags, refunds and revocations apply to the row's current period or a later one; flags
--     extend the expiry to the later of the two (Stripe's retry window, a CANCELLATION for a period
--     whose RENEWAL is still on its way); grace merges as the later of the two;
--   * an event whose entitlement_ids are null (the dashboard mapping changed) restricts the rows
--     its product already has;
--   * lineage: of two products of one subscription (same original transaction, or one named as
--     the other's pending product), the later-started supersedes the older, every entitlement of
--     it;
--   * a real grant ends the entitlement's temporary grants; a temporary grant is refused while a
--     real row grants;
--   * TRANSFER moves the rows of its environment (and of its store when it names one).
--
-- Events recorded before plans were stored, for the service to compute their plans
-- (lib/billing/record-event.ts): p_ids a JSON array of subscriber ids. At most 1000 per call.
create or replace function public.billing_events_without_plan(p_ids jsonb)
returns jsonb
language sql
stable
security definer
set search_path = ''
as $$
  select coalesce(jsonb_agg(jsonb_build_object('event_id', e.event_id, 'event_at', e.event_at, 'body', e.body)), '[]'::jsonb)
  from (
    select event_id, event_at, body from public.billing_events
    where subject_id in (select jsonb_array_elements_text(p_ids)) and plan is null
    order by event_at, event_id
    limit 1000
  ) e
$$;
revoke all on function public.billing_events_without_plan(jsonb) from public, anon, authenticated;
grant execute on function public.billing_events_without_plan(jsonb) to service_role;

-- Store plans computed by the service: [{eventId, plan}]. The plan's rank and subject are stored
-- beside it; the event's time and outcome stay as recorded.
create or replace function public.billing_store_plans(p_plans jsonb)
returns integer
language sql
volatile
security definer
set search_path = ''
as $$
  with updated as (
    update public.billing_events e set
      plan = p.value->'plan',
      sort_rank = coalesce((p.value->'plan'->>'rank')::smallint, 1),
      -- An event the current code ignores takes no part in folds.
      subject_id = case when p.value->'plan'->>'ignoredReason' is null then coalesce(p.value->'plan'->>'subjectId', e.subject_id) end
    from jsonb_array_elements(p_plans) as p(value)
    where e.event_id = p.value->>'eventId'
    returning 1
  )
  select count(*)::integer from updated
$$;
revoke all on function public.billing_store_plans(jsonb) from public, anon, authenticated;
grant execute on function public.billing_store_plans(jsonb) to service_role;

-- Flat cost as the tables grow: what tests/db/query-plans.test.ts found reading a big
-- table whole, at the volume of `npm run bench -- --scale` (1M billing events over 13 months, 300k
-- subscribers, 200k wallets, 20k leagues), each fixed with an index or a query change. Every
-- statement of the SQL functions is now an index lookup at that size (the test shows each plan).
--
-- 1. The webhook: an event naming an anonymous id (most of RevenueCat's, whose aliases carry the
--    $RCAnonymousID the app started with) merges it into the owner, and the merge looks for the
--    ids that read another id's rows, `app_user_id = any (v_moved) or customer_id = any (v_moved)`:
--    without an index on customer_id that read every billing_subscribers row, on every such event.
--
-- The log the rebuild walks: every entry, a page at a time after p_after_event_id (event id order).
--
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
revoke all on function public.billing_events_page(text,integer) from public, anon, authenticated;
grant execute on function public.billing_events_page(text,integer) to service_role;

-- Billing sync: entitlements that converge on RevenueCat's own record.
--
-- A snapshot of the customer from RevenueCat's REST API (lib/billing/sync.ts) is one more entry of
-- the log the entitlements are folded from (public.billing_log_and_fold): filed at its
-- request_date_ms, authoritative for the customer as of then, overtaken by every webhook event after
-- it. What a sync needs besides: a shared budget of calls to RevenueCat, a per-user limit on
-- "Refresh purchases", a queue the webhook marks and the sweep works through, and a way to fold
-- a customer's history again with the current decision code (npm run billing:rebuild).
--
-- The entries of the log with these ids (the rebuild reads one customer's at a time).
create or replace function public.billing_events_by_id(p_event_ids jsonb)
returns jsonb
language sql
stable
security definer
set search_path = ''
as $$
  select coalesce(jsonb_agg(jsonb_build_object('eventId', e.event_id, 'eventAt', e.event_at, 'type', e.type, 'appUserId', e.app_user_id,
                                               'subjectId', e.subject_id, 'body', e.body)), '[]'::jsonb)
  from public.billing_events e
  where e.event_id in (select jsonb_array_elements_text(p_event_ids))
$$;
revoke all on function public.billing_events_by_id(jsonb) from public, anon, authenticated;
grant execute on function public.billing_events_by_id(jsonb) to service_role;

-- Billing retention: the event log kept by month, for a limited time, without changing
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
--
-- 3. The partitioned log. Months are named billing_events_YYYY_MM.
create or replace function public.billing_events_partition_name(p_month date)
returns text
language sql
immutable
set search_path = ''
as $$
  select 'billing_events_' || to_char(p_month, 'YYYY_MM')
$$;
revoke all on function public.billing_events_partition_name(date) from public, anon, authenticated;
grant execute on function public.billing_events_partition_name(date) to service_role;

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
revoke all on function public.billing_ensure_partitions(date,date) from public, anon, authenticated;
grant execute on function public.billing_ensure_partitions(date,date) to service_role;

-- One row of the event log, as billing_log_and_fold files it (an ignored event takes part in no
-- fold: no subject, no moves).
create or replace function public.billing_log_event(p_body jsonb, p_plan jsonb, p_received timestamptz, p_outcome text, p_owner text, p_ignored boolean)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  insert into public.billing_events (event_id, type, app_user_id, event_at, received_at, outcome, environment, owner_id, moved_ids, body, plan, subject_id, sort_rank)
  values (p_plan->>'eventId', coalesce(p_plan->>'type', ''), p_plan->>'appUserId', (p_plan->>'eventAt')::timestamptz, p_received,
          p_outcome, p_plan->>'environment', p_owner,
          case when p_ignored then '{}'::text[] else array(select jsonb_array_elements_text(coalesce(p_plan->'movedIds', '[]'::jsonb))) end,
          p_body, p_plan, case when not p_ignored then p_plan->>'subjectId' end, coalesce((p_plan->>'rank')::smallint, 1));
end;
$$;
revoke all on function public.billing_log_event(jsonb,jsonb,timestamp with time zone,text,text,boolean) from public, anon, authenticated;
grant execute on function public.billing_log_event(jsonb,jsonb,timestamp with time zone,text,text,boolean) to service_role;

-- The settings of the bounds, one place each.
create or replace function public.billing_tail_bound()
returns integer
language plpgsql
immutable
set search_path = ''
as $$
begin
  return 200;
end;
$$;
revoke all on function public.billing_tail_bound() from public, anon, authenticated;
grant execute on function public.billing_tail_bound() to service_role;

-- How old a group's last event must be before a webhook checkpoints the group there: an event
-- generated before a checkpoint can no longer be folded in its place. RevenueCat's automatic
-- retries end within hours, but a delivery that failed throughout may be sent again from its
-- dashboard once the server is fixed ("Retrying a Failed Webhook", integrations/webhooks), days
-- later: a refund sent again 6 days late was stale under a lag of 3 days, and left the refunded
-- purchase granting. A month covers a long outage; a group with recent events is checkpointed
-- before them (public.billing_checkpoint_before), so its tail stays about a month long.
create or replace function public.billing_checkpoint_lag()
returns interval
language plpgsql
immutable
set search_path = ''
as $$
begin
  return interval '30 days';
end;
$$;
revoke all on function public.billing_checkpoint_lag() from public, anon, authenticated;
grant execute on function public.billing_checkpoint_lag() to service_role;

-- The billing log with bounded work: what one customer does can no longer grow the
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
--      * when the group's state is a month old (pending_since), the next event first checkpoints
--        the group at its newest event at least billing_checkpoint_lag() old (RevenueCat's retries,
--        and a resend from its dashboard after an outage, are over for anything before it): where
--        it stands, a copy of its rows, when that is its last event; else one replay of its tail
--        (public.billing_checkpoint_before);
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
create or replace function public.billing_content_window()
returns interval
language sql
immutable
set search_path = ''
as $$ select interval '3 hours' $$;
revoke all on function public.billing_content_window() from public, anon, authenticated;
grant execute on function public.billing_content_window() to service_role;

-- The event time of a sort key (public.billing_sort_key); null when it does not read as one.
create or replace function public.billing_key_time(p_key text)
returns timestamptz
language plpgsql
stable
set search_path = ''
as $$
begin
  return case when p_key ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}:'
              then (left(p_key, 26) || '+00')::timestamptz end;
end;
$$;
revoke all on function public.billing_key_time(text) from public, anon, authenticated;
grant execute on function public.billing_key_time(text) to service_role;

-- The event id of a sort key (what follows its time and rank).
create or replace function public.billing_key_event(p_key text)
returns text
language plpgsql
immutable
set search_path = ''
as $$
begin
  return substring(p_key from '^[^:]*:[^:]*:[^:]*:[^:]*:(.*)$');
end;
$$;
revoke all on function public.billing_key_event(text) from public, anon, authenticated;
grant execute on function public.billing_key_event(text) to service_role;

-- The answer to a delivery of an event already recorded: the first delivery's outcome.
create or replace function public.billing_recorded_event(p_event_id text)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select coalesce((
    select jsonb_build_object('duplicate', true, 'outcome', e.outcome, 'ownerId', e.owner_id)
    from public.billing_event_ids d join public.billing_events e on e.event_id = d.event_id and e.received_at = d.received_at
    where d.event_id = p_event_id), jsonb_build_object('duplicate', true, 'outcome', 'stale', 'ownerId', null)));
end;
$$;
revoke all on function public.billing_recorded_event(text) from public, anon, authenticated;
grant execute on function public.billing_recorded_event(text) to service_role;

-- The months ahead, as maintenance keeps them (a new database receives its first events at once).
select public.billing_ensure_partitions(current_date, (now() + interval '12 months')::date);
