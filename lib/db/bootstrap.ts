/**
 * What a Supabase database already has and a plain Postgres (or PGlite) does not: the API roles,
 * the role Supabase Auth runs its hooks as (`supabase_auth_admin`), and the `auth` schema with
 * `auth.users` and `auth.uid()` (Supabase's definition: the `sub` of the request's JWT claims, read
 * from `request.jwt.claim.sub` or `request.jwt.claims` as PostgREST and Realtime set them). Each piece
 * is created only where it is missing, checked in the catalogs first, so running this against
 * Supabase itself (DATABASE_URL pointing at its pooler) only reads: it never needs rights on
 * Supabase's own `auth` schema. Supabase's `realtime` schema is not made here: without it the
 * migrations apply and broadcast nothing (embedded and plain Postgres).
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
  if not exists (select 1 from pg_roles where rolname = 'supabase_auth_admin') then
    create role supabase_auth_admin nologin noinherit;
  end if;

  if not exists (select 1 from pg_namespace where nspname = 'auth') then
    create schema auth;
  end if;
  -- As on Supabase: the API roles call auth.uid() (row-level security policies do).
  if not has_schema_privilege('authenticated', 'auth', 'usage') then
    grant usage on schema auth to anon, authenticated, service_role;
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
      create function auth.uid() returns uuid language sql stable as $body$
        select coalesce(
          nullif(current_setting('request.jwt.claim.sub', true), ''),
          (nullif(current_setting('request.jwt.claims', true), '')::jsonb ->> 'sub')
        )::uuid
      $body$
    $fn$;
  end if;
end
$$;
`;
