-- A contract-wallet check the chain did not answer is not a check (issue 13: an RPC failure or
-- timeout "does NOT consume the challenge, so the user can retry with the same signature").
--
-- wallet_start_contract_check (20261124001300_contract_wallets.sql) counts a check on the challenge
-- before the chain is asked, so that at most 5 chain calls per challenge are in flight or spent
-- (concurrent requests included). Until now the count was kept whatever happened next, so after
-- five 503 chain_unavailable answers the same signature got 400 challenge_expired. From here on the
-- count is of definite answers: the service counts the check as before, and when the chain gave no
-- answer (an RPC error, a non-JSON-RPC answer, a timeout) it gives the check back with the function
-- below, in the same request, before answering 503. A definite "no" (422 invalid_signature: a wrong
-- owner, a reverting contract) stays counted, so the limit still bounds how many signatures one
-- challenge lets a caller try on chain.

-- Give back one check of this caller's challenge: the chain did not answer it. Never below zero,
-- and nothing happens for a challenge that is not the caller's (or no longer exists: retention).
-- Returns the checks still counted, or null when there was no such challenge.
create function public.wallet_refund_contract_check(
  p_user_id uuid,
  p_challenge_id uuid
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_checks integer;
begin
  update public.wallet_challenges
  set contract_checks = greatest(contract_checks - 1, 0)
  where id = p_challenge_id and user_id = p_user_id
  returning contract_checks into v_checks;
  return jsonb_build_object('contractChecks', v_checks);
end;
$$;

revoke all on function public.wallet_refund_contract_check(uuid, uuid) from public, anon, authenticated;
grant execute on function public.wallet_refund_contract_check(uuid, uuid) to service_role;
