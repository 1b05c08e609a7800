-- A duplicate's 200 only once the event it repeats is on disk.
--
-- A gathered call commits each of its events without waiting for the flush and flushes once at its
-- end (20261127007000_billing_gathered_events_one_flush.sql). A delivery of the same event id that
-- arrives meanwhile, alone, waits for the first one's commit, finds the id taken and answers 200
-- as a duplicate. That call wrote nothing, so its commit flushed nothing: a crash of the database
-- in that moment could lose the event while its sender had a 200 for it (the first delivery's
-- answer lost with the crash). Now a call that finds its event a duplicate writes an empty logical
-- decoding message, so its commit flushes the log through the first one's commit before it
-- answers. (A duplicate found by its content digest already wrote: its `on conflict do update`
-- locks the row.) Everything else in record_billing_event is as in 20261127000100_billing_log_bounds.sql.

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
  if (v_result->>'duplicate')::boolean or p_plan->>'ignoredReason' is not null then
    return v_result || jsonb_build_object('syncIds', '[]'::jsonb);
  end if;
  v_owner := v_result->>'ownerId';
  if coalesce((v_result->>'beforeHistory')::boolean, false) then
    if p_sync_after <> 'none' then
      v_sync := public.billing_mark_sync(array[v_owner], 'before_history');
    end if;
  elsif p_sync_after = 'all' or (p_sync_after = 'gaps' and (p_plan->>'syncReason' is not null or (v_result->>'newSource')::boolean)) then
    v_sync := public.billing_mark_sync(
      case when p_plan->>'syncReason' = 'transfer'
           then array(select jsonb_array_elements_text(p_plan->'movedIds')) || v_owner
           else array[v_owner] end,
      coalesce(p_plan->>'syncReason', case when p_sync_after = 'all' then 'event' else 'new_source' end));
  elsif coalesce((v_result->>'afterSnapshot')::boolean, false) and p_sync_after <> 'none' then
    v_sync := public.billing_mark_sync(array[v_owner], 'after_snapshot');
  end if;
  return v_result - 'groupId' - 'newSource' - 'beforeHistory' - 'afterSnapshot' || jsonb_build_object('syncIds', to_jsonb(v_sync));
end;
$$;
