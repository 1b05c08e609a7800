-- The billing webhook's small SQL functions, planned once per connection on every Postgres.
--
-- Postgres 18 keeps the plans of a LANGUAGE sql function's statements in its plan cache; Postgres 17
-- and 15 (what Supabase runs: https://github.com/supabase/postgres, "Primary Features") parse and
-- plan them again on every call that is not inlined, and a function with its own `set search_path`
-- never is. On Postgres 17, `sql-profile.ts` found an in-order renewal at 0.57 ms of Postgres CPU
-- against 0.45 on 18: the event's INSERT (public.billing_log_event) planned on every call (0.105 ms
-- against 0.046), and the sort and source keys likewise. PL/pgSQL keeps a plan per statement for the
-- connection's life on every version, so each of these is now PL/pgSQL: the same statement or
-- expression, the same volatility, the same `search_path`. What they return is unchanged (the whole
-- test suite, run on 17 and 18). Measured: docs/benchmarks.md.

create or replace function public.billing_log_event(p_body jsonb, p_plan jsonb, p_received timestamptz, p_outcome text, p_owner text, p_ignored boolean)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  insert into public.billing_events (event_id, type, app_user_id, event_at, received_at, outcome, environment, owner_id, moved_ids, body, plan, subject_id, sort_rank)
  values (p_plan->>'eventId', coalesce(p_plan->>'type', ''), p_plan->>'appUserId', (p_plan->>'eventAt')::timestamptz, p_received,
          p_outcome, p_plan->>'environment', p_owner,
          case when p_ignored then '{}'::text[] else array(select jsonb_array_elements_text(coalesce(p_plan->'movedIds', '[]'::jsonb))) end,
          p_body, p_plan, case when not p_ignored then p_plan->>'subjectId' end, coalesce((p_plan->>'rank')::smallint, 1));
end;
$$;

create or replace function public.billing_sort_key(p_event_at timestamptz, p_rank smallint, p_event_id text)
returns text
language plpgsql
stable
set search_path = ''
as $$
begin
  return to_char(p_event_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') || ':' || coalesce(p_rank, 1)::text || ':' || p_event_id;
end;
$$;

create or replace function public.billing_source_key(p_environment text, p_store text, p_product_id text, p_original_transaction_id text, p_transaction_id text)
returns text
language plpgsql
immutable
set search_path = ''
as $$
begin
  return md5(jsonb_build_array(
    upper(coalesce(p_environment, 'PRODUCTION')),
    upper(coalesce(p_store, '')),
    p_product_id,
    case when p_product_id is null then coalesce(p_original_transaction_id, p_transaction_id) end
  )::text);
end;
$$;

create or replace function public.billing_key_time(p_key text)
returns timestamptz
language plpgsql
stable
set search_path = ''
as $$
begin
  return case when p_key ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}:'
              then (left(p_key, 26) || '+00')::timestamptz end;
end;
$$;

create or replace function public.billing_key_event(p_key text)
returns text
language plpgsql
immutable
set search_path = ''
as $$
begin
  return substring(p_key from '^[^:]*:[^:]*:[^:]*:[^:]*:(.*)$');
end;
$$;

create or replace function public.billing_tail_bound()
returns integer
language plpgsql
immutable
set search_path = ''
as $$
begin
  return 200;
end;
$$;

create or replace function public.billing_checkpoint_lag()
returns interval
language plpgsql
immutable
set search_path = ''
as $$
begin
  return interval '3 days';
end;
$$;

-- (A checkpoint's copy of one member's rows: 20261128000200_billing_in_order_checkpoint.sql.)
create or replace function public.billing_checkpoint_rows(p_app_user_id text)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return (
    select coalesce(jsonb_agg(to_jsonb(e) - 'grants_until' order by e.entitlement_id collate "C", e.source_key), '[]'::jsonb)
    from public.entitlements e where e.app_user_id = p_app_user_id);
end;
$$;
