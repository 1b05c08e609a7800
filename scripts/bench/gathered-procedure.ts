// The procedure behind the gathered calls the service had (docs/decisions/gathered-calls.md), for
// the benches that compare them with one call per event (billing-burst.ts, call-batching.ts).

/**
 * public.record_billing_events as the service's schema had it (its last definition:
 * supabase/migrations/20261127007000_billing_gathered_events_one_flush.sql), under another name,
 * so the bench runs whether or not the schema still holds it.
 */
export const GATHERED_PROCEDURE = `create procedure public.bench_record_billing_events(
  p_calls jsonb, p_lock_timeout_ms integer default null, p_time_budget_ms integer default null, inout p_answers jsonb default null)
language plpgsql as $$
declare
  v_count integer := pg_catalog.jsonb_array_length(p_calls);
  v_started timestamptz := pg_catalog.clock_timestamp();
  v_budget interval := pg_catalog.make_interval(secs => p_time_budget_ms operator(pg_catalog./) 1000.0);
  v_call jsonb; v_answer jsonb; v_state text; v_message text; v_detail text; v_stored boolean := false;
begin
  p_answers := '[]';
  for v_index in 0 .. v_count operator(pg_catalog.-) 1 loop
    v_call := p_calls operator(pg_catalog.->) v_index;
    if v_index operator(pg_catalog.>) 0 and v_budget is not null
       and pg_catalog.clock_timestamp() operator(pg_catalog.-) v_started operator(pg_catalog.>=) v_budget then
      p_answers := p_answers operator(pg_catalog.||) '[{"skipped": true}]'::jsonb;
      continue;
    end if;
    perform pg_catalog.set_config('synchronous_commit', 'off', true);
    begin
      if p_lock_timeout_ms is not null then
        perform pg_catalog.set_config('lock_timeout', pg_catalog.format('%sms', p_lock_timeout_ms), true);
      end if;
      v_answer := pg_catalog.jsonb_build_object('result', public.record_billing_event(
        p_body => v_call operator(pg_catalog.->) 'p_body', p_plan => v_call operator(pg_catalog.->) 'p_plan',
        p_sync_after => coalesce(v_call operator(pg_catalog.->>) 'p_sync_after', 'none'),
        p_content_digest => v_call operator(pg_catalog.->>) 'p_content_digest'));
      v_stored := true;
    exception when others then
      get stacked diagnostics v_state = returned_sqlstate, v_message = message_text, v_detail = pg_exception_detail;
      v_answer := pg_catalog.jsonb_build_object('error', pg_catalog.jsonb_build_object('sqlstate', v_state, 'message', v_message));
    end;
    p_answers := p_answers operator(pg_catalog.||) pg_catalog.jsonb_build_array(v_answer);
    commit;
  end loop;
  if v_stored then
    perform pg_catalog.pg_logical_emit_message(true, 'record_billing_events', '');
    commit;
  end if;
end $$`;

/** Its call: the events' named arguments as a JSON array, the lock timeout (ms), the time budget (ms). */
export const GATHERED_CALL = 'call public.bench_record_billing_events(p_calls => $1, p_lock_timeout_ms => $2, p_time_budget_ms => $3)';
