-- Smart-contract wallets (issue 13): ERC-1271 and ERC-6492 signatures are verified on the chain
-- the message names, through its RPC, before the link is made (lib/wallets/contract-signatures.ts).
--
--   * A link records what proved it (`kind`): 'eoa' (the wallet's own key signed; every link made
--     before this migration, and every Solana link), 'erc1271' (a deployed contract accepted the
--     signature) or 'erc6492' (a contract not yet deployed accepted it, through the deployment the
--     signature carries, simulated in an eth_call).
--   * A challenge counts the on-chain checks spent on it (`contract_checks`). An invalid signature
--     and an RPC that does not answer consume nothing, so the same challenge may be tried again; the
--     count bounds how many RPC calls one challenge can cost (5), as the challenge rate limit
--     bounds how many challenges a user gets.
--
-- POST /api/wallet-link for a contract wallet is then two calls: wallet_start_contract_check
-- (every check wallet_link makes that needs no signature, plus the count) before asking the chain,
-- and wallet_link with the kind after. An ordinary wallet's link stays one call, of wallet_link.

alter table public.wallet_links
  add column kind text not null default 'eoa',
  add constraint wallet_links_kind check (kind in ('eoa', 'erc1271', 'erc6492') and (chain = 'evm' or kind = 'eoa'));

alter table public.wallet_challenges
  add column contract_checks integer not null default 0;

