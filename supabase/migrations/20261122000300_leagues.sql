-- Leagues sync (issue 5): league snapshots pushed by a sync worker to
-- POST /api/webhooks/leagues-sync, and the read side for GET /api/me.
--
-- Rules, applied by public.apply_leagues_sync under row locks:
--   * a league is keyed by (source, external_id); a snapshot replaces the league and its members;
--   * newest wins: each league row has a version, the time of the latest event applied to it
--     (greatest(updated_at, deleted_at)). An older event is `stale`, an equal one `unchanged`;
--   * a deletion is a tombstone (deleted_at) that keeps its time, so a snapshot older than the
--     deletion cannot bring the league back and a newer one does. On a tie the deletion wins;
--   * a delivery is all or nothing (one function call = one transaction), and a repeated delivery
--     id (per source) answers the first delivery's counts without applying anything again.

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

create index league_members_app_user_id_idx on public.league_members (app_user_id) where app_user_id is not null;

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

alter table public.leagues enable row level security;
alter table public.league_members enable row level security;
alter table public.league_sync_deliveries enable row level security;
revoke all on table public.leagues, public.league_members, public.league_sync_deliveries from public, anon, authenticated;

-- POST /api/webhooks/leagues-sync: apply one delivery. p_leagues and p_deleted are the validated
-- `leagues` and `deleted` arrays of the request body (camelCase keys). Returns
-- {upserted, unchanged, stale, deleted} and, for a repeated delivery id, the first delivery's
-- counts with duplicate = true.
--
-- Concurrency: every league row is locked (select ... for update, or created by this transaction)
-- before it is compared, so two deliveries for the same league serialise and the second compares
-- against what the first stored. Leagues are visited in one fixed order (external_id, "C"
-- collation) by every delivery, so two deliveries sharing several leagues wait instead of deadlocking.
create or replace function public.apply_leagues_sync(
  p_source text,
  p_sent_at timestamptz,
  p_leagues jsonb default '[]'::jsonb,
  p_deleted jsonb default '[]'::jsonb,
  p_delivery_id text default null
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
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
        update public.leagues l
        set name = v_item.doc ->> 'name',
            sport = v_item.doc ->> 'sport',
            season = v_item.doc ->> 'season',
            status = v_item.doc ->> 'status',
            settings = coalesce(v_item.doc -> 'settings', '{}'::jsonb),
            updated_at = v_item.at,
            deleted_at = null,
            synced_at = now()
        where l.id = v_row.id;
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
        update public.leagues l set deleted_at = v_item.at, synced_at = now() where l.id = v_row.id;
        v_deleted := v_deleted + 1;
        v_tombstoned_ids := array_append(v_tombstoned_ids, v_row.id);
      end if;
    end if;
  end loop;

  -- Members: a snapshot's list replaces the stored one; a deleted league keeps no members.
  delete from public.league_members m
  where m.league_id = any (v_replace_ids || v_tombstoned_ids);

  insert into public.league_members (league_id, external_user_id, display_name, role, app_user_id)
  select r.league_id, m."externalUserId", m."displayName", m.role, m."appUserId"
  from unnest(v_replace_ids, v_replace_members) as r(league_id, members)
  cross join lateral jsonb_to_recordset(r.members)
    as m("externalUserId" text, "displayName" text, role text, "appUserId" uuid);

  update public.league_sync_deliveries d
  set upserted = v_upserted, unchanged = v_unchanged, stale = v_stale, deleted = v_deleted
  where d.id = v_delivery;

  return jsonb_build_object('upserted', v_upserted, 'unchanged', v_unchanged, 'stale', v_stale, 'deleted', v_deleted);
end
$$;

revoke all on function public.apply_leagues_sync(text, timestamptz, jsonb, jsonb, text) from public, anon, authenticated;
grant execute on function public.apply_leagues_sync(text, timestamptz, jsonb, jsonb, text) to service_role;

-- GET /api/me: the caller's leagues (not deleted), with the caller's role in each, newest first.
-- A user linked to two members of one league gets the league once, as commissioner if either is.
-- Keys are those of the API; updatedAt is UTC with microseconds (lib/leagues trims the zeros).
create or replace function public.account_leagues(p_user_id uuid)
returns jsonb
language sql
stable
security definer
set search_path = ''
as $$
  select coalesce(
    jsonb_agg(
      jsonb_build_object(
        'source', l.source,
        'externalId', l.external_id,
        'name', l.name,
        'sport', l.sport,
        'season', l.season,
        'status', l.status,
        'role', r.role,
        'updatedAt', to_char(l.updated_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
      )
      order by l.updated_at desc, l.source, l.external_id
    ),
    '[]'::jsonb
  )
  from (
    select m.league_id,
           case when bool_or(m.role = 'commissioner') then 'commissioner' else 'member' end as role
    from public.league_members m
    where m.app_user_id = p_user_id
    group by m.league_id
  ) r
  join public.leagues l on l.id = r.league_id
  where l.deleted_at is null
$$;

revoke all on function public.account_leagues(uuid) from public, anon, authenticated;
grant execute on function public.account_leagues(uuid) to service_role;
