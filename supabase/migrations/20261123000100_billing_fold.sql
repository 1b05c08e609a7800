-- Billing, the model that holds in any delivery order (issue 11).
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

-- 1. The event log: what each event is filed under, its plan, and its rank within an instant.
alter table public.billing_events
  add column subject_id text,
  add column sort_rank smallint,
  add column plan jsonb;

-- Events recorded before this migration: filed under their id; their plans are computed by the
-- service when a fold first needs them (lib/billing/record-event.ts) or by `npm run billing:rebuild`.
-- subject_id is set exactly for the events that take part in folds (not the ignored ones).
update public.billing_events set subject_id = coalesce(app_user_id, owner_id) where subject_id is null and outcome <> 'ignored';

-- Nothing reads these any more: moves are found through the groups, events through subject_id.
drop index if exists public.billing_events_app_user_id_idx;
drop index if exists public.billing_events_moved_ids_idx;
create index billing_events_subject_idx on public.billing_events (subject_id, event_at) where subject_id is not null;

-- 2. Groups and their watermark.
create table public.billing_subscribers (
  app_user_id text primary key check (char_length(app_user_id) between 1 and 256),
  -- The group this id's events are folded with, named by one of its ids (whose row has group_id = app_user_id).
  group_id text not null,
  -- On the group's own row: the sort key (public.billing_sort_key) of the last event folded.
  folded_key text,
  -- The id that holds this id's rows when RevenueCat named both as one customer (a merge: legacy
  -- aliasing, an anonymous id): GET /api/me of either shows them. Null: it holds its own.
  customer_id text
);
create index billing_subscribers_group_idx on public.billing_subscribers (group_id);
alter table public.billing_subscribers enable row level security;
revoke all on table public.billing_subscribers from public, anon, authenticated;

-- Subscribers to fetch from RevenueCat's REST API (lib/billing/sync.ts): marked by the webhook in
-- the same transaction as an event that cannot say everything (a TRANSFER, a refund, a product or
-- entitlement not seen before; every event with BILLING_SYNC_AFTER=all), cleared by the snapshot
-- that answers it. The sweep (GET /api/cron/billing-sync) works through what is due.
create table public.billing_sync_queue (
  app_user_id text primary key check (char_length(app_user_id) between 1 and 256),
  reason text not null,
  requested_at timestamptz not null default now(),
  attempts integer not null default 0,
  -- Not before this (a failure's backoff, or a sweep's lease while it works on it).
  next_attempt_at timestamptz not null default now(),
  last_error text
);
create index billing_sync_queue_due_idx on public.billing_sync_queue (next_attempt_at);
alter table public.billing_sync_queue enable row level security;
revoke all on table public.billing_sync_queue from public, anon, authenticated;

-- 3. Entitlement rows: keyed by source, with the grants rule as a column.
-- The old key's check (an md5 of environment and product): the key is public.billing_source_key now.
do $$
declare
  v_name text;
begin
  for v_name in
    select conname from pg_constraint
    where conrelid = 'public.entitlements'::regclass and contype = 'c' and pg_get_constraintdef(oid) like '%md5%'
  loop
    execute format('alter table public.entitlements drop constraint %I', v_name);
  end loop;
end;
$$;
alter table public.entitlements rename column product_key to source_key;
-- When the grant that began the row's current period happened (event time): orders the products
-- of one subscription lineage. Not the purchase time: Stripe reports the product a subscription
-- changed to with the subscription's original start (t0), even in a later period.
alter table public.entitlements add column granted_at timestamptz;
-- Where the row's state came from: a webhook event, or a snapshot of RevenueCat's own record
-- (lib/billing/sync.ts); and when a snapshot last confirmed it.
alter table public.entitlements add column origin text not null default 'webhook' check (origin in ('webhook', 'sync'));
alter table public.entitlements add column synced_at timestamptz;
-- Until when the row grants access ('infinity': forever; '-infinity': not at all). THE rule for
-- "grants": the API's `active` and effective status, the row shown, and every guard below read it.
alter table public.entitlements add column grants_until timestamptz generated always as (
  case
    when status in ('active', 'cancelled_active', 'temporary', 'billing_issue') then coalesce(expires_at, 'infinity')
    when status = 'grace' then coalesce(greatest(expires_at, grace_expires_at), 'infinity')
    else '-infinity'
  end
) stored;

-- The row key of an event's source, of bounded size: (environment, store, product), or, for an
-- event that names no product, (environment, store, its original transaction), so a product-less
-- expiry never touches another purchase, and a refund on one store never ends what the same
-- product id pays for on another. A JSON array, so no two different parts can spell the same key.
create or replace function public.billing_source_key(p_environment text, p_store text, p_product_id text, p_original_transaction_id text, p_transaction_id text)
returns text
language sql
immutable
set search_path = ''
as $$
  select md5(jsonb_build_array(
    upper(coalesce(p_environment, 'PRODUCTION')),
    upper(coalesce(p_store, '')),
    p_product_id,
    case when p_product_id is null then coalesce(p_original_transaction_id, p_transaction_id) end
  )::text)
$$;

