-- Billing, the fold: what a subscriber group is entitled to, decided from its events in event-time
-- order whatever order they arrived in. public.record_billing_event is the webhook's one call: it
-- logs the event and applies it, through the in-order shortcut when the event is the group's newest,
-- or by folding the group again from its checkpoint when it is not. The rules of each event type are
-- in lib/billing/event-effects.ts (the plan) and public.billing_apply_event (its effect on the rows);
-- docs/billing.md states them with their sources.

-- One row per source of an entitlement: (subscriber, entitlement, source).
create table public.entitlements (
  app_user_id text not null check (char_length(app_user_id) between 1 and 256),
  entitlement_id text not null check (char_length(entitlement_id) between 1 and 256),
  -- The product that grants it (null: the events named none; they share one row).
  product_id text,
  -- Which source of the entitlement this row is, as a key of bounded size (public.billing_source_key).
  source_key text not null,
  status text not null check (status in (
    'active', 'cancelled_active', 'temporary', 'grace', 'billing_issue', 'paused', 'expired', 'refunded', 'transferred'
  )),
  will_renew boolean not null,
  -- null = never expires (lifetime).
  expires_at timestamptz,
  grace_expires_at timestamptz,
  pending_product_id text,
  store text,
  environment text,
  period_type text,
  original_transaction_id text,
  transaction_id text,
  period_purchased_at timestamptz,
  auto_resume_at timestamptz,
  last_event_id text not null,
  last_event_at timestamptz not null,
  updated_at timestamptz not null default now(),
  primary key (app_user_id, entitlement_id, source_key),
  -- When the grant that began the row's current period happened (event time): orders the products
  -- of one subscription lineage (on the App Store and Google Play, with the period's purchase: the
  -- earlier of the two). Not the purchase time alone: Stripe reports the product a subscription
  -- changed to with the subscription's original start (t0), even in a later period.
  granted_at timestamptz,
  -- Where the row's state came from: a webhook event, or a snapshot of RevenueCat's own record
  -- (lib/billing/sync.ts); and when a snapshot last confirmed it.
  origin text not null default 'webhook' check (origin in ('webhook', 'sync')),
  synced_at timestamptz,
  -- Until when the row grants access ('infinity': forever; '-infinity': not at all). THE rule for
  -- "grants": the API's `active` and effective status, the row shown, and every guard below read it.
  grants_until timestamptz generated always as (
    case
      when status in ('active', 'cancelled_active', 'temporary', 'billing_issue') then coalesce(expires_at, 'infinity')
      when status = 'grace' then coalesce(greatest(expires_at, grace_expires_at), 'infinity')
      else '-infinity'
    end
  ) stored,
  -- When a cancellation in the App Store's charge window was made: an App Store subscription
  -- cancelled less than 24 hours before its period ends, which Apple charges for the next period
  -- anyway, and for which the cancellation holds (the event's cancelsWithinChargeWindow,
  -- lib/billing/event-effects.ts). Kept on the row: a sync between the two, or the retention of the
  -- log, leaves it as it is (rows from before the column: public.billing_cancelled_in_charge_window).
  -- Cleared by that charge (the RENEWAL right after, public.billing_grant; a sync showing the next
  -- period), and whenever renewal is turned back on.
  cancelled_in_charge_window_at timestamptz,
  -- When a product change ended the row: its subscription moved to another product (the lineage
  -- step below), and nothing has touched the row since. A Stripe RENEWAL at price 0 on such a row
  -- is the change back, which grants; on any other expired row it is the open invoice of a
  -- subscription marked unpaid, which grants nothing (public.billing_grant_refused). Any other
  -- write clears it (an EXPIRATION, a flag, a grant, a sync), and rows and checkpoints from before
  -- the column have none: where in doubt, the refusal stands.
  replaced_at timestamptz
)
-- Every billing event updates a row here: room on its page for the new version keeps the update
-- HOT (no index entry to add).
with (fillfactor = 90);
alter table public.entitlements enable row level security;
revoke all on table public.entitlements from public, anon, authenticated;
-- Which known subscribers the sweep has already enqueued because their access ends soon or they
-- were never synced is told by billing_sync_queue and entitlements.synced_at; this index finds
-- rows that grant for a while by the end of their access.
create index entitlements_grants_until_idx on public.entitlements (grants_until)
  where status in ('active', 'cancelled_active', 'temporary', 'billing_issue', 'grace');
-- `npm run billing:sync -- --all` walks the subscribers in "C" order and saves its place to resume
-- a later run: an index in that order.
create index entitlements_app_user_id_c_idx on public.entitlements (app_user_id collate "C")
  where status <> 'transferred';
grant select (app_user_id, entitlement_id, source_key, product_id, pending_product_id, status, will_renew, expires_at,
              grace_expires_at, store, environment, period_type, last_event_at, synced_at, grants_until)
  on public.entitlements to authenticated;
grant select (app_user_id, entitlement_id, grants_until) on public.entitlements to supabase_auth_admin;

-- Groups and their watermark: each id RevenueCat named, the group its events are folded with, and
-- on the group's own row what the fold has reached.
create table public.billing_subscribers (
  app_user_id text primary key check (char_length(app_user_id) between 1 and 256),
  -- The group this id's events are folded with, named by one of its ids (whose row has group_id = app_user_id).
  group_id text not null,
  -- On the group's own row: the sort key (public.billing_sort_key) of the last event folded.
  folded_key text,
  -- The id that holds this id's rows when RevenueCat named both as one customer (a merge: legacy
  -- aliasing, an anonymous id): GET /api/me of either shows them. Null: it holds its own.
  customer_id text,
  -- Checkpoints, per subscriber id: the sort key they were taken at, the id's entitlement rows then
  -- (as JSON, without the generated column), and the id its rows were merged into (customer_id) then.
  base_key text,
  base_rows jsonb,
  base_customer text,
  -- On a group's own row: how many of its events a fold replays (those after the checkpoints), and
  -- when the oldest of them was received (null: none; retention drops a month only when every group
  -- with such an event received in it has been checkpointed past it).
  tail_events integer not null default 0,
  pending_since timestamptz
)
-- Every billing event updates its group's row: room on the page keeps the update HOT.
with (fillfactor = 90);
alter table public.billing_subscribers enable row level security;
create index billing_subscribers_group_idx on public.billing_subscribers (group_id);
create index billing_subscribers_customer_idx on public.billing_subscribers (customer_id)
  where customer_id is not null;
-- In the order maintenance reads it (oldest pending first, then by id): no sort, and a read that
-- stops at its deadline stops early.
create index billing_subscribers_pending_idx on public.billing_subscribers (pending_since, app_user_id) where pending_since is not null;
revoke all on table public.billing_subscribers from public, anon, authenticated;
-- What a signed-in user (through the select-own policies of 07_account.sql) and Supabase Auth's
-- access-token hook may read.
grant select (app_user_id, customer_id) on public.billing_subscribers to authenticated;
grant select (app_user_id, customer_id) on public.billing_subscribers to supabase_auth_admin;

-- A new customer's first event would look for events already filed under its ids in every month of
-- the log (one index probe per partition). Only events recorded before groups existed can be: those
-- without a plan, or filed under an id that has no group. Every later event gets both when it is
-- recorded (and a rebuild locks the ids it files events under before it does), so the last receive
-- time of those old events bounds where to look: nothing to look at on a database that never had
-- any (null), the months up to it on one that did.
create table public.billing_legacy_horizon (
  id boolean primary key default true check (id),
  received_before timestamptz
);
alter table public.billing_legacy_horizon enable row level security;
revoke all on table public.billing_legacy_horizon from public, anon, authenticated;

-- One row: on a database that had events before the log kept folds' keys, what was received before it.
insert into public.billing_legacy_horizon (received_before) values (null) on conflict (id) do nothing;

-- The row key of an event's source, of bounded size: (environment, store, product, purchase). A
-- source is a purchase: RevenueCat's own record is per purchase (REST v1 lists each
-- non-subscription purchase with its own id; REST v2 lists subscriptions and purchases as items of
-- their own), so two purchases of one product (a consumable bought twice, a Stripe customer who
-- subscribed twice) are two rows, and the refund or expiry of one never lands on the other. The
-- purchase is its original transaction (the same through every renewal of a subscription; for a
-- one-time purchase its own transaction), else its transaction (NON_RENEWING_PURCHASE names only
-- that). The product stays in the key, so an upgrade within one subscription (same original
-- transaction) is two products whose lineage public.billing_apply_event follows. A record that does
-- not know the purchase (no transaction ids) keys the product's source: (environment, store,
-- product, null), which is also the key every row had before sources were purchases, and which the
-- first event naming the purchase claims (public.billing_apply_event). An event that names no
-- product keys (environment, store, null, purchase), so a product-less expiry never touches
-- another purchase, and a refund on one store never ends what the same product id pays for on
-- another. A JSON array, so no two different parts can spell the same key.
create or replace function public.billing_source_key(p_environment text, p_store text, p_product_id text, p_original_transaction_id text, p_transaction_id text)
returns text
language plpgsql
immutable
set search_path = ''
as $$
begin
  return md5(jsonb_build_array(
    upper(coalesce(p_environment, 'PRODUCTION')),
    upper(coalesce(p_store, '')),
    p_product_id,
    coalesce(p_original_transaction_id, p_transaction_id)
  )::text);
end;
$$;
revoke all on function public.billing_source_key(text,text,text,text,text) from public, anon, authenticated;
grant execute on function public.billing_source_key(text,text,text,text,text) to service_role;

-- The fold's step and the subscriber-group lock, planned once per connection (like the in-order
-- shortcut, public.billing_fold_in_order).
--
-- Every event the in-order shortcut leaves to the fold (a new customer's first purchase, a merge, a
-- late event) runs public.billing_lock_group and public.billing_apply_event. Five of their
-- statements took an array of ids (`= any (...)`, or `unnest` with a lookup per element). Postgres
-- planned four of them again on every call, and the fifth, the rows of the ids a merge moves, was
-- read by a generic plan that scanned the table when the planner had no statistics yet and planned
-- again on the other calls: together ~0.25 ms of a new customer's ~1.1 ms of Postgres CPU
-- (pg_stat_statements with track_planning). Here each id is looked up by its own statement, whose
-- generic plan is the plan, and the rename of a second group runs only when there is one. What they
-- lock, in what order, and what they write are unchanged.
--
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
  v_tail integer;
  v_pending timestamptz;
  v_legacy timestamptz;
  v_legacy_tail record;
  v_id text;
  v_seen text[];
  v_known_key text;
  v_known_tail integer;
  v_known_pending timestamptz;
begin
  for i in 1..20 loop
    -- Each id's group (an id without one stands for itself): one index lookup per id, each its own
    -- statement (see the note above this function).
    v_seen := '{}';
    foreach v_id in array p_ids loop
      select s.group_id into v_group from public.billing_subscribers s where s.app_user_id = v_id;
      v_group := coalesce(v_group, v_id);
      if v_group is null or not v_group = any (v_seen) then
        v_seen := v_seen || v_group;
      end if;
    end loop;
    v_groups := array(select g from unnest(v_seen) as g order by g collate "C");
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

  v_new := '{}';
  foreach v_id in array p_ids loop
    if not exists (select 1 from public.billing_subscribers s where s.app_user_id = v_id) then
      v_new := v_new || v_id;
    end if;
  end loop;
  -- The usual case: every id known, one group.
  if cardinality(v_new) = 0 and cardinality(v_groups) = 1 then
    return v_groups[1];
  end if;
  v_known := array(select g from unnest(v_groups) as g where not g = any (v_new) order by g collate "C");

  -- Name the joined group after an existing group when there is one (fewer rows to rename).
  v_group := coalesce(v_known[1], (select min(id collate "C") from unnest(v_new) as ids(id)));
  -- The known groups' watermarks (the latest), tails (added up) and pending times (the oldest).
  v_tail := 0;
  foreach v_id in array v_known loop
    select folded_key, tail_events, pending_since into v_known_key, v_known_tail, v_known_pending
    from public.billing_subscribers where app_user_id = v_id;
    v_key := greatest(v_key collate "C", v_known_key);
    v_tail := v_tail + coalesce(v_known_tail, 0);
    v_pending := least(v_pending, v_known_pending);
  end loop;
  -- Only events recorded before groups existed can be filed under an id that has no group: looked
  -- for only in the months that can hold them, none on a database that never had any
  -- (public.billing_legacy_horizon says where).
  if cardinality(v_new) > 0 then
    select received_before into v_legacy from public.billing_legacy_horizon;
    if v_legacy is not null then
      select max(public.billing_sort_key(e.event_at, e.sort_rank, e.event_id) collate "C") as key, count(*)::integer as n, min(e.received_at) as since
      into v_legacy_tail
      from public.billing_events e where e.subject_id = any (v_new) and e.received_at <= v_legacy;
      v_key := greatest(v_key collate "C", v_legacy_tail.key);
      v_tail := v_tail + v_legacy_tail.n;
      v_pending := least(v_pending, v_legacy_tail.since);
    end if;
  end if;
  -- (The joined group is named after the first known group: only a second one has rows to rename.)
  if cardinality(v_known) > 1 then
    update public.billing_subscribers set group_id = v_group, folded_key = null, tail_events = 0, pending_since = null
    where group_id = any (v_known) and group_id <> v_group;
  end if;
  insert into public.billing_subscribers (app_user_id, group_id)
  select distinct ids.id, v_group from unnest(v_new) as ids(id)
  on conflict (app_user_id) do nothing;
  update public.billing_subscribers set folded_key = v_key, tail_events = v_tail, pending_since = v_pending where app_user_id = v_group;
  return v_group;
