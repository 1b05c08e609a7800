import { BOOTSTRAP_SQL } from '../../lib/db/bootstrap.ts';

/**
 * Supabase Realtime's part of a Supabase database, as its migrations make it (supabase/realtime,
 * lib/realtime/tenants/repo/migrations: the `realtime` schema, `messages` partitioned by day,
 * `topic()`, and `send()` as of 20260605120000_rename_broadcast_send_warning: it adds an `id` to the
 * payload, sets `realtime.topic` for the transaction, inserts the message and turns any failure into
 * a WARNING). Realtime delivers what lands in `realtime.messages` once its transaction commits; a
 * test reads the table instead.
 *
 * Only the tests and the bench make it (before the migrations run, as on Supabase, so the migrations
 * add their policy to it): the service's own bootstrap never does, which is how the embedded and
 * plain Postgres modes run without Realtime.
 */
export const REALTIME_SQL = /* sql */ `
-- The roles first, as a Supabase database has them.
${BOOTSTRAP_SQL}
do $$
begin
  if not exists (select 1 from pg_roles where rolname = 'supabase_realtime_admin') then
    create role supabase_realtime_admin nologin noinherit noreplication;
  end if;
end
$$;

create schema realtime;

create table realtime.messages (
  topic text not null,
  extension text not null,
  payload jsonb,
  event text,
  private boolean default false,
  updated_at timestamp not null default now(),
  inserted_at timestamp not null default now(),
  id uuid not null default gen_random_uuid(),
  binary_payload bytea,
  constraint messages_payload_exclusive check (payload is null or binary_payload is null),
  primary key (id, inserted_at)
) partition by range (inserted_at);
alter table realtime.messages enable row level security;

-- Realtime makes the day partitions as clients connect; here, from yesterday to three days ahead.
do $$
declare
  v_day date;
begin
  for v_day in select generate_series(current_date - 1, current_date + 3, interval '1 day')::date loop
    execute format('create table realtime.%I partition of realtime.messages for values from (%L) to (%L)',
                   'messages_' || to_char(v_day, 'YYYY_MM_DD'), v_day, v_day + 1);
  end loop;
end
$$;

create function realtime.topic() returns text as $$
  select nullif(current_setting('realtime.topic', true), '')::text;
$$ language sql stable;

create function realtime.send(payload jsonb, event text, topic text, private boolean default true) returns void as $$
declare
  generated_id uuid;
  final_payload jsonb;
begin
  begin
    generated_id := gen_random_uuid();
    if payload ? 'id' then
      final_payload := payload;
    else
      final_payload := jsonb_set(payload, '{id}', to_jsonb(generated_id));
    end if;
    execute format('SET LOCAL realtime.topic TO %L', topic);
    insert into realtime.messages (id, payload, event, topic, private, extension)
    values (generated_id, final_payload, event, topic, private, 'broadcast');
  exception
    when others then
      raise warning 'WarnSendingBroadcastMessage: %', sqlerrm;
  end;
end;
$$ language plpgsql;

grant usage on schema realtime to anon, authenticated, service_role;
grant select, insert, update on realtime.messages to anon, authenticated, service_role;
grant execute on all functions in schema realtime to anon, authenticated, service_role;
alter table realtime.messages owner to supabase_realtime_admin;
`;

/**
 * What Supabase grants on everything new in `public` (its default privileges for the role that
 * migrates): every API role gets every right unless a migration takes it away. A database with
 * these shows a missing `revoke` that a plain Postgres would hide.
 */
export const SUPABASE_DEFAULT_PRIVILEGES_SQL = /* sql */ `
alter default privileges in schema public grant all on tables to anon, authenticated, service_role;
alter default privileges in schema public grant all on functions to anon, authenticated, service_role;
alter default privileges in schema public grant all on sequences to anon, authenticated, service_role;
`;
