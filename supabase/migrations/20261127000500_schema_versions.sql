-- The migrations this database has applied, by the one ledger (the Supabase CLI's own,
-- supabase_migrations.schema_migrations, which `supabase db push` and `npm run migrate` both write).
-- A deployed instance never migrates: it asks this before it serves, and answers 503 until the
-- database has every migration of its code. Through the Data API (Supabase mode) this function is
-- the only way to read the ledger, whose schema the API does not expose.
create or replace function public.schema_versions()
returns text[]
language sql
stable
security definer
set search_path = ''
as $$
  select coalesce(array_agg(version order by version), '{}') from supabase_migrations.schema_migrations
$$;

revoke all on function public.schema_versions() from public, anon, authenticated;
grant execute on function public.schema_versions() to service_role;
