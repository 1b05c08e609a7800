-- GET /api/me and the account page: everything about one user in ONE call (one round trip).
-- Each part is its domain's own function; this only puts them side by side.

create or replace function public.get_account(p_user_id uuid)
returns jsonb
language sql
stable
security definer
set search_path = ''
as $$
  select jsonb_build_object(
    'wallets', public.account_wallets(p_user_id),
    'entitlements', public.account_entitlements(p_user_id::text),
    'leagues', public.account_leagues(p_user_id)
  )
$$;

revoke all on function public.get_account(uuid) from public, anon, authenticated;
grant execute on function public.get_account(uuid) to service_role;
