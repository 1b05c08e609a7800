-- Several deliveries' events in one call, each committed on its own.
--
-- When every database connection of a server is busy, the billing webhooks that arrive meanwhile
-- wait for one; lib/db/gathered-calls.ts then sends the waiting events together, as one call of this
-- procedure instead of one call each. Each event runs public.record_billing_event exactly as a call
-- of its own would, in a transaction of its own: it commits before the next one starts, so no lock
-- of one event is held while another runs (no deadlock between two gathered calls, none with the
-- maintenance), and a refused event refuses only itself. Per event, Postgres does the same work as
-- before, less the statement around it: ~0.23 ms of backend CPU per call whatever it applies, which
-- ten events then share (docs/benchmarks.md, "Deliveries gathered into one call").
--
-- p_calls is a JSON array of record_billing_event's named arguments ({"p_body": ..., "p_plan": ...,
-- "p_sync_after": ..., "p_content_digest": ...}). p_answers comes back in the same order: for each
-- event {"result": <record_billing_event's answer>} or {"error": {"sqlstate", "message", "detail"}},
-- which the caller turns into the DbError a call of its own would have raised.
--
-- A procedure that commits may carry no `set search_path` and may not be security definer (Postgres
-- refuses transaction control in either), so this one names the schema of everything it uses
-- (operators too) and runs with its caller's rights: it is executable by service_role alone, like
-- the function it calls, which keeps its own `search_path = ''` and definer rights. The lock timeout
-- the service sets per call (lib/db/sql-call.ts) comes as p_lock_timeout_ms and is set here per
-- event, as each commit ends it (the embedded database, with one connection, passes none).
-- An exception block per event is a savepoint; a transaction cannot end inside one, so the commit
-- follows the block.

create or replace procedure public.record_billing_events(p_calls jsonb, p_lock_timeout_ms integer default null, inout p_answers jsonb default null)
language plpgsql
as $$
declare
  v_count integer := pg_catalog.jsonb_array_length(p_calls);
  v_call jsonb;
  v_answer jsonb;
  v_state text;
  v_message text;
  v_detail text;
begin
  p_answers := '[]';
  for v_index in 0 .. v_count operator(pg_catalog.-) 1 loop
    v_call := p_calls operator(pg_catalog.->) v_index;
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
        pg_catalog.jsonb_build_object('sqlstate', v_state, 'message', v_message, 'detail', nullif(v_detail, '')));
    end;
    p_answers := p_answers operator(pg_catalog.||) pg_catalog.jsonb_build_array(v_answer);
    commit;
  end loop;
end;
$$;

revoke all on procedure public.record_billing_events(jsonb, integer, jsonb) from public, anon, authenticated;
grant execute on procedure public.record_billing_events(jsonb, integer, jsonb) to service_role;
