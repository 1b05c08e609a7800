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
  -- renewal off; the payment that recovers it turns it back on).
  v_will_renew := case when v_keeps_issue then false
                       when v_renewal = 'on' then true when v_renewal = 'off' then false
                       when v_renewal = 'continue' then not v_continues or p_row.will_renew or p_row.status in ('billing_issue', 'grace')
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
    granted_at = case when v_new_period or not v_continues or p_row.granted_at is null then p_event_at else p_row.granted_at end,
    origin = 'webhook',
    last_event_id = p_event_id,
    last_event_at = greatest(p_row.last_event_at, p_event_at),
    updated_at = now()
  where app_user_id = p_row.app_user_id and entitlement_id = p_row.entitlement_id and source_key = p_row.source_key;
end;
$$;

-- One step of the fold: apply one event's plan to the stored rows, as of the event's time.
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
  v_groups integer;
  v_known integer;
  v_members text[];
  v_customers text[];
  v_base text;
  v_folded text;
  v_tail integer;
  v_pending timestamptz;
  v_moved text[] := '{}';
  v_other_sources integer;
  v_movable integer;
  v_row public.entitlements%rowtype;
  v_checkpoint_due boolean := false;
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
  -- then its members read under the lock, which also confirms the ids are still all in it.
  select min(s.group_id collate "C"), count(distinct s.group_id), count(*) into v_group, v_groups, v_known
  from public.billing_subscribers s where s.app_user_id = any (p_linked);
  if v_known <> cardinality(p_linked) or v_groups <> 1 then
    return null;
  end if;
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

  -- The owner: the one candidate, its own customer (no merge has pointed it at another id).
  if not v_owner = any (v_members) or v_customers[array_position(v_members, v_owner)] is not null then
    return null;
  end if;
  -- A merge that merges nothing: the ids it names (and the customers they point at) hold no rows
  -- to move, and every real id among them already points at the owner.
  if v_merge then
    v_moved := array(select distinct value from jsonb_array_elements_text(coalesce(p_plan->'movedIds', '[]'::jsonb)) where value <> v_owner);
    if not v_moved <@ v_members then
      return null;
    end if;
    v_moved := v_moved || array(select distinct m.customer from unnest(v_members, v_customers) as m(id, customer)
                                where m.id = any (v_moved) and m.customer is not null and m.customer <> v_owner and not m.customer = any (v_moved));
    if exists (select 1 from unnest(v_members, v_customers) as m(id, customer)
               where (m.id = any (v_moved) or m.customer = any (v_moved)) and m.id <> v_owner
                 and not starts_with(m.id, '$RCAnonymousID:') and m.customer is distinct from v_owner) then
      return null;
    end if;
  end if;

  -- The rows: the owner's of this source only (lineage and the end of provisional grants need two
  -- sources), none to move; then the one it changes.
  v_source_key := public.billing_source_key(p_plan->>'environment', p_plan->'period'->>'store', p_plan->'period'->>'productId',
                                            p_plan->'period'->>'originalTransactionId', p_plan->'period'->>'transactionId');
  select count(*) filter (where e.app_user_id = v_owner and e.source_key <> v_source_key),
         count(*) filter (where e.app_user_id <> v_owner and e.status <> 'transferred')
  into v_other_sources, v_movable
  from public.entitlements e where e.app_user_id = any (v_moved || v_owner);
  if v_other_sources > 0 or v_movable > 0 then
    return null;
  end if;
  select * into v_row from public.entitlements
  where app_user_id = v_owner and entitlement_id = v_effect->>'entitlementId' and source_key = v_source_key
  for update;
  if not found then
    return null;
  end if;

  if coalesce(v_checkpoint_due, false) then
    if public.billing_checkpoint_here(v_group) then
      v_tail := 0;
      v_pending := null;
    elsif v_tail + 1 >= public.billing_tail_bound() then
      return null;
    end if;
  end if;
  perform public.billing_grant(v_row, p_plan, v_effect, v_event_id, v_event_at);
  update public.billing_subscribers set folded_key = v_key, tail_events = v_tail + 1, pending_since = coalesce(v_pending, p_received)
  where app_user_id = v_group;
  perform public.billing_log_event(p_body, p_plan, p_received, 'applied', v_owner, false);
  return jsonb_build_object('duplicate', false, 'outcome', 'applied', 'ownerId', v_owner, 'groupId', v_group,
                            'newSource', false, 'afterSnapshot', false, 'inOrder', true);