-- The public shape of a link, now with `kind`.
create or replace function public.wallet_link_json(l public.wallet_links)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_strip_nulls(jsonb_build_object(
    'id', l.id,
    'chain', l.chain,
    'address', l.address,
    'chainId', l.chain_id,
    'cluster', l.cluster,
    'kind', l.kind,
    'createdAt', to_char(l.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
$$;

-- Before a contract wallet's signature is sent to its chain: is there anything to link? The same
-- refusals, in the same order, as wallet_link below (which stays the authority: it checks again
-- under its locks when the link is made), then one more check counted on the challenge. Nothing
-- is consumed; the count is kept even when the chain then says no or does not answer.
--   more than 5 checks of this challenge -> 400 challenge_expired (ask for a new one)
create or replace function public.wallet_start_contract_check(
  p_user_id uuid,
  p_challenge_id uuid,
  p_message text,
  p_chain text,
  p_address_key text
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_challenge public.wallet_challenges;
  v_link public.wallet_links;
  v_count integer;
begin
  select * into v_challenge from public.wallet_challenges where id = p_challenge_id for update;
  if not found or v_challenge.user_id <> p_user_id then
    raise exception 'challenge_not_found' using errcode = 'PT400',
      detail = 'No challenge with this Request ID was issued to you; request a new one from POST /api/wallet-link/challenge.';
  end if;
  if v_challenge.message <> p_message then
    raise exception 'invalid_message' using errcode = 'PT422',
      detail = 'The message is not the one issued for this challenge; sign the challenge text exactly as issued.';
  end if;
  if v_challenge.chain <> p_chain or v_challenge.address_key <> p_address_key then
    raise exception 'address_mismatch' using errcode = 'PT422',
      detail = 'The wallet in the payload is not the wallet this challenge was issued for.';
  end if;
  if v_challenge.expires_at <= now() then
    raise exception 'challenge_expired' using errcode = 'PT400',
      detail = 'This challenge has expired; request a new one and sign it within 10 minutes.';
  end if;

  select * into v_link from public.wallet_links l
  where l.chain = v_challenge.chain and l.address_key = v_challenge.address_key;
  if v_challenge.used_at is not null and not (found and v_link.user_id = p_user_id) then
    raise exception 'challenge_already_used' using errcode = 'PT409',
      detail = 'This challenge has already been used; request a new one.';
  end if;
  if v_challenge.used_at is null and v_challenge.retired_at is not null then
    raise exception 'challenge_expired' using errcode = 'PT400',
      detail = 'This challenge was replaced by newer ones (at most 5 are open at a time); request a new one.';
  end if;
  if found and v_link.user_id <> p_user_id then
    raise exception 'wallet_already_linked' using errcode = 'PT409',
      detail = 'This wallet is already linked to another account.';
  end if;
  if not found then
    select count(*) into v_count from public.wallet_links l where l.user_id = p_user_id;
    if v_count >= 10 then
      raise exception 'too_many_wallets' using errcode = 'PT409',
        detail = 'An account can link at most 10 wallets; unlink one first.';
    end if;
  end if;

  if v_challenge.contract_checks >= 5 then
    raise exception 'challenge_expired' using errcode = 'PT400',
      detail = 'This challenge has been checked on chain 5 times; request a new one.';
  end if;
  update public.wallet_challenges set contract_checks = contract_checks + 1 where id = v_challenge.id;
  return jsonb_build_object('contractChecks', v_challenge.contract_checks + 1);
end;
$$;

-- wallet_link, now told what proved the wallet (p_kind). Everything else as in
-- 20261122000200_wallets.sql, whose comment lists the outcomes.
drop function public.wallet_link(uuid, uuid, text, text, text);

create function public.wallet_link(
  p_user_id uuid,
  p_challenge_id uuid,
  p_message text,
  p_chain text,
  p_address_key text,
  p_kind text
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_challenge public.wallet_challenges;
  v_link public.wallet_links;
  v_count integer;
begin
  perform pg_advisory_xact_lock(4361, hashtext(p_user_id::text));

  select * into v_challenge from public.wallet_challenges where id = p_challenge_id for update;
  if not found or v_challenge.user_id <> p_user_id then
    raise exception 'challenge_not_found' using errcode = 'PT400',
      detail = 'No challenge with this Request ID was issued to you; request a new one from POST /api/wallet-link/challenge.';
  end if;
  if v_challenge.message <> p_message then
    raise exception 'invalid_message' using errcode = 'PT422',
      detail = 'The message is not the one issued for this challenge; sign the challenge text exactly as issued.';
  end if;
  if v_challenge.chain <> p_chain or v_challenge.address_key <> p_address_key then
    raise exception 'address_mismatch' using errcode = 'PT422',
      detail = 'The wallet in the payload is not the wallet this challenge was issued for.';
  end if;

  if v_challenge.expires_at <= now() then
    raise exception 'challenge_expired' using errcode = 'PT400',
      detail = 'This challenge has expired; request a new one and sign it within 10 minutes.';
  end if;
  if v_challenge.used_at is not null then
    select * into v_link from public.wallet_links l
    where l.user_id = p_user_id and l.chain = v_challenge.chain and l.address_key = v_challenge.address_key;
    if found then
      return jsonb_build_object('link', public.wallet_link_json(v_link), 'alreadyLinked', true);
    end if;
    raise exception 'challenge_already_used' using errcode = 'PT409',
      detail = 'This challenge has already been used; request a new one.';
  end if;
  if v_challenge.retired_at is not null then
    raise exception 'challenge_expired' using errcode = 'PT400',
      detail = 'This challenge was replaced by newer ones (at most 5 are open at a time); request a new one.';
  end if;

  select * into v_link from public.wallet_links l
  where l.chain = v_challenge.chain and l.address_key = v_challenge.address_key;
  if found then
    if v_link.user_id <> p_user_id then
      raise exception 'wallet_already_linked' using errcode = 'PT409',
        detail = 'This wallet is already linked to another account.';
    end if;
    update public.wallet_challenges set used_at = now() where id = v_challenge.id;
    return jsonb_build_object('link', public.wallet_link_json(v_link), 'alreadyLinked', true);
  end if;

  select count(*) into v_count from public.wallet_links l where l.user_id = p_user_id;
  if v_count >= 10 then
    raise exception 'too_many_wallets' using errcode = 'PT409',
      detail = 'An account can link at most 10 wallets; unlink one first.';
  end if;

  insert into public.wallet_links (user_id, chain, address, address_key, chain_id, cluster, challenge_id, kind)
  values (p_user_id, v_challenge.chain, v_challenge.address, v_challenge.address_key,
          v_challenge.chain_id, v_challenge.cluster, v_challenge.id, p_kind)
  on conflict (chain, address_key) do nothing
  returning * into v_link;
  if not found then
    -- Another user's request linked this wallet between our check and our insert.
    raise exception 'wallet_already_linked' using errcode = 'PT409',
      detail = 'This wallet is already linked to another account.';
  end if;

  update public.wallet_challenges set used_at = now() where id = v_challenge.id;
  return jsonb_build_object('link', public.wallet_link_json(v_link), 'alreadyLinked', false);
end;
$$;

revoke all on function public.wallet_start_contract_check(uuid, uuid, text, text, text) from public, anon, authenticated;
revoke all on function public.wallet_link(uuid, uuid, text, text, text, text) from public, anon, authenticated;
grant execute on function public.wallet_start_contract_check(uuid, uuid, text, text, text) to service_role;
grant execute on function public.wallet_link(uuid, uuid, text, text, text, text) to service_role;