end;
$$;
revoke all on function public.billing_lock_group(text[]) from public, anon, authenticated;
grant execute on function public.billing_lock_group(text[]) to service_role;

-- Whether an effect is an App Store cancellation within Apple's 24-hour charge window
-- (cancelsWithinChargeWindow, lib/billing/event-effects.ts; plans stored before named it
-- cancelsTrialLate, for trials only). One reading for every place the fold asks.
create or replace function public.billing_effect_cancels_in_charge_window(p_effect jsonb)
returns boolean
language plpgsql
immutable
set search_path = ''
as $$
begin
  return coalesce(coalesce(p_effect->>'cancelsWithinChargeWindow', p_effect->>'cancelsTrialLate')::boolean, false);
end;
$$;
revoke all on function public.billing_effect_cancels_in_charge_window(jsonb) from public, anon, authenticated;
grant execute on function public.billing_effect_cancels_in_charge_window(jsonb) to service_role;

-- 5. One step of the fold: apply one event's plan to the stored rows, as of the event's time.
-- Returns {outcome: applied | stale | ignored, ownerId}. Called with the event's group locked.
-- Its statements are planned once per connection (plan_cache_mode): several look ids up by an
-- array, whose generic plan Postgres distrusts (it guesses ten ids where an event names two), so it
-- planned them on every event a new customer or a merge brings. Their generic plans are lookups by
-- key (tests/db/query-plans.test.ts reads them at scale), and on Postgres autovacuum's ANALYZE has
-- them made again (the embedded database keeps what its first calls made, as it would anyway).
-- Only here: the setting reaches every function a function calls, and the fold's log of events
-- is partitioned, where a generic plan locks every partition (a plan for the call's values prunes).
create or replace function public.billing_apply_event(p_plan jsonb, p_event_id text, p_event_at timestamptz)
returns jsonb
language plpgsql
volatile
set search_path = ''
set plan_cache_mode = force_generic_plan
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
  v_joined text[] := '{}';
  v_merged text[];
  v_moved_id text;
  v_src public.entitlements%rowtype;
  v_row public.entitlements%rowtype;
  v_effect jsonb;
  v_entitlement text;
  v_action text;
  v_renewal text;
  v_status text;
  v_status_from text[];
  v_expires timestamptz;
  v_new_period boolean;
  v_found boolean;
  v_applied integer := 0;
  v_stale integer := 0;
  v_granted text[] := '{}';
  v_source jsonb;
  v_key text;
  v_keys text[] := '{}';
  v_products text[] := '{}';
  v_product_key text;
  v_match text[];
  v_source_keys jsonb := '[]'::jsonb;
  -- Whether a flag, refund or revocation has reached the rows of entitlements the event does not name.
  v_spread boolean := false;
  v_unnamed boolean;
  v_row_expires timestamptz;
  v_shown_start timestamptz;
begin
  -- Owner: each candidate stands for its customer (the id RevenueCat's aliasing already merged it
  -- into, whose rows hold the customer's state); the first of those that already holds rows (one
  -- subscriber seen under two real ids keeps one state), else the first.
  select coalesce(s.customer_id, c.id) into v_owner
  from jsonb_array_elements_text(coalesce(p_plan->'ownerCandidates', '[]'::jsonb)) with ordinality as c(id, n)
  left join public.billing_subscribers s on s.app_user_id = c.id
  where exists (select 1 from public.entitlements e where e.app_user_id = coalesce(s.customer_id, c.id) and e.status <> 'transferred')
  order by c.n
  limit 1;
  v_owner := coalesce(v_owner, (select s.customer_id from public.billing_subscribers s where s.app_user_id = p_plan->'ownerCandidates'->>0),
                      p_plan->'ownerCandidates'->>0);
  if v_owner is null then
    return jsonb_build_object('outcome', 'ignored', 'ownerId', null);
  end if;

  -- Moves: the other ids' rows go to the owner (a merge: every row; a TRANSFER: the rows of its
  -- environment, and of its store when it names one, leaving `transferred` rows behind). Where the
  -- owner has a row of the same source, the one that grants longer stays (then the newer); but a
  -- `transferred` row there is only what the owner left when the purchase moved away ("the
  -- entitlements will be removed from user 1 and added to user 2", RevenueCat's Event flows,
  -- Transfers): the row coming back replaces it, however old its last event. (Kept, it stood for
  -- the purchase instead of the row it left as, expired say, and an unpaid Stripe invoice's
  -- zero-price RENEWAL granted on it: public.billing_grant_refused refuses it on expired rows.)
  v_moved := array(select distinct value from jsonb_array_elements_text(coalesce(p_plan->'movedIds', '[]'::jsonb)) where value <> v_owner);
  -- The ids an event names stand for their customers: where one of them was merged into another
  -- id, the rows are there (a TRANSFER's source customer; a merge joining two customers).
  v_moved := v_moved || array(select distinct s.customer_id from public.billing_subscribers s
                              where s.app_user_id = any (v_moved) and s.customer_id is not null and s.customer_id <> v_owner
                                and not s.customer_id = any (v_moved));
  -- A TRANSFER's other receiving ids (joinedIds: the receiving customer's anonymous id beside the
  -- signed-in one) are the owner's customer: their rows and ids merge into it, as a merge's do. Not
  -- one merged into another customer, nor one a signed-in id was merged into: it shares rows with
  -- a user the event does not name, which stay theirs. (Anonymous ids merged into it are the same
  -- customer's, and come along.)
  if v_move = 'transfer' then
    v_joined := array(select distinct j.id from jsonb_array_elements_text(coalesce(p_plan->'joinedIds', '[]'::jsonb)) as j(id)
                      where j.id <> v_owner and not j.id = any (v_moved)
                        and not exists (select 1 from public.billing_subscribers s
                                        where (s.app_user_id = j.id and s.customer_id is distinct from v_owner and s.customer_id is not null)
                                           or (s.customer_id = j.id and s.app_user_id <> v_owner and not starts_with(s.app_user_id, '$RCAnonymousID:'))));
  end if;
  v_merged := case when v_move = 'merge' then v_moved else v_joined end;
  if v_move in ('merge', 'transfer') and cardinality(v_moved || v_joined) > 0 then
    -- One id at a time, in the order one statement over them all would take (see the note above
    -- public.billing_lock_group).
    foreach v_moved_id in array array(select distinct m collate "C" from unnest(v_moved || v_joined) as m order by 1) loop
      for v_src in
        select * from public.entitlements
        where app_user_id = v_moved_id and status <> 'transferred'
          and (v_moved_id = any (v_merged) or (upper(coalesce(environment, 'PRODUCTION')) = v_env_key and (v_store is null or store = v_store)))
        order by entitlement_id collate "C", source_key
        for update
      loop
        select * into v_row from public.entitlements
        where app_user_id = v_owner and entitlement_id = v_src.entitlement_id and source_key = v_src.source_key
        for update;
        v_found := found;
        if not v_found or v_row.status = 'transferred'
           or (v_src.grants_until, v_src.last_event_at) > (v_row.grants_until, v_row.last_event_at) then
          if v_found then
            delete from public.entitlements where app_user_id = v_owner and entitlement_id = v_src.entitlement_id and source_key = v_src.source_key;
          end if;
          insert into public.entitlements (
            app_user_id, entitlement_id, product_id, source_key, status, will_renew, expires_at, grace_expires_at, pending_product_id,
            store, environment, period_type, original_transaction_id, transaction_id, period_purchased_at, auto_resume_at, granted_at,
            origin, synced_at, last_event_id, last_event_at, cancelled_in_charge_window_at, replaced_at
          ) values (
            v_owner, v_src.entitlement_id, v_src.product_id, v_src.source_key, v_src.status, v_src.will_renew, v_src.expires_at,
            v_src.grace_expires_at, v_src.pending_product_id, v_src.store, v_src.environment, v_src.period_type,
            v_src.original_transaction_id, v_src.transaction_id, v_src.period_purchased_at, v_src.auto_resume_at, v_src.granted_at,
            v_src.origin, v_src.synced_at, v_src.last_event_id, greatest(v_src.last_event_at, case when v_found then v_row.last_event_at end),
            v_src.cancelled_in_charge_window_at, v_src.replaced_at
          );
        end if;
        if not v_moved_id = any (v_merged) then
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
    end loop;
  end if;
  -- One customer under several ids: every other id it names (and whatever was merged into them)
  -- stands for the owner from now on: a real id reads the owner's rows, and an anonymous one is
  -- where a later event naming it finds them (a TRANSFER from the $RCAnonymousID the customer
  -- started with moves the customer's purchases).
  if cardinality(v_merged) > 0 then
    update public.billing_subscribers set customer_id = v_owner
    where (app_user_id = any (v_merged) or customer_id = any (v_merged)) and app_user_id <> v_owner
      and customer_id is distinct from v_owner;
    update public.billing_subscribers set customer_id = null where app_user_id = v_owner and customer_id is not null;
  end if;

  -- Which purchase's rows the event is about (public.billing_source_key). An event that names its
  -- purchase claims the product's row of a record that did not know it (a sync of a subscription
  -- REST v1 lists by product, an event without transaction ids, a row kept from before sources were
  -- purchases): the same purchase, now known. An event that names none is about the purchase of its
  -- product the customer holds: the product's row, else the purchase its own period says (the one
  -- whose period it is, by purchase time or end; else the one whose period ends where it begins:
  -- a renewal), else the latest purchase of the product. (Its `purchased_at_ms` and
  -- `expiration_at_ms` are the transaction's, RevenueCat's event fields: with two subscriptions of
  -- one product, the latest is not always the one it is about.)
  if v_period->>'productId' is not null then
    v_product_key := public.billing_source_key(p_plan->>'environment', v_store, v_period->>'productId', null, null);
    if v_source_key <> v_product_key then
      if not exists (select 1 from public.entitlements where app_user_id = v_owner and source_key = v_source_key) then
        update public.entitlements set source_key = v_source_key
        where app_user_id = v_owner and source_key = v_product_key;
      end if;
    elsif not exists (select 1 from public.entitlements where app_user_id = v_owner and source_key = v_product_key) then
      select e.source_key into v_key from public.entitlements e
      where e.app_user_id = v_owner and e.product_id = v_period->>'productId'
        and upper(coalesce(e.environment, 'PRODUCTION')) = v_env_key and upper(coalesce(e.store, '')) = upper(coalesce(v_store, ''))
      order by (e.period_purchased_at = v_purchased or e.expires_at = v_period_expires) desc nulls last,
               (e.expires_at between v_purchased - interval '1 hour' and v_purchased + interval '1 hour') desc nulls last,
               e.period_purchased_at desc nulls last, e.granted_at desc nulls last, e.source_key
      limit 1;
      v_source_key := coalesce(v_key, v_source_key);
      v_key := null;
    end if;
  end if;
  -- A provisional grant (TEMPORARY_ENTITLEMENT_GRANT) is keyed by its transaction: the events that
  -- settle it name that transaction with an original transaction of their own (its failed
  -- validation is "an EXPIRATION event with the same transaction_id"): they are about its row.
  -- That EXPIRATION (the one event that revokes) is, whatever product of the same store it names:
  -- "depending on the store, the product_id might be different" (Google Play's names the base
  -- plan, `pro_monthly:monthly`, where the grant named `pro_monthly`). Any other event of another
  -- product is about a purchase of its own, whose row it keeps (a real grant of the entitlement
  -- ends the provisional one below).
  if v_period->>'transactionId' is not null
     and not exists (select 1 from public.entitlements where app_user_id = v_owner and source_key = v_source_key) then
    select e.source_key into v_key from public.entitlements e
    where e.app_user_id = v_owner and e.status = 'temporary' and e.transaction_id = v_period->>'transactionId'
      and (e.product_id is not distinct from v_period->>'productId'
           or (upper(coalesce(e.store, '')) = upper(coalesce(v_store, ''))
               and exists (select 1 from jsonb_array_elements(coalesce(p_plan->'effects', '[]'::jsonb)) x where x->>'action' = 'revoke')))
    order by e.product_id is not distinct from v_period->>'productId' desc, e.source_key
    limit 1;
    -- The purchase that validates it (a grant naming the same transaction under an original
    -- transaction of its own: a Stripe invoice of a subscription, an App Store resubscription) takes
    -- the row over under the purchase's key, where the purchase's later events (its refund, its
    -- cancellation, its expiry) look for it.
    if v_key is not null and exists (select 1 from jsonb_array_elements(coalesce(p_plan->'effects', '[]'::jsonb)) x where x->>'action' = 'grant') then
      update public.entitlements set source_key = v_source_key where app_user_id = v_owner and source_key = v_key;
      v_key := null;
    end if;
    v_source_key := coalesce(v_key, v_source_key);
    v_key := null;
  end if;
  -- A promotional grant that a refresh reading REST v2 alone wrote before the grant's webhooks came:
  -- v2 names no product for it, so the refresh keyed it by its transaction, with that transaction
  -- standing for the product (lib/billing/snapshot-v2.ts). The grant's events are about that row
  -- (its removal ends it) and key it as they name it.
  if upper(coalesce(v_store, '')) = 'PROMOTIONAL' and v_period->>'transactionId' is not null
     and not exists (select 1 from public.entitlements where app_user_id = v_owner and source_key = v_source_key) then
    update public.entitlements e set source_key = v_source_key, product_id = v_period->>'productId'
    where e.app_user_id = v_owner and upper(coalesce(e.store, '')) = 'PROMOTIONAL'
      and upper(coalesce(e.environment, 'PRODUCTION')) = v_env_key
      and e.transaction_id = v_period->>'transactionId' and e.product_id = e.transaction_id;
  end if;
  -- A one-time purchase is keyed by its own transaction (a NON_RENEWING_PURCHASE's original
  -- transaction ties it to no lineage: lib/billing/event-effects.ts); an event about it that names
  -- an original transaction too (its refund) is about that row, even where another purchase's row
  -- has the original's key (a second one-time purchase naming the first as its original).
  if v_period->>'transactionId' is not null and v_period->>'originalTransactionId' is distinct from v_period->>'transactionId' then
    v_key := public.billing_source_key(p_plan->>'environment', v_store, v_period->>'productId', null, v_period->>'transactionId');
    if exists (select 1 from public.entitlements where app_user_id = v_owner and source_key = v_key) then
      v_source_key := v_key;
    end if;
    v_key := null;
  end if;

  -- A snapshot of RevenueCat's own record (lib/billing/snapshot.ts) is authoritative as of its
  -- time: each purchase it shows is written as it says, for the entitlements it maps to it and for
  -- the owner's other rows of that purchase; rows of products it no longer shows stop granting.
  -- Events after it in the fold still apply on top of it.
  --
  -- Which rows are the purchase it shows: those of its product whose transaction (the period's, or
  -- the original) is the one the record names (REST v1's `store_transaction_id`, REST v2's
  -- `store_subscription_identifier` / `store_purchase_identifier`: for a subscription the latest
  -- transaction, for a one-time purchase its own). Else, for a one-time purchase (purchaseOnly), its
  -- own key (as its events key it); for a subscription, which the record keys by product, the
  -- latest purchase of the product the customer holds here, or the product's source when there is
  -- none (the first event naming the purchase claims it); none at all for a subscription that does
  -- not grant while its entitlement does (grantedElsewhere) when the customer holds several
  -- purchases of the product: it may be any of them but the one that grants; none either for a
  -- second subscription of a product REST v2 lists twice (matchOnly): the product's other item
  -- stands for the purchase not known here. A purchase the record names no product for
  -- (productUnnamed: REST v2's promotional grants) is the row its transaction names, whatever that
  -- row's product: its webhooks named one.
  for v_source in select value from jsonb_array_elements(coalesce(p_plan->'snapshot'->'sources', '[]'::jsonb)) loop
    v_match := array(
      select distinct e.source_key from public.entitlements e
      where e.app_user_id = v_owner
        and (e.product_id = v_source->>'productId' or coalesce((v_source->>'productUnnamed')::boolean, false))
        and upper(coalesce(e.environment, 'PRODUCTION')) = upper(coalesce(v_source->>'environment', 'PRODUCTION'))
        and upper(coalesce(e.store, '')) = upper(coalesce(v_source->>'store', ''))
        and v_source->>'transactionId' in (e.transaction_id, e.original_transaction_id)
      order by 1);
    if cardinality(v_match) = 0 and coalesce((v_source->>'purchaseOnly')::boolean, false) then
      v_match := array[public.billing_source_key(v_source->>'environment', v_source->>'store', v_source->>'productId', null, v_source->>'transactionId')];
    elsif cardinality(v_match) = 0 and coalesce((v_source->>'matchOnly')::boolean, false) then
      v_match := '{}';
    elsif cardinality(v_match) = 0 then
      -- (A subscription's latest transaction is new here when its RENEWAL webhook has not come: the
      -- purchase it renews is one whose period ends where the shown one begins, or is that period,
      -- and that renews; not a later purchase of the product that has ended, from a second Google
      -- account or Apple ID.)
      v_shown_start := (v_source->>'purchasedAt')::timestamptz;
      v_match := array(
        select e.source_key from public.entitlements e
        where e.app_user_id = v_owner and e.product_id = v_source->>'productId'
          and upper(coalesce(e.environment, 'PRODUCTION')) = upper(coalesce(v_source->>'environment', 'PRODUCTION'))
          and upper(coalesce(e.store, '')) = upper(coalesce(v_source->>'store', ''))
        order by (coalesce(e.expires_at, 'infinity') <= v_shown_start + interval '1 hour'
                  or e.period_purchased_at between v_shown_start - interval '1 hour' and v_shown_start + interval '1 hour') desc nulls last,
                 e.will_renew desc, e.period_purchased_at desc nulls last, e.granted_at desc nulls last, e.source_key
        limit 1);
      if coalesce((v_source->>'grantedElsewhere')::boolean, false) and exists (
        select 1 from public.entitlements e
        where e.app_user_id = v_owner and e.product_id = v_source->>'productId' and e.source_key <> v_match[1]
          and upper(coalesce(e.environment, 'PRODUCTION')) = upper(coalesce(v_source->>'environment', 'PRODUCTION'))
          and upper(coalesce(e.store, '')) = upper(coalesce(v_source->>'store', ''))) then
        v_match := '{}';
      elsif cardinality(v_match) = 0 then
        v_match := array[public.billing_source_key(v_source->>'environment', v_source->>'store', v_source->>'productId', null, null)];
      end if;
    end if;
    v_key := v_match[1];
    v_keys := v_keys || v_match;
    v_source_keys := v_source_keys || jsonb_build_array(v_source || jsonb_build_object('keys', to_jsonb(v_match)));
    v_products := v_products || (v_source->>'productId');
    -- A purchase v1 lists that no entitlement points to (asEventsSaid; v1 shows, per entitlement,
    -- only the purchase that lasts longest) may grant what earlier events said, or have been
    -- refunded (v1 still lists it): its rows stay as the events left them. Any other is written as
    -- the record says.
    if not coalesce((v_source->>'asEventsSaid')::boolean, false) and cardinality(v_match) > 0 then
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
        -- The record shows a later period: the charge a cancellation in the charge window held for
        -- was made (public.billing_grant clears it the same way for a RENEWAL).
        cancelled_in_charge_window_at = case when (v_source->>'expiresAt')::timestamptz > expires_at then null
                                             else cancelled_in_charge_window_at end,
        replaced_at = null,
        origin = 'sync',
        synced_at = p_event_at,
        last_event_id = p_event_id,
        last_event_at = greatest(last_event_at, p_event_at),
        updated_at = now()
      where app_user_id = v_owner and source_key = any (v_match) and last_event_id <> p_event_id;
    end if;
    v_applied := v_applied + 1;
  end loop;
  -- What the record proves no longer grants, in one statement:
  --   * rows of products it no longer shows (by product, not by purchase: v1 keys subscriptions by
  --     product, so a sandbox purchase of a product hides the production one of the same product
  --     from the snapshot, and one purchase of a product hides another; those stay as the events
  --     left them, and so do rows of products the snapshot left out (leftOut: sandbox
  --     purchases a deployment ignores, which may be what hides a production one));
  --   * rows of an entitlement it does not list: v1 lists every entitlement of the customer,
  --     expired ones included, so one it omits is not the customer's (the dashboard mapping
  --     changed, or RevenueCat revoked it), whatever grants it here (snapshots stored before the
  --     list was kept carry none);
  --   * rows of a product it shows, of an entitlement the product does not grant: REST v2 lists
  --     every entitlement the product grants and not this one (mapping `complete`), or, for a
  --     purchase no entitlement points to, the entitlement shows another purchase that ends sooner
  --     than the row would (v1 would have shown this one).
  if p_plan ? 'snapshot' then
    update public.entitlements e set
      status = 'expired',
      will_renew = false,
      expires_at = least(coalesce(e.expires_at, 'infinity'), p_event_at),
      grace_expires_at = null,
      origin = 'sync',
      synced_at = p_event_at,
      last_event_id = p_event_id,
      last_event_at = greatest(e.last_event_at, p_event_at),
      updated_at = now()
    where e.app_user_id = v_owner and e.grants_until > p_event_at
      and ((not e.source_key = any (v_keys)
            and not coalesce(e.product_id = any (v_products || array(select value->>'productId' from jsonb_array_elements(coalesce(p_plan->'snapshot'->'leftOut', '[]'::jsonb)))), false))
           or (jsonb_typeof(p_plan->'snapshot'->'entitlementIds') = 'array'
               and not e.entitlement_id = any (array(select jsonb_array_elements_text(p_plan->'snapshot'->'entitlementIds'))))
           or exists (
             select 1 from jsonb_array_elements(v_source_keys) as src(value)
             where e.source_key = any (array(select jsonb_array_elements_text(src.value->'keys')))
               and not e.entitlement_id = any (array(select jsonb_array_elements_text(coalesce(src.value->'entitlementIds', '[]'::jsonb))))
               and (src.value->>'mapping' = 'complete'
                    or (coalesce((src.value->>'asEventsSaid')::boolean, false)
                        and e.grants_until > (p_plan->'snapshot'->'entitlementExpiries'->>e.entitlement_id)::timestamptz))));
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

    -- A provisional grant never replaces a real row of its own source that grants when it begins
    -- (it would cut that row's period short). Beside another source's row it stands, and the read
    -- decides which grants: RevenueCat grants it for a purchase it could not validate yet, and what
    -- grants now may end before the purchase is validated.
    -- (Its own source: its purchase, or any purchase of its product, as RevenueCat's provisional
    -- grant may carry a transaction id other than the purchase's own.)
    if v_action = 'temporary_grant' and exists (
      select 1 from public.entitlements
      where app_user_id = v_owner and entitlement_id = v_entitlement and status <> 'temporary' and grants_until > v_start
        and (source_key = v_source_key
             or (product_id = v_period->>'productId' and upper(coalesce(environment, 'PRODUCTION')) = v_env_key
                 and upper(coalesce(store, '')) = upper(coalesce(v_store, ''))))
    ) then
      v_stale := v_stale + 1;
      continue;
    end if;

    -- The rows it changes: the entitlement's row of this source, or, when the event names no
    -- entitlements, every row this source has (never a new one). A flag, refund or revocation is
    -- about the purchase, not the entitlement: it also reaches the purchase's rows of entitlements
    -- the event does not name (the dashboard moved the product to another entitlement since it
    -- granted them), once, with the first such effect.
    v_found := false;
    for v_row in
      select * from public.entitlements
      where app_user_id = v_owner and source_key = v_source_key
        and (v_entitlement is null or entitlement_id = v_entitlement
             or (v_action not in ('grant', 'temporary_grant') and not v_spread
                 and not entitlement_id = any (array(select jsonb_array_elements(coalesce(p_plan->'effects', '[]'::jsonb))->>'entitlementId'))))
      order by entitlement_id collate "C"
      for update
    loop
      if v_entitlement is null or v_row.entitlement_id = v_entitlement then v_found := true; end if;
      if v_action in ('grant', 'temporary_grant') then
        continue when public.billing_grant_refused(v_row, p_plan, v_effect);
        perform public.billing_grant(v_row, p_plan, v_effect, p_event_id, p_event_at);
        if v_action = 'grant' and coalesce(v_expires > p_event_at, true) then v_granted := v_granted || v_row.entitlement_id; end if;
        v_applied := v_applied + 1;
        continue;
      end if;

      -- flag / refund / revoke: only about the row's current period or a later one.
      if not (
        coalesce(v_period_expires, 'infinity') >= coalesce(v_row.expires_at, 'infinity')
        or coalesce(v_purchased >= v_row.period_purchased_at, false)
        or coalesce(v_period->>'transactionId' = v_row.transaction_id, false)
        -- An App Store subscription cancelled less than 24 hours before its period ends: it holds
        -- for the next period (began as this one ended), which Apple charged anyway, folded before
        -- it or after.
        or coalesce(public.billing_effect_cancels_in_charge_window(v_effect)
                    and v_row.period_purchased_at >= v_period_expires - interval '1 minute'
                    and v_row.period_purchased_at <= v_period_expires + interval '1 day', false)
      ) then
        v_stale := v_stale + 1;
        continue;
      end if;
      v_status := v_effect->>'status';
      if v_status is null or (v_status_from is not null and not v_row.status = any (v_status_from)) then
        v_status := v_row.status;
      end if;
      -- A row of an entitlement the event does not name (reached through its purchase) only loses:
      -- the product no longer grants that entitlement, so nothing here extends it, puts it in grace
      -- or turns its renewal on; a cancellation or refund still ends what it grants. An event that
      -- names none at all (entitlement_ids null: "the product_id is not mapped to any entitlements",
      -- RevenueCat's event fields) names none of its rows either.
      v_unnamed := v_entitlement is null or v_row.entitlement_id <> v_entitlement;
      if v_unnamed and v_status = 'grace' then v_status := v_row.status; end if;
      v_row_expires := case v_effect->>'expiry'
        when 'set' then v_expires
        -- The later of the two; an event without an expiry says nothing about it.
        when 'extend' then case when v_expires is null or v_row.expires_at is null then v_row.expires_at
                                else greatest(v_row.expires_at, v_expires) end
        -- A cancellation saying the row's current period already ended (the same transaction, or
        -- without transaction ids the same purchase): it ended then.
        when 'period' then case when v_expires is null then v_row.expires_at
                                when coalesce(v_period->>'transactionId' = v_row.transaction_id, v_purchased = v_row.period_purchased_at, false)
                                  then v_expires
                                when v_row.expires_at is null then v_row.expires_at
                                else greatest(v_row.expires_at, v_expires) end
        else v_row.expires_at end;
      if v_unnamed then v_row_expires := least(v_row.expires_at, v_row_expires); end if;
      -- A refunded period ended at its refund: a later flag about it (a cancellation carrying the
      -- period's end, a billing issue) does not move its end back out (RevenueCat's Refunds page).
      if v_row.status = 'refunded' and not coalesce(v_purchased > v_row.period_purchased_at, false) then
        v_row_expires := least(v_row.expires_at, v_row_expires);
      end if;
      v_new_period := v_purchased is not null and v_purchased > v_row.period_purchased_at;
      update public.entitlements set
        status = v_status,
        will_renew = case v_renewal when 'on' then v_row.will_renew or not v_unnamed when 'off' then false else v_row.will_renew end,
        expires_at = v_row_expires,
        grace_expires_at = case when v_status = 'grace' then greatest(v_row.grace_expires_at, (v_effect->>'graceExpiresAt')::timestamptz) end,
        pending_product_id = case when v_effect->>'pendingProductId' is null then v_row.pending_product_id
                                  else nullif(v_effect->>'pendingProductId', v_row.product_id) end,
        auto_resume_at = coalesce((v_effect->>'autoResumeAt')::timestamptz, v_row.auto_resume_at),
        period_type = case when v_new_period then coalesce(v_period->>'periodType', v_row.period_type) else v_row.period_type end,
        transaction_id = case when v_new_period then coalesce(v_period->>'transactionId', v_row.transaction_id) else v_row.transaction_id end,
        period_purchased_at = case when v_new_period then v_purchased else v_row.period_purchased_at end,
        -- A cancellation in the App Store's charge window, of the row's own period (not one folded
        -- after the RENEWAL it held for: that charge has been made).
        cancelled_in_charge_window_at = case
          when coalesce(public.billing_effect_cancels_in_charge_window(v_effect)
                        and v_period_expires >= v_row.expires_at - interval '1 minute', false) then p_event_at
          else v_row.cancelled_in_charge_window_at end,
        replaced_at = null,
        origin = 'webhook',
        last_event_id = p_event_id,
        last_event_at = greatest(v_row.last_event_at, p_event_at),
        updated_at = now()
      where app_user_id = v_row.app_user_id and entitlement_id = v_row.entitlement_id and source_key = v_row.source_key;
      v_applied := v_applied + 1;
    end loop;
    if v_action not in ('grant', 'temporary_grant') then v_spread := true; end if;
    if v_found or v_entitlement is null then
      if not v_found then v_stale := v_stale + 1; end if;
      continue;
    end if;

    -- No row yet: a grant creates it; a flag, refund or revocation only when it says how long
    -- access lasts (RevenueCat sends those for live subscriptions), starting from what it says.
    -- Not a grant the purchase's own row refuses (an entitlement its product was mapped to since:
    -- an unpaid Stripe invoice, or the UNCANCELLATION of a refunded period, grants none of them).
    if (v_action not in ('grant', 'temporary_grant') and not coalesce((v_effect->>'createsRow')::boolean, false))
       or exists (select 1 from public.entitlements e where e.app_user_id = v_owner and e.source_key = v_source_key and public.billing_grant_refused(e, p_plan, v_effect)) then
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
      last_event_id, last_event_at, cancelled_in_charge_window_at
    ) values (
      v_owner, v_entitlement, v_period->>'productId', v_source_key, v_status, v_renewal is distinct from 'off',
      case when v_action in ('grant', 'temporary_grant') or v_effect->>'expiry' = 'set' then v_expires else v_period_expires end,
      case when v_status = 'grace' then (v_effect->>'graceExpiresAt')::timestamptz end,
      nullif(v_effect->>'pendingProductId', v_period->>'productId'),
      v_store, v_environment, v_period->>'periodType', v_period->>'originalTransactionId', v_period->>'transactionId', v_purchased,
      (v_effect->>'autoResumeAt')::timestamptz, case when v_action = 'grant' then p_event_at end,
      p_event_id, p_event_at,
      case when public.billing_effect_cancels_in_charge_window(v_effect) then p_event_at end
    );
    if v_action = 'grant' and coalesce(v_expires > p_event_at, true) then v_granted := v_granted || v_entitlement; end if;
    v_applied := v_applied + 1;
  end loop;

  -- Lineage: when a subscription changes product, the new product's rows continue the old one's
  -- subscription (same original transaction, or the product the old row named as pending, begun
  -- where the old period ends). The later-started supersedes. On the App Store, the Mac App Store
  -- and Google Play, where a period's purchase is when it began: the one the store acted on later,
  -- the earlier of its period's purchase and the grant that began it here. After an immediate
  -- change "the customer will immediately have access to the new entitlements" (RevenueCat's
  -- webhook event flows), so the older product's RENEWAL of a period begun before an upgrade,
  -- generated after the upgrade's (RevenueCat learning of both from one receipt), ends nothing; a
  -- RENEWAL generated hours before its period begins counts from its event. Elsewhere, and on
  -- ties: the grant that began its period came later (Stripe's RENEWAL of an immediate change "may
  -- show the same purchased_at_ms as the original subscription (ie. t0)", event flows; RevenueCat's
  -- pages do not say what the other stores report); for a row no grant began here, such as one a
  -- CANCELLATION of a subscription bought before this service created, its period's purchase.
  -- Every row of the older product stops granting (expired, not renewing, ending when the newer
  -- began), whichever entitlements each product grants. A newer period that begins after this
  -- event (a change at period end whose event the store generated hours before the old period
  -- ends, as RevenueCat's sample RENEWAL is: "The customer will retain their entitlement based on
  -- the original product", RevenueCat's webhook event flows) leaves the older rows granting until
  -- it begins, not renewing; an event at or after that point expires them. One exception, Apple's
  -- (the App Store and the Mac App Store): an upgrade during an introductory offer (a free trial)
  -- keeps the offer's product active to its end beside the new one; it only stops renewing.
  with superseded as (
    select o.entitlement_id, o.source_key, min(greatest(n.period_purchased_at, n.granted_at)) as at, max(n.last_event_at) as news_at,
           -- (The same subscription moved to another product: what replaced_at notes. Another
           -- subscription taking over, such as the pending product bought anew, is not.)
           bool_or(n.original_transaction_id = o.original_transaction_id) as same_subscription,
           upper(coalesce(o.store, '')) in ('APP_STORE', 'MAC_APP_STORE') and upper(coalesce(o.period_type, '')) in ('TRIAL', 'INTRO') as keeps_offer
    from public.entitlements o
    join public.entitlements n on n.app_user_id = o.app_user_id and n.source_key <> o.source_key
    where o.app_user_id = v_owner
      and v_source_key in (o.source_key, n.source_key)
      and o.status = any (c_granting)
      and o.product_id is not null and n.product_id is not null
      and upper(coalesce(n.environment, 'PRODUCTION')) = upper(coalesce(o.environment, 'PRODUCTION'))
      and ((n.original_transaction_id = o.original_transaction_id and n.product_id <> o.product_id)
           -- The product the old row named as pending continues it only from the old period's end,
           -- where a change at period end takes effect (within an hour, for the stores' clocks): a
           -- purchase of that product already under way is another subscription (a second Play
           -- account or Apple ID), which the change does not end.
           or (n.product_id = o.pending_product_id and n.product_id <> o.product_id
               and greatest(n.period_purchased_at, n.granted_at) >= o.expires_at - interval '1 hour')
           -- Google Play replaced it at once with a product it did not name (a PRODUCT_CHANGE without
           -- new_product_id): the Play subscription that began after it is the replacement. Not one
           -- begun before the change (the old row's last event, within an hour for a bundle's order):
           -- that is another subscription, and the old row grants to the end of what was paid. The
           -- replacement may be the same product: another offer of its base plan, which Play sells
           -- as a new purchase token where "the old purchase token becomes inactive" (RevenueCat's
           -- guide to Google Play Billing, subscription-upgrades-downgrades-and-plan-changes).
           or (o.pending_product_id = '*' and upper(coalesce(o.store, '')) = 'PLAY_STORE' and upper(coalesce(n.store, '')) = 'PLAY_STORE'
               and n.original_transaction_id is not null
               and greatest(n.period_purchased_at, n.granted_at) >= o.last_event_at - interval '1 hour'))
      -- (A provisional grant supersedes nothing: the purchase it stands for may never be validated.)
      and n.status <> 'temporary'
      -- Which is newer. On the App Store, the Mac App Store and Google Play, where a period's
      -- purchase is when it began: the earlier of that purchase and the grant that began it here
      -- (when the store acted); ties and rows without either, as elsewhere. Elsewhere (Stripe's t0,
      -- and the stores RevenueCat's pages do not describe): the grant first, the purchase on ties.
      and (case when upper(coalesce(o.store, '')) in ('APP_STORE', 'MAC_APP_STORE', 'PLAY_STORE')
                     and upper(coalesce(n.store, '')) in ('APP_STORE', 'MAC_APP_STORE', 'PLAY_STORE')
                     and least(n.period_purchased_at, n.granted_at) <> least(o.period_purchased_at, o.granted_at)
                then least(n.period_purchased_at, n.granted_at) > least(o.period_purchased_at, o.granted_at)
                else coalesce(n.granted_at, n.period_purchased_at, '-infinity') > coalesce(o.granted_at, o.period_purchased_at, '-infinity')
                     or (coalesce(n.granted_at, n.period_purchased_at, '-infinity') = coalesce(o.granted_at, o.period_purchased_at, '-infinity')
                         and n.period_purchased_at > o.period_purchased_at) end)
    group by o.entitlement_id, o.source_key, o.store, o.period_type
  )
  update public.entitlements e set
    status = case when not (s.keeps_offer or s.at > p_event_at) then 'expired' when e.status = 'active' then 'cancelled_active' else e.status end,
    replaced_at = case when not (s.keeps_offer or s.at > p_event_at) and s.same_subscription then p_event_at end,
    will_renew = false,
    expires_at = case when s.keeps_offer then e.expires_at else least(coalesce(e.expires_at, 'infinity'), s.at) end,
    grace_expires_at = case when s.keeps_offer then e.grace_expires_at when s.at > p_event_at and e.grace_expires_at is not null then least(e.grace_expires_at, s.at) end,
    origin = 'webhook',
    last_event_id = p_event_id,
    last_event_at = greatest(e.last_event_at, s.news_at),
    updated_at = now()
  from superseded s
  where e.app_user_id = v_owner and e.entitlement_id = s.entitlement_id and e.source_key = s.source_key;

  -- A real grant ends the entitlement's provisional grants of every other source: what stands is the
  -- real purchase, so its refund or expiry ends access even when the temporary grant named another
  -- product. Not one whose period has already ended (a REFUND_REVERSED of an old period): it grants
  -- nothing, and the purchase the provisional grant stands for is still to be validated.
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
revoke all on function public.billing_apply_event(jsonb,text,timestamp with time zone) from public, anon, authenticated;
grant execute on function public.billing_apply_event(jsonb,text,timestamp with time zone) to service_role;

-- What the group's rows say, as one value, to tell whether folding again changed anything (which
-- event touched a row last, and when it was written, do not count).
create or replace function public.billing_group_state(p_group text)
returns text
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select md5(coalesce(string_agg((to_jsonb(e) - array['updated_at', 'granted_at', 'last_event_id'])::text, ',' order by e.app_user_id collate "C", e.entitlement_id collate "C", e.source_key), ''))
    from public.entitlements e
    where e.app_user_id in (select s.app_user_id from public.billing_subscribers s where s.group_id = p_group));
end;
$$;
revoke all on function public.billing_group_state(text) from public, anon, authenticated;
grant execute on function public.billing_group_state(text) to service_role;

-- Whether an event shows that its product's entitlements changed in the dashboard since the
-- service wrote its purchase's rows: a row of the purchase still granting (at the event's time)
-- under an entitlement the event does not name, or under any when it names none (its product maps
-- to no entitlement now: `entitlement_ids` null); or an entitlement it names that nothing of the
-- owner grants, while the purchase grants another (the product moved to it). Attaching and detaching
-- change what earlier purchases grant ("detaching an entitlement from a product will remove it for
-- any customers that have previously purchased that product", RevenueCat's Entitlements page), but
-- no webhook says so: the event's own effects only take away there (a flag, refund or expiration
-- reaches every row of its purchase), and RevenueCat's record, fetched after it (a sync, reason
-- `mapping`), says what the purchase grants now. Once the record has settled it, the same events
-- ask no more. A grant that names no entitlement (it changes nothing: ignoredReason `no_entitlements`,
-- or `namesNoEntitlement` when it still merges ids) names none here.
-- Not asked of a PRODUCT_CHANGE: whether it names the old product's entitlements or the new one's,
-- RevenueCat's pages do not say, and a change of product is no sign of a new mapping.
create or replace function public.billing_mapping_changed(p_owner text, p_plan jsonb, p_at timestamptz)
returns boolean
language plpgsql
stable
set search_path = ''
as $$
declare
  v_source_key text := public.billing_source_key(p_plan->>'environment', p_plan->'period'->>'store', p_plan->'period'->>'productId',
                                                 p_plan->'period'->>'originalTransactionId', p_plan->'period'->>'transactionId');
  v_named text[] := array(select x->>'entitlementId' from jsonb_array_elements(coalesce(p_plan->'effects', '[]'::jsonb)) x
                          where x->>'entitlementId' is not null);
  v_names_none boolean := exists (select 1 from jsonb_array_elements(coalesce(p_plan->'effects', '[]'::jsonb)) x where x->>'entitlementId' is null)
                           or p_plan->>'ignoredReason' = 'no_entitlements' or coalesce((p_plan->>'namesNoEntitlement')::boolean, false);