update public.entitlements
set source_key = public.billing_source_key(environment, store, product_id, original_transaction_id, transaction_id);

-- The fold order as one comparable text: time (UTC, microseconds), rank, event id.
create or replace function public.billing_sort_key(p_event_at timestamptz, p_rank smallint, p_event_id text)
returns text
language sql
stable
set search_path = ''
as $$
  select to_char(p_event_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') || ':' || coalesce(p_rank, 1)::text || ':' || p_event_id
$$;

-- 4. Lock the groups of p_ids (an id without one stands for itself), join them into one, and
-- return its name. Locks are taken in name order; a group merged away meanwhile is re-read and
-- its successor locked too. Joining keeps the latest watermark (and, for ids seen for the first
-- time, the latest event already filed under them: events recorded before groups existed).
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
  if cardinality(v_new) > 0 then
    v_key := greatest(v_key collate "C", (
      select max(public.billing_sort_key(e.event_at, e.sort_rank, e.event_id) collate "C")
      from public.billing_events e where e.subject_id = any (v_new)));
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

-- 5. One step of the fold: apply one event's plan to the stored rows, as of the event's time.
-- Returns {outcome: applied | stale | ignored, ownerId}. Called with the event's group locked.
create or replace function public.billing_apply_event(p_plan jsonb, p_event_id text, p_event_at timestamptz)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  c_granting constant text[] := array['active', 'cancelled_active', 'temporary', 'billing_issue', 'grace'];
  v_period jsonb := coalesce(p_plan->'period', '{}'::jsonb);
  v_environment text := p_plan->>'environment';
  v_env_key text := upper(coalesce(p_plan->>'environment', 'PRODUCTION'));
  v_store text := v_period->>'store';
  v_source_key text := public.billing_source_key(p_plan->>'environment', v_period->>'store', v_period->>'productId',
                                                  v_period->>'originalTransactionId', v_period->>'transactionId');
  v_purchased timestamptz := (v_period->>'purchasedAt')::timestamptz;
  v_period_expires timestamptz := (v_period->>'expiresAt')::timestamptz;
  -- Where the event's period begins: whether a row "still grants" is judged there.
  v_start timestamptz := coalesce((v_period->>'purchasedAt')::timestamptz, p_event_at);
  v_move text := p_plan->>'move';
  v_owner text;
  v_moved text[];
  v_src public.entitlements%rowtype;
  v_row public.entitlements%rowtype;
  v_effect jsonb;
  v_entitlement text;
  v_action text;
  v_renewal text;
  v_status text;
  v_status_from text[];
  v_will_renew boolean;
  v_expires timestamptz;
  v_continues boolean;
  v_new_period boolean;
  v_found boolean;
  v_applied integer := 0;
  v_stale integer := 0;
  v_granted text[] := '{}';
  v_source jsonb;
  v_key text;
  v_keys text[] := '{}';
  v_products text[] := '{}';
begin
  -- Owner: the first candidate that already holds rows (one subscriber seen under two real ids
  -- keeps one state), else the first.
  select c.id into v_owner
  from jsonb_array_elements_text(coalesce(p_plan->'ownerCandidates', '[]'::jsonb)) with ordinality as c(id, n)
  where exists (select 1 from public.entitlements e where e.app_user_id = c.id and e.status <> 'transferred')
  order by c.n
  limit 1;
  v_owner := coalesce(v_owner, p_plan->'ownerCandidates'->>0);
  if v_owner is null then
    return jsonb_build_object('outcome', 'ignored', 'ownerId', null);
  end if;

  -- Moves: the other ids' rows go to the owner (a merge: every row; a TRANSFER: the rows of its
  -- environment, and of its store when it names one, leaving `transferred` rows behind). Where the
  -- owner has a row of the same source, the one that grants longer stays (then the newer).
  v_moved := array(select distinct value from jsonb_array_elements_text(coalesce(p_plan->'movedIds', '[]'::jsonb)) where value <> v_owner);
  -- A TRANSFER names ids of the source customer: where one of them was merged into another id of
  -- that customer, the rows are there.
  if v_move = 'transfer' then
    v_moved := v_moved || array(select distinct s.customer_id from public.billing_subscribers s
                                where s.app_user_id = any (v_moved) and s.customer_id is not null and s.customer_id <> v_owner);
  end if;
  if v_move in ('merge', 'transfer') and cardinality(v_moved) > 0 then
    for v_src in
      select * from public.entitlements
      where app_user_id = any (v_moved) and status <> 'transferred'
        and (v_move = 'merge' or (upper(coalesce(environment, 'PRODUCTION')) = v_env_key and (v_store is null or store = v_store)))
      order by app_user_id collate "C", entitlement_id collate "C", source_key
      for update
    loop
      select * into v_row from public.entitlements
      where app_user_id = v_owner and entitlement_id = v_src.entitlement_id and source_key = v_src.source_key
      for update;
      v_found := found;
      if not v_found or (v_src.grants_until, v_src.last_event_at) > (v_row.grants_until, v_row.last_event_at) then
        if v_found then
          delete from public.entitlements where app_user_id = v_owner and entitlement_id = v_src.entitlement_id and source_key = v_src.source_key;
        end if;
        insert into public.entitlements (
          app_user_id, entitlement_id, product_id, source_key, status, will_renew, expires_at, grace_expires_at, pending_product_id,
          store, environment, period_type, original_transaction_id, transaction_id, period_purchased_at, auto_resume_at, granted_at,
          origin, synced_at, last_event_id, last_event_at
        ) values (
          v_owner, v_src.entitlement_id, v_src.product_id, v_src.source_key, v_src.status, v_src.will_renew, v_src.expires_at,
          v_src.grace_expires_at, v_src.pending_product_id, v_src.store, v_src.environment, v_src.period_type,
          v_src.original_transaction_id, v_src.transaction_id, v_src.period_purchased_at, v_src.auto_resume_at, v_src.granted_at,
          v_src.origin, v_src.synced_at, v_src.last_event_id, greatest(v_src.last_event_at, case when v_found then v_row.last_event_at end)
        );
      end if;
      if v_move = 'transfer' then
        update public.entitlements
        set status = 'transferred', will_renew = false, grace_expires_at = null, origin = 'webhook', last_event_id = p_event_id,
            last_event_at = greatest(last_event_at, p_event_at), updated_at = now()
        where app_user_id = v_src.app_user_id and entitlement_id = v_src.entitlement_id and source_key = v_src.source_key;
      else
        delete from public.entitlements
        where app_user_id = v_src.app_user_id and entitlement_id = v_src.entitlement_id and source_key = v_src.source_key;
      end if;
      v_applied := v_applied + 1;
    end loop;
  end if;
  -- One customer under several ids: every other real id it names (and whatever was merged into
  -- them) reads the owner's rows from now on. (An anonymous id is never signed in as.)
  if v_move = 'merge' and cardinality(v_moved) > 0 then
    update public.billing_subscribers set customer_id = v_owner
    where (app_user_id = any (v_moved) or customer_id = any (v_moved)) and app_user_id <> v_owner
      and not starts_with(app_user_id, '$RCAnonymousID:') and customer_id is distinct from v_owner;
    update public.billing_subscribers set customer_id = null where app_user_id = v_owner and customer_id is not null;
  end if;

  -- A snapshot of RevenueCat's own record (lib/billing/snapshot.ts) is authoritative as of its
  -- time: each product it shows is written as it says, for the entitlements it maps to it and for
  -- the owner's other rows of that product; rows of products it no longer shows stop granting.
  -- Events after it in the fold still apply on top of it.
  for v_source in select value from jsonb_array_elements(coalesce(p_plan->'snapshot'->'sources', '[]'::jsonb)) loop
    v_key := public.billing_source_key(v_source->>'environment', v_source->>'store', v_source->>'productId', null, v_source->>'transactionId');
    v_keys := v_keys || v_key;
    v_products := v_products || (v_source->>'productId');
    insert into public.entitlements (
      app_user_id, entitlement_id, product_id, source_key, status, will_renew, expires_at, grace_expires_at,
      store, environment, period_type, transaction_id, period_purchased_at, auto_resume_at, granted_at,
      origin, synced_at, last_event_id, last_event_at
    )
    select v_owner, ids.id, v_source->>'productId', v_key, v_source->>'status', (v_source->>'willRenew')::boolean,
           (v_source->>'expiresAt')::timestamptz, (v_source->>'graceExpiresAt')::timestamptz,
           v_source->>'store', v_source->>'environment', v_source->>'periodType', v_source->>'transactionId',
           (v_source->>'purchasedAt')::timestamptz, (v_source->>'autoResumeAt')::timestamptz, p_event_at,
           'sync', p_event_at, p_event_id, p_event_at
    from jsonb_array_elements_text(coalesce(v_source->'entitlementIds', '[]'::jsonb)) as ids(id)
    on conflict (app_user_id, entitlement_id, source_key) do nothing;
    update public.entitlements set
      status = v_source->>'status',
      will_renew = (v_source->>'willRenew')::boolean,
      expires_at = (v_source->>'expiresAt')::timestamptz,
      grace_expires_at = (v_source->>'graceExpiresAt')::timestamptz,
      store = coalesce(v_source->>'store', store),
      environment = coalesce(v_source->>'environment', environment),
      period_type = coalesce(v_source->>'periodType', period_type),
      transaction_id = coalesce(v_source->>'transactionId', transaction_id),
      period_purchased_at = coalesce((v_source->>'purchasedAt')::timestamptz, period_purchased_at),
      auto_resume_at = (v_source->>'autoResumeAt')::timestamptz,
      granted_at = p_event_at,
      origin = 'sync',
      synced_at = p_event_at,
      last_event_id = p_event_id,
      last_event_at = greatest(last_event_at, p_event_at),
      updated_at = now()
    where app_user_id = v_owner and source_key = v_key and last_event_id <> p_event_id;
    v_applied := v_applied + 1;
  end loop;
  if p_plan ? 'snapshot' then
    update public.entitlements set
      status = 'expired',
      will_renew = false,
      expires_at = least(coalesce(expires_at, 'infinity'), p_event_at),
      grace_expires_at = null,
      origin = 'sync',
      synced_at = p_event_at,
      last_event_id = p_event_id,
      last_event_at = greatest(last_event_at, p_event_at),
      updated_at = now()
    -- (By product, not by source: v1 keys subscriptions by product, so a sandbox purchase of a
    -- product hides the production one of the same product from the snapshot; that one stays.)
    where app_user_id = v_owner and not source_key = any (v_keys) and grants_until > p_event_at
      and not coalesce(product_id = any (v_products), false);
    v_applied := v_applied + 1;
  end if;

  -- Effects, per entitlement, on the owner's row of the event's source.
  for v_effect in select value from jsonb_array_elements(coalesce(p_plan->'effects', '[]'::jsonb)) loop
    v_entitlement := v_effect->>'entitlementId';
    v_action := v_effect->>'action';
    v_renewal := v_effect->>'renewal';
    v_expires := (v_effect->>'expiresAt')::timestamptz;
    v_status_from := case when jsonb_typeof(v_effect->'statusFrom') = 'array'
                          then array(select jsonb_array_elements_text(v_effect->'statusFrom')) end;

    -- A provisional grant never stands beside a real one that grants when it begins.
    if v_action = 'temporary_grant' and exists (
      select 1 from public.entitlements
      where app_user_id = v_owner and entitlement_id = v_entitlement and status <> 'temporary'
        and upper(coalesce(environment, 'PRODUCTION')) = v_env_key and grants_until > v_start
    ) then
      v_stale := v_stale + 1;
      continue;
    end if;

    -- The rows it changes: the entitlement's row of this source, or, when the event names no
    -- entitlements, every row this source has (never a new one).
    v_found := false;
    for v_row in
      select * from public.entitlements
      where app_user_id = v_owner and source_key = v_source_key and (v_entitlement is null or entitlement_id = v_entitlement)
      order by entitlement_id collate "C"
      for update
    loop
      v_found := true;
      if v_action in ('grant', 'temporary_grant') then
        -- Continues the stored period when that still grants as this one begins (a renewal); else
        -- (lapsed, expired, refunded, temporary) it starts afresh.
        v_continues := v_row.grants_until >= v_start and v_row.status <> 'temporary' and v_action = 'grant';
        v_new_period := v_purchased is not null and (v_row.period_purchased_at is null or v_purchased > v_row.period_purchased_at);
        -- 'continue' (a renewal, an extension) keeps what the subscriber chose,
        -- unless the period it continues had lapsed or was failing to charge (a billing error turned
        -- renewal off; the payment that recovers it turns it back on).
        v_will_renew := case v_renewal when 'on' then true when 'off' then false
                                       when 'continue' then not v_continues or v_row.will_renew or v_row.status in ('billing_issue', 'grace')
                                       else v_row.will_renew end;
        v_status := case when v_action = 'temporary_grant' then 'temporary'
                         when not v_will_renew and v_renewal <> 'off' then 'cancelled_active'
                         else 'active' end;
        update public.entitlements set
          status = v_status,
          will_renew = v_will_renew,
          expires_at = case when v_continues
                            then nullif(greatest(coalesce(v_row.expires_at, 'infinity'), coalesce(v_expires, 'infinity')), 'infinity')
                            else v_expires end,
          grace_expires_at = null,
          pending_product_id = case when v_continues and not v_new_period then v_row.pending_product_id end,
          auto_resume_at = null,
          store = coalesce(v_store, v_row.store),
          environment = coalesce(v_environment, v_row.environment),
          period_type = case when v_new_period or not v_continues then coalesce(v_period->>'periodType', v_row.period_type) else v_row.period_type end,
          original_transaction_id = coalesce(v_period->>'originalTransactionId', v_row.original_transaction_id),
          transaction_id = case when v_new_period or not v_continues then coalesce(v_period->>'transactionId', v_row.transaction_id) else v_row.transaction_id end,
          period_purchased_at = case when v_new_period or not v_continues then coalesce(v_purchased, v_row.period_purchased_at) else v_row.period_purchased_at end,
          granted_at = case when v_new_period or not v_continues or v_row.granted_at is null then p_event_at else v_row.granted_at end,
          origin = 'webhook',
          last_event_id = p_event_id,
          last_event_at = greatest(v_row.last_event_at, p_event_at),
          updated_at = now()
        where app_user_id = v_row.app_user_id and entitlement_id = v_row.entitlement_id and source_key = v_row.source_key;
        if v_action = 'grant' then v_granted := v_granted || v_row.entitlement_id; end if;
        v_applied := v_applied + 1;
        continue;
      end if;

      -- flag / refund / revoke: only about the row's current period or a later one.
      if not (
        coalesce(v_period_expires, 'infinity') >= coalesce(v_row.expires_at, 'infinity')
        or coalesce(v_purchased >= v_row.period_purchased_at, false)
        or coalesce(v_period->>'transactionId' = v_row.transaction_id, false)
      ) then
        v_stale := v_stale + 1;
        continue;
      end if;
      v_status := v_effect->>'status';
      if v_status is null or (v_status_from is not null and not v_row.status = any (v_status_from)) then
        v_status := v_row.status;
      end if;
      v_new_period := v_purchased is not null and v_purchased > v_row.period_purchased_at;
      update public.entitlements set
        status = v_status,
        will_renew = case v_renewal when 'on' then true when 'off' then false else v_row.will_renew end,
        expires_at = case v_effect->>'expiry'
                       when 'set' then v_expires
                       -- The later of the two; an event without an expiry says nothing about it.
                       when 'extend' then case when v_expires is null or v_row.expires_at is null then v_row.expires_at
                                               else greatest(v_row.expires_at, v_expires) end
                       else v_row.expires_at end,
        grace_expires_at = case when v_status = 'grace' then greatest(v_row.grace_expires_at, (v_effect->>'graceExpiresAt')::timestamptz) end,
        pending_product_id = case when v_effect->>'pendingProductId' is null then v_row.pending_product_id
                                  else nullif(v_effect->>'pendingProductId', v_row.product_id) end,
        auto_resume_at = coalesce((v_effect->>'autoResumeAt')::timestamptz, v_row.auto_resume_at),
        period_type = case when v_new_period then coalesce(v_period->>'periodType', v_row.period_type) else v_row.period_type end,
        transaction_id = case when v_new_period then coalesce(v_period->>'transactionId', v_row.transaction_id) else v_row.transaction_id end,
        period_purchased_at = case when v_new_period then v_purchased else v_row.period_purchased_at end,
        origin = 'webhook',
        last_event_id = p_event_id,
        last_event_at = greatest(v_row.last_event_at, p_event_at),
        updated_at = now()
      where app_user_id = v_row.app_user_id and entitlement_id = v_row.entitlement_id and source_key = v_row.source_key;
      v_applied := v_applied + 1;
    end loop;
    if v_found or v_entitlement is null then
      if not v_found then v_stale := v_stale + 1; end if;
      continue;
    end if;

    -- No row yet: a grant creates it; a flag, refund or revocation only when it says how long
    -- access lasts (RevenueCat sends those for live subscriptions), starting from what it says.
    if v_action not in ('grant', 'temporary_grant') and not coalesce((v_effect->>'createsRow')::boolean, false) then
      v_stale := v_stale + 1;
      continue;
    end if;
    v_status := case
      when v_action = 'temporary_grant' then 'temporary'
      when v_action = 'grant' then 'active'
      when v_effect->>'status' is not null and (v_status_from is null or 'active' = any (v_status_from)) then v_effect->>'status'
      else 'active' end;
    insert into public.entitlements (
      app_user_id, entitlement_id, product_id, source_key, status, will_renew, expires_at, grace_expires_at, pending_product_id,
      store, environment, period_type, original_transaction_id, transaction_id, period_purchased_at, auto_resume_at, granted_at,
      last_event_id, last_event_at
    ) values (
      v_owner, v_entitlement, v_period->>'productId', v_source_key, v_status, v_renewal is distinct from 'off',
      case when v_action in ('grant', 'temporary_grant') or v_effect->>'expiry' = 'set' then v_expires else v_period_expires end,
      case when v_status = 'grace' then (v_effect->>'graceExpiresAt')::timestamptz end,
      nullif(v_effect->>'pendingProductId', v_period->>'productId'),
      v_store, v_environment, v_period->>'periodType', v_period->>'originalTransactionId', v_period->>'transactionId', v_purchased,
      (v_effect->>'autoResumeAt')::timestamptz, case when v_action = 'grant' then p_event_at end,
      p_event_id, p_event_at
    );
    if v_action = 'grant' then v_granted := v_granted || v_entitlement; end if;
    v_applied := v_applied + 1;
  end loop;

  -- Lineage: when a subscription changes product, the new product's rows continue the old one's
  -- subscription (same original transaction, or the product the old row named as pending). The
  -- later-started (the grant that began its period came later) supersedes: every row of the older
  -- product stops granting (expired, not renewing, ending when the newer began), whichever
  -- entitlements each product grants. One exception, Apple's: an upgrade during an introductory
  -- offer (a free trial) keeps the offer's product active to its end beside the new one; it only
  -- stops renewing.
  with superseded as (
    select o.entitlement_id, o.source_key, min(greatest(n.period_purchased_at, n.granted_at)) as at, max(n.last_event_at) as news_at,
           upper(coalesce(o.store, '')) = 'APP_STORE' and upper(coalesce(o.period_type, '')) in ('TRIAL', 'INTRO') as keeps_offer
    from public.entitlements o
    join public.entitlements n on n.app_user_id = o.app_user_id and n.source_key <> o.source_key
    where o.app_user_id = v_owner
      and v_source_key in (o.source_key, n.source_key)
      and o.status = any (c_granting)
      and o.product_id is not null and n.product_id is not null and n.product_id <> o.product_id
      and upper(coalesce(n.environment, 'PRODUCTION')) = upper(coalesce(o.environment, 'PRODUCTION'))
      and (n.original_transaction_id = o.original_transaction_id or n.product_id = o.pending_product_id)
      and (n.granted_at > o.granted_at
           or (n.granted_at = o.granted_at and n.period_purchased_at > o.period_purchased_at))
    group by o.entitlement_id, o.source_key, o.store, o.period_type
  )
  update public.entitlements e set
    status = case when not s.keeps_offer then 'expired' when e.status = 'active' then 'cancelled_active' else e.status end,
    will_renew = false,
    expires_at = case when s.keeps_offer then e.expires_at else least(coalesce(e.expires_at, 'infinity'), s.at) end,
    grace_expires_at = case when s.keeps_offer then e.grace_expires_at end,
    origin = 'webhook',
    last_event_id = p_event_id,
    last_event_at = greatest(e.last_event_at, s.news_at),
    updated_at = now()
  from superseded s
  where e.app_user_id = v_owner and e.entitlement_id = s.entitlement_id and e.source_key = s.source_key;

  -- A real grant ends the entitlement's provisional grants of every other source: what stands is the
  -- real purchase, so its refund or expiry ends access even when the temporary grant named another
  -- product.
  if cardinality(v_granted) > 0 then
    update public.entitlements e set
      status = 'expired',
      will_renew = false,
      expires_at = least(coalesce(e.expires_at, 'infinity'), p_event_at),
      origin = 'webhook',
      last_event_id = p_event_id,
      last_event_at = greatest(e.last_event_at, p_event_at),
      updated_at = now()
    where e.app_user_id = v_owner and e.status = 'temporary' and e.source_key <> v_source_key
      and upper(coalesce(e.environment, 'PRODUCTION')) = v_env_key
      and e.entitlement_id = any (v_granted);
  end if;

  return jsonb_build_object(
    'outcome', case when v_applied > 0 then 'applied' when v_stale > 0 then 'stale' else 'ignored' end,
    'ownerId', v_owner);
