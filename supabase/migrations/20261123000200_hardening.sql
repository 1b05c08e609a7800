-- Hardening (issue 12): grants that Supabase's default privileges hand out, and what deleting a
-- user removes.

-- 1. Grants.
-- On Supabase, `alter default privileges in schema public grant all on tables, functions,
-- sequences to anon, authenticated` gives every new object of the migrating role to the API roles.
-- Each migration revokes that for its tables and functions by name; two kinds of object slipped
-- through: the migration runner's own bookkeeping table (every right, TRUNCATE included) and the
-- sequences behind identity columns (usable through the Data API by anyone with the anon key).
-- Nothing here is meant for anon or authenticated: the service reaches its data only through the
-- functions below, as service_role.
do $$
begin
  -- Present when the service's own runner migrated this database (embedded and Postgres modes);
  -- `supabase db push` keeps its records in supabase_migrations instead.
  if to_regclass('public.schema_migrations') is not null then
    revoke all on table public.schema_migrations from public, anon, authenticated;
  end if;
end
$$;
revoke all on all sequences in schema public from public, anon, authenticated;

-- 2. Deleting a user.
-- When a row leaves auth.users (account deletion in Supabase Auth, which app stores require), the
-- service forgets that user, per domain:
--   wallets:  their wallet links and sign-in challenges are deleted (a link is personal data and
--             proves nothing once its owner is gone; the wallet can be linked again by anyone
--             who proves it);
--   leagues:  league_members rows stay (they are the league's roster as the sync source sent it),
--             but app_user_id is set to null: the roster no longer says which of its members was
--             this account, and GET /api/me has no one to show it to;
--   billing:  public.billing_forget_user(uuid), when that function exists (the billing module
--             owns its tables and defines it: see the README's "Deleting a user").
-- The trigger keeps the name the wallets migration gave it (wallets_delete_user_rows), so this
-- migration never needs more than TRIGGER on auth.users (on Supabase that table belongs to the
-- Auth server's role; dropping its triggers would need ownership).

create or replace function public.wallets_forget_user(p_user_id uuid)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_links integer;
  v_challenges integer;
begin
  delete from public.wallet_links where user_id = p_user_id;
  get diagnostics v_links = row_count;
  delete from public.wallet_challenges where user_id = p_user_id;
  get diagnostics v_challenges = row_count;
  return jsonb_build_object('walletLinks', v_links, 'walletChallenges', v_challenges);
end;
$$;

create or replace function public.leagues_forget_user(p_user_id uuid)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_members integer;
begin
  update public.league_members set app_user_id = null where app_user_id = p_user_id;
  get diagnostics v_members = row_count;
  return jsonb_build_object('leagueMembersUnlinked', v_members);
end;
$$;

-- Forget one user in every domain, in one transaction. Called by the trigger below; an operator
-- can also call it for a user who never had an auth.users row (dev tokens, self-hosted Auth).
-- Idempotent: forgetting a forgotten user changes nothing. Returns what each domain did.
create or replace function public.forget_user(p_user_id uuid)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_result jsonb;
begin
  if p_user_id is null then
    raise exception 'invalid_request' using errcode = 'PT400', detail = 'A user id is required.';
  end if;
  v_result := public.wallets_forget_user(p_user_id) || public.leagues_forget_user(p_user_id);
  -- The billing module's part, looked up by name so its migrations can add or replace it in any order.
  if to_regprocedure('public.billing_forget_user(uuid)') is not null then
    execute 'select public.billing_forget_user($1)' using p_user_id;
    v_result := v_result || jsonb_build_object('billing', true);
  end if;
  return v_result;
end;
$$;

-- The trigger function of `wallets_delete_user_rows` (after delete on auth.users), now for every domain.
create or replace function public.wallets_delete_user_rows()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  perform public.forget_user(old.id);
  return old;
end;
$$;

revoke all on function public.wallets_forget_user(uuid) from public, anon, authenticated;
revoke all on function public.leagues_forget_user(uuid) from public, anon, authenticated;
revoke all on function public.forget_user(uuid) from public, anon, authenticated;
revoke all on function public.wallets_delete_user_rows() from public, anon, authenticated;
grant execute on function public.wallets_forget_user(uuid) to service_role;
grant execute on function public.leagues_forget_user(uuid) to service_role;
grant execute on function public.forget_user(uuid) to service_role;
grant execute on function public.wallets_delete_user_rows() to service_role;