end;
$$;


-- Record one entry of the log (a webhook event, or a snapshot of RevenueCat's record) and bring its
-- group's entitlements to the fold of its history: on top when it is the newest, else the history
-- since the checkpoint again. Returns {duplicate, outcome, ownerId, groupId, newSource,
-- afterSnapshot}: afterSnapshot, the event was generated between a snapshot and a later confirmation
-- of it (RevenueCat's record had already moved past it). Checkpoints the group on the way when its
-- tail is old or long (see the top of this file).
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
  v_linked text[] := array(select distinct value from jsonb_array_elements_text(coalesce(p_plan->'linkedIds', '[]'::jsonb)));
  v_candidates text[] := array(select value from jsonb_array_elements_text(coalesce(p_plan->'ownerCandidates', '[]'::jsonb)));
  v_ignored boolean;
  v_new_source boolean := false;
  v_after_snapshot boolean := false;
  v_group text;
  v_folded text;
  v_tail integer;
  v_pending timestamptz;
  v_base text;
  v_key text;
  v_before text;
  v_owner text;
  v_outcome text;
  v_result jsonb;
begin
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
  select max(base_key collate "C") into v_base from public.billing_subscribers where app_user_id = any (v_linked);
  if v_base is not null and v_key collate "C" <= v_base collate "C" then
    perform public.billing_log_event(p_body, p_plan, v_received, 'stale', v_candidates[1], false);
    return jsonb_build_object('duplicate', false, 'outcome', 'stale', 'ownerId', v_candidates[1], 'groupId', v_group,
                              'newSource', false, 'beforeHistory', true);
  end if;
  v_new_source := jsonb_array_length(coalesce(p_plan->'effects', '[]'::jsonb)) > 0 and not exists (
    select 1 from public.entitlements
    where app_user_id = any (v_candidates)
      and source_key = public.billing_source_key(p_plan->>'environment', p_plan->'period'->>'store', p_plan->'period'->>'productId',
                                                 p_plan->'period'->>'originalTransactionId', p_plan->'period'->>'transactionId'));
  select folded_key, tail_events, pending_since into v_folded, v_tail, v_pending from public.billing_subscribers where app_user_id = v_group;
  -- (Equal: the watermark of a new id already counted an event of this key, filed under it.)
  if v_folded is null or v_key collate "C" >= v_folded collate "C" then
    -- Checkpointed where it stands (a copy) when that state is old enough: its tail is long or a
    -- month old, and its last event so far back that nothing before it can still be on its way
    -- (RevenueCat's retries end within hours).
    -- (Nested: SQL does not promise to evaluate the terms of an "and" in order.)
    if v_folded is not null and (v_tail >= public.billing_tail_bound() or v_pending < v_received - interval '30 days')
       and public.billing_key_time(v_folded) < v_received - public.billing_checkpoint_lag() then
      if public.billing_checkpoint_here(v_group) then
        v_tail := 0;
        v_pending := null;
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
                            'afterSnapshot', v_after_snapshot);
end;
$$;

revoke all on function public.billing_grant(public.entitlements, jsonb, jsonb, text, timestamptz) from public, anon, authenticated;
grant execute on function public.billing_grant(public.entitlements, jsonb, jsonb, text, timestamptz) to service_role;
revoke all on function public.billing_fold_in_order(jsonb, jsonb, timestamptz, text[]) from public, anon, authenticated;
grant execute on function public.billing_fold_in_order(jsonb, jsonb, timestamptz, text[]) to service_role;