end;
$$;

-- What the group's rows say, as one value, to tell whether folding again changed anything (which
-- event touched a row last, and when it was written, do not count).
create or replace function public.billing_group_state(p_group text)
returns text
language sql
stable
set search_path = ''
as $$
  select md5(coalesce(string_agg((to_jsonb(e) - array['updated_at', 'granted_at', 'last_event_id'])::text, ',' order by e.app_user_id collate "C", e.entitlement_id collate "C", e.source_key), ''))
  from public.entitlements e
  where e.app_user_id in (select s.app_user_id from public.billing_subscribers s where s.group_id = p_group)
$$;

-- Fold the group's history again from nothing, in event order. Returns the owner the step of
-- p_event_id chose. Events recorded before this model have no plan yet: the caller computes them
-- (billing_plans_missing) and calls again.
create or replace function public.billing_refold_group(p_group text, p_event_id text)
returns text
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_members text[] := array(select app_user_id from public.billing_subscribers where group_id = p_group);
  v_event record;
  v_result jsonb;
  v_owner text;
  v_key text;
begin
  if exists (select 1 from public.billing_events where subject_id = any (v_members) and plan is null) then
    raise exception 'billing_plans_missing' using errcode = 'PT503',
      detail = (select jsonb_agg(to_jsonb(m))::text from unnest(v_members) as m);
  end if;
  delete from public.entitlements where app_user_id = any (v_members);
  update public.billing_subscribers set customer_id = null where group_id = p_group and customer_id is not null;
  for v_event in
    select event_id, event_at, sort_rank, plan from public.billing_events
    where subject_id = any (v_members) and plan->>'ignoredReason' is null
    order by event_at, sort_rank, event_id collate "C"
  loop
    v_result := public.billing_apply_event(v_event.plan, v_event.event_id, v_event.event_at);
    if v_event.event_id = p_event_id then v_owner := v_result->>'ownerId'; end if;
    v_key := public.billing_sort_key(v_event.event_at, v_event.sort_rank, v_event.event_id);
  end loop;
  update public.billing_subscribers set folded_key = v_key where app_user_id = p_group;
  return v_owner;
