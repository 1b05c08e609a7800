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

-- One member's rows as a checkpoint keeps them (the generated expiry left out: it is computed again).
create or replace function public.billing_checkpoint_rows(p_app_user_id text)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select coalesce(jsonb_agg(to_jsonb(e) - 'grants_until' order by e.entitlement_id collate "C", e.source_key), '[]'::jsonb)
  from public.entitlements e where e.app_user_id = p_app_user_id
$$;
revoke all on function public.billing_checkpoint_rows(text) from public, anon, authenticated;
grant execute on function public.billing_checkpoint_rows(text) to service_role;

create or replace function public.billing_take_checkpoint(p_members text[], p_key text)
returns void
language sql
volatile
set search_path = ''
as $$
  update public.billing_subscribers s set
    base_key = p_key,
    base_customer = s.customer_id,
    base_rows = public.billing_checkpoint_rows(s.app_user_id)
  where s.app_user_id = any (p_members)
$$;

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
  -- lookup per id, not one statement over the array: see the top of this file.)
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
  if exists (select 1 from public.entitlements e where e.app_user_id = v_owner and e.source_key <> v_source_key) then
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
  if not found then
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
  perform public.billing_grant(v_row, p_plan, v_effect, v_event_id, v_event_at);
  perform public.billing_log_event(p_body, p_plan, p_received, 'applied', v_owner, false);
  return jsonb_build_object('duplicate', false, 'outcome', 'applied', 'ownerId', v_owner, 'groupId', v_group,
                            'newSource', false, 'afterSnapshot', false, 'inOrder', true);
end;
$$;
