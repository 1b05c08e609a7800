-- A gathered call of billing events waits for one WAL flush, not one per event.
--
-- public.record_billing_events (20261127006000_billing_gathered_events.sql) commits each event in a
-- transaction of its own, and each commit waited for its WAL to reach the disk: up to ten flushes
-- one after another in one call, where concurrent calls of their own share theirs (group commit).
-- On a disk whose flush takes a millisecond (a cloud volume) that is ten milliseconds a call.
-- Now each event commits without waiting (synchronous_commit off for its own transaction), and the
-- call ends with one transaction that does: a flush reaches every earlier record too, so when the
-- answers leave, every event they report stored is on disk, as before. A transactional logical
-- message (pg_logical_emit_message, open to every role) is the smallest write that makes a commit
-- flush; a transaction that wrote nothing would not. If the call fails before its end (the
-- connection drops, it is cancelled), the events it committed may be lost in a crash of the
-- database in the moment after; but then every event it carried was answered with an error, and
-- the sender's retry brings each back (stored again, or found a duplicate). Other sessions may see
-- an event before it is on disk, for at most the rest of the call.
-- (PostgreSQL docs, "Asynchronous Commit" and synchronous_commit.)
--
-- Everything else is as before; see the earlier migration for what the procedure does.

create or replace procedure public.record_billing_events(
  p_calls jsonb, p_lock_timeout_ms integer default null, p_time_budget_ms integer default null, inout p_answers jsonb default null)
language plpgsql
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
    -- Past its budget, the call starts no more events (each could wait p_lock_timeout_ms for a
    -- lock): it answers them as skipped, and the caller sends each alone, so the call answers
    -- before its caller stops waiting. The first event always runs.
    if v_index operator(pg_catalog.>) 0 and v_budget is not null
       and pg_catalog.clock_timestamp() operator(pg_catalog.-) v_started operator(pg_catalog.>=) v_budget then
      p_answers := p_answers operator(pg_catalog.||) '[{"skipped": true}]'::jsonb;
      continue;
    end if;
    -- This event's commit does not wait for its flush; the one at the end of the call does.
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
      v_stored := true;
    exception when others then
      get stacked diagnostics v_state = returned_sqlstate, v_message = message_text, v_detail = pg_exception_detail;
      v_answer := pg_catalog.jsonb_build_object('error',
        pg_catalog.jsonb_build_object('sqlstate', v_state, 'message', v_message,
          'detail', case when v_detail operator(pg_catalog.=) '' then null else v_detail end));
    end;
    p_answers := p_answers operator(pg_catalog.||) pg_catalog.jsonb_build_array(v_answer);
    commit;
  end loop;
  -- One flush for the call, at the session's own synchronous_commit: it reaches every event's
  -- commit before it.
  if v_stored then
    perform pg_catalog.pg_logical_emit_message(true, 'record_billing_events', '');
    commit;
  end if;
end;
$$;

revoke all on procedure public.record_billing_events(jsonb, integer, integer, jsonb) from public, anon, authenticated;
grant execute on procedure public.record_billing_events(jsonb, integer, integer, jsonb) to service_role;