begin
  if p_owner is null or p_plan ? 'snapshot' or p_plan->>'type' = 'PRODUCT_CHANGE'
     or (jsonb_array_length(coalesce(p_plan->'effects', '[]'::jsonb)) = 0 and not v_names_none) then
    return false;
  end if;
  return exists (select 1 from public.entitlements e
                 where e.app_user_id = p_owner and e.source_key = v_source_key and e.grants_until > p_at
                   and (v_names_none or not e.entitlement_id = any (v_named)))
      or (exists (select 1 from unnest(v_named) as n(id)
                  where not exists (select 1 from public.entitlements e
                                    where e.app_user_id = p_owner and e.entitlement_id = n.id and e.grants_until > p_at))
          and exists (select 1 from public.entitlements e
                      where e.app_user_id = p_owner and e.source_key = v_source_key and e.grants_until > p_at));
end;
$$;
revoke all on function public.billing_mapping_changed(text,jsonb,timestamp with time zone) from public, anon, authenticated;
grant execute on function public.billing_mapping_changed(text,jsonb,timestamp with time zone) to service_role;

-- The billing webhook at close to the cost of storing the event.
--
-- Most deliveries are in order: a renewal, newer than everything its customer has, granting the one
-- entitlement row the customer holds. The fold's in-order step (public.billing_apply_event, through
-- public.billing_log_and_fold) ran about forty PL/pgSQL statements for one: the group's lock in three
-- reads, the owner among the candidates, the merge of the ids the event names (two updates that
-- change nothing), the lineage of the owner's rows (a self-join), the end of provisional grants, a
-- probe for a new source. public.billing_fold_in_order does what that step does for such an event
-- in a handful, and leaves everything else to the fold (it returns null, having written nothing, when
-- it cannot tell that the step would do no more). The grant itself is one function both use
-- (public.billing_grant), so the two cannot drift apart; billing_apply_event is otherwise unchanged.
-- Measured: docs/benchmarks.md.
--
-- Record one entry of the log (a webhook event, or a snapshot of RevenueCat's record) and bring its
-- group's entitlements to the fold of its history: on top when it is the newest, else the history
-- since the checkpoint again. Returns {duplicate, outcome, ownerId, groupId, newSource,
-- afterSnapshot}: afterSnapshot, the event was generated between a snapshot and a later confirmation
-- of it (RevenueCat's record had already moved past it). Checkpoints the group on the way when its
-- tail is old or long (public.billing_checkpoint_here decides). Outcome applied (some entitlement
-- changed), stale (nothing changed: the newer history already says more), ignored (nothing to
-- apply); newSource: the event is about a purchase none of its owner's ids had a row of. A second
-- delivery of the same id waits on the unique key and then changes nothing.
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
  v_linked text[];
  v_candidates text[];
  v_ignored boolean;
  v_new_source boolean := false;
  v_after_snapshot boolean := false;
  v_mapping_changed boolean := false;
  v_group text;
  v_folded text;
  v_tail integer;
  v_pending timestamptz;
  v_base text;
  v_id text;
  v_id_base text;
  v_key text;
  v_before text;
  v_owner text;
  v_outcome text;
  v_result jsonb;
begin
  -- (One statement for both: every statement costs its start-up, and every event runs this one.)
  select array(select distinct value from jsonb_array_elements_text(coalesce(p_plan->'linkedIds', '[]'::jsonb))),
         array(select value from jsonb_array_elements_text(coalesce(p_plan->'ownerCandidates', '[]'::jsonb)))
  into v_linked, v_candidates;
  v_ignored := p_plan->>'ignoredReason' is not null or v_subject is null or not v_subject = any (v_linked);

  -- 1. Record, exactly once. A concurrent delivery of the same id waits here for this one to commit.
  insert into public.billing_event_ids (event_id, received_at) values (v_event_id, v_received) on conflict (event_id) do nothing;
  if not found then
    return public.billing_recorded_event(v_event_id);
  end if;
  if v_ignored then
    perform public.billing_log_event(p_body, p_plan, v_received, 'ignored', v_candidates[1], true);
    return jsonb_build_object('duplicate', false, 'outcome', 'ignored', 'ownerId', v_candidates[1]);
  end if;

  -- 2. In order, one entitlement row changed: a handful of statements (public.billing_fold_in_order,
  -- which gives what the step below gives, or nothing when it cannot tell).
  v_result := public.billing_fold_in_order(p_body, p_plan, v_received, v_linked);
  if v_result is not null then
    return v_result;
  end if;

  -- 3. Lock the group, then fold.
  v_group := public.billing_lock_group(v_linked);
  v_key := public.billing_sort_key(v_event_at, v_rank, v_event_id);
  -- Older than a checkpoint of an id it names: its place in the history is gone; it changes
  -- nothing, and RevenueCat's record is fetched instead.
  -- (One id at a time, each a lookup by key: over the array, Postgres planned it on every call.)
  foreach v_id in array v_linked loop
    select s.base_key into v_id_base from public.billing_subscribers s where s.app_user_id = v_id;
    if v_id_base collate "C" > coalesce(v_base, '') collate "C" then
      v_base := v_id_base;
    end if;
  end loop;
  if v_base is not null and v_key collate "C" <= v_base collate "C" then
    perform public.billing_log_event(p_body, p_plan, v_received, 'stale', v_candidates[1], false);
    return jsonb_build_object('duplicate', false, 'outcome', 'stale', 'ownerId', v_candidates[1], 'groupId', v_group,
                              'newSource', false, 'beforeHistory', true);
  end if;
  v_new_source := jsonb_array_length(coalesce(p_plan->'effects', '[]'::jsonb)) > 0 and not exists (
    select 1 from public.entitlements
    where app_user_id = any (v_candidates)
      and source_key in (public.billing_source_key(p_plan->>'environment', p_plan->'period'->>'store', p_plan->'period'->>'productId',
                                                   p_plan->'period'->>'originalTransactionId', p_plan->'period'->>'transactionId'),
                         -- (The product's row of a record that did not know the purchase: the event claims it.)
                         public.billing_source_key(p_plan->>'environment', p_plan->'period'->>'store', p_plan->'period'->>'productId', null, null),
                         -- (A one-time purchase's, keyed by its own transaction: billing_apply_event finds it so.)
                         public.billing_source_key(p_plan->>'environment', p_plan->'period'->>'store', p_plan->'period'->>'productId', null,
                                                   p_plan->'period'->>'transactionId')));
  select folded_key, tail_events, pending_since into v_folded, v_tail, v_pending from public.billing_subscribers where app_user_id = v_group;
  -- (Equal: the watermark of a new id already counted an event of this key, filed under it.)
  if v_folded is null or v_key collate "C" >= v_folded collate "C" then
    -- Checkpointed when its tail is long or a month old, at its newest event so far back that
    -- nothing before it can still be on its way (billing_checkpoint_lag): where it stands (a copy)
    -- when that is its last event, else before the events since (one replay of the tail).
    -- (Nested: SQL does not promise to evaluate the terms of an "and" in order.)
    if v_folded is not null and (v_tail >= public.billing_tail_bound() or v_pending < v_received - interval '30 days') then
      if public.billing_key_time(v_folded) < v_received - public.billing_checkpoint_lag() then
        if public.billing_checkpoint_here(v_group) then
          v_tail := 0;
          v_pending := null;
        end if;
      elsif v_pending < v_received - interval '30 days' then
        if public.billing_checkpoint_before(v_group, v_received - public.billing_checkpoint_lag()) then
          select tail_events, pending_since into v_tail, v_pending from public.billing_subscribers where app_user_id = v_group;
        end if;
      end if;
    end if;
    -- On top of the history: one step, and the event is written once, with what it did.
    v_result := public.billing_apply_event(p_plan, v_event_id, v_event_at);
    v_outcome := v_result->>'outcome';
    v_owner := v_result->>'ownerId';
    v_tail := v_tail + 1;
    update public.billing_subscribers set folded_key = v_key, tail_events = v_tail, pending_since = coalesce(v_pending, v_received)
    where app_user_id = v_group;
    perform public.billing_log_event(p_body, p_plan, v_received, v_outcome, v_owner, false);
    v_mapping_changed := (v_outcome = 'applied' or coalesce((p_plan->>'namesNoEntitlement')::boolean, false))
                         and public.billing_mapping_changed(v_owner, p_plan, v_event_at);
    -- Generated before a later snapshot confirmed the last one (the group's last entry): that one already knew of it.
    if public.billing_key_event(v_folded) like 'sync:%' then
      v_after_snapshot := exists (
        select 1 from public.billing_events e where e.event_id = public.billing_key_event(v_folded) and e.confirmed_at > v_event_at);
    end if;
  else
    -- Inside the history: the fold reads the event from the log, so it goes in first.
    perform public.billing_log_event(p_body, p_plan, v_received, 'stale', v_candidates[1], false);
    v_before := public.billing_group_state(v_group);
    v_owner := public.billing_refold_group(v_group, v_event_id);
    v_outcome := case when public.billing_group_state(v_group) is distinct from v_before then 'applied' else 'stale' end;
    update public.billing_events set outcome = v_outcome, owner_id = v_owner where event_id = v_event_id and received_at = v_received;
    -- (No mapping check, but of a grant naming no entitlement, which changes nothing: the rows are
    -- what later events made them, not what this one found.)
    v_mapping_changed := coalesce((p_plan->>'namesNoEntitlement')::boolean, false) and public.billing_mapping_changed(v_owner, p_plan, v_event_at);
    select tail_events into v_tail from public.billing_subscribers where app_user_id = v_group;
    -- Generated between a snapshot and a later one that said the same (a confirmation): that one already knew of it.
    v_after_snapshot := exists (
      select 1 from public.billing_events e
      where e.subject_id in (select s.app_user_id from public.billing_subscribers s where s.group_id = v_group)
        and e.event_at >= public.billing_group_from(v_group) and e.event_at < v_event_at and e.confirmed_at > v_event_at);
  end if;
  -- Never more than the bound after a call: a late event replays at most that many.
  if v_tail >= public.billing_tail_bound() then
    perform public.billing_checkpoint_tail(v_group);
  end if;
  return jsonb_build_object('duplicate', false, 'outcome', v_outcome, 'ownerId', v_owner, 'groupId', v_group, 'newSource', v_new_source,
                            'afterSnapshot', v_after_snapshot, 'mappingChanged', v_mapping_changed);
end;
$$;
revoke all on function public.billing_log_and_fold(jsonb,jsonb) from public, anon, authenticated;
grant execute on function public.billing_log_and_fold(jsonb,jsonb) to service_role;

-- Mark subscribers to be fetched from RevenueCat (billing_sync_queue); an existing mark becomes due now.
create or replace function public.billing_mark_sync(p_ids text[], p_reason text)
returns text[]
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_marked text[];
begin
  with marked as (
    insert into public.billing_sync_queue (app_user_id, reason)
    select distinct id, p_reason from unnest(p_ids) as ids(id)
    where id is not null and char_length(id) between 1 and 256
    on conflict (app_user_id) do update set reason = excluded.reason, requested_at = now(), next_attempt_at = now()
    returning app_user_id
  )
  select coalesce(array_agg(app_user_id order by app_user_id), '{}') into v_marked from marked;
  return v_marked;
end;
$$;
revoke all on function public.billing_mark_sync(text[],text) from public, anon, authenticated;
grant execute on function public.billing_mark_sync(text[],text) to service_role;

-- A renewal that takes a checkpoint, in fewer writes.
--
-- The in-order shortcut (public.billing_fold_in_order) checkpoints a group where it stands when its
-- unfolded events are a month old, which is a monthly subscriber's renewal about every other month
-- and every renewal of a customer quiet for longer. It called public.billing_checkpoint_here, which
-- read the group's watermark and members again, wrote each member's checkpoint
-- (public.billing_take_checkpoint), then reset the group's tail; the shortcut then wrote the
-- watermark: the group's row three times, two of them moving `pending_since` (indexed, so never a
-- HOT update). Measured alone, such a renewal cost ~0.2 ms more Postgres CPU than one that takes
-- none (0.68 against 0.46 ms; `CHECKPOINT=1 node scripts/bench/sql-ab.ts`). Now the shortcut uses
-- what it read under the lock, and writes each member's row once: the group's with its checkpoint
-- and its watermark together, before the grant changes the rows the checkpoint copies. What it stores is unchanged
-- (tests/billing/in-order-fold.test.ts compares it column by column with the fold's own step, which
-- still calls billing_checkpoint_here). The copy of a member's rows is one function for both:
-- public.billing_checkpoint_rows. Such a renewal now costs 0.54 ms; one that takes no checkpoint is
-- unchanged (0.46). Measured: docs/benchmarks.md.
--
-- Take a checkpoint of the group's members at p_key: each id's rows now (the fold up to p_key).
create or replace function public.billing_take_checkpoint(p_members text[], p_key text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  update public.billing_subscribers s set
    base_key = p_key,
    base_customer = s.customer_id,
    base_rows = public.billing_checkpoint_rows(s.app_user_id)
  where s.app_user_id = any (p_members);
end;
$$;
revoke all on function public.billing_take_checkpoint(text[],text) from public, anon, authenticated;
grant execute on function public.billing_take_checkpoint(text[],text) to service_role;

-- Fold the group's history again: from each member's checkpoint (or from nothing), replaying the
-- events after it in event order, each snapshot's confirmation with it. With p_checkpoint_key, take
-- a new checkpoint of every member at that key on the way (the end state is the same). Leaves the
-- group's watermark, tail and pending receive time as the fold found them. Returns the owner the
-- step of p_event_id chose. Events recorded before plans were stored have none yet: the caller
-- computes them (billing_plans_missing) and calls again.
create or replace function public.billing_refold_group(p_group text, p_event_id text, p_checkpoint_key text default null)
returns text
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_members text[] := array(select app_user_id from public.billing_subscribers where group_id = p_group);
  -- Every event replayed is at or after it, so the log is read from there, not from its start.
  v_from timestamptz := public.billing_group_from(p_group);
  v_event record;
  v_result jsonb;
  v_owner text;
  v_key text;
  v_last text;
  v_checkpointed boolean := p_checkpoint_key is null;
  v_tail integer := 0;
  v_pending timestamptz;
begin
  if exists (
    select 1 from public.billing_events e left join public.billing_subscribers s on s.app_user_id = e.subject_id
    where e.subject_id = any (v_members) and e.event_at >= v_from and e.plan is null
      and public.billing_sort_key(e.event_at, coalesce(e.sort_rank, 1::smallint), e.event_id) collate "C" > coalesce(s.base_key, '') collate "C"
  ) then
    raise exception 'billing_plans_missing' using errcode = 'PT503',
      detail = (select jsonb_agg(to_jsonb(m))::text from unnest(v_members) as m);
  end if;
  delete from public.entitlements where app_user_id = any (v_members);
  -- Start from the checkpoints.
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
  where s.group_id = p_group and s.base_rows is not null;
  update public.billing_subscribers set customer_id = base_customer where group_id = p_group and customer_id is distinct from base_customer;

  for v_event in
    select e.event_id, e.event_at, e.sort_rank, e.plan, e.received_at, e.confirmed_at,
           public.billing_sort_key(e.event_at, e.sort_rank, e.event_id) as sort_key
    from public.billing_events e join public.billing_subscribers s on s.app_user_id = e.subject_id
    where e.subject_id = any (v_members) and e.event_at >= v_from and e.plan->>'ignoredReason' is null
      and public.billing_sort_key(e.event_at, e.sort_rank, e.event_id) collate "C" > coalesce(s.base_key, '') collate "C"
    order by e.event_at, e.sort_rank, e.event_id collate "C"
  loop
    if not v_checkpointed and v_event.sort_key collate "C" > p_checkpoint_key collate "C" then
      perform public.billing_take_checkpoint(v_members, p_checkpoint_key);
      v_checkpointed := true;
      v_tail := 0;
      v_pending := null;
    end if;
    v_result := public.billing_apply_event(v_event.plan, v_event.event_id, v_event.event_at);
    -- A snapshot later snapshots said again: the rows it wrote were confirmed then (as when they came).
    if v_event.confirmed_at is not null then
      update public.entitlements set synced_at = v_event.confirmed_at
      where app_user_id = any (v_members) and last_event_id = v_event.event_id and synced_at is distinct from v_event.confirmed_at;
    end if;
    if v_event.event_id = p_event_id then v_owner := v_result->>'ownerId'; end if;
    v_last := v_event.sort_key;
    v_tail := v_tail + 1;
    v_pending := least(v_pending, v_event.received_at);
  end loop;
  if not v_checkpointed then
    perform public.billing_take_checkpoint(v_members, p_checkpoint_key);
    v_tail := 0;
    v_pending := null;
  end if;
  select max(k collate "C") into v_key from (
    select v_last as k union all select base_key from public.billing_subscribers where group_id = p_group) keys;
  update public.billing_subscribers set folded_key = v_key, tail_events = v_tail, pending_since = v_pending where app_user_id = p_group;
  return v_owner;
end;
$$;
revoke all on function public.billing_refold_group(text,text,text) from public, anon, authenticated;
grant execute on function public.billing_refold_group(text,text,text) to service_role;

-- 2. Where a fold of the group starts reading the log: the earliest checkpoint of its ids
--    ('-infinity' when one has none). Every event a fold replays is at or after it.
create or replace function public.billing_group_from(p_group text)
returns timestamptz
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select coalesce(case when bool_and(public.billing_key_time(s.base_key) is not null) then min(public.billing_key_time(s.base_key)) end, '-infinity')
    from public.billing_subscribers s where s.group_id = p_group);
end;
$$;
revoke all on function public.billing_group_from(text) from public, anon, authenticated;
grant execute on function public.billing_group_from(text) to service_role;

-- Checkpoint the group where it stands: its rows are the fold of its history up to its watermark,
-- so they are the checkpoint at it, for the price of a copy (nothing is replayed). Not over events
-- an older version stored without plans (their rows came from older rules; a fold computes them):
-- false then, and nothing is done.
create or replace function public.billing_checkpoint_here(p_group text)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_folded text;
  v_pending timestamptz;
  v_legacy timestamptz := (select received_before from public.billing_legacy_horizon);
begin
  select folded_key, pending_since into v_folded, v_pending from public.billing_subscribers where app_user_id = p_group;
  if v_folded is null or (v_legacy is not null and v_pending <= v_legacy) then
    return false;
  end if;
  perform public.billing_take_checkpoint(array(select app_user_id from public.billing_subscribers where group_id = p_group), v_folded);
  update public.billing_subscribers set tail_events = 0, pending_since = null where app_user_id = p_group;
  return true;
end;
$$;
revoke all on function public.billing_checkpoint_here(text) from public, anon, authenticated;
grant execute on function public.billing_checkpoint_here(text) to service_role;

-- A group whose state is a month old but whose last events are recent (a weekly renewal): checkpoint
-- it at its newest event generated before p_before, by one replay of its tail, so that the events
-- after it stay unfolded (a late one still takes its place) and the tail starts again. False when
-- no event of the tail is that old.
create or replace function public.billing_checkpoint_before(p_group text, p_before timestamptz)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_members text[] := array(select app_user_id from public.billing_subscribers where group_id = p_group);
  v_key text;
begin
  select max(public.billing_sort_key(e.event_at, e.sort_rank, e.event_id) collate "C") into v_key
  from public.billing_events e join public.billing_subscribers s on s.app_user_id = e.subject_id
  where e.subject_id = any (v_members) and e.event_at >= public.billing_group_from(p_group) and e.event_at < p_before
    and e.plan->>'ignoredReason' is null
    and public.billing_sort_key(e.event_at, e.sort_rank, e.event_id) collate "C" > coalesce(s.base_key, '') collate "C";
  if v_key is null then
    return false;
  end if;
  -- Never behind a checkpoint a member has already (ids merged into one group: one's may be newer).
  select greatest(v_key collate "C", max(s.base_key collate "C")) into v_key from public.billing_subscribers s where s.group_id = p_group;
  -- (In the default collation: a "C" argument would make every text of the fold "C", and no index could serve it.)
  perform public.billing_refold_group(p_group, '', v_key collate "default");
  return true;
end;
$$;
revoke all on function public.billing_checkpoint_before(text,timestamp with time zone) from public, anon, authenticated;
grant execute on function public.billing_checkpoint_before(text,timestamp with time zone) to service_role;

-- The tail bound: checkpoint the group so that only the newest half of billing_tail_bound() events
-- stays after its checkpoint (one replay of the tail now; every later fold replays less than the bound).
create or replace function public.billing_checkpoint_tail(p_group text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_members text[] := array(select app_user_id from public.billing_subscribers where group_id = p_group);
  v_from timestamptz := public.billing_group_from(p_group);
  v_key text;
begin
  -- A tail far past the bound (a history from before tails were bounded): replaying it would take
  -- seconds, so the group is checkpointed where it stands; an event older than that can no longer
  -- take its place (it marks the customer for a sync instead).
  if (select tail_events from public.billing_subscribers where app_user_id = p_group) > 2 * public.billing_tail_bound() then
    if public.billing_checkpoint_here(p_group) then
      return;
    end if;
  end if;
  select k.sort_key into v_key from (
    select public.billing_sort_key(e.event_at, e.sort_rank, e.event_id) as sort_key
    from public.billing_events e join public.billing_subscribers s on s.app_user_id = e.subject_id
    where e.subject_id = any (v_members) and e.event_at >= v_from and e.plan->>'ignoredReason' is null
      and public.billing_sort_key(e.event_at, e.sort_rank, e.event_id) collate "C" > coalesce(s.base_key, '') collate "C"
  ) k
  order by k.sort_key collate "C" desc
  offset public.billing_tail_bound() / 2 limit 1;
  if v_key is not null then
    -- (In the default collation: a "C" argument would make every text of the fold "C", and no index could serve it.)
    perform public.billing_refold_group(p_group, '', v_key collate "default");
  else
    -- The count ran ahead of the log (a user's deletion erased events of the tail): count again.
    perform public.billing_refold_group(p_group, '');
  end if;
end;
$$;
revoke all on function public.billing_checkpoint_tail(text) from public, anon, authenticated;
grant execute on function public.billing_checkpoint_tail(text) to service_role;

-- A duplicate's 200 only once the event it repeats is on disk.
--
-- A call that commits its event without waiting for the flush (synchronous_commit off) and flushes
-- later would let this happen: a delivery of the same event id that
-- arrives meanwhile, alone, waits for the first one's commit, finds the id taken and answers 200
-- as a duplicate. That call wrote nothing, so its commit flushed nothing: a crash of the database
-- in that moment could lose the event while its sender had a 200 for it (the first delivery's
-- answer lost with the crash). Now a call that finds its event a duplicate writes an empty logical
-- decoding message, so its commit flushes the log through the first one's commit before it
-- answers. (A duplicate found by its content digest already wrote: its `on conflict do update`
-- locks the row.)
create or replace function public.record_billing_event(p_body jsonb, p_plan jsonb, p_sync_after text default 'none', p_content_digest text default null)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_event_id text := p_plan->>'eventId';
  v_first text;
  v_result jsonb;
  v_owner text;
  v_sync text[] := '{}';
begin
  if v_event_id is null or char_length(v_event_id) not between 1 and 256
     or jsonb_typeof(p_body->'event') is distinct from 'object'
     or p_body->'event'->>'id' is distinct from v_event_id
     or p_plan->>'eventAt' is null
     or p_plan ? 'snapshot'
     or (p_content_digest is not null and p_content_digest !~ '^[0-9a-f]{64}$')
     or jsonb_typeof(coalesce(p_plan->'effects', '[]'::jsonb)) <> 'array'
     or jsonb_typeof(coalesce(p_plan->'movedIds', '[]'::jsonb)) <> 'array'
     or jsonb_typeof(coalesce(p_plan->'linkedIds', '[]'::jsonb)) <> 'array'
     or jsonb_typeof(coalesce(p_plan->'ownerCandidates', '[]'::jsonb)) <> 'array' then
    raise exception 'invalid_request' using errcode = 'PT400', detail = 'The billing event plan does not match the body.';
  end if;
  -- An event naming an erased user keeps no personal data and grants nothing (04_billing_sync.sql).
  -- (Asked first on its own: most events name no erased id, and then nothing is copied.)
  if public.billing_event_names_erased(p_body, p_plan) then
    select e.body, e.plan into p_body, p_plan from public.billing_erased_event(p_body, p_plan) e;
  end if;
  if p_content_digest is not null then
    -- The first delivery of this content in the window takes the digest; a concurrent one waits
    -- here for it to commit, then finds it.
    insert into public.billing_content_keys as k (digest, event_id, received_at) values (p_content_digest, v_event_id, now())
    on conflict (digest) do update set event_id = excluded.event_id, received_at = excluded.received_at
      where k.received_at <= excluded.received_at - public.billing_content_window()
    returning k.event_id into v_first;
    if v_first is null then
      return public.billing_recorded_event((select event_id from public.billing_content_keys where digest = p_content_digest))
             || jsonb_build_object('syncIds', '[]'::jsonb);
    end if;
  end if;
  v_result := public.billing_log_and_fold(p_body, p_plan);
  if (v_result->>'duplicate')::boolean then
    -- Found by its id, this call wrote nothing, so its commit would flush nothing; the first
    -- delivery's commit may not be on disk yet (a gathered call commits each event without
    -- waiting and flushes at its end). A write makes this commit flush the log, through that one.
    perform pg_catalog.pg_logical_emit_message(true, 'record_billing_event', '');
  end if;
  -- A grant naming no entitlement changes nothing, but where its purchase still grants, the
  -- product's entitlements changed (public.billing_mapping_changed).
  if not (v_result->>'duplicate')::boolean and p_plan->>'ignoredReason' = 'no_entitlements' and p_sync_after <> 'none'
     and public.billing_mapping_changed(v_result->>'ownerId', p_plan, (p_plan->>'eventAt')::timestamptz) then
    v_sync := public.billing_mark_sync(array[v_result->>'ownerId'], 'mapping');
  end if;
  if (v_result->>'duplicate')::boolean or p_plan->>'ignoredReason' is not null then
    return v_result || jsonb_build_object('syncIds', to_jsonb(v_sync));
  end if;
  v_owner := v_result->>'ownerId';
  if coalesce((v_result->>'beforeHistory')::boolean, false) then
    if p_sync_after <> 'none' then
      v_sync := public.billing_mark_sync(array[v_owner], 'before_history');
    end if;
  elsif p_sync_after = 'all' or (p_sync_after = 'gaps' and (p_plan->>'syncReason' is not null or (v_result->>'newSource')::boolean
                                                          or coalesce((v_result->>'mappingChanged')::boolean, false))) then
    v_sync := public.billing_mark_sync(
      case when p_plan->>'syncReason' = 'transfer'
           then array(select jsonb_array_elements_text(p_plan->'movedIds')) || v_owner
           else array[v_owner] end,
      coalesce(p_plan->>'syncReason', case when p_sync_after = 'all' then 'event' when (v_result->>'newSource')::boolean then 'new_source' else 'mapping' end));
  elsif coalesce((v_result->>'afterSnapshot')::boolean, false) and p_sync_after <> 'none' then
    v_sync := public.billing_mark_sync(array[v_owner], 'after_snapshot');
  end if;
  -- usersNoted: whether it changed what a Supabase user reads, so its commit may write outbound
  -- events (public.outbound_pending_users): the server moves the outbox after the response only then.
  return v_result - 'groupId' - 'newSource' - 'beforeHistory' - 'afterSnapshot' - 'mappingChanged' || jsonb_build_object('syncIds', to_jsonb(v_sync),
    'usersNoted', exists (select 1 from public.outbound_pending_users where tx = pg_current_xact_id()));
end;
$$;
revoke all on function public.record_billing_event(jsonb,jsonb,text,text) from public, anon, authenticated;
grant execute on function public.record_billing_event(jsonb,jsonb,text,text) to service_role;

-- Several webhooks' events in one call, each its own transaction: what the server sends when
-- events wait for a pooled connection anyway (lib/db/gathered-calls.ts). Under load that shares a
-- call's fixed cost (parsing, planning, a round trip, a WAL flush) among up to ten events.
--
-- Each event is record_billing_event, committed before the next, so it commits or fails alone,
-- exactly as it would have alone; its answer is `{result}`, `{error: {sqlstate, message, detail}}`
-- or `{skipped}`, in order (p_answers).
--
-- One customer's held lock must never hold up the other customers' events in the call: an event
-- waits at most p_lock_timeout_ms (a few milliseconds) for a lock, then is answered
-- `{"skipped": "locked"}` and the server sends it alone, where it waits on a connection of its own.
-- Past p_time_budget_ms the call starts no more events (`{"skipped": "time"}`, sent alone too),
-- so it answers well before its caller stops waiting. The first event always runs.
--
-- Each event's commit does not wait for the WAL flush; the call ends with one transaction that
-- does (a transactional logical message, open to every role, is the smallest write that makes a
-- commit flush; PostgreSQL docs, "Asynchronous Commit"), and a flush reaches every earlier record
-- too: when the answers leave, every event they report stored is on disk. If the call fails before
-- its end (the connection drops), every event it carried is answered with an error and its
-- sender's retry brings it back (stored again, or found a duplicate).
create or replace procedure public.record_billing_events(
  p_calls jsonb, p_lock_timeout_ms integer default null, p_time_budget_ms integer default null, inout p_answers jsonb default null)
language plpgsql
-- (No `set search_path`: a procedure with a SET clause may not commit. Every name is qualified instead.)
as $$
declare
  v_count integer := pg_catalog.jsonb_array_length(p_calls);
  v_started timestamptz := pg_catalog.clock_timestamp();
  v_budget interval := pg_catalog.make_interval(secs => p_time_budget_ms operator(pg_catalog./) 1000.0);
  v_call jsonb;
  v_answer jsonb;
  v_state text;
  v_message text;
  v_detail text;
  v_stored boolean := false;
begin
  p_answers := '[]';
  for v_index in 0 .. v_count operator(pg_catalog.-) 1 loop
    v_call := p_calls operator(pg_catalog.->) v_index;
    if v_index operator(pg_catalog.>) 0 and v_budget is not null
       and pg_catalog.clock_timestamp() operator(pg_catalog.-) v_started operator(pg_catalog.>=) v_budget then
      p_answers := p_answers operator(pg_catalog.||) '[{"skipped": "time"}]'::jsonb;
      continue;
    end if;
    perform pg_catalog.set_config('synchronous_commit', 'off', true);
    begin
      if p_lock_timeout_ms is not null then
        perform pg_catalog.set_config('lock_timeout', pg_catalog.format('%sms', p_lock_timeout_ms), true);
      end if;
      v_answer := pg_catalog.jsonb_build_object('result', public.record_billing_event(
        p_body => v_call operator(pg_catalog.->) 'p_body',
        p_plan => v_call operator(pg_catalog.->) 'p_plan',
        p_sync_after => coalesce(v_call operator(pg_catalog.->>) 'p_sync_after', 'none'),
        p_content_digest => v_call operator(pg_catalog.->>) 'p_content_digest'));
      -- What the event deferred to its commit (the outbound events' reconcile, 10_events.sql) runs
      -- here, inside its own block: a lock it waits for past p_lock_timeout_ms skips this event
      -- alone, as a lock in the event itself does, where at the commit below it failed the call.
      set constraints all immediate;
      v_stored := true;
    exception
      when lock_not_available then
        v_answer := '{"skipped": "locked"}';
      when others then
        get stacked diagnostics v_state = returned_sqlstate, v_message = message_text, v_detail = pg_exception_detail;
        v_answer := pg_catalog.jsonb_build_object('error', pg_catalog.jsonb_build_object('sqlstate', v_state, 'message', v_message,
          'detail', case when v_detail operator(pg_catalog.=) '' then null else v_detail end));
    end;
    p_answers := p_answers operator(pg_catalog.||) pg_catalog.jsonb_build_array(v_answer);
    commit;
  end loop;
  if v_stored then
    perform pg_catalog.pg_logical_emit_message(true, 'record_billing_events', '');
    commit;
  end if;
end;
$$;
revoke all on procedure public.record_billing_events(jsonb,integer,integer,jsonb) from public, anon, authenticated;
grant execute on procedure public.record_billing_events(jsonb,integer,integer,jsonb) to service_role;

-- Count every group's tail and its oldest receive time from the log (the migration that began
-- counting tails, for the log as it stood; the scale seed, for what it writes). Returns how many groups have a tail.
create or replace function public.billing_recount_tails()
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_groups integer;
begin
  update public.billing_subscribers set tail_events = 0, pending_since = null where tail_events <> 0 or pending_since is not null;
  with tails as (
    select s.group_id, count(*)::integer as n, min(e.received_at) as since
    from public.billing_events e join public.billing_subscribers s on s.app_user_id = e.subject_id
    where e.plan->>'ignoredReason' is null
      and public.billing_sort_key(e.event_at, e.sort_rank, e.event_id) collate "C" > coalesce(s.base_key, '') collate "C"
    group by s.group_id
  )
  update public.billing_subscribers g set tail_events = t.n, pending_since = t.since
  from tails t where g.app_user_id = t.group_id;
  get diagnostics v_groups = row_count;
  return v_groups;
end;
$$;
revoke all on function public.billing_recount_tails() from public, anon, authenticated;
grant execute on function public.billing_recount_tails() to service_role;

-- Whether the row holds a cancellation in the App Store's charge window (its column says when),
-- which the RENEWAL right after it does not undo: Apple charged it anyway ("Your account will be
-- charged for renewal within 24 hours prior to the end of the current period", the App Store's
-- auto-renewal terms). A row written before the column was (a checkpoint's copy too) says it by
-- its last change: that cancellation, within 24 hours of the row's end, its plan read from the log
-- (looked up only then).
create or replace function public.billing_cancelled_in_charge_window(p_row public.entitlements)
returns boolean
language plpgsql
stable
set search_path = ''
as $$
begin
  return upper(coalesce(p_row.store, '')) in ('APP_STORE', 'MAC_APP_STORE')
    and (p_row.cancelled_in_charge_window_at is not null
         or (p_row.last_event_at > p_row.expires_at - interval '24 hours'
             and exists (select 1 from public.billing_events e
                         where e.event_id = p_row.last_event_id
                           and public.billing_effect_cancels_in_charge_window(e.plan->'effects'->0))));
end;
$$;
revoke all on function public.billing_cancelled_in_charge_window(public.entitlements) from public, anon, authenticated;
grant execute on function public.billing_cancelled_in_charge_window(public.entitlements) to service_role;

-- Whether a grant leaves the row as it is (nothing is granted, and nothing else the grant would end
-- ends):
-- - a Stripe RENEWAL at price 0 on an expired row is an unpaid invoice, whose access RevenueCat
--   revoked (the effect's zeroPriceStripeRenewal, lib/billing/event-effects.ts), whatever period
--   it names; except on a row a product change ended (replaced_at): that is the change back at
--   once, which a trial, a 100%-off coupon or the proration leaves with nothing to pay, and grants;
-- - a refunded period is not given back by a later grant of that period that charges nothing (an
--   UNCANCELLATION, keepsBillingIssue; an extension, renewal 'continue' without resumesRenewal):
--   "Granting a refund will immediately expire the subscription and remove any entitlement access"
--   (RevenueCat's Refunds page). A REFUND_REVERSED gives it back (reinstates); a charge (a RENEWAL,
--   which on Stripe may carry the subscription's first start, t0) grants as before;
-- - a REFUND_REVERSED of a period older than the row's (RevenueCat's sample reverses one that had
--   ended) reinstates nothing the row still holds: the row has moved on, renewed, in grace or expired.
create or replace function public.billing_grant_refused(p_row public.entitlements, p_plan jsonb, p_effect jsonb)
returns boolean
language plpgsql
immutable
set search_path = ''
as $$
declare
  v_purchased timestamptz := (p_plan->'period'->>'purchasedAt')::timestamptz;
  v_reinstates boolean := coalesce((p_effect->>'reinstates')::boolean, false);
  v_charges_nothing boolean := coalesce((p_effect->>'keepsBillingIssue')::boolean, false)
    or (p_effect->>'renewal' = 'continue' and not coalesce((p_effect->>'resumesRenewal')::boolean, false));
begin
  return (coalesce((p_effect->>'zeroPriceStripeRenewal')::boolean, false) and p_row.status = 'expired'
          and p_row.replaced_at is null)
      or coalesce(p_row.status = 'refunded' and v_charges_nothing and v_purchased <= p_row.period_purchased_at, false)
      or coalesce(v_reinstates and v_purchased < p_row.period_purchased_at, false);
end;
$$;
revoke all on function public.billing_grant_refused(entitlements,jsonb,jsonb) from public, anon, authenticated;
grant execute on function public.billing_grant_refused(entitlements,jsonb,jsonb) to service_role;

-- A grant on a stored row of its source (one step of the fold for `grant` and `temporary_grant`):
-- the row as the event leaves it. One piece of code for the fold (public.billing_apply_event) and for
-- its in-order shortcut (public.billing_fold_in_order).
create or replace function public.billing_grant(p_row public.entitlements, p_plan jsonb, p_effect jsonb, p_event_id text, p_event_at timestamptz)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_period jsonb := coalesce(p_plan->'period', '{}'::jsonb);
  v_environment text := p_plan->>'environment';
  v_store text := v_period->>'store';
  v_purchased timestamptz := (v_period->>'purchasedAt')::timestamptz;
  -- Where the event's period begins: whether the row "still grants" is judged there.
  v_start timestamptz := coalesce((v_period->>'purchasedAt')::timestamptz, p_event_at);
  v_action text := p_effect->>'action';
  v_renewal text := p_effect->>'renewal';
  v_expires timestamptz := (p_effect->>'expiresAt')::timestamptz;
  v_continues boolean;
  v_keeps_issue boolean;
  v_new_period boolean;
  v_will_renew boolean;
  v_status text;
begin
  -- Continues the stored period when that still grants as this one begins (a renewal); else
  -- (lapsed, expired, refunded, temporary) it starts afresh.
  v_continues := p_row.grants_until >= v_start and p_row.status <> 'temporary' and v_action = 'grant';
  -- An UNCANCELLATION of a subscription failing to charge re-enables renewal only: the billing
  -- issue (its grace period) stands until a payment recovers it (a RENEWAL).
  v_keeps_issue := v_continues and coalesce((p_effect->>'keepsBillingIssue')::boolean, false) and p_row.status in ('grace', 'billing_issue');
  v_new_period := v_purchased is not null and (p_row.period_purchased_at is null or v_purchased > p_row.period_purchased_at);
  -- 'continue' (a renewal, an extension) keeps what the subscriber chose,
  -- unless the period it continues had lapsed or was failing to charge (a billing error turned
  -- renewal off; the payment that recovers it turns it back on), or it is a RENEWAL past the stored
  -- period's end (resumesRenewal): a cancelled subscription charged again was turned back on
  -- (Stripe never sends UNCANCELLATION; Apple's can be lost). Except an App Store subscription
  -- cancelled less than 24 hours before its period ends, which Apple charges for the next period
  -- anyway and which stays cancelled (public.billing_cancelled_in_charge_window): only the charge
  -- right after that cancellation (which clears it, below); the one after it was turned back on.
  v_will_renew := case when v_keeps_issue then false
                       when v_renewal = 'on' then true when v_renewal = 'off' then false
                       when v_renewal = 'continue' then not v_continues or p_row.will_renew or p_row.status in ('billing_issue', 'grace')
                         or coalesce((p_effect->>'resumesRenewal')::boolean and v_expires > p_row.expires_at
                                     and not public.billing_cancelled_in_charge_window(p_row), false)
                       else p_row.will_renew end;
  v_status := case when v_action = 'temporary_grant' then 'temporary'
                   when v_keeps_issue then p_row.status
                   when not v_will_renew and v_renewal <> 'off' then 'cancelled_active'
                   else 'active' end;
  update public.entitlements set
    status = v_status,
    will_renew = v_will_renew,
    expires_at = case when v_continues
                      then nullif(greatest(coalesce(p_row.expires_at, 'infinity'), coalesce(v_expires, 'infinity')), 'infinity')
                      else v_expires end,
    grace_expires_at = case when v_keeps_issue then p_row.grace_expires_at end,
    pending_product_id = case when v_continues and not v_new_period then p_row.pending_product_id end,
    auto_resume_at = null,
    store = coalesce(v_store, p_row.store),
    environment = coalesce(v_environment, p_row.environment),
    period_type = case when v_new_period or not v_continues then coalesce(v_period->>'periodType', p_row.period_type) else p_row.period_type end,
    original_transaction_id = coalesce(v_period->>'originalTransactionId', p_row.original_transaction_id),
    transaction_id = case when v_new_period or not v_continues then coalesce(v_period->>'transactionId', p_row.transaction_id) else p_row.transaction_id end,
    period_purchased_at = case when v_new_period or not v_continues then coalesce(v_purchased, p_row.period_purchased_at) else p_row.period_purchased_at end,
    -- (A reinstated period, a refund reversed, began when it was first granted: it is not newer
    -- than what the subscription moved on to meanwhile, which it would otherwise supersede. A grant
    -- on a row that no longer grants begins now, even of the same period: Stripe's RENEWAL of a
    -- change back to an earlier product carries the subscription's first start, t0.)
    granted_at = case when coalesce((p_effect->>'reinstates')::boolean, false) and p_row.granted_at is not null then p_row.granted_at
                      when v_new_period or not v_continues or p_row.granted_at is null then p_event_at
                      else p_row.granted_at end,
    -- The charge right after a cancellation in the charge window has been made (it held for it);
    -- renewal turned back on, or access begun again, ends it too.
    cancelled_in_charge_window_at = case
      when v_will_renew or not v_continues or coalesce((p_effect->>'resumesRenewal')::boolean and v_expires > p_row.expires_at, false) then null
      else p_row.cancelled_in_charge_window_at end,
    replaced_at = null,
    origin = 'webhook',
    last_event_id = p_event_id,
    last_event_at = greatest(p_row.last_event_at, p_event_at),
    updated_at = now()
  where app_user_id = p_row.app_user_id and entitlement_id = p_row.entitlement_id and source_key = p_row.source_key;
end;
$$;
revoke all on function public.billing_grant(entitlements,jsonb,jsonb,text,timestamp with time zone) from public, anon, authenticated;
grant execute on function public.billing_grant(entitlements,jsonb,jsonb,text,timestamp with time zone) to service_role;

-- The fold's shortcut for what most deliveries are: an event newer than everything its customer has,
-- granting one entitlement on the one row its customer holds (a renewal). It does exactly what
-- public.billing_log_and_fold's in-order step would, in a handful of statements: the group's lock,
-- one read of the group, one of its rows, the row's update, the watermark, the event's row (the
-- dedupe key is recorded before). It returns null, having written nothing, whenever it cannot tell
-- that the step would do no more: a plan that moves rows (a transfer, or a merge of ids that hold
-- rows or point elsewhere), changes more than one row, creates one, or is not a grant; a new id or
-- two groups; an event not newer than the group's watermark or at a checkpoint; a tail checkpoint
-- due after it; an owner with rows of another source (lineage, provisional grants); a history whose
-- last entry is a snapshot. Then the fold runs as before. A checkpoint where the group stands, due
-- before the event (the month-start renewal of a monthly subscriber), it takes as the fold would.
-- tests/billing/in-order-fold.test.ts folds random histories both ways and compares every stored
-- column.
create or replace function public.billing_fold_in_order(p_body jsonb, p_plan jsonb, p_received timestamptz, p_linked text[])
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_event_id text := p_plan->>'eventId';
  v_event_at timestamptz := (p_plan->>'eventAt')::timestamptz;
  v_effect jsonb := p_plan->'effects'->0;
  v_owner text := p_plan->'ownerCandidates'->>0;
  v_merge boolean := p_plan->>'move' = 'merge';
  v_source_key text;
  v_key text;
  v_group text;
  v_known integer;
  v_members text[];
  v_customers text[];
  v_base text;
  v_folded text;
  v_tail integer;
  v_pending timestamptz;
  v_moved text[] := '{}';
  v_id text;
  v_id_group text;
  v_row public.entitlements%rowtype;
  v_checkpoint_due boolean := false;
  v_checkpoint boolean := false;
  v_setting text;
begin
  -- The plan: one grant of a named entitlement, one owner candidate, no snapshot, no transfer.
  if p_plan ? 'snapshot' or (p_plan->>'move' is not null and not v_merge)
     or jsonb_typeof(p_plan->'effects') is distinct from 'array' or jsonb_array_length(p_plan->'effects') <> 1
     or v_effect->>'action' is distinct from 'grant' or v_effect->>'entitlementId' is null
     or jsonb_typeof(p_plan->'ownerCandidates') is distinct from 'array' or jsonb_array_length(p_plan->'ownerCandidates') <> 1
     or v_owner is null or cardinality(p_linked) = 0 then
    return null;
  end if;

  -- The group: every id known and in one group (public.billing_lock_group's usual case), locked;
  -- then its members read under the lock, which also confirms the ids are still all in it. (One
  -- lookup per id, not one statement over the array: see the note above public.billing_lock_group.)
  foreach v_id in array p_linked loop
    select s.group_id into v_id_group from public.billing_subscribers s where s.app_user_id = v_id;
    if v_id_group is null or v_id_group <> coalesce(v_group, v_id_group) then
      return null;
    end if;
    v_group := v_id_group;
  end loop;
  perform pg_advisory_xact_lock(hashtextextended('billing_group:' || v_group, 0));
  select array_agg(s.app_user_id), array_agg(s.customer_id),
         max(s.base_key collate "C") filter (where s.app_user_id = any (p_linked)),
         count(*) filter (where s.app_user_id = any (p_linked)),
         max(s.folded_key) filter (where s.app_user_id = v_group),
         max(s.tail_events) filter (where s.app_user_id = v_group),
         max(s.pending_since) filter (where s.app_user_id = v_group)
  into v_members, v_customers, v_base, v_known, v_folded, v_tail, v_pending
  from public.billing_subscribers s where s.group_id = v_group;
  if v_known is distinct from cardinality(p_linked) then
    return null;
  end if;

  -- Newer than the group's watermark and than every checkpoint of its ids; the history's last entry
  -- not a snapshot (whose confirmation the fold would read).
  v_key := public.billing_sort_key(v_event_at, coalesce((p_plan->>'rank')::smallint, 1::smallint), v_event_id);
  if v_folded is null or v_key collate "C" < v_folded collate "C"
     or (v_base is not null and v_key collate "C" <= v_base collate "C")
     or position(':sync:' in v_folded) > 0 then
    return null;
  end if;
  -- The fold's checkpoint where the group stands, when its state is old enough (taken below, once
  -- nothing else can send the event to the fold); no tail checkpoint due after the event.
  if v_tail >= public.billing_tail_bound() or v_pending < p_received - interval '30 days' then
    v_checkpoint_due := public.billing_key_time(v_folded) < p_received - public.billing_checkpoint_lag();
  end if;
  if not coalesce(v_checkpoint_due, false) and v_tail + 1 >= public.billing_tail_bound() then
    return null;
  end if;
  -- A month-old state with recent events: the fold checkpoints it before them (billing_checkpoint_before).
  if not coalesce(v_checkpoint_due, false) and v_pending < p_received - interval '30 days' then
    return null;
  end if;

  -- The owner: the one candidate, its own customer (no merge has pointed it at another id).
  if not v_owner = any (v_members) or v_customers[array_position(v_members, v_owner)] is not null then
    return null;
  end if;
  -- A merge that merges nothing: the ids it names (and the customers they point at) hold no rows
  -- to move, and every one of them already points at the owner.
  if v_merge then
    v_moved := array(select distinct value from jsonb_array_elements_text(coalesce(p_plan->'movedIds', '[]'::jsonb)) where value <> v_owner);
    if not v_moved <@ v_members then
      return null;
    end if;
    v_moved := v_moved || array(select distinct m.customer from unnest(v_members, v_customers) as m(id, customer)
                                where m.id = any (v_moved) and m.customer is not null and m.customer <> v_owner and not m.customer = any (v_moved));
    if exists (select 1 from unnest(v_members, v_customers) as m(id, customer)
               where (m.id = any (v_moved) or m.customer = any (v_moved)) and m.id <> v_owner
                 and m.customer is distinct from v_owner) then
      return null;
    end if;
  end if;

  -- The rows: the owner's of this source only (lineage and the end of provisional grants need two
  -- sources), none to move; then the one it changes.
  v_source_key := public.billing_source_key(p_plan->>'environment', p_plan->'period'->>'store', p_plan->'period'->>'productId',
                                            p_plan->'period'->>'originalTransactionId', p_plan->'period'->>'transactionId');
  -- A purchase that granted another entitlement too (the dashboard moved its product since): the
  -- fold's step decides what this event does to that row. (Both in one statement.)
  if exists (select 1 from public.entitlements e
             where e.app_user_id = v_owner and (e.source_key <> v_source_key or e.entitlement_id <> v_effect->>'entitlementId')) then
    return null;
  end if;
  foreach v_id in array v_moved loop
    if exists (select 1 from public.entitlements e where e.app_user_id = v_id and e.status <> 'transferred') then
      return null;
    end if;
  end loop;
  select * into v_row from public.entitlements
  where app_user_id = v_owner and entitlement_id = v_effect->>'entitlementId' and source_key = v_source_key
  for update;
  if not found or public.billing_grant_refused(v_row, p_plan, v_effect) then
    return null;
  end if;

  -- The checkpoint, by public.billing_checkpoint_here's rule with what was read above under the
  -- lock: not while the unfolded events began before the fold model (the legacy horizon).
  if coalesce(v_checkpoint_due, false) then
    v_checkpoint := not coalesce(v_pending <= (select h.received_before from public.billing_legacy_horizon h), false);
    if not v_checkpoint and v_tail + 1 >= public.billing_tail_bound() then
      return null;
    end if;
  end if;
  if v_checkpoint then
    -- Where the group stands, copied before this event changes it (public.billing_take_checkpoint's
    -- copy), and the group's watermark: one write of each member's row, the tail starting again at
    -- this event.
    foreach v_id in array v_members loop
      update public.billing_subscribers s set
        base_key = v_folded, base_customer = s.customer_id, base_rows = public.billing_checkpoint_rows(s.app_user_id),
        folded_key = case when v_id = v_group then v_key else s.folded_key end,
        tail_events = case when v_id = v_group then 1 else s.tail_events end,
        pending_since = case when v_id = v_group then p_received else s.pending_since end
      where s.app_user_id = v_id;
    end loop;
  else
    update public.billing_subscribers set folded_key = v_key, tail_events = v_tail + 1, pending_since = coalesce(v_pending, p_received)
    where app_user_id = v_group;
  end if;
  -- The row's readers (its owner and the ids merged into it: members of this group) are told here,
  -- from the members read above; the entitlements trigger skips this update rather than look them
  -- up again (public.entitlements_changed, 10_events.sql). Most owners have no reader that is a
  -- Supabase user, and then nothing more runs.
  -- (Assigned, not performed: an assignment is evaluated as an expression, a PERFORM as a query.)
  v_setting := set_config('account_link.readers_told', 'on', true);
  perform public.billing_grant(v_row, p_plan, v_effect, v_event_id, v_event_at);
  v_setting := set_config('account_link.readers_told', '', true);
  -- (Asked of the group's ids first: a group without a Supabase user's id runs no query here.)
  if public.names_user_id(v_members) then
    perform public.entitlement_readers_changed(array(select m.id from unnest(v_members, v_customers) as m(id, customer)
                                                     where m.id = v_owner or m.customer = v_owner));
  end if;
  perform public.billing_log_event(p_body, p_plan, p_received, 'applied', v_owner, false);
  return jsonb_build_object('duplicate', false, 'outcome', 'applied', 'ownerId', v_owner, 'groupId', v_group,
                            'newSource', false, 'afterSnapshot', false, 'inOrder', true);
end;
$$;
revoke all on function public.billing_fold_in_order(jsonb,jsonb,timestamp with time zone,text[]) from public, anon, authenticated;
grant execute on function public.billing_fold_in_order(jsonb,jsonb,timestamp with time zone,text[]) to service_role;

-- One member's rows as a checkpoint keeps them (the generated expiry left out: it is computed again).
create or replace function public.billing_checkpoint_rows(p_app_user_id text)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return (
    select coalesce(jsonb_agg(to_jsonb(e) - 'grants_until' order by e.entitlement_id collate "C", e.source_key), '[]'::jsonb)
    from public.entitlements e where e.app_user_id = p_app_user_id);
end;
$$;
revoke all on function public.billing_checkpoint_rows(text) from public, anon, authenticated;
grant execute on function public.billing_checkpoint_rows(text) to service_role;
