-- A leagues delivery also answers which app users were members of the leagues it replaced or
-- deleted, so the service can tell them their leagues changed: a member a snapshot leaves out, or
-- of a league deleted, is not named in the delivery.
-- apply_leagues_sync as 20261122000300_leagues.sql defined it, with that one addition.

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

revoke all on function public.apply_leagues_sync(text, timestamptz, jsonb, jsonb, text) from public, anon, authenticated;
grant execute on function public.apply_leagues_sync(text, timestamptz, jsonb, jsonb, text) to service_role;
