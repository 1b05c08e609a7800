-- Subscription billing (issue 3): RevenueCat webhook events become per-user entitlement state,
-- exactly once, in any order.
--
-- The split: what an event MEANS per entitlement (grant until X, flag, refund, revoke, move) is a
-- pure TypeScript function (lib/billing/event-effects.ts) whose result arrives here as p_plan.
-- What needs the STORED row to decide is public.record_billing_event, written once for every
-- event type and run under locks in one transaction.
--
-- Sources: one entitlement can be granted by several products of one subscriber (a monthly
-- subscription and a lifetime purchase, or two subscriptions). Each (subscriber, entitlement,
-- environment, product) is its own row, and an event changes only the row of the product it names
-- (event.product_id), so one product's renewal, cancellation, refund or expiry never touches what
-- another product grants. Every rule below is per row. What the API shows per entitlement is
-- derived when read (public.account_entitlements): the row that grants longest.
--
--   * dedupe: the event row is inserted first, unique by event id; a repeat changes nothing;
--   * order guards: an event is newer when its time >= the row's last_event_at (ties are newer,
--     except a grant for the transaction the row holds, tied with a flag: the flag stands).
--     Flags, refunds and revocations apply only when newer AND about the row's current period
--     (their expiry >= the row's, or their purchase time >= the period start, or the same
--     transaction). A newer grant sets the row; a stale grant only raises the expiry of a row
--     that still grants. So an older event never undoes a newer one, and a late RENEWAL cannot
--     re-grant a refund;
--   * expiries: a grant keeps the later of the stored and the event's expiry (null = forever),
--     except on a row that no longer grants (expired, refunded, paused, transferred) or a
--     temporary one, where the event's value replaces it;
--   * temporary grants: only where no row of the entitlement (any product) grants for real; a
--     real grant ends the entitlement's temporary rows of every product;
--   * lineage: of two rows of one subscription (same original transaction, or one naming the
--     other's product as pending), the later-purchased supersedes: the older stops granting;
--   * moves: anonymous aliases merge into the owner; TRANSFER moves rows (all products; only the
--     named store's when it names one) to the destination and leaves `transferred` rows behind.
--     A move is remembered (billing_events.moved_ids), so a late event for a moved id, older than
--     the move (and of the transferred store), is applied to where the rows went.
-- Access is not stored: lib/billing/entitlement-view.ts computes it from status and expiries
-- when the row is read.

create table public.billing_events (
  event_id text primary key check (char_length(event_id) between 1 and 256),
  type text not null,
  -- event.app_user_id as sent (null for TRANSFER); owner_id is whose entitlements it changed.
  app_user_id text,
  event_at timestamptz not null,
  received_at timestamptz not null default now(),
  outcome text not null check (outcome in ('applied', 'stale', 'ignored')),
  environment text,
  owner_id text,
  -- Ids whose rows this event moved to owner_id (anonymous aliases, or transferred_from).
  moved_ids text[] not null default '{}',
  -- The whole request body, as received.
  body jsonb not null
);

-- Only events that moved rows are indexed (most move nothing), and without GIN's pending list:
-- every lookup scans that list, so with it the cost of recording an event grew with the number of
-- events recorded since the last vacuum (measured: 0.5 -> 2 ms of Postgres CPU per event over 16k).
create index billing_events_moved_ids_idx on public.billing_events using gin (moved_ids)
  with (fastupdate = off) where moved_ids <> '{}';
create index billing_events_app_user_id_idx on public.billing_events (app_user_id, event_at) where app_user_id is not null;

-- One row per source of an entitlement: (subscriber, entitlement, product).
create table public.entitlements (
  app_user_id text not null check (char_length(app_user_id) between 1 and 256),
  entitlement_id text not null check (char_length(entitlement_id) between 1 and 256),
  -- The product that grants it (null: the events named none; they share one row).
  product_id text,
  -- (environment, product_id) as a key of bounded size (product ids are not length-checked; a btree
  -- entry must fit). The environment is part of it so a sandbox event never touches a production
  -- row of the same product (no environment: production, as RevenueCat's default).
  product_key text not null check (product_key = md5(upper(coalesce(environment, 'PRODUCTION')) || ':' || coalesce(product_id, ''))),
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
  primary key (app_user_id, entitlement_id, product_key)
);

alter table public.billing_events enable row level security;
alter table public.entitlements enable row level security;
revoke all on table public.billing_events, public.entitlements from public, anon, authenticated;

-- POST /api/webhooks/subscription-billing: record one event and apply its plan. p_body is the
-- request body (stored as is), p_plan what describeEventEffects() said the event means,
-- p_ignore_sandbox the BILLING_IGNORE_SANDBOX setting. Returns {duplicate, outcome}.
--
-- Concurrency: every subscriber id the event touches is locked (transaction-level advisory lock,
-- taken in one fixed order, then the rows `for update`) before any row is compared, so events of
-- one subscriber serialise and each compares against what the previous one stored. A second
-- delivery of the same id waits on the unique key and then changes nothing.
create or replace function public.record_billing_event(
  p_body jsonb,
  p_plan jsonb,
  p_ignore_sandbox boolean default false
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  -- Statuses that no longer grant: a grant replaces their expiry instead of taking the max.
  c_revoked constant text[] := array['expired', 'refunded', 'paused', 'transferred'];
  v_event_id text := p_plan->>'eventId';
  v_event_at timestamptz;
  v_period jsonb := coalesce(p_plan->'period', '{}'::jsonb);
  -- The row an effect changes is the one of the product the event names.
  v_environment text := p_plan->>'environment';
  v_product_key text := md5(upper(coalesce(v_environment, 'PRODUCTION')) || ':' || coalesce(p_plan->'period'->>'productId', ''));
  v_owner text := p_plan->>'ownerId';
  v_move text := p_plan->>'move';
  v_moved text[];
  v_ignored boolean;
  v_id text;
  v_next text;
  v_since timestamptz;
  v_moved_at timestamptz;
  v_src public.entitlements%rowtype;
  v_src_id text;
  v_row public.entitlements%rowtype;
  v_effect jsonb;
  v_action text;
  v_status text;
  v_status_from text[];
  v_will_renew boolean;
  v_expires timestamptz;
  v_period_expires timestamptz;
  v_period_purchased timestamptz;
  v_replaceable boolean;
  v_newer boolean;
  v_applied integer := 0;
  v_stale integer := 0;
  v_outcome text;
begin
  if v_event_id is null or char_length(v_event_id) not between 1 and 256
     or jsonb_typeof(p_body->'event') is distinct from 'object'
     or p_body->'event'->>'id' is distinct from v_event_id
     or p_plan->>'eventAt' is null
     or jsonb_typeof(coalesce(p_plan->'effects', '[]'::jsonb)) <> 'array'
     or jsonb_typeof(coalesce(p_plan->'movedIds', '[]'::jsonb)) <> 'array' then
    raise exception 'invalid_request' using errcode = 'PT400', detail = 'The billing event plan does not match the body.';
  end if;
  v_event_at := (p_plan->>'eventAt')::timestamptz;
  v_period_expires := (v_period->>'expiresAt')::timestamptz;
  v_period_purchased := (v_period->>'purchasedAt')::timestamptz;
  v_moved := array(select distinct value from jsonb_array_elements_text(coalesce(p_plan->'movedIds', '[]'::jsonb)) where value is distinct from v_owner);
  v_ignored := p_plan->>'ignoredReason' is not null
    or v_owner is null
    or (coalesce(p_ignore_sandbox, false) and upper(coalesce(v_environment, '')) = 'SANDBOX');

  -- 1. Record, exactly once. A concurrent delivery of the same id waits here for this one to commit.
  insert into public.billing_events (event_id, type, app_user_id, event_at, outcome, environment, owner_id, moved_ids, body)
  values (v_event_id, coalesce(p_plan->>'type', ''), p_plan->>'appUserId', v_event_at, 'ignored', v_environment, v_owner,
          case when v_ignored then '{}'::text[] else v_moved end, p_body)
  on conflict (event_id) do nothing;
  if not found then
    return jsonb_build_object('duplicate', true, 'outcome', (select outcome from public.billing_events where event_id = v_event_id));
  end if;
  if v_ignored then
    return jsonb_build_object('duplicate', false, 'outcome', 'ignored');
  end if;

  -- 2. Lock the subscriber ids this event names, in one order (no deadlock between two events).
  for v_id in select distinct id collate "C" from unnest(v_moved || v_owner) as ids(id) order by 1 loop
    perform pg_advisory_xact_lock(hashtextextended('billing_subscriber:' || v_id, 0));
  end loop;

  -- 3. Follow moves recorded at or after this event's time: a late event for an id whose rows
  -- have since moved applies where they went. Read under the lock, so no move is in flight.
  -- Rows that moved on again are followed from the time they arrived (v_since).
  v_since := v_event_at;
  for i in 1..8 loop
    select e.owner_id, e.event_at into v_next, v_moved_at
    from public.billing_events e
    where e.moved_ids <> '{}' and e.moved_ids @> array[v_owner] and e.event_at >= v_since and e.event_id <> v_event_id
      and e.owner_id is not null and e.owner_id <> v_owner
      -- A TRANSFER that named a store moved only that store's rows.
      and (e.type <> 'TRANSFER' or e.body->'event'->>'store' is null or e.body->'event'->>'store' = v_period->>'store')
    order by e.event_at, e.event_id
    limit 1;
    exit when v_next is null;
    v_owner := v_next;
    v_since := v_moved_at;
    perform pg_advisory_xact_lock(hashtextextended('billing_subscriber:' || v_owner, 0));
  end loop;
  v_moved := array_remove(v_moved, v_owner);

  -- 4. Moves: the moved ids' rows (every product; for a TRANSFER that names a store, only that
  -- store's) go to the owner. When the owner has a row for the same entitlement and product, the
  -- one that grants longer stays (then the newer).
  if v_move in ('merge', 'transfer') and cardinality(v_moved) > 0 then
    for v_src in
      select * from public.entitlements
      where app_user_id = any (v_moved) and status <> 'transferred'
        and (v_move = 'merge' or v_period->>'store' is null or store = v_period->>'store')
      order by app_user_id collate "C", entitlement_id collate "C", product_key
      for update
    loop
      -- A row with news newer than the transfer was not part of it.
      if v_move = 'transfer' and v_src.last_event_at > v_event_at then
        v_stale := v_stale + 1;
        continue;
      end if;
      v_src_id := v_src.app_user_id;
      select * into v_row from public.entitlements
      where app_user_id = v_owner and entitlement_id = v_src.entitlement_id and product_key = v_src.product_key
      for update;
      if not found or (v_src.status <> all (c_revoked), coalesce(v_src.expires_at, 'infinity'), v_src.last_event_at)
                    > (v_row.status <> all (c_revoked), coalesce(v_row.expires_at, 'infinity'), v_row.last_event_at) then
        if found then
          delete from public.entitlements where app_user_id = v_owner and entitlement_id = v_src.entitlement_id and product_key = v_src.product_key;
          v_src.last_event_at := greatest(v_src.last_event_at, v_row.last_event_at);
        end if;
        v_src.app_user_id := v_owner;
        v_src.updated_at := now();
        insert into public.entitlements select v_src.*;
      end if;
      if v_move = 'transfer' then
        update public.entitlements
        set status = 'transferred', will_renew = false, grace_expires_at = null, last_event_id = v_event_id,
            last_event_at = greatest(last_event_at, v_event_at), updated_at = now()
        where app_user_id = v_src_id and entitlement_id = v_src.entitlement_id and product_key = v_src.product_key;
      else
        delete from public.entitlements where app_user_id = v_src_id and entitlement_id = v_src.entitlement_id and product_key = v_src.product_key;
      end if;
      v_applied := v_applied + 1;
    end loop;
  end if;

  -- 5. Effects, per entitlement, merged with the stored row of the event's product.
  for v_effect in select value from jsonb_array_elements(coalesce(p_plan->'effects', '[]'::jsonb)) loop
    v_action := v_effect->>'action';
    v_status := v_effect->>'status';
    v_status_from := case when jsonb_typeof(v_effect->'statusFrom') = 'array'
                          then array(select jsonb_array_elements_text(v_effect->'statusFrom')) end;
    v_will_renew := (v_effect->>'willRenew')::boolean;
    v_expires := (v_effect->>'expiresAt')::timestamptz;

    -- A provisional grant never stands beside something real: stale while any product grants.
    if v_action = 'temporary_grant' and exists (
      select 1 from public.entitlements
      where app_user_id = v_owner and entitlement_id = v_effect->>'entitlementId' and status <> all (c_revoked || 'temporary'::text)
    ) then
      v_stale := v_stale + 1;
      continue;
    end if;

    select * into v_row from public.entitlements
    where app_user_id = v_owner and entitlement_id = v_effect->>'entitlementId' and product_key = v_product_key
    for update;

    if not found then
      if v_action in ('grant', 'temporary_grant') or coalesce((v_effect->>'createsRow')::boolean, false) then
        -- A flag on no row starts from what the event says: a live subscription until its expiry.
        if v_action not in ('grant', 'temporary_grant') then
          v_status := case when v_status is not null and (v_status_from is null or 'active' = any (v_status_from))
                           then v_status else 'active' end;
          v_will_renew := coalesce(v_will_renew, true);
          v_expires := case when v_effect->>'expiry' = 'set' then v_expires else v_period_expires end;
        end if;
        insert into public.entitlements (
          app_user_id, entitlement_id, product_id, product_key, status, will_renew, expires_at, grace_expires_at, pending_product_id,
          store, environment, period_type, original_transaction_id, transaction_id, period_purchased_at, auto_resume_at,
          last_event_id, last_event_at
        ) values (
          v_owner, v_effect->>'entitlementId', v_period->>'productId', v_product_key, v_status, coalesce(v_will_renew, false), v_expires,
          case when v_status = 'grace' then (v_effect->>'graceExpiresAt')::timestamptz end,
          nullif(v_effect->>'pendingProductId', v_period->>'productId'),
          v_period->>'store', v_environment, v_period->>'periodType', v_period->>'originalTransactionId',
          v_period->>'transactionId', v_period_purchased, (v_effect->>'autoResumeAt')::timestamptz,
          v_event_id, v_event_at
        );
        v_applied := v_applied + 1;
      else
        v_stale := v_stale + 1;
      end if;
      continue;
    end if;

    -- On a timestamp tie, a grant for the transaction the row already holds is not newer: it is
    -- the same purchase the tied flag spoke of (RevenueCat sends such bundles, e.g. a first
    -- payment failing: INITIAL_PURCHASE, BILLING_ISSUE, CANCELLATION at one instant, any order),
    -- so the flag stands whatever the arrival order. A grant for a new transaction still wins.
    v_newer := v_event_at > v_row.last_event_at
      or (v_event_at = v_row.last_event_at
          and not (v_action = 'grant' and v_period->>'transactionId' = v_row.transaction_id));

    if v_action in ('grant', 'temporary_grant') then
      v_replaceable := v_row.status = any (c_revoked || 'temporary'::text);
      if v_newer then
        update public.entitlements set
          status = v_status,
          will_renew = coalesce(v_will_renew, false),
          expires_at = case when v_replaceable then v_expires
                            else nullif(greatest(coalesce(v_row.expires_at, 'infinity'), coalesce(v_expires, 'infinity')), 'infinity') end,
          grace_expires_at = null,
          pending_product_id = null,
          auto_resume_at = null,
          store = coalesce(v_period->>'store', v_row.store),
          environment = coalesce(v_environment, v_row.environment),
          period_type = coalesce(v_period->>'periodType', v_row.period_type),
          original_transaction_id = coalesce(v_period->>'originalTransactionId', v_row.original_transaction_id),
          transaction_id = coalesce(v_period->>'transactionId', v_row.transaction_id),
          period_purchased_at = coalesce(v_period_purchased, v_row.period_purchased_at),
          last_event_id = v_event_id,
          last_event_at = v_event_at,
          updated_at = now()
        where app_user_id = v_row.app_user_id and entitlement_id = v_row.entitlement_id and product_key = v_row.product_key;
        v_applied := v_applied + 1;
      elsif v_row.status <> all (c_revoked) and coalesce(v_expires, 'infinity') > coalesce(v_row.expires_at, 'infinity') then
        -- A stale grant: the row still grants, and the event shows access lasting longer.
        update public.entitlements set expires_at = v_expires, updated_at = now()
        where app_user_id = v_row.app_user_id and entitlement_id = v_row.entitlement_id and product_key = v_row.product_key;
        v_applied := v_applied + 1;
      else
        v_stale := v_stale + 1;
      end if;
      continue;
    end if;

    -- flag / refund / revoke: only when newer and about the current period.
    if not v_newer or not (
      coalesce(v_period_expires, 'infinity') >= coalesce(v_row.expires_at, 'infinity')
      or v_period_purchased >= v_row.period_purchased_at
      or v_period->>'transactionId' = v_row.transaction_id
    ) then
      v_stale := v_stale + 1;
      continue;
    end if;
    if v_status is null or (v_status_from is not null and not v_row.status = any (v_status_from)) then
      v_status := v_row.status;
    end if;
    update public.entitlements set
      status = v_status,
      will_renew = coalesce(v_will_renew, v_row.will_renew),
      expires_at = case when v_effect->>'expiry' = 'set' then v_expires else v_row.expires_at end,
      grace_expires_at = case when v_status = 'grace' then coalesce((v_effect->>'graceExpiresAt')::timestamptz, v_row.grace_expires_at) end,
      pending_product_id = case when v_effect->>'pendingProductId' is null then v_row.pending_product_id
                                else nullif(v_effect->>'pendingProductId', v_row.product_id) end,
      auto_resume_at = coalesce((v_effect->>'autoResumeAt')::timestamptz, v_row.auto_resume_at),
      last_event_id = v_event_id,
      last_event_at = v_event_at,
      updated_at = now()
    where app_user_id = v_row.app_user_id and entitlement_id = v_row.entitlement_id and product_key = v_row.product_key;
    v_applied := v_applied + 1;
  end loop;

  -- 6. Lineage: when a subscription changes product, the new product's row continues the old
  -- one's subscription (same original transaction, or the product the old row named as pending).
  -- The later-purchased row supersedes: the older stops granting (expired, not renewing, ending
  -- when the newer period began), so only the current product of a subscription grants. Checked
  -- both ways for the row this event touched, so the arrival order does not matter.
  with touched as (
    select distinct value->>'entitlementId' as entitlement_id from jsonb_array_elements(coalesce(p_plan->'effects', '[]'::jsonb))
  ), superseded as (
    select o.entitlement_id, o.product_key, min(n.period_purchased_at) as at, max(n.last_event_at) as news_at
    from public.entitlements o
    join public.entitlements n
      on n.app_user_id = o.app_user_id and n.entitlement_id = o.entitlement_id and n.product_key <> o.product_key
    where o.app_user_id = v_owner and o.entitlement_id in (select entitlement_id from touched)
      and v_product_key in (o.product_key, n.product_key)
      and o.status <> all (c_revoked)
      and n.period_purchased_at > o.period_purchased_at
      and upper(coalesce(n.environment, 'PRODUCTION')) = upper(coalesce(o.environment, 'PRODUCTION'))
      and (n.original_transaction_id = o.original_transaction_id or n.product_id = o.pending_product_id)
    group by o.entitlement_id, o.product_key
  )
  update public.entitlements e set
    status = 'expired',
    will_renew = false,
    expires_at = least(coalesce(e.expires_at, 'infinity'), s.at),
    grace_expires_at = null,
    last_event_id = v_event_id,
    last_event_at = greatest(e.last_event_at, s.news_at),
    updated_at = now()
  from superseded s
  where e.app_user_id = v_owner and e.entitlement_id = s.entitlement_id and e.product_key = s.product_key;

  -- 7. A real grant ends the entitlement's provisional grants of every product (the one of its
  -- own product was replaced by it above): what stands is the real purchase, so its refund or
  -- expiry ends access even when the temporary grant named another product.
  update public.entitlements e set
    status = 'expired',
    will_renew = false,
    expires_at = least(coalesce(e.expires_at, 'infinity'), v_event_at),
    last_event_id = v_event_id,
    last_event_at = greatest(e.last_event_at, v_event_at),
    updated_at = now()
  where e.app_user_id = v_owner and e.status = 'temporary' and e.product_key <> v_product_key
    and upper(coalesce(e.environment, 'PRODUCTION')) = upper(coalesce(v_environment, 'PRODUCTION'))
    and e.entitlement_id in (select value->>'entitlementId' from jsonb_array_elements(coalesce(p_plan->'effects', '[]'::jsonb)) where value->>'action' = 'grant')
    and exists (select 1 from public.entitlements g
                where g.app_user_id = v_owner and g.entitlement_id = e.entitlement_id and g.product_key = v_product_key
                  and g.status <> all (c_revoked || 'temporary'::text));

  v_outcome := case when v_applied > 0 then 'applied' when v_stale > 0 then 'stale' else 'ignored' end;
  update public.billing_events set outcome = v_outcome, owner_id = v_owner where event_id = v_event_id;
  return jsonb_build_object('duplicate', false, 'outcome', v_outcome);
end;
$$;

revoke all on function public.record_billing_event(jsonb, jsonb, boolean) from public, anon, authenticated;
grant execute on function public.record_billing_event(jsonb, jsonb, boolean) to service_role;

-- GET /api/me: the caller's entitlements (app_user_id = the caller's user id), as a JSON array
-- with ONE row per entitlement id, ordered by it. Whether it grants access is computed by the
-- reader at request time (lib/billing/entitlement-view.ts), never stored.
--
-- Of the rows (products) of one entitlement, the one that grants longest is shown: first the
-- rows whose status grants (the statuses isEntitlementActive counts), by the end of their access
-- (grace: the grace end; null = forever), latest first. Each of them grants exactly until that
-- end, so whatever the reader's clock, the row shown grants whenever any row does. When none
-- grants, it is the granting-status row that lapsed last; only without one, the row with the
-- latest news (statuses that grant nothing rank last, by news).
create or replace function public.account_entitlements(p_user_id text)
returns jsonb
language sql
stable
security definer
set search_path = ''
as $$
  with shown as (
    select distinct on (e.entitlement_id) e.*
    from public.entitlements e
    where e.app_user_id = p_user_id
    order by e.entitlement_id,
             -- Until when the row grants ('infinity': forever; null: it grants nothing, so last).
             case when e.status = 'grace' then coalesce(e.grace_expires_at, e.expires_at, 'infinity')
                  when e.status in ('active', 'cancelled_active', 'temporary', 'billing_issue') then coalesce(e.expires_at, 'infinity')
             end desc nulls last,
             e.last_event_at desc,
             e.will_renew desc,
             e.product_key
  )
  select coalesce(jsonb_agg(jsonb_build_object(
    'entitlement_id', e.entitlement_id,
    'status', e.status,
    'will_renew', e.will_renew,
    'expires_at', e.expires_at,
    'grace_expires_at', e.grace_expires_at,
    'product_id', e.product_id,
    'pending_product_id', e.pending_product_id,
    'store', e.store,
    'environment', e.environment,
    'period_type', e.period_type,
    'last_event_at', e.last_event_at
  ) order by e.entitlement_id collate "C"), '[]'::jsonb)
  from shown e
$$;

revoke all on function public.account_entitlements(text) from public, anon, authenticated;
grant execute on function public.account_entitlements(text) to service_role;
