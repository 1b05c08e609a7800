-- Several deliveries' events in one call, each committed on its own.
--
-- When a server already has its billing calls in flight (two at most), the billing webhooks that
-- arrive meanwhile wait; lib/db/gathered-calls.ts then sends the waiting events together, as one
-- call of this procedure instead of one call each. Each event runs public.record_billing_event exactly as a call
-- of its own would, in a transaction of its own: it commits before the next one starts, so no lock
-- of one event is held while another runs (no deadlock between two gathered calls, none with the
-- maintenance), and a refused event refuses only itself. Per event, Postgres does the same work as
-- before, less the statement around it: ~0.23 ms of backend CPU per call whatever it applies, which
-- ten events then share (docs/benchmarks.md, "Deliveries gathered into one call").
--
-- p_calls is a JSON array of record_billing_event's named arguments ({"p_body": ..., "p_plan": ...,
-- "p_sync_after": ..., "p_content_digest": ...}). p_answers comes back in the same order: for each
-- event {"result": <record_billing_event's answer>} or {"error": {"sqlstate", "message", "detail"}},
-- which the caller turns into the DbError a call of its own would have raised, or {"skipped": true}
-- when the call's time budget ran out before the event began (the caller then sends it alone).
--
-- A procedure that commits may carry no `set search_path` and may not be security definer (Postgres
-- refuses transaction control in either), so this one names the schema of everything it uses
-- (operators too) and runs with its caller's rights: it is executable by service_role alone, like
-- the function it calls, which keeps its own `search_path = ''` and definer rights. The lock timeout
-- the service sets per call (lib/db/sql-call.ts) comes as p_lock_timeout_ms and is set here per
-- event, as each commit ends it (the embedded database, with one connection, passes none).
-- An exception block per event is a savepoint; a transaction cannot end inside one, so the commit
-- follows the block.

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
    begin
      if p_lock_timeout_ms is not null then
        perform pg_catalog.set_config('lock_timeout', pg_catalog.format('%sms', p_lock_timeout_ms), true);
      end if;
      v_answer := pg_catalog.jsonb_build_object('result', public.record_billing_event(
        p_body => v_call operator(pg_catalog.->) 'p_body',
        p_plan => v_call operator(pg_catalog.->) 'p_plan',
        p_sync_after => coalesce(v_call operator(pg_catalog.->>) 'p_sync_after', 'none'),
        p_content_digest => v_call operator(pg_catalog.->>) 'p_content_digest'));
    exception when others then
      get stacked diagnostics v_state = returned_sqlstate, v_message = message_text, v_detail = pg_exception_detail;
      v_answer := pg_catalog.jsonb_build_object('error',
        pg_catalog.jsonb_build_object('sqlstate', v_state, 'message', v_message,
          'detail', case when v_detail operator(pg_catalog.=) '' then null else v_detail end));
    end;
    p_answers := p_answers operator(pg_catalog.||) pg_catalog.jsonb_build_array(v_answer);
    commit;
  end loop;
end;
$$;

revoke all on procedure public.record_billing_events(jsonb, integer, integer, jsonb) from public, anon, authenticated;
grant execute on procedure public.record_billing_events(jsonb, integer, integer, jsonb) to service_role;
