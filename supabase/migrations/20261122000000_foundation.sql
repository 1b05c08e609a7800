-- Foundation: what every domain migration builds on.
--
-- Conventions for every SQL function in this folder:
--   * `security definer` + `set search_path = ''` so it sees exactly the objects it names;
--   * executable only by service_role (and the owner), never by anon or authenticated, or a
--     signed-in user could skip the checks done in Next.js by calling it through the Data API;
--   * domain errors raised as `raise exception '<problem_code>' using errcode = 'PT<http status>'`,
--     which PostgREST maps to that status and the pg/PGlite adapters read from the SQLSTATE.

-- GET /api/health: one round trip that proves the database answers and the schema is in place.
create or replace function public.health_check()
returns jsonb
language sql
stable
security definer
set search_path = ''
as $$
  select jsonb_build_object('ok', true, 'now', now())
$$;

revoke all on function public.health_check() from public, anon, authenticated;
grant execute on function public.health_check() to service_role;
