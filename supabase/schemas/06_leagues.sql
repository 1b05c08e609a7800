-- Leagues: snapshots from the sync worker, applied idempotently and in order per league, with the
-- roster each league has now. docs/leagues.md.

create table public.leagues (
  id bigint generated always as identity primary key,
  source text not null check (source ~ '^[a-z0-9_-]{1,32}$'),
  external_id text not null check (char_length(external_id) between 1 and 128),
  -- The snapshot's fields; null only on a tombstone recorded before any snapshot of the league.
  name text,
  sport text,
  season text,
  status text check (status in ('pre_draft', 'drafting', 'in_season', 'complete')),
  settings jsonb not null default '{}'::jsonb check (jsonb_typeof(settings) = 'object'),
  -- updatedAt of the snapshot stored here.
  updated_at timestamptz,
  -- The tombstone: set while the league is deleted, to the deletion's time.
  deleted_at timestamptz,
  -- When this service last changed the row (for operators; not part of any rule).
  synced_at timestamptz not null default now(),
  constraint leagues_source_external_id_key unique (source, external_id),
  constraint leagues_live_has_snapshot check (
    deleted_at is not null
    or (name is not null and sport is not null and season is not null and status is not null and updated_at is not null)
  )
);
alter table public.leagues enable row level security;
revoke all on table public.leagues from public, anon, authenticated;
revoke all on sequence public.leagues_id_seq from public, anon, authenticated;
-- What a member may read of their leagues (the select-own policies are in 07_account.sql).
grant select (id, source, external_id, name, sport, season, status, updated_at, deleted_at) on public.leagues to authenticated;

create table public.league_members (
  league_id bigint not null references public.leagues (id) on delete cascade,
  external_user_id text not null check (char_length(external_user_id) between 1 and 128),
  display_name text not null,
  role text not null check (role in ('commissioner', 'member')),
  -- The member's account in this app, when the sender knows it (no foreign key: the user may not
  -- exist here yet, and one unknown user must not fail a whole delivery).
  app_user_id uuid,
  primary key (league_id, external_user_id)
);
alter table public.league_members enable row level security;
create index league_members_app_user_id_idx on public.league_members (app_user_id) where app_user_id is not null;
revoke all on table public.league_members from public, anon, authenticated;
grant select (league_id, app_user_id, role) on public.league_members to authenticated;

create table public.league_sync_deliveries (
  id bigint generated always as identity primary key,
  source text not null,
  -- The sender's delivery id; null when it sent none (then a replay is not recognised as one, but
  -- newest-wins still makes it change nothing).
  delivery_id text,
  sent_at timestamptz not null,
  received_at timestamptz not null default now(),
  upserted integer not null default 0,
  unchanged integer not null default 0,
  stale integer not null default 0,
  deleted integer not null default 0,
  constraint league_sync_deliveries_source_delivery_id_key unique (source, delivery_id)
);
alter table public.league_sync_deliveries enable row level security;
-- Deliveries are pruned by age; without this index every run would read the whole table.
create index league_sync_deliveries_received_at_idx on public.league_sync_deliveries (received_at);
revoke all on table public.league_sync_deliveries from public, anon, authenticated;
revoke all on sequence public.league_sync_deliveries_id_seq from public, anon, authenticated;

-- A leagues delivery also answers which app users were members of the leagues it replaced or
-- deleted, so the service can tell them their leagues changed: a member a snapshot leaves out, or
-- of a league deleted, is not named in the delivery.
-- POST /api/webhooks/leagues-sync: apply one delivery. p_leagues and p_deleted are the validated
-- `leagues` and `deleted` arrays of the request body (camelCase keys). Returns
-- {upserted, unchanged, stale, deleted} and, for a repeated delivery id, the first delivery's
-- counts with duplicate = true.
--
-- Concurrency: every league row is locked (select ... for update, or created by this transaction)
-- before it is compared, so two deliveries for the same league serialise and the second compares
-- against what the first stored. Leagues are visited in one fixed order (external_id, "C"
-- collation) by every delivery, so two deliveries sharing several leagues wait instead of deadlocking.
create or replace function public.apply_leagues_sync(p_source text, p_sent_at timestamp with time zone, p_leagues jsonb DEFAULT '[]'::jsonb, p_deleted jsonb DEFAULT '[]'::jsonb, p_delivery_id text DEFAULT NULL::text)
 RETURNS jsonb
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $$
declare
  v_delivery bigint;
  v_first public.league_sync_deliveries%rowtype;
  v_item record;
  v_row public.leagues%rowtype;
  v_id bigint;
  v_version timestamptz;
  v_upserted integer := 0;
  v_unchanged integer := 0;
  v_stale integer := 0;
  v_deleted integer := 0;
  -- Leagues whose members are replaced, with their new member lists (parallel arrays).
  v_replace_ids bigint[] := '{}';
  v_replace_members jsonb[] := '{}';
  v_tombstoned_ids bigint[] := '{}';
  -- Existing leagues that change, with what they change to (parallel arrays; no document: a
  -- tombstone): written after the loop, once their accounts are marked (below says why).
  v_changed_ids bigint[] := '{}';
  v_changed_docs jsonb[] := '{}';
  v_changed_at timestamptz[] := '{}';
  v_previous_members uuid[];
