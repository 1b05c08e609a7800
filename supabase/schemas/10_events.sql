-- Outbound events: what changed in a user's access and wallets, told to the app's own backend as
-- signed webhooks (Standard Webhooks). docs/events.md.
--
-- Derived from state, not from inbound bodies. A user's entitlements as GET /api/me shows them
-- (public.account_entitlements) are compared with what receivers were last told
-- (outbound_told_entitlements) when the transaction that changed a row commits: an entitlement
-- that now grants and was not told is `entitlement.granted`, one told that no longer grants is
-- `entitlement.revoked` (with why), one told that changed what a receiver acts on is
-- `entitlement.updated`. So a refold that rebuilds a customer's rows, a TRANSFER, a sync snapshot
-- and a webhook all tell the same thing for the same outcome, and nothing for no outcome.
-- Access that ends because time passed writes no row: public.outbound_tell_lapses finds told
-- access that time may have changed (one of its sources' ends is past) and tells what changed
-- (lib/events/lapses.ts runs it).
--
-- The outbox. Each event is written in the transaction of the change that caused it (nothing told
-- for a change that rolled back, nothing lost for one that committed), with a per-user sequence
-- number taken under that user's row lock here, so a user's events are numbered in commit order.
-- One delivery row per endpoint the settings name (outbound_endpoints, kept by the service from
-- EVENTS_WEBHOOK_URL / EVENTS_WEBHOOK_ENDPOINTS); lib/events/delivery.ts claims, sends and
-- settles them: in order per user and endpoint, retried with backoff, dead-lettered after about
-- three days.

-- Ids events are told for: Supabase users (a lower-case uuid). RevenueCat's anonymous ids and
-- custom app user ids are nobody a receiver knows; their purchases are told when they reach a
-- user (a TRANSFER, an alias: the merged user reads the customer's rows). The shape, unanchored,
-- is one function for the two checks below (immutable: a constant once planned).
create or replace function public.user_id_pattern()
returns text
language sql
immutable
set search_path = ''
as $$
  select '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'
$$;
revoke all on function public.user_id_pattern() from public, anon, authenticated;
grant execute on function public.user_id_pattern() to service_role;

create or replace function public.is_user_id(p_id text)
returns boolean
language plpgsql
immutable
set search_path = ''
as $$
begin
  return p_id ~ ('^' || public.user_id_pattern() || '$');
end;
$$;
revoke all on function public.is_user_id(text) from public, anon, authenticated;
grant execute on function public.is_user_id(text) to service_role;

-- Whether any of these ids is a Supabase user's, as one match over the ids joined by spaces (no
-- query runs: the in-order fold asks it on every renewal). An id that holds a space can only make
-- it say yes where no id is a user's, never no where one is.
create or replace function public.names_user_id(p_ids text[])
returns boolean
language plpgsql
immutable
set search_path = ''
as $$
begin
  return array_to_string(p_ids, ' ') ~ ('(^| )' || public.user_id_pattern() || '( |$)');
end;
$$;
revoke all on function public.names_user_id(text[]) from public, anon, authenticated;
grant execute on function public.names_user_id(text[]) to service_role;

-- The events, oldest first by (user, sequence). `data` is the internal shape (the rows as
-- account_entitlements and wallet_link_json return them); lib/events/messages.ts makes the body a
-- receiver gets from it, the same on every attempt.
create table public.outbound_events (
  id uuid primary key default gen_random_uuid(),
  user_id text not null,
  sequence bigint not null,
  type text not null check (type in (
    'entitlement.granted', 'entitlement.updated', 'entitlement.revoked', 'wallet.linked', 'wallet.unlinked', 'customer.deleted')),
  data jsonb not null,
  created_at timestamptz not null default now(),
  unique (user_id, sequence)
);
alter table public.outbound_events enable row level security;
create index outbound_events_created_idx on public.outbound_events (created_at);
-- The erasures told (few): what each user had before theirs is never sent again, and goes with it.
create index outbound_events_erasures_idx on public.outbound_events (user_id, sequence) where type = 'customer.deleted';
revoke all on table public.outbound_events from public, anon, authenticated;
grant select, insert, update, delete on table public.outbound_events to service_role;

-- Each user's last sequence number; its row is the lock that orders the user's events.
create table public.outbound_user_sequences (
  user_id text primary key,
  last_sequence bigint not null,
  last_type text
);
alter table public.outbound_user_sequences enable row level security;
revoke all on table public.outbound_user_sequences from public, anon, authenticated;
grant select, insert, update, delete on table public.outbound_user_sequences to service_role;

-- What receivers were last told each user is entitled to: one row per entitlement told as granting
-- (granted or updated, not revoked since), with when time alone may change it next
-- (public.outbound_recheck_at): the scan of lapses looks at it again then.
create table public.outbound_told_entitlements (
  user_id text not null,
  entitlement_id text not null,
  entitlement jsonb not null,
  recheck_at timestamptz not null,
  primary key (user_id, entitlement_id)
);
alter table public.outbound_told_entitlements enable row level security;
create index outbound_told_entitlements_recheck_idx on public.outbound_told_entitlements (recheck_at);
revoke all on table public.outbound_told_entitlements from public, anon, authenticated;
grant select, insert, update, delete on table public.outbound_told_entitlements to service_role;

-- The endpoints the settings name, by id (a digest of the URL: the URL itself may carry a
-- credential, and stays in the settings). `types`: the event types it takes (`wallet.*` for a
-- family; null: every type). An endpoint no server's settings have named for
-- outbound_unnamed_retire_after() is retired: it gets no new deliveries, and its pending ones wait
-- in case it comes back. Not sooner: servers that share the database may name different receivers
-- (a preview beside production, a rollout), and one that retired the others' at once would leave
-- every event written until they name theirs again undelivered to them.
create table public.outbound_endpoints (
  id text primary key check (char_length(id) between 1 and 64),
  types text[],
  registered_at timestamptz not null default now(),
  retired_at timestamptz,
  -- The last delivery of the deliveries an erasure or the retention deleted, noted as they go (the
  -- status would go back to "never delivered"); the ones kept have their own. Never written on the
  -- delivery path: every event's delivery row checks this row (its foreign key), and an update per
  -- settle made each of those checks chase a new row version (the events-sent webhook at half the
  -- rate, docs/benchmarks.md).
  last_delivered_at timestamptz,
  -- When a server's settings last named it (to within an hour: public.outbound_add_endpoints).
  named_at timestamptz not null default now()
);
alter table public.outbound_endpoints enable row level security;
revoke all on table public.outbound_endpoints from public, anon, authenticated;
grant select, insert, update, delete on table public.outbound_endpoints to service_role;

-- One event to one endpoint. `pending` until a 2xx (`delivered`) or the retries run out (`dead`).
-- `leased_until`: an attempt is under way until then (another worker skips it).
create table public.outbound_deliveries (
  endpoint_id text not null references public.outbound_endpoints (id) on delete cascade,
  event_id uuid not null references public.outbound_events (id) on delete cascade,
  user_id text not null,
  sequence bigint not null,
  state text not null default 'pending' check (state in ('pending', 'delivered', 'dead')),
  attempts integer not null default 0,
  next_attempt_at timestamptz not null default now(),
  leased_until timestamptz,
  first_attempt_at timestamptz,
  last_attempt_at timestamptz,
  last_error text,
  delivered_at timestamptz,
  -- The last attempt that failed (its time and number): last_error's, kept when a later attempt
  -- delivers, so the status names the failure and not the attempt that recovered from it.
  last_failed_at timestamptz,
  last_failed_attempt integer,
  primary key (endpoint_id, event_id)
);
alter table public.outbound_deliveries enable row level security;
-- A user's queue at an endpoint (its head is the lowest pending sequence), and what is due, first
-- attempts apart from retries, in the order a claim takes each (so that a claim reads from its start
-- and stops, whatever the backlog of the other kind). (Whether it was attempted is read from
-- first_attempt_at, which only the first claim sets: a retry's claim changes no indexed column.)
create index outbound_deliveries_queue_idx on public.outbound_deliveries (endpoint_id, user_id, sequence) where state = 'pending';
create index outbound_deliveries_due_attempted_idx on public.outbound_deliveries (endpoint_id, (first_attempt_at is not null), next_attempt_at, sequence) where state = 'pending';
create index outbound_deliveries_event_idx on public.outbound_deliveries (event_id);
revoke all on table public.outbound_deliveries from public, anon, authenticated;
grant select, insert, update, delete on table public.outbound_deliveries to service_role;

-- Each user's queue at an endpoint, one row while it may hold pending deliveries: when the claim
-- should next look at its head (`look_at`), and whether that head was attempted (as last seen).
-- The claim reads these instead of the deliveries, so a backlog waiting behind heads that retry
-- later costs it nothing (with the deliveries read, 280 ms a claim with 1,000 users' 50 queued each).
-- A row may be early (the claim then sets it right: one look a delivery written, lease or retry), never
-- missing while its queue holds a pending delivery: a delivery's writer puts its row there in its own
-- transaction (outbound_emit, outbound_replay), holding its lock to the commit, and only a transaction
-- that holds that lock and then sees the queue empty deletes it (outbound_drop_empty_queues: a claim,
-- a settle, an erasure, the maintenance). Should one go missing anyway, outbound_mend_queues puts it
-- back as a server opens the database, and in the daily maintenance.
-- (No foreign key to the endpoint: a row is written for most events, and its check would be a
-- statement each time; the maintenance removes the rows of an endpoint retired or gone.)
create table public.outbound_queues (
  endpoint_id text not null,
  user_id text not null,
  look_at timestamptz not null default now(),
  head_attempted boolean not null default false,
  primary key (endpoint_id, user_id)
);
alter table public.outbound_queues enable row level security;
create index outbound_queues_due_idx on public.outbound_queues (endpoint_id, head_attempted, look_at);
revoke all on table public.outbound_queues from public, anon, authenticated;
grant select, insert, update, delete on table public.outbound_queues to service_role;

-- Delete the queues' rows (by ctid, locked by the caller's statement before) whose queue holds no
-- pending delivery. Read here, after the lock: a delivery committed since is seen, and one written
-- later waits for the lock to put its row back (outbound_emit). Returns how many went.
-- (`enable_seqscan` off: by `ctid = any (...)` the table was read whole where its statistics said it
-- was small, while rows written and deleted with every event had grown it: 4-8 ms a settle.)
create or replace function public.outbound_drop_empty_queues(p_locked tid[])
returns integer
language plpgsql
volatile
security definer
set search_path = ''
set enable_seqscan = off
as $$
declare
  v_count integer;
begin
  delete from public.outbound_queues q
  where q.ctid = any (p_locked)
    and not exists (select 1 from public.outbound_deliveries d
                    where d.endpoint_id = q.endpoint_id and d.user_id = q.user_id and d.state = 'pending');
  get diagnostics v_count = row_count;
  return v_count;
end;
$$;
revoke all on function public.outbound_drop_empty_queues(tid[]) from public, anon, authenticated;
grant execute on function public.outbound_drop_empty_queues(tid[]) to service_role;

-- Put back the row of any queue that holds a pending delivery and has none. There should be none:
-- a delivery is written with its row. But a delivery written while the migration that made the rows
-- ran had none, and a lost row would keep its queue waiting for good. Run by the maintenance and as
-- each server opens the database (lib/events/registration.ts). Returns how many were put back.
create or replace function public.outbound_mend_queues()
returns integer
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_count integer;
begin
  -- Each as its head shows it (when it is due, whether it was attempted): none to set right.
  insert into public.outbound_queues (endpoint_id, user_id, look_at, head_attempted)
    select h.endpoint_id, h.user_id, greatest(h.next_attempt_at, h.leased_until), h.first_attempt_at is not null
    from (select distinct on (d.endpoint_id collate "C", d.user_id collate "C") d.endpoint_id, d.user_id, d.next_attempt_at, d.leased_until, d.first_attempt_at
          from public.outbound_deliveries d
          where d.state = 'pending'
            and not exists (select 1 from public.outbound_queues q where q.endpoint_id = d.endpoint_id and q.user_id = d.user_id)
          order by d.endpoint_id collate "C", d.user_id collate "C", d.sequence) h
  on conflict (endpoint_id, user_id) do nothing;
  get diagnostics v_count = row_count;
  return v_count;
end;
$$;
revoke all on function public.outbound_mend_queues() from public, anon, authenticated;
grant execute on function public.outbound_mend_queues() to service_role;

-- Whether an endpoint that takes `p_types` wants an event of `p_type` ('wallet.*': the family).
create or replace function public.outbound_endpoint_wants(p_types text[], p_type text)
returns boolean
language plpgsql
immutable
set search_path = ''
as $$
begin
  return p_types is null or p_type = any (p_types) or split_part(p_type, '.', 1) || '.*' = any (p_types);
end;
$$;
revoke all on function public.outbound_endpoint_wants(text[],text) from public, anon, authenticated;
grant execute on function public.outbound_endpoint_wants(text[],text) to service_role;

-- Hold the user's sequence row until commit: their events are written one transaction at a time,
-- and what a transaction reads after this (what was told) is what the one before it committed.
create or replace function public.outbound_lock_user(p_user_id text)
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  perform 1 from public.outbound_user_sequences where user_id = p_user_id for update;
  if not found then
    -- The user's first event, or their first since an erasure deleted their counter: numbered after
    -- the events of theirs still waiting (the erasure's customer.deleted), so none goes before it.
    -- Read by a statement after the insert, which may have waited for the erasure's transaction to
    -- commit (and a statement sees only what committed before it began).
    insert into public.outbound_user_sequences (user_id, last_sequence) values (p_user_id, 0) on conflict (user_id) do nothing;
    update public.outbound_user_sequences
      set last_sequence = greatest(last_sequence, coalesce((select max(e.sequence) from public.outbound_events e where e.user_id = p_user_id), 0))
      where user_id = p_user_id;
  end if;
end;
$$;
revoke all on function public.outbound_lock_user(text) from public, anon, authenticated;
grant execute on function public.outbound_lock_user(text) to service_role;

-- Write one event (and its deliveries) with the user's next sequence number, under the user's lock
-- (its counter's row: public.outbound_lock_user, which a caller reading what was told takes first).
-- Returns the number.
create or replace function public.outbound_emit(p_user_id text, p_type text, p_data jsonb)
returns bigint
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_sequence bigint;
  v_id uuid;
begin
  update public.outbound_user_sequences set last_sequence = last_sequence + 1, last_type = p_type
    where user_id = p_user_id returning last_sequence into v_sequence;
  if not found then -- (no counter yet: made as outbound_lock_user makes it, never from 1 again)
    perform public.outbound_lock_user(p_user_id);
    update public.outbound_user_sequences set last_sequence = last_sequence + 1, last_type = p_type
      where user_id = p_user_id returning last_sequence into v_sequence;
  end if;
  insert into public.outbound_events (user_id, sequence, type, data) values (p_user_id, v_sequence, p_type, p_data)
    returning id into v_id;
  -- Each delivery's queue marked due: a row made, or one already there locked to the commit (an
  -- ON CONFLICT row is locked even where nothing is updated), so that no claim sees the queue empty
  -- and deletes its row before this delivery is there to see.
  with added as (
    insert into public.outbound_deliveries (endpoint_id, event_id, user_id, sequence)
      select e.id, v_id, p_user_id, v_sequence from public.outbound_endpoints e
      where e.retired_at is null and public.outbound_endpoint_wants(e.types, p_type)
      returning endpoint_id
  )
  insert into public.outbound_queues as q (endpoint_id, user_id)
    select a.endpoint_id, p_user_id from added a order by a.endpoint_id collate "C"
  -- (Looked at in the first attempts' lane, which every claim reads: the head may be this one, after
  -- one that went while a settle could not reach the row. A retrying head is set back by that look.)
  on conflict (endpoint_id, user_id) do update set look_at = least(q.look_at, now()), head_attempted = false
    where q.look_at > now() or q.head_attempted;
  if p_type <> 'customer.deleted' then
    -- The same person back after an erasure: a later erasure is told again.
    delete from public.outbound_erased_users where id_hash = pg_catalog.sha256(pg_catalog.convert_to(p_user_id, 'UTF8'));
  end if;
  return v_sequence;
end;
$$;
revoke all on function public.outbound_emit(text,text,jsonb) from public, anon, authenticated;
grant execute on function public.outbound_emit(text,text,jsonb) to service_role;

-- Whether the user is being erased in this transaction (public.forget_user): their rows go, and
-- `customer.deleted` says so once, instead of a revoke or an unlink for each.
create or replace function public.outbound_erasing(p_user_id text)
returns boolean
language plpgsql
stable
set search_path = ''
as $$
begin
  return coalesce(nullif(current_setting('account_link.erasing', true), ''), '[]')::jsonb ? p_user_id;
end;
$$;
revoke all on function public.outbound_erasing(text) from public, anon, authenticated;
grant execute on function public.outbound_erasing(text) to service_role;

-- When time alone may next change what an entitlement of a user shows: the first of its sources'
-- ends still ahead (grants_until, THE rule for "grants", 03_billing_fold.sql). The view reads the
-- time only there (public.entitlement_sources): a source that stops granting may end the access, or
-- leave it with another source and change what it shows (a renewing monthly lapsing beside a
-- lifetime: will_renew turns false), so each end is looked at, not only the last. None ahead:
-- at once. Planned once per connection, as public.entitlement_sources is (07_account.sql says why).
create or replace function public.outbound_recheck_at(p_owner_ids text[], p_entitlement_id text)
returns timestamptz
language plpgsql
stable
security definer
set search_path = ''
set plan_cache_mode = force_generic_plan
as $$
begin
  return (
    select coalesce(min(e.grants_until), '-infinity') from public.entitlements e
    where e.app_user_id = any (p_owner_ids) and e.entitlement_id = p_entitlement_id and e.grants_until > now());
end;
$$;
revoke all on function public.outbound_recheck_at(text[],text) from public, anon, authenticated;
grant execute on function public.outbound_recheck_at(text[],text) to service_role;

-- Whether a receiver would act differently: the fields of an entitlement it is told about, times
-- compared as times (their JSON text follows the session's time zone).
create or replace function public.outbound_entitlement_changed(p_told jsonb, p_now jsonb)
returns boolean
language plpgsql
immutable
set search_path = ''
as $$
begin
  return p_told -> 'status' is distinct from p_now -> 'status'
      or p_told -> 'will_renew' is distinct from p_now -> 'will_renew'
      or p_told -> 'product_id' is distinct from p_now -> 'product_id'
      or p_told -> 'store' is distinct from p_now -> 'store'
      or p_told -> 'environment' is distinct from p_now -> 'environment'
      or p_told -> 'period_type' is distinct from p_now -> 'period_type'
      or (p_told ->> 'expires_at')::timestamptz is distinct from (p_now ->> 'expires_at')::timestamptz
      or (p_told ->> 'grace_expires_at')::timestamptz is distinct from (p_now ->> 'grace_expires_at')::timestamptz;
end;
$$;
revoke all on function public.outbound_entitlement_changed(jsonb,jsonb) from public, anon, authenticated;
grant execute on function public.outbound_entitlement_changed(jsonb,jsonb) to service_role;

-- Tell what changed in one user's entitlements since they were last told. Returns the events written.
create or replace function public.outbound_reconcile_entitlements(p_user_id text)
returns integer
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_view jsonb;
  v_owners text[];
  v_told record;
  v_item jsonb;
  v_recheck_at timestamptz;
  v_written integer := 0;
begin
  if not public.is_user_id(p_user_id) or public.outbound_erasing(p_user_id) then
    return 0;
  end if;
  perform public.outbound_lock_user(p_user_id);
  v_view := public.account_entitlements(p_user_id, now());
  v_owners := public.entitlement_owner_ids(p_user_id);

  for v_told in
    select t.entitlement_id, t.entitlement, t.recheck_at from public.outbound_told_entitlements t
    where t.user_id = p_user_id order by t.entitlement_id collate "C"
  loop
    v_item := (select x from jsonb_array_elements(v_view) x where x ->> 'entitlement_id' = v_told.entitlement_id);
    if v_item is null or not (v_item ->> 'active')::boolean then
      delete from public.outbound_told_entitlements where user_id = p_user_id and entitlement_id = v_told.entitlement_id;
      perform public.outbound_emit(p_user_id, 'entitlement.revoked', jsonb_build_object(
        -- Gone from the list (removed): as last told, granting nothing (not `active` with active
        -- false, which a receiver reading the status would take for access).
        'entitlement', coalesce(v_item, v_told.entitlement || '{"active": false, "status": "expired", "will_renew": false, "grace_expires_at": null}'),
        -- The effective status says why (expired, refunded, transferred, paused); gone: removed.
        'reason', coalesce(v_item ->> 'status', 'removed')));
      v_written := v_written + 1;
    else
      v_recheck_at := public.outbound_recheck_at(v_owners, v_told.entitlement_id);
      if public.outbound_entitlement_changed(v_told.entitlement, v_item) then
        update public.outbound_told_entitlements set entitlement = v_item, recheck_at = v_recheck_at
        where user_id = p_user_id and entitlement_id = v_told.entitlement_id;
        perform public.outbound_emit(p_user_id, 'entitlement.updated', jsonb_build_object('entitlement', v_item, 'previous', v_told.entitlement));
        v_written := v_written + 1;
      elsif v_recheck_at is distinct from v_told.recheck_at then
        update public.outbound_told_entitlements set recheck_at = v_recheck_at
        where user_id = p_user_id and entitlement_id = v_told.entitlement_id;
      end if;
    end if;
  end loop;

  for v_item in
    select x from jsonb_array_elements(v_view) x
    where (x ->> 'active')::boolean
      and not exists (select 1 from public.outbound_told_entitlements t where t.user_id = p_user_id and t.entitlement_id = x ->> 'entitlement_id')
    order by x ->> 'entitlement_id' collate "C"
  loop
    insert into public.outbound_told_entitlements (user_id, entitlement_id, entitlement, recheck_at)
      values (p_user_id, v_item ->> 'entitlement_id', v_item, public.outbound_recheck_at(v_owners, v_item ->> 'entitlement_id'));
    perform public.outbound_emit(p_user_id, 'entitlement.granted', jsonb_build_object('entitlement', v_item));
    v_written := v_written + 1;
  end loop;
  return v_written;
end;
$$;
revoke all on function public.outbound_reconcile_entitlements(text) from public, anon, authenticated;
grant execute on function public.outbound_reconcile_entitlements(text) to service_role;

-- Users whose entitlements a transaction changed, each once (keyed by the transaction, so
-- transactions never wait on each other here), reconciled when it commits: by then every statement
-- of the transaction has run, so a refold that deletes and rebuilds rows is compared as its outcome.
create table public.outbound_pending_users (
  tx xid8 not null default pg_current_xact_id(),
  user_id text not null,
  primary key (tx, user_id)
);
alter table public.outbound_pending_users enable row level security;
revoke all on table public.outbound_pending_users from public, anon, authenticated;
grant select, insert, update, delete on table public.outbound_pending_users to service_role;

-- Everyone who reads entitlement rows that changed (the rows' owners and the ids merged into them):
-- noted for the commit (outbound events) and told now (Realtime's account_changed, 07_account.sql).
create or replace function public.entitlement_readers_changed(p_ids text[])
returns void
language plpgsql
security definer
set search_path = ''
as $$
begin
  insert into public.outbound_pending_users (user_id)
    select distinct u from unnest(p_ids) u where public.is_user_id(u) and not public.outbound_erasing(u)
    on conflict do nothing;
  if public.can_broadcast() then
    perform public.send_account_changed('entitlements', p_ids);
  end if;
end;
$$;
revoke all on function public.entitlement_readers_changed(text[]) from public, anon, authenticated;
grant execute on function public.entitlement_readers_changed(text[]) to service_role;

-- The readers of the rows a statement changed: their owners (from its transition tables) and the
-- ids merged into them.
create or replace function public.entitlements_changed()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
declare
  v_ids text[];
begin
  -- (Each statement names only the transition tables its trigger has.)
  if tg_op = 'INSERT' then
    v_ids := array(select distinct n.app_user_id from new_rows n);
  elsif tg_op = 'DELETE' then
    v_ids := array(select distinct o.app_user_id from old_rows o);
  else
    v_ids := array(select n.app_user_id from new_rows n union select o.app_user_id from old_rows o);
  end if;
  v_ids := v_ids || array(select s.app_user_id from public.billing_subscribers s where s.customer_id = any (v_ids));
  perform public.entitlement_readers_changed(v_ids);
  return null;
end;
$$;
revoke all on function public.entitlements_changed() from public, anon, authenticated;
grant execute on function public.entitlements_changed() to service_role;

create trigger entitlements_changed_insert after insert on public.entitlements
  referencing new table as new_rows for each statement execute function public.entitlements_changed();

-- The in-order fold (public.billing_fold_in_order) tells the readers of its one update itself, from
-- the group it has already read under its lock, and sets account_link.readers_told around that
-- update: this trigger would look the same readers up again, on every renewal.
create trigger entitlements_changed_update after update on public.entitlements
  referencing old table as old_rows new table as new_rows for each statement
  when (current_setting('account_link.readers_told', true) is distinct from 'on')
  execute function public.entitlements_changed();

create trigger entitlements_changed_delete after delete on public.entitlements
  referencing old table as old_rows for each statement execute function public.entitlements_changed();

-- A user merged into another customer, or out of one, now reads other rows: noted for the commit.
-- A row trigger whose condition Postgres checks itself: every billing event updates its
-- subscribers' rows, and only a merge changes customer_id, so the others cost nothing here.
create or replace function public.outbound_subscriber_merged()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  if public.is_user_id(new.app_user_id) and not public.outbound_erasing(new.app_user_id) then
    insert into public.outbound_pending_users (user_id) values (new.app_user_id) on conflict do nothing;
  end if;
  return null;
end;
$$;
revoke all on function public.outbound_subscriber_merged() from public, anon, authenticated;
grant execute on function public.outbound_subscriber_merged() to service_role;

create trigger billing_subscribers_outbound after update of customer_id on public.billing_subscribers
  for each row when (old.customer_id is distinct from new.customer_id) execute function public.outbound_subscriber_merged();

-- At commit: each noted user reconciled, and the note gone.
create or replace function public.outbound_reconcile_pending()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  delete from public.outbound_pending_users where tx = new.tx and user_id = new.user_id;
  perform public.outbound_reconcile_entitlements(new.user_id);
  return null;
end;
$$;
revoke all on function public.outbound_reconcile_pending() from public, anon, authenticated;
grant execute on function public.outbound_reconcile_pending() to service_role;

create constraint trigger outbound_pending_users_reconcile after insert on public.outbound_pending_users
  deferrable initially deferred for each row execute function public.outbound_reconcile_pending();

-- Receivers know of the access that exists when events start (an upgrade, a database seeded in
-- bulk): it is noted as told, without an event, so the next change of it is told as what it is (a
-- renewal as updated, a lapse as revoked) rather than as a first grant. Returns the rows noted.
create or replace function public.outbound_adopt_current_state()
returns integer
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_count integer;
begin
  insert into public.outbound_told_entitlements (user_id, entitlement_id, entitlement, recheck_at)
  select u.id, x ->> 'entitlement_id', x, public.outbound_recheck_at(public.entitlement_owner_ids(u.id), x ->> 'entitlement_id')
  from (
    select e.app_user_id as id from public.entitlements e where e.grants_until > now()
    union
    select s.app_user_id from public.billing_subscribers s join public.entitlements e on e.app_user_id = s.customer_id
    where e.grants_until > now()
  ) u
  cross join lateral jsonb_array_elements(public.account_entitlements(u.id, now())) x
  where public.is_user_id(u.id) and (x ->> 'active')::boolean
  on conflict (user_id, entitlement_id) do nothing;
  get diagnostics v_count = row_count;
  return v_count;
end;
$$;
revoke all on function public.outbound_adopt_current_state() from public, anon, authenticated;
grant execute on function public.outbound_adopt_current_state() to service_role;

-- A wallet linked or unlinked: told as it happens (a link is never rebuilt).
create or replace function public.outbound_wallet_changed()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
declare
  v_row public.wallet_links;
begin
  if tg_op = 'DELETE' then v_row := old; else v_row := new; end if;
  if public.is_user_id(v_row.user_id::text) and not public.outbound_erasing(v_row.user_id::text) then
    perform public.outbound_emit(v_row.user_id::text,
      case tg_op when 'DELETE' then 'wallet.unlinked' else 'wallet.linked' end,
      jsonb_build_object('wallet', public.wallet_link_json(v_row)));
  end if;
  return null;
end;
$$;
revoke all on function public.outbound_wallet_changed() from public, anon, authenticated;
grant execute on function public.outbound_wallet_changed() to service_role;

create trigger wallet_links_outbound after insert or delete on public.wallet_links
  for each row execute function public.outbound_wallet_changed();

-- Erasure (public.forget_user): from here to commit the user's rows go without a revoke or an
-- unlink each; what they were told is forgotten.
create or replace function public.outbound_begin_erasure(p_user_id text)
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  perform public.outbound_lock_user(p_user_id);
  perform set_config('account_link.erasing',
    (coalesce(nullif(current_setting('account_link.erasing', true), ''), '[]')::jsonb || to_jsonb(p_user_id))::text, true);
  delete from public.outbound_told_entitlements where user_id = p_user_id;
end;
$$;
revoke all on function public.outbound_begin_erasure(text) from public, anon, authenticated;
grant execute on function public.outbound_begin_erasure(text) to service_role;

-- Users erased and told so (customer.deleted), as the sha256 of the id (never the id itself):
-- forgetting a forgotten user tells nothing again. An event about the id later (the same person
-- back) lifts it.
create table public.outbound_erased_users (
  id_hash bytea primary key,
  erased_at timestamptz not null default now()
);
alter table public.outbound_erased_users enable row level security;
revoke all on table public.outbound_erased_users from public, anon, authenticated;
grant select, insert, update, delete on table public.outbound_erased_users to service_role;

-- Before events go (an erasure, the retention): the last time each endpoint delivered any of them,
-- kept on the endpoint (the status's "last delivered" reads it beside the deliveries kept).
create or replace function public.outbound_note_last_deliveries(p_event_ids uuid[])
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  update public.outbound_endpoints p set last_delivered_at = last.delivered_at
  from (select d.endpoint_id, max(d.delivered_at) as delivered_at from public.outbound_deliveries d
        where d.event_id = any (p_event_ids) and d.delivered_at is not null group by d.endpoint_id) last
  where p.id = last.endpoint_id and last.delivered_at > coalesce(p.last_delivered_at, '-infinity');
end;
$$;
revoke all on function public.outbound_note_last_deliveries(uuid[]) from public, anon, authenticated;
grant execute on function public.outbound_note_last_deliveries(uuid[]) to service_role;

-- ...and `customer.deleted`, once. Then what the outbox keeps about the user goes: their earlier
-- events that wait for no delivery, and their counter. An endpoint that gets no customer.deleted (a
-- retired one: no new deliveries; one whose types leave it out) loses what it still waits for of
-- the user now: sent later, it would give the erased user's data to a receiver never told of the
-- erasure. The events an endpoint that takes it still waits for go out before the customer.deleted,
-- then go with it (outbound_maintain); no replay sends them again (outbound_replay). The
-- customer.deleted itself stays until every endpoint has it (none configured: it goes at once),
-- then retention removes it.
create or replace function public.outbound_tell_erasure(p_user_id text)
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_hash bytea := pg_catalog.sha256(pg_catalog.convert_to(p_user_id, 'UTF8'));
  v_gone uuid[];
begin
  if not public.is_user_id(p_user_id) then
    return;
  end if;
  if not exists (select 1 from public.outbound_erased_users where id_hash = v_hash) then
    perform public.outbound_emit(p_user_id, 'customer.deleted', '{}'::jsonb);
    insert into public.outbound_erased_users (id_hash) values (v_hash);
  end if;
  delete from public.outbound_deliveries d using public.outbound_endpoints p
  where d.user_id = p_user_id and d.state = 'pending' and p.id = d.endpoint_id
    and (p.retired_at is not null or not public.outbound_endpoint_wants(p.types, 'customer.deleted'));
  perform public.outbound_drop_empty_queues(array(
    select q.ctid from public.outbound_queues q join public.outbound_endpoints p on p.id = q.endpoint_id
    where q.user_id = p_user_id
    for update of q skip locked));
  v_gone := array(select e.id from public.outbound_events e
                   where e.user_id = p_user_id
                     and not exists (select 1 from public.outbound_deliveries d where d.event_id = e.id and d.state = 'pending')
                     -- (The customer.deleted stays while an earlier event of the user does: see outbound_maintain.)
                     and (e.type <> 'customer.deleted'
                          or not exists (select 1 from public.outbound_events x join public.outbound_deliveries d on d.event_id = x.id
                                         where x.user_id = p_user_id and x.sequence < e.sequence and d.state = 'pending')));
  perform public.outbound_note_last_deliveries(v_gone);
  delete from public.outbound_events where id = any (v_gone);
  delete from public.outbound_user_sequences where user_id = p_user_id;
end;
$$;
revoke all on function public.outbound_tell_erasure(text) from public, anon, authenticated;
grant execute on function public.outbound_tell_erasure(text) to service_role;

-- Lapses by time: the users with told access that time may have changed by now (recheck_at), at
-- most p_limit of them, each reconciled (an `entitlement.revoked`, reason `expired`, when the access
-- ended; `entitlement.updated` when another source still grants and what shows changed; nothing
-- when nothing did) and sent the same account_changed broadcast as a written change. Returns
-- {users, more}.
create or replace function public.outbound_tell_lapses(p_limit integer default 200)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_users text[];
  v_user text;
begin
  if p_limit is null or p_limit < 1 or p_limit > 10000 then
    raise exception 'invalid_request' using errcode = 'PT400', detail = 'p_limit must be between 1 and 10000.';
  end if;
  v_users := array(
    select t.user_id from public.outbound_told_entitlements t
    where t.recheck_at <= now()
    group by t.user_id
    order by min(t.recheck_at)
    limit p_limit);
  foreach v_user in array v_users loop
    perform public.outbound_reconcile_entitlements(v_user);
  end loop;
  if cardinality(v_users) > 0 and public.can_broadcast() then
    perform public.send_account_changed('entitlements', v_users);
  end if;
  return jsonb_build_object('users', to_jsonb(v_users), 'more', cardinality(v_users) = p_limit);
end;
$$;
revoke all on function public.outbound_tell_lapses(integer) from public, anon, authenticated;
grant execute on function public.outbound_tell_lapses(integer) to service_role;

-- How long an endpoint no server's settings name keeps getting deliveries before it is retired:
-- longer than a deployment on Vercel goes without naming its receivers (its daily crons' outbox
-- runs name them, and each new instance as it opens the database), as long as a delivery's retries.
create or replace function public.outbound_unnamed_retire_after()
returns interval
language sql
immutable
set search_path = ''
as $$
  select interval '3 days'
$$;
revoke all on function public.outbound_unnamed_retire_after() from public, anon, authenticated;
grant execute on function public.outbound_unnamed_retire_after() to service_role;

-- The endpoints a server's settings name ([{id, types}]): added, updated, brought back, noted as
-- named; no other touched. The server calls it as it opens the database, before its first change
-- (an event gets a delivery for each endpoint registered when it is written). In id order, so that
-- two servers registering at once never wait on each other's rows in opposite orders.
create or replace function public.outbound_add_endpoints(p_endpoints jsonb)
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  if jsonb_typeof(p_endpoints) is distinct from 'array' then
    raise exception 'invalid_request' using errcode = 'PT400', detail = 'p_endpoints must be a JSON array.';
  end if;
  insert into public.outbound_endpoints as e (id, types)
    select x ->> 'id', case when jsonb_typeof(x -> 'types') = 'array' then array(select jsonb_array_elements_text(x -> 'types')) end
    from jsonb_array_elements(p_endpoints) x
    order by x ->> 'id' collate "C"
  on conflict (id) do update set types = excluded.types, retired_at = null, named_at = now()
    -- named_at at most hourly: every event's delivery row checks this row (its foreign key), and a
    -- write per registration would make those checks chase a new row version.
    where e.types is distinct from excluded.types or e.retired_at is not null or e.named_at < now() - interval '1 hour';
end;
$$;
revoke all on function public.outbound_add_endpoints(jsonb) from public, anon, authenticated;
grant execute on function public.outbound_add_endpoints(jsonb) to service_role;

-- The endpoints the settings name now: added as above, and retired those no server has named for
-- outbound_unnamed_retire_after() (an outbox run). Returns how many the settings name.
create or replace function public.outbound_set_endpoints(p_endpoints jsonb)
returns integer
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_ids text[];
begin
  perform public.outbound_add_endpoints(p_endpoints);
  v_ids := array(select x ->> 'id' from jsonb_array_elements(p_endpoints) x);
  update public.outbound_endpoints set retired_at = now()
  where retired_at is null and not (id = any (v_ids)) and named_at < now() - public.outbound_unnamed_retire_after();
  return cardinality(v_ids);
end;
$$;
revoke all on function public.outbound_set_endpoints(jsonb) from public, anon, authenticated;
grant execute on function public.outbound_set_endpoints(jsonb) to service_role;

-- Claim up to p_limit deliveries due at one endpoint, each the head of its user's queue there (no
-- earlier pending event of that user), leased for p_lease_seconds. Returns them with their events.
-- Retries first, at most p_retry_limit of them (null: half of p_limit, rounded up), then first
-- attempts in the places left, each kind in the order its queues came due. The caller counts the
-- retries it has in flight against p_retry_limit (the server: at most half of its places), so each
-- kind has its share when both wait: the retries of users whose events hang at the receiver, each
-- holding its place until its timeout, never keep the other users' new events waiting behind them,
-- and a stream of new events (a bulk replay's) never keeps the retries waiting (docs/events.md).
-- The queues come from public.outbound_queues, due ones of the kind first, each locked so that one
-- claim looks at it at a time; only each one's head is read (by the queue index), never what waits
-- behind it. A queue's row that was early is set right as it is read (its head not due until a
-- retry or the end of a lease, or of the other kind; no head: the row goes), and the next due rows
-- are read in its place. The rows looked at stay locked to the commit: a write of an event for one
-- of them waits for the claim (one look a row, each early row once). The heads are locked as they
-- are chosen, then updated where they are, by their ctid (a row this transaction has locked keeps it).
create or replace function public.outbound_claim(p_endpoint_id text, p_limit integer, p_lease_seconds integer, p_retry_limit integer default null)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
-- (Each statement planned once per connection: the choice of retries, run beside first attempts,
-- was otherwise planned again for every call's values.)
set plan_cache_mode = force_generic_plan
as $$
declare
  v_due tid[] := '{}';
  v_retry_room integer := least(p_limit, coalesce(p_retry_limit, (p_limit + 1) / 2));
  v_retries_taken integer := 0;
  v_pass integer := 0;
  v_retrying boolean;
  v_take integer;
  v_moved_to_retries boolean := false;
  v_queues refcursor;
  v_queue record;
  v_head record;
  v_claimed jsonb;
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease_seconds is null or p_lease_seconds < 1 or p_lease_seconds > 3600
     or p_retry_limit < 0 then
    raise exception 'invalid_request' using errcode = 'PT400', detail = 'p_limit must be 1 to 1000, p_lease_seconds 1 to 3600, p_retry_limit 0 or more.';
  end if;
  -- Retries, then first attempts: the same choice, one kind at a time. Then the retries again when
  -- the first attempts' lane found due retries in it (a new event marks its queue there: it may be
  -- the head), so that such a retry is not left for a later claim, which may not come soon.
  foreach v_retrying in array array[true, false, true] loop
    v_pass := v_pass + 1;
    continue when v_pass = 3 and not v_moved_to_retries;
    v_take := case when v_retrying then least(p_limit - cardinality(v_due), v_retry_room - v_retries_taken) else p_limit - cardinality(v_due) end;
    continue when v_take <= 0;
    -- The queues due of this kind, each locked as it is fetched (one claim looks at a queue at a
    -- time; one another holds is looked at by the next claim), one at a time (a loop over the query
    -- would fetch and lock them by tens). Each written by its ctid: a set joined to the table was
    -- planned as a read of the whole table while it had no statistics.
    open v_queues for
      select q.ctid, q.user_id from public.outbound_queues q
      where q.endpoint_id = p_endpoint_id and q.head_attempted = v_retrying and q.look_at <= now()
      order by q.look_at
      for update skip locked;
    loop
      fetch v_queues into v_queue;
      exit when not found;
      select h.ctid, h.next_attempt_at, h.leased_until, h.first_attempt_at is not null as attempted into v_head
      from public.outbound_deliveries h
      where h.endpoint_id = p_endpoint_id and h.user_id = v_queue.user_id and h.state = 'pending'
      order by h.sequence limit 1;
      if not found then
        perform public.outbound_drop_empty_queues(array[v_queue.ctid]);
      elsif v_head.attempted = v_retrying and v_head.next_attempt_at <= now() and (v_head.leased_until is null or v_head.leased_until <= now()) then
        -- Due: leased to this claim, unless a settle holds it (then the queue stays due).
        perform 1 from public.outbound_deliveries d where d.ctid = v_head.ctid and d.state = 'pending' for update skip locked;
        if found then
          v_due := v_due || v_head.ctid;
          update public.outbound_queues set look_at = now() + make_interval(secs => p_lease_seconds), head_attempted = true
          where ctid = v_queue.ctid;
          v_retries_taken := v_retries_taken + v_retrying::integer;
          v_take := v_take - 1;
          exit when v_take = 0;
        elsif v_retrying then
          -- A settle holds the head (a late one: its lease had ended). It may pass this row by, and
          -- the head after it be a first attempt: to the first attempts' lane, which every claim reads
          -- (a retry there is set back by the look).
          update public.outbound_queues set head_attempted = false where ctid = v_queue.ctid;
        end if;
      else
        -- Early: when its head is due (a retry, the end of a lease), and which kind it is; only from
        -- a head this claim holds, so that no settle changes it unseen (one under way: the row stays
        -- due; one after waits for this claim, then sets the row itself).
        -- (Its times checked again under the lock: a settle that committed meanwhile changed them.)
        perform 1 from public.outbound_deliveries d
        where d.ctid = v_head.ctid and d.state = 'pending' and d.next_attempt_at = v_head.next_attempt_at
          and d.leased_until is not distinct from v_head.leased_until
        for share skip locked;
        if found then
          update public.outbound_queues set look_at = greatest(v_head.next_attempt_at, v_head.leased_until), head_attempted = v_head.attempted
          where ctid = v_queue.ctid;
          v_moved_to_retries := v_moved_to_retries or (not v_retrying and v_head.attempted
            and v_head.next_attempt_at <= now() and (v_head.leased_until is null or v_head.leased_until <= now()));
        end if;
      end if;
    end loop;
    close v_queues;
  end loop;
  with claimed as (
    update public.outbound_deliveries d
    set leased_until = now() + make_interval(secs => p_lease_seconds), attempts = d.attempts + 1,
        first_attempt_at = coalesce(d.first_attempt_at, now()), last_attempt_at = now()
    where d.ctid = any (v_due)
    returning d.event_id, d.attempts, d.first_attempt_at
  )
  select coalesce(jsonb_agg(jsonb_build_object(
    'event_id', e.id, 'type', e.type, 'user_id', e.user_id, 'sequence', e.sequence, 'data', e.data,
    'created_at', e.created_at, 'attempts', c.attempts, 'first_attempt_at', c.first_attempt_at
  ) order by e.user_id, e.sequence), '[]'::jsonb) into v_claimed
  from claimed c join public.outbound_events e on e.id = c.event_id;
  return v_claimed;
end;
$$;
revoke all on function public.outbound_claim(text,integer,integer,integer) from public, anon, authenticated;
grant execute on function public.outbound_claim(text,integer,integer,integer) to service_role;

-- Settle attempts: [{event_id, outcome: delivered | retry | dead, retry_at?, error?}]. A delivery
-- someone else settled meanwhile (a replay, an operator) is left as it is. Returns how many
-- settled. Each queue's row then says when to look at it again: at a retry's time (now, when a
-- replay put an earlier event of the user before it: outbound_replay); now, for the delivery behind
-- one that went; or the row goes, when none is behind it (read after the row is locked, as the
-- claim does). A row another transaction holds is left: an emit's makes it due anyway, a claim's
-- sets it right from what it reads (so a settle never waits on a queue's row, nor on a transaction
-- that writes events for two users).
create or replace function public.outbound_settle(p_endpoint_id text, p_results jsonb)
returns integer
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_count integer;
  v_moved text[];
  v_retrying text[];
  v_retry_at timestamptz[];
  v_retry_sequence bigint[];
  v_ahead boolean;
  v_rows tid[];
  v_row tid;
begin
  with settled as (
    update public.outbound_deliveries d
    set state = case r.outcome when 'delivered' then 'delivered' when 'dead' then 'dead' else 'pending' end,
        delivered_at = case when r.outcome = 'delivered' then now() end,
        next_attempt_at = case when r.outcome = 'retry' then coalesce(r.retry_at, now()) else d.next_attempt_at end,
        last_error = case when r.outcome = 'delivered' then d.last_error else left(r.error, 500) end,
        last_failed_at = case when r.outcome = 'delivered' then d.last_failed_at else now() end,
        last_failed_attempt = case when r.outcome = 'delivered' then d.last_failed_attempt else d.attempts end,
        leased_until = null
    from jsonb_to_recordset(p_results) as r(event_id uuid, outcome text, retry_at timestamptz, error text)
    where d.endpoint_id = p_endpoint_id and d.event_id = r.event_id and d.state = 'pending' and d.leased_until is not null
      and r.outcome in ('delivered', 'retry', 'dead')
    returning d.user_id, d.state, d.next_attempt_at, d.sequence
  )
  select count(*), coalesce(array_agg(s.user_id) filter (where s.state <> 'pending'), '{}'),
         coalesce(array_agg(s.user_id) filter (where s.state = 'pending'), '{}'), coalesce(array_agg(s.next_attempt_at) filter (where s.state = 'pending'), '{}'),
         coalesce(array_agg(s.sequence) filter (where s.state = 'pending'), '{}')
    into v_count, v_moved, v_retrying, v_retry_at, v_retry_sequence
  from settled s;
  for i in 1 .. cardinality(v_retrying) loop
    select q.ctid into v_row from public.outbound_queues q where q.endpoint_id = p_endpoint_id and q.user_id = v_retrying[i] for update skip locked;
    continue when v_row is null;
    v_ahead := exists (select 1 from public.outbound_deliveries h
                       where h.endpoint_id = p_endpoint_id and h.user_id = v_retrying[i] and h.state = 'pending' and h.sequence < v_retry_sequence[i]);
    update public.outbound_queues set look_at = case when v_ahead then now() else v_retry_at[i] end, head_attempted = not v_ahead
    where ctid = v_row;
  end loop;
  if cardinality(v_moved) > 0 then
    v_rows := array(select q.ctid from public.outbound_queues q where q.endpoint_id = p_endpoint_id and q.user_id = any (v_moved) for update skip locked);
    perform public.outbound_drop_empty_queues(v_rows);
    -- The rest (the rows deleted just now are no longer at their ctids), one by one as there.
    foreach v_row in array v_rows loop
      update public.outbound_queues set look_at = now(), head_attempted = false where ctid = v_row;
    end loop;
  end if;
  return v_count;
end;
$$;
revoke all on function public.outbound_settle(text,jsonb) from public, anon, authenticated;
grant execute on function public.outbound_settle(text,jsonb) to service_role;

-- Send again: one event (p_event_id) or those written in [p_from, p_to), to one endpoint or every
-- active one, whatever happened to them before (delivered, dead, never sent there). The webhook-id
-- stays the event's, so a receiver that has it already sees a duplicate. Returns how many.
-- An endpoint has at most one attempt of a user's under way (docs/events.md, "In order per user"):
-- a replayed event whose user has an attempt of it, or of a later event, under way there is due
-- when that attempt's lease ends (its head otherwise, it would go out beside it), and so is one
-- replayed while an earlier replay still waits for that lease (never attempted, due later: only a
-- replay writes such a delivery), since the first replay took the attempt's own lease off when it
-- was the same event. The queues' rows are taken first, so a claim under way commits its leases
-- before they are read.
create or replace function public.outbound_replay(p_event_id uuid default null, p_from timestamptz default null, p_to timestamptz default null, p_endpoint_id text default null)
returns integer
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_endpoints text[];
  v_events uuid[];
  v_users text[];
  v_count integer;
begin
  if p_event_id is null and (p_from is null or p_to is null or p_to <= p_from) then
    raise exception 'invalid_request' using errcode = 'PT400', detail = 'Name an event, or a time range whose end is after its start.';
  end if;
  if p_endpoint_id is not null and not exists (select 1 from public.outbound_endpoints where id = p_endpoint_id and retired_at is null) then
    raise exception 'endpoint_not_found' using errcode = 'PT404', detail = 'No active endpoint has this id.';
  end if;
  select coalesce(array_agg(p.id), '{}'), coalesce(array_agg(e.id), '{}'), coalesce(array_agg(e.user_id), '{}')
  into v_endpoints, v_events, v_users
  from public.outbound_events e
  cross join public.outbound_endpoints p
  where (p_event_id is null or e.id = p_event_id)
    and (p_event_id is not null or (e.created_at >= p_from and e.created_at < p_to))
    and p.retired_at is null and (p_endpoint_id is null or p.id = p_endpoint_id)
    and public.outbound_endpoint_wants(p.types, e.type)
    -- Never what an erased user had before their customer.deleted (still waiting to go out).
    and not exists (select 1 from public.outbound_events c where c.user_id = e.user_id and c.type = 'customer.deleted' and c.sequence > e.sequence);
  -- Their queues marked due, as outbound_emit marks them (a replayed event may be a new head), user
  -- by user as a transaction writing events for several users takes them (no lock cycle with one).
  insert into public.outbound_queues as q (endpoint_id, user_id)
    select distinct t.endpoint_id collate "C", t.user_id collate "C" from unnest(v_endpoints, v_users) t(endpoint_id, user_id) order by 2, 1
  on conflict (endpoint_id, user_id) do update set look_at = least(q.look_at, now()), head_attempted = false
    where q.look_at > now() or q.head_attempted;
  -- What a replayed event waits for: the attempts under way at its endpoints, and the replays still
  -- waiting for one (few: read once, not once an event, which made a bulk replay quadratic).
  with waits as materialized (
    select o.endpoint_id, o.user_id, o.sequence, coalesce(o.leased_until, o.next_attempt_at) as until
    from public.outbound_deliveries o
    where o.endpoint_id = any (array(select distinct unnest(v_endpoints))) and o.state = 'pending'
      and (o.leased_until > now() or (o.first_attempt_at is null and o.next_attempt_at > now()))
  )
  insert into public.outbound_deliveries as d (endpoint_id, event_id, user_id, sequence, next_attempt_at)
    select t.endpoint_id, e.id, e.user_id, e.sequence,
           greatest(now(), (select max(w.until) from waits w
                            where w.endpoint_id = t.endpoint_id and w.user_id = e.user_id and w.sequence >= e.sequence))
    from unnest(v_endpoints, v_events) t(endpoint_id, event_id)
    join public.outbound_events e on e.id = t.event_id
    -- (Again, now that the queues' rows are held: an erasure that committed meanwhile is seen.)
    where not exists (select 1 from public.outbound_events c where c.user_id = e.user_id and c.type = 'customer.deleted' and c.sequence > e.sequence)
  on conflict (endpoint_id, event_id) do update
    set state = 'pending', attempts = 0, next_attempt_at = excluded.next_attempt_at, leased_until = null, first_attempt_at = null, delivered_at = null;
  get diagnostics v_count = row_count;
  return v_count;
end;
$$;
revoke all on function public.outbound_replay(uuid,timestamp with time zone,timestamp with time zone,text) from public, anon, authenticated;
grant execute on function public.outbound_replay(uuid,timestamp with time zone,timestamp with time zone,text) to service_role;

-- Each endpoint with its backlog and last failure, for the admin route and `npm run status`.
create or replace function public.outbound_status()
returns jsonb
language sql
stable
security definer
set search_path = ''
as $$
  select jsonb_build_object(
    'endpoints', coalesce((
      select jsonb_agg(jsonb_build_object(
        'id', p.id, 'types', p.types, 'registered_at', p.registered_at, 'retired_at', p.retired_at, 'named_at', p.named_at,
        'retires_at', case when p.retired_at is null then p.named_at + public.outbound_unnamed_retire_after() end,
        'pending', (select count(*) from public.outbound_deliveries d where d.endpoint_id = p.id and d.state = 'pending'),
        'oldest_pending_at', (select min(e.created_at) from public.outbound_deliveries d join public.outbound_events e on e.id = d.event_id
                              where d.endpoint_id = p.id and d.state = 'pending'),
        -- When the next attempt is due: the soonest of the users' queue heads (an event behind its
        -- user's head waits for the head, whatever its own time says), each head found as the claim
        -- finds it (first attempts and retries each in the order the claim reads them); none for a
        -- retired endpoint, which is not sent to. A head under way (leased) is passed over: its time
        -- is when it came due, not when it goes next (at most the server's 100 places to pass).
        'next_attempt_at', (select min(soonest.at) from (values (false), (true)) as kinds(attempted)
                            cross join lateral (
                              select d.next_attempt_at as at from public.outbound_deliveries d
                              where p.retired_at is null and d.endpoint_id = p.id and d.state = 'pending'
                                and (d.first_attempt_at is not null) = kinds.attempted
                                and (d.leased_until is null or d.leased_until <= now())
                                and d.sequence = (
                                  select head.sequence from public.outbound_deliveries head
                                  where head.endpoint_id = d.endpoint_id and head.user_id = d.user_id and head.state = 'pending'
                                  order by head.sequence limit 1)
                              order by d.next_attempt_at, d.sequence limit 1) soonest),
        'dead', (select count(*) from public.outbound_deliveries d where d.endpoint_id = p.id and d.state = 'dead'),
        'last_delivered_at', (select greatest(p.last_delivered_at, max(d.delivered_at)) from public.outbound_deliveries d where d.endpoint_id = p.id),
        'last_failure', (select jsonb_build_object('event_id', d.event_id, 'at', d.last_failed_at, 'error', d.last_error, 'attempts', d.last_failed_attempt)
                         from public.outbound_deliveries d
                         where d.endpoint_id = p.id and d.last_error is not null and d.last_failed_at is not null
                         order by d.last_failed_at desc limit 1)
      ) order by p.retired_at nulls first, p.id)
      from public.outbound_endpoints p), '[]'::jsonb),
    'events', (select count(*) from public.outbound_events),
    'last_event_at', (select max(created_at) from public.outbound_events),
    'lapses_due', (select count(*) from public.outbound_told_entitlements t where t.recheck_at <= now())
  )
$$;
revoke all on function public.outbound_status() from public, anon, authenticated;
grant execute on function public.outbound_status() to service_role;

-- Dead-lettered deliveries, newest first, with their events.
create or replace function public.outbound_dead_letters(p_endpoint_id text default null, p_limit integer default 100)
returns jsonb
language sql
stable
security definer
set search_path = ''
as $$
  -- Null for an endpoint id never registered (the route answers 404 endpoint_not_found).
  select case when p_endpoint_id is not null and not exists (select 1 from public.outbound_endpoints p where p.id = p_endpoint_id) then null
  else (
    select coalesce(jsonb_agg(x order by x ->> 'last_attempt_at' desc), '[]'::jsonb) from (
      select jsonb_build_object(
        'endpoint_id', d.endpoint_id, 'event_id', e.id, 'type', e.type, 'user_id', e.user_id, 'sequence', e.sequence,
        'created_at', e.created_at, 'attempts', d.attempts, 'first_attempt_at', d.first_attempt_at,
        'last_attempt_at', d.last_attempt_at, 'last_error', d.last_error) as x
      from public.outbound_deliveries d join public.outbound_events e on e.id = d.event_id
      where d.state = 'dead' and (p_endpoint_id is null or d.endpoint_id = p_endpoint_id)
      order by d.last_attempt_at desc
      limit least(greatest(coalesce(p_limit, 100), 1), 1000)
    ) dead)
  end
$$;
revoke all on function public.outbound_dead_letters(text,integer) from public, anon, authenticated;
grant execute on function public.outbound_dead_letters(text,integer) to service_role;

-- Events written since p_since (inclusive), oldest first: `npm run events:listen` follows them.
create or replace function public.outbound_events_since(p_since timestamptz, p_limit integer default 100, p_after uuid default null)
returns jsonb
language sql
stable
security definer
set search_path = ''
as $$
  select coalesce(jsonb_agg(x order by (x ->> 'created_at')::timestamptz, x ->> 'user_id', (x ->> 'sequence')::bigint), '[]'::jsonb) from (
    select jsonb_build_object('event_id', e.id, 'type', e.type, 'user_id', e.user_id, 'sequence', e.sequence, 'data', e.data, 'created_at', e.created_at) as x
    from public.outbound_events e
    where e.created_at >= p_since
      -- The next page after a full one: events after p_after in this order (many may share one
      -- created_at, the time of the transaction that wrote them). An event gone since: from p_since.
      and (p_after is null or not exists (select 1 from public.outbound_events a where a.id = p_after)
           or (e.created_at, e.user_id, e.sequence) > (select a.created_at, a.user_id, a.sequence from public.outbound_events a where a.id = p_after))
    order by e.created_at, e.user_id, e.sequence
    limit least(greatest(coalesce(p_limit, 100), 1), 1000)
  ) recent
$$;
revoke all on function public.outbound_events_since(timestamp with time zone,integer,uuid) from public, anon, authenticated;
grant execute on function public.outbound_events_since(timestamp with time zone,integer,uuid) to service_role;

-- Retention: an event is kept 30 days, and longer while a delivery of it is pending (dead letters
-- go with their event: replay them within the 30 days); an erased user's customer.deleted, only
-- until every endpoint has it. Batches of 1000 until the deadline.
create or replace function public.outbound_maintain(p_now timestamptz, p_deadline timestamptz)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  -- What was written before this is past the 30 days.
  v_kept_since timestamptz := p_now - interval '30 days';
  v_batch integer;
  v_deleted integer := 0;
  v_erased_done boolean;
  v_gone uuid[];
begin
  -- Queues' rows: any missing put back, and those of an endpoint retired (no claim looks at its
  -- queues) or gone whose deliveries have gone removed.
  perform public.outbound_mend_queues();
  perform public.outbound_drop_empty_queues(array(
    select q.ctid from public.outbound_queues q left join public.outbound_endpoints p on p.id = q.endpoint_id
    where p.id is null or p.retired_at is not null
    for update of q skip locked));
  -- What an erased user had before their customer.deleted, once it waits for no delivery (an active
  -- endpoint sends it before the customer.deleted): kept, a replay or a new endpoint could send it
  -- again after the erasure. (From the erasures, which are few; what is left, the next run takes.)
  v_gone := array(
    select e.id from public.outbound_events c
    join public.outbound_events e on e.user_id = c.user_id and e.sequence < c.sequence
    where c.type = 'customer.deleted'
      and not exists (select 1 from public.outbound_deliveries d join public.outbound_endpoints p on p.id = d.endpoint_id
                      where d.event_id = e.id and d.state = 'pending' and (p.retired_at is null or e.created_at >= v_kept_since))
    limit 1000
    for update of e skip locked);
  perform public.outbound_note_last_deliveries(v_gone);
  delete from public.outbound_events o where o.id = any (v_gone);
  get diagnostics v_deleted = row_count;
  v_erased_done := v_deleted < 1000;
  loop
    v_gone := array(
      select e.id from public.outbound_events e
      where (e.created_at < v_kept_since
             -- an erased user's customer.deleted, once no endpoint waits for it
             or (e.type = 'customer.deleted' and e.user_id not in (select s.user_id from public.outbound_user_sequences s)))
        -- A customer.deleted stays while any event of its user before it does: it is what keeps a
        -- replay from sending them (an endpoint that takes no customer.deleted may still wait for them).
        and (e.type <> 'customer.deleted'
             or not exists (select 1 from public.outbound_events x where x.user_id = e.user_id and x.sequence < e.sequence))
        -- A pending delivery keeps its event, but a retired endpoint's only for the 30 days (it may
        -- come back): no server sends to it, and its backlog must not keep personal data for good.
        and not exists (select 1 from public.outbound_deliveries d join public.outbound_endpoints p on p.id = d.endpoint_id
                        where d.event_id = e.id and d.state = 'pending' and (p.retired_at is null or e.created_at >= v_kept_since))
      order by e.created_at
      limit 1000
      for update skip locked);
    perform public.outbound_note_last_deliveries(v_gone);
    delete from public.outbound_events o where o.id = any (v_gone);
    get diagnostics v_batch = row_count;
    v_deleted := v_deleted + v_batch;
    exit when v_batch < 1000 or clock_timestamp() >= p_deadline;
  end loop;
  return jsonb_build_object('eventsDeleted', v_deleted, 'done', v_erased_done and v_batch < 1000);
end;
$$;
revoke all on function public.outbound_maintain(timestamp with time zone,timestamp with time zone) from public, anon, authenticated;
grant execute on function public.outbound_maintain(timestamp with time zone,timestamp with time zone) to service_role;
