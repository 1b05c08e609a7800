/**
 * What a Supabase database already has and a plain Postgres (or PGlite) does not: the API roles and
 * the `auth` schema with `auth.users` and `auth.uid()`. Each piece is created only where it is
 * missing, checked in the catalogs first, so running this against Supabase itself (DATABASE_URL
 * pointing at its pooler) only reads: it never needs rights on Supabase's own `auth` schema.
 */
export const BOOTSTRAP_SQL = /* sql */ `
do $$
begin
  if not exists (select 1 from pg_roles where rolname = 'anon') then
    create role anon nologin noinherit;
  end if;
  if not exists (select 1 from pg_roles where rolname = 'authenticated') then
    create role authenticated nologin noinherit;
  end if;
  if not exists (select 1 from pg_roles where rolname = 'service_role') then
    create role service_role nologin noinherit bypassrls;
  end if;

  if not exists (select 1 from pg_namespace where nspname = 'auth') then
    create schema auth;
  end if;

  if to_regclass('auth.users') is null then
    create table auth.users (
      id uuid primary key,
      email text,
      is_anonymous boolean not null default false,
      created_at timestamptz not null default now()
    );
  end if;

  if not exists (
    select 1 from pg_proc p join pg_namespace n on n.oid = p.pronamespace
    where n.nspname = 'auth' and p.proname = 'uid'
  ) then
    execute $fn$
      create function auth.uid() returns uuid language sql stable as
      'select nullif(current_setting(''request.jwt.claim.sub'', true), '''')::uuid'
    $fn$;
  end if;
end
$$;
`;
