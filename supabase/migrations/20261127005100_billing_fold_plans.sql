-- The fold's step and the subscriber-group lock, planned once per connection (like the in-order
-- shortcut in 20261127005000_billing_in_order_plans.sql).
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
    -- statement (see the top of this file).
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
  -- (billing_legacy_horizon, 20261126000500_flat_cost_at_scale.sql).
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
  -- owner has a row of the same source, the one that grants longer stays (then the newer).
  v_moved := array(select distinct value from jsonb_array_elements_text(coalesce(p_plan->'movedIds', '[]'::jsonb)) where value <> v_owner);
  -- The ids an event names stand for their customers: where one of them was merged into another
  -- id, the rows are there (a TRANSFER's source customer; a merge joining two customers).
  v_moved := v_moved || array(select distinct s.customer_id from public.billing_subscribers s
                              where s.app_user_id = any (v_moved) and s.customer_id is not null and s.customer_id <> v_owner
                                and not s.customer_id = any (v_moved));
  if v_move in ('merge', 'transfer') and cardinality(v_moved) > 0 then
    -- One id at a time, in the order one statement over them all would take (see the top of this file).
    foreach v_moved_id in array array(select distinct m collate "C" from unnest(v_moved) as m order by 1) loop
      for v_src in
        select * from public.entitlements
        where app_user_id = v_moved_id and status <> 'transferred'
          and (v_move = 'merge' or (upper(coalesce(environment, 'PRODUCTION')) = v_env_key and (v_store is null or store = v_store)))
        order by entitlement_id collate "C", source_key
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
    -- A purchase v1 lists that no entitlement points to (asEventsSaid; v1 shows, per entitlement,
    -- only the purchase that lasts longest) may grant what earlier events said, or have been
    -- refunded (v1 still lists it): its rows stay as the events left them. Any other is written as
    -- the record says.
    if not coalesce((v_source->>'asEventsSaid')::boolean, false) then
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
    end if;
    v_applied := v_applied + 1;
  end loop;
  -- What the record proves no longer grants, in one statement:
  --   * rows of products it no longer shows (by product, not by source: v1 keys subscriptions by
  --     product, so a sandbox purchase of a product hides the production one of the same product
  --     from the snapshot; that one stays);
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
      and ((not e.source_key = any (v_keys) and not coalesce(e.product_id = any (v_products), false))
           or (jsonb_typeof(p_plan->'snapshot'->'entitlementIds') = 'array'
               and not e.entitlement_id = any (array(select jsonb_array_elements_text(p_plan->'snapshot'->'entitlementIds'))))
           or exists (
             select 1 from jsonb_array_elements(coalesce(p_plan->'snapshot'->'sources', '[]'::jsonb)) as src(value)
             where public.billing_source_key(src.value->>'environment', src.value->>'store', src.value->>'productId', null, src.value->>'transactionId') = e.source_key
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
    if v_action = 'temporary_grant' and exists (
      select 1 from public.entitlements
      where app_user_id = v_owner and entitlement_id = v_entitlement and source_key = v_source_key and status <> 'temporary'
        and grants_until > v_start
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
        perform public.billing_grant(v_row, p_plan, v_effect, p_event_id, p_event_at);
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
                       -- A cancellation saying the row's current period already ended (the same
                       -- transaction, or without transaction ids the same purchase): it ended then.
                       when 'period' then case when v_expires is null then v_row.expires_at
                                               when coalesce(v_period->>'transactionId' = v_row.transaction_id, v_purchased = v_row.period_purchased_at, false)
                                                 then v_expires
                                               when v_row.expires_at is null then v_row.expires_at
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
  -- later-started (the grant that began its period came later; for a row no grant began here, such
  -- as one a CANCELLATION of a subscription bought before this service created, its period's
  -- purchase) supersedes: every row of the older
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
      and (n.original_transaction_id = o.original_transaction_id or n.product_id = o.pending_product_id
           -- Google Play replaced it at once with a product it did not name (a PRODUCT_CHANGE without
           -- new_product_id): the Play subscription that began after it is the replacement.
           or (o.pending_product_id = '*' and upper(coalesce(o.store, '')) = 'PLAY_STORE' and upper(coalesce(n.store, '')) = 'PLAY_STORE'
               and n.original_transaction_id is not null))
      -- (A provisional grant supersedes nothing: the purchase it stands for may never be validated.)
      and n.status <> 'temporary'
      and (coalesce(n.granted_at, n.period_purchased_at, '-infinity') > coalesce(o.granted_at, o.period_purchased_at, '-infinity')
           or (coalesce(n.granted_at, n.period_purchased_at, '-infinity') = coalesce(o.granted_at, o.period_purchased_at, '-infinity')
               and n.period_purchased_at > o.period_purchased_at))
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