begin
  -- The route validated all of this; checked again because this function is the last line.
  if p_source is null or p_source !~ '^[a-z0-9_-]{1,32}$' then
    raise exception 'invalid_request' using errcode = 'PT400', detail = 'source must match [a-z0-9_-]{1,32}.';
  end if;
  if p_sent_at is null then
    raise exception 'invalid_request' using errcode = 'PT400', detail = 'sentAt is required.';
  end if;
  p_leagues := coalesce(p_leagues, '[]'::jsonb);
  p_deleted := coalesce(p_deleted, '[]'::jsonb);
  if jsonb_typeof(p_leagues) <> 'array' or jsonb_typeof(p_deleted) <> 'array' then
    raise exception 'invalid_request' using errcode = 'PT400', detail = 'leagues and deleted must be arrays.';
  end if;
  if exists (
    select 1
    from (
      select e.value ->> 'externalId' as external_id from jsonb_array_elements(p_leagues) e
      union all
      select e.value ->> 'externalId' from jsonb_array_elements(p_deleted) e
    ) k
    group by k.external_id
    having count(*) > 1 or k.external_id is null
  ) then
    raise exception 'invalid_request' using errcode = 'PT400', detail = 'Each league may appear once per delivery, with an externalId.';
  end if;

  -- Idempotency first: a concurrent delivery with the same id waits here on the unique key, and
  -- then sees the committed first delivery (or takes over if that one rolled back).
  insert into public.league_sync_deliveries (source, delivery_id, sent_at)
  values (p_source, p_delivery_id, p_sent_at)
  on conflict (source, delivery_id) do nothing
  returning id into v_delivery;

  if v_delivery is null then
    select * into strict v_first
    from public.league_sync_deliveries d
    where d.source = p_source and d.delivery_id = p_delivery_id;
    return jsonb_build_object(
      'upserted', v_first.upserted, 'unchanged', v_first.unchanged,
      'stale', v_first.stale, 'deleted', v_first.deleted, 'duplicate', true
    );
  end if;

  for v_item in
    select s.kind, s.doc, s.external_id, s.at
    from (
      select 'snapshot' as kind, e.value as doc, e.value ->> 'externalId' as external_id,
             (e.value ->> 'updatedAt')::timestamptz as at
      from jsonb_array_elements(p_leagues) e
      union all
      select 'deletion', e.value, e.value ->> 'externalId', (e.value ->> 'deletedAt')::timestamptz
      from jsonb_array_elements(p_deleted) e
    ) s
    order by s.external_id collate "C"
  loop
    if v_item.at is null then
      raise exception 'invalid_request' using errcode = 'PT400',
        detail = format('League %s has no %s.', v_item.external_id, case v_item.kind when 'snapshot' then 'updatedAt' else 'deletedAt' end);
    end if;

    select * into v_row
    from public.leagues l
    where l.source = p_source and l.external_id = v_item.external_id
    for update;

    if not found then
      -- New league (or a tombstone for one never seen, so a late older snapshot stays out).
      -- A concurrent delivery creating the same league makes this insert wait for it and then
      -- do nothing; the row is then locked and compared below like any existing one.
      v_id := null;
      if v_item.kind = 'snapshot' then
        insert into public.leagues (source, external_id, name, sport, season, status, settings, updated_at)
        values (
          p_source, v_item.external_id, v_item.doc ->> 'name', v_item.doc ->> 'sport', v_item.doc ->> 'season',
          v_item.doc ->> 'status', coalesce(v_item.doc -> 'settings', '{}'::jsonb), v_item.at
        )
        on conflict (source, external_id) do nothing
        returning id into v_id;
        if v_id is not null then
          v_upserted := v_upserted + 1;
          v_replace_ids := array_append(v_replace_ids, v_id);
          v_replace_members := array_append(v_replace_members, coalesce(v_item.doc -> 'members', '[]'::jsonb));
          continue;
        end if;
      else
        insert into public.leagues (source, external_id, deleted_at)
        values (p_source, v_item.external_id, v_item.at)
        on conflict (source, external_id) do nothing
        returning id into v_id;
        if v_id is not null then
          v_deleted := v_deleted + 1;
          continue;
        end if;
      end if;

      select * into strict v_row
      from public.leagues l
      where l.source = p_source and l.external_id = v_item.external_id
      for update;
    end if;

    v_version := greatest(v_row.updated_at, v_row.deleted_at);

    if v_item.kind = 'snapshot' then
      if v_item.at < v_version or (v_item.at = v_version and v_row.deleted_at is not null) then
        v_stale := v_stale + 1;
      elsif v_item.at = v_version then
        v_unchanged := v_unchanged + 1;
      else
        v_changed_ids := array_append(v_changed_ids, v_row.id);
        v_changed_docs := array_append(v_changed_docs, v_item.doc);
        v_changed_at := array_append(v_changed_at, v_item.at);
        v_upserted := v_upserted + 1;
        v_replace_ids := array_append(v_replace_ids, v_row.id);
        v_replace_members := array_append(v_replace_members, coalesce(v_item.doc -> 'members', '[]'::jsonb));
      end if;
    else
      if v_item.at < v_version then
        v_stale := v_stale + 1;
      elsif v_item.at = v_version and v_row.deleted_at is not null then
        v_unchanged := v_unchanged + 1;
      else
        v_changed_ids := array_append(v_changed_ids, v_row.id);
        v_changed_docs := array_append(v_changed_docs, null::jsonb); -- (a tombstone)
        v_changed_at := array_append(v_changed_at, v_item.at);
        v_deleted := v_deleted + 1;
        v_tombstoned_ids := array_append(v_tombstoned_ids, v_row.id);
      end if;
    end if;
  end loop;

  -- Every app user whose account this delivery changes, marked changed at once and in id order
  -- (public.account_changed locks their kept accounts): the members of the leagues it changes, as
  -- they are under those leagues' locks, and the members they get. The triggers of the writes below
  -- then find them locked already. (Marked league by league, by each league's update, two deliveries
  -- naming the same users in other leagues locked them in crossing orders, and Postgres ended the
  -- deadlock by failing one of them: a 503 to the sync worker.)
  perform public.account_changed(array(
    select m.app_user_id from public.league_members m where m.league_id = any (v_changed_ids)
    union
    select (x.value ->> 'appUserId')::uuid from unnest(v_replace_members) as r(members), jsonb_array_elements(r.members) x
    where x.value ->> 'appUserId' is not null));

  -- The leagues that change, each by its id (as its own statement, the triggers' reads of its
  -- members go through their index): a snapshot's fields, or a tombstone's time.
  for i in 1 .. cardinality(v_changed_ids) loop
    if v_changed_docs[i] is null then
      update public.leagues l set deleted_at = v_changed_at[i], synced_at = now() where l.id = v_changed_ids[i];
    else
      update public.leagues l
      set name = v_changed_docs[i] ->> 'name',
          sport = v_changed_docs[i] ->> 'sport',
          season = v_changed_docs[i] ->> 'season',
          status = v_changed_docs[i] ->> 'status',
          settings = coalesce(v_changed_docs[i] -> 'settings', '{}'::jsonb),
          updated_at = v_changed_at[i],
          deleted_at = null,
          synced_at = now()
      where l.id = v_changed_ids[i];
    end if;
  end loop;

  -- Members: a snapshot's list replaces the stored one; a deleted league keeps no members.
  -- The app users among the members replaced or deleted are told their leagues changed too (the
  -- service's local event stream; Realtime's broadcasts come from the statement's own trigger).
  with removed as (
    delete from public.league_members m
    where m.league_id = any (v_replace_ids || v_tombstoned_ids)
    returning m.app_user_id
  )
  select coalesce(array_agg(distinct r.app_user_id) filter (where r.app_user_id is not null), '{}')
  into v_previous_members
  from removed r;

  insert into public.league_members (league_id, external_user_id, display_name, role, app_user_id)
  select r.league_id, m."externalUserId", m."displayName", m.role, m."appUserId"
  from unnest(v_replace_ids, v_replace_members) as r(league_id, members)
  cross join lateral jsonb_to_recordset(r.members)
    as m("externalUserId" text, "displayName" text, role text, "appUserId" uuid);

  update public.league_sync_deliveries d
  set upserted = v_upserted, unchanged = v_unchanged, stale = v_stale, deleted = v_deleted
  where d.id = v_delivery;

  return jsonb_build_object('upserted', v_upserted, 'unchanged', v_unchanged, 'stale', v_stale, 'deleted', v_deleted,
    'previousMemberUserIds', to_jsonb(v_previous_members));
end
$$;
revoke all on function public.apply_leagues_sync(text,timestamp with time zone,jsonb,jsonb,text) from public, anon, authenticated;
grant execute on function public.apply_leagues_sync(text,timestamp with time zone,jsonb,jsonb,text) to service_role;

-- Hardening: grants that Supabase's default privileges hand out, and what deleting a
-- user removes.
create or replace function public.leagues_forget_user(p_user_id uuid)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_members integer;
begin
  -- The account first, as a leagues delivery marks accounts before it touches members
  -- (public.apply_leagues_sync): in the other order the two waited for each other.
  perform public.account_changed(array[p_user_id]);
  update public.league_members set app_user_id = null where app_user_id = p_user_id;
  get diagnostics v_members = row_count;
  return jsonb_build_object('leagueMembersUnlinked', v_members);
end;
$$;
revoke all on function public.leagues_forget_user(uuid) from public, anon, authenticated;
grant execute on function public.leagues_forget_user(uuid) to service_role;