end;
$$;

-- Record one entry of the log (a webhook event, or a snapshot of RevenueCat's record) and bring its
-- group's entitlements to the fold of its history: on top when it is the newest, else the whole
-- history again. Returns {duplicate, outcome, ownerId, groupId, newSource}: outcome applied (some
-- entitlement changed), stale (nothing changed: the newer history already says more), ignored
-- (nothing to apply); newSource: the event is about a product none of its owner's ids had a row of.
-- A second delivery of the same id waits on the unique key and then changes nothing.
create or replace function public.billing_log_and_fold(p_body jsonb, p_plan jsonb)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_event_id text := p_plan->>'eventId';
  v_event_at timestamptz := (p_plan->>'eventAt')::timestamptz;
  v_rank smallint := coalesce((p_plan->>'rank')::smallint, 1);
  v_subject text := p_plan->>'subjectId';
  v_linked text[] := array(select distinct value from jsonb_array_elements_text(coalesce(p_plan->'linkedIds', '[]'::jsonb)));
  v_candidates text[] := array(select value from jsonb_array_elements_text(coalesce(p_plan->'ownerCandidates', '[]'::jsonb)));
  v_ignored boolean;
  v_new_source boolean := false;
  v_group text;
  v_folded text;
  v_key text;
  v_before text;
  v_owner text;
  v_outcome text;
  v_result jsonb;
begin
  v_ignored := p_plan->>'ignoredReason' is not null or v_subject is null or not v_subject = any (v_linked);

  -- 1. Record, exactly once. A concurrent delivery of the same id waits here for this one to commit.
  insert into public.billing_events (event_id, type, app_user_id, event_at, outcome, environment, owner_id, moved_ids, body, plan, subject_id, sort_rank)
  values (v_event_id, coalesce(p_plan->>'type', ''), p_plan->>'appUserId', v_event_at,
          case when v_ignored then 'ignored' else 'stale' end, p_plan->>'environment', v_candidates[1],
          case when v_ignored then '{}'::text[] else array(select jsonb_array_elements_text(coalesce(p_plan->'movedIds', '[]'::jsonb))) end,
          p_body, p_plan, case when not v_ignored then v_subject end, v_rank)
  on conflict (event_id) do nothing;
  if not found then
    return (select jsonb_build_object('duplicate', true, 'outcome', outcome, 'ownerId', owner_id) from public.billing_events where event_id = v_event_id);
  end if;
  if v_ignored then
    return jsonb_build_object('duplicate', false, 'outcome', 'ignored', 'ownerId', v_candidates[1]);
  end if;

  -- 2. Lock the group, then fold.
  v_group := public.billing_lock_group(v_linked);
  v_new_source := jsonb_array_length(coalesce(p_plan->'effects', '[]'::jsonb)) > 0 and not exists (
    select 1 from public.entitlements
    where app_user_id = any (v_candidates)
      and source_key = public.billing_source_key(p_plan->>'environment', p_plan->'period'->>'store', p_plan->'period'->>'productId',
                                                 p_plan->'period'->>'originalTransactionId', p_plan->'period'->>'transactionId'));
  v_key := public.billing_sort_key(v_event_at, v_rank, v_event_id);
  select folded_key into v_folded from public.billing_subscribers where app_user_id = v_group;
  -- (Equal: the watermark of a new id already counted this event, filed under it just above.)
  if v_folded is null or v_key collate "C" >= v_folded collate "C" then
    v_result := public.billing_apply_event(p_plan, v_event_id, v_event_at);
    v_outcome := v_result->>'outcome';
    v_owner := v_result->>'ownerId';
    update public.billing_subscribers set folded_key = v_key where app_user_id = v_group;
  else
    v_before := public.billing_group_state(v_group);
    v_owner := public.billing_refold_group(v_group, v_event_id);
    v_outcome := case when public.billing_group_state(v_group) is distinct from v_before then 'applied' else 'stale' end;
  end if;

  update public.billing_events set outcome = v_outcome, owner_id = v_owner where event_id = v_event_id;
  return jsonb_build_object('duplicate', false, 'outcome', v_outcome, 'ownerId', v_owner, 'groupId', v_group, 'newSource', v_new_source);
end;
$$;

-- Mark subscribers to be fetched from RevenueCat (billing_sync_queue); an existing mark becomes due now.
create or replace function public.billing_mark_sync(p_ids text[], p_reason text)
returns text[]
language sql
volatile
set search_path = ''
as $$
  with marked as (
    insert into public.billing_sync_queue (app_user_id, reason)
    select distinct id, p_reason from unnest(p_ids) as ids(id)
    where id is not null and char_length(id) between 1 and 256
    on conflict (app_user_id) do update set reason = excluded.reason, requested_at = now(), next_attempt_at = now()
    returning app_user_id
  )
  select coalesce(array_agg(app_user_id order by app_user_id), '{}') from marked
$$;

-- POST /api/webhooks/subscription-billing: record one event and apply it (billing_log_and_fold).
-- p_body is the request body (stored as is), p_plan what describeEventEffects() said it means,
-- p_sync_after which events mark their subscribers for a sync from RevenueCat in the same
-- transaction: 'gaps' (a TRANSFER's both sides, a refund, a product or entitlement the owner had no
-- row of), 'all', or 'none' (no RevenueCat key configured). Returns {duplicate, outcome, ownerId,
-- syncIds}: the ids to sync after the response.
drop function if exists public.record_billing_event(jsonb, jsonb, boolean);
create or replace function public.record_billing_event(p_body jsonb, p_plan jsonb, p_sync_after text default 'none')
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_event_id text := p_plan->>'eventId';
  v_result jsonb;
  v_owner text;
  v_sync text[] := '{}';
begin
  if v_event_id is null or char_length(v_event_id) not between 1 and 256
     or jsonb_typeof(p_body->'event') is distinct from 'object'
     or p_body->'event'->>'id' is distinct from v_event_id
     or p_plan->>'eventAt' is null
     or p_plan ? 'snapshot'
     or jsonb_typeof(coalesce(p_plan->'effects', '[]'::jsonb)) <> 'array'
     or jsonb_typeof(coalesce(p_plan->'movedIds', '[]'::jsonb)) <> 'array'
     or jsonb_typeof(coalesce(p_plan->'linkedIds', '[]'::jsonb)) <> 'array'
     or jsonb_typeof(coalesce(p_plan->'ownerCandidates', '[]'::jsonb)) <> 'array' then
    raise exception 'invalid_request' using errcode = 'PT400', detail = 'The billing event plan does not match the body.';
  end if;
  v_result := public.billing_log_and_fold(p_body, p_plan);
  if (v_result->>'duplicate')::boolean or p_plan->>'ignoredReason' is not null then
    return v_result || jsonb_build_object('syncIds', '[]'::jsonb);
  end if;
  v_owner := v_result->>'ownerId';
  if p_sync_after = 'all' or (p_sync_after = 'gaps' and (p_plan->>'syncReason' is not null or (v_result->>'newSource')::boolean)) then
    v_sync := public.billing_mark_sync(
      case when p_plan->>'syncReason' = 'transfer'
           then array(select jsonb_array_elements_text(p_plan->'movedIds')) || v_owner
           else array[v_owner] end,
      coalesce(p_plan->>'syncReason', case when p_sync_after = 'all' then 'event' else 'new_source' end));
  end if;
  return v_result - 'groupId' - 'newSource' || jsonb_build_object('syncIds', to_jsonb(v_sync));
end;
$$;

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

-- GET /api/me: the caller's entitlements at p_now, ONE item per entitlement id, ordered by it
-- (the caller's rows and, when RevenueCat merged the caller's id into another of one customer's
-- ids, that id's rows).
-- The item is the row that grants longest (grants_until, then the latest news, then renewing), with
-- its effective status at p_now (a granting status whose access has ended reads `expired`), `active`
-- from the same column, `will_renew` true when any source that grants now renews, and every source.
drop function if exists public.get_account(uuid);
drop function if exists public.account_entitlements(text);
create or replace function public.account_entitlements(p_user_id text, p_now timestamptz default now())
returns jsonb
language sql
stable
security definer
set search_path = ''
as $$
  with sources as (
    select e.*,
           e.grants_until > p_now as grants_now,
           case when e.grants_until <= p_now and e.status in ('active', 'cancelled_active', 'temporary', 'billing_issue', 'grace')
                then 'expired' else e.status end as effective_status,
           row_number() over (partition by e.entitlement_id
                              order by e.grants_until desc, e.last_event_at desc, e.will_renew desc, e.source_key) as place
    from public.entitlements e
    -- The caller's rows, and their customer's when RevenueCat named the caller as another id of it.
    where e.app_user_id in (p_user_id, (select c.customer_id from public.billing_subscribers c where c.app_user_id = p_user_id))
  )
  select coalesce(jsonb_agg(jsonb_build_object(
    'entitlement_id', s.entitlement_id,
    'active', s.grants_now,
    'status', s.effective_status,
    'will_renew', exists (select 1 from sources r where r.entitlement_id = s.entitlement_id and r.grants_now and r.will_renew),
    'expires_at', s.expires_at,
    'grace_expires_at', s.grace_expires_at,
    'product_id', s.product_id,
    'pending_product_id', s.pending_product_id,
    'store', s.store,
    'environment', s.environment,
    'period_type', s.period_type,
    'last_event_at', s.last_event_at,
    'synced_at', s.synced_at,
    'sources', (
      select jsonb_agg(jsonb_build_object(
        'product_id', r.product_id,
        'store', r.store,
        'environment', r.environment,
        'status', r.effective_status,
        'active', r.grants_now,
        'expires_at', r.expires_at,
        'grace_expires_at', r.grace_expires_at,
        'will_renew', r.will_renew and r.grants_now
      ) order by r.place)
      from sources r where r.entitlement_id = s.entitlement_id)
  ) order by s.entitlement_id collate "C"), '[]'::jsonb)
  from sources s
  where s.place = 1
$$;

create or replace function public.get_account(p_user_id uuid, p_now timestamptz default now())
returns jsonb
language sql
stable
security definer
set search_path = ''
as $$
  select jsonb_build_object(
    'wallets', public.account_wallets(p_user_id),
    'entitlements', public.account_entitlements(p_user_id::text, p_now),
    'leagues', public.account_leagues(p_user_id)
  )
$$;

-- Executable by the service role only (the internal steps too: they run inside the functions above).
do $$
declare
  v_fn text;
begin
  foreach v_fn in array array[
    'public.billing_source_key(text, text, text, text, text)', 'public.billing_sort_key(timestamptz, smallint, text)',
    'public.billing_lock_group(text[])', 'public.billing_apply_event(jsonb, text, timestamptz)',
    'public.billing_group_state(text)', 'public.billing_refold_group(text, text)',
    'public.billing_log_and_fold(jsonb, jsonb)', 'public.billing_mark_sync(text[], text)',
    'public.record_billing_event(jsonb, jsonb, text)', 'public.billing_events_without_plan(jsonb)',
    'public.billing_store_plans(jsonb)', 'public.account_entitlements(text, timestamptz)',
    'public.get_account(uuid, timestamptz)'
  ] loop
    execute format('revoke all on function %s from public, anon, authenticated', v_fn);
    execute format('grant execute on function %s to service_role', v_fn);
  end loop;
end;
$$;
