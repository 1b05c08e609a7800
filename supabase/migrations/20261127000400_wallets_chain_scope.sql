-- Wallet links scoped to what proved them, and contract-wallet checks bounded per account.
--
-- 1. A smart-contract wallet is linked on its chain only. Until now a link's key was the address
--    alone, whatever proved it: a contract wallet proven on one chain was linked on every chain, so
--    the holder of an account's old owner key (rotated away on chain 1) could link the address with
--    an ERC-6492 signature on a chain where the account was never deployed, and the real owner got
--    409 everywhere. The same address on two chains is two contracts (or one and none), each with
--    its own owners; only a key is the same wallet on every EVM chain. So:
--      * a link proven by the wallet's key (`kind` 'eoa', every Solana link) holds the address on
--        every chain of its family, as before: its scope is the address;
--      * a link proven by a contract (`erc1271`, `erc6492`) holds the address on its chain only:
--        its scope is (address, chain id), the CAIP-10 account id `eip155:<chainId>:<address>`.
--    `contract_chain_id` says it (the chain of a contract's link, null for a key's), one owner per
--    scope. Existing rows take it from what they recorded: every contract link made so far is now
--    scoped to the chain id it was proven on, every key link stays address-wide.
--    Scopes overlap when one is a key's: a key's link of an address covers that address's contract
--    links on every chain and the reverse. Overlapping scopes have one owner: an address linked by
--    its key to A refuses B's contract proof on any chain (409), and B's contract link on chain N
--    refuses A's key proof (it would cover chain N too). Who comes first keeps it, as for any link.
--    An address is either a key's or a contract's (deriving a key for a deployed contract's address,
--    or deploying at a key's address, is a 2^160 search) but for EIP-7702, where a key's address
--    runs delegated code: there the key can re-delegate at will on every chain, and still a link
--    made by the delegated code's owners is not taken from them. The caller's own links: a contract
--    proof where the caller's key link already covers the address is "already linked"; a key proof
--    where the caller holds contract links of the address replaces them with the key's one link.
--
-- 2. A contract-wallet check costs an RPC call, so checks are bounded per account, whatever their
--    outcome: at most 20 in any 10 minutes (then 429 with Retry-After), counted in
--    wallet_contract_checks (a row per check, kept 10 minutes). The per-challenge count (5) also
--    changes meaning in the service: a check is given back (wallet_refund_contract_check) only when
--    the RPC provider failed in a way the caller cannot cause (an HTTP 5xx, a refused connection);
--    an answer over the size cap or a call that outlasts the timeout counts like any answer.

-- 1. The scope of a link, one owner per scope.
alter table public.wallet_links
  add column contract_chain_id bigint generated always as (case when kind = 'eoa' then null else chain_id end) stored;

alter table public.wallet_links drop constraint wallet_links_one_owner;
-- Nulls not distinct: one key link per address, one contract link per (address, chain).
alter table public.wallet_links
  add constraint wallet_links_one_owner unique nulls not distinct (chain, address_key, contract_chain_id);

-- The public shape of a link (20261124001300_contract_wallets.sql), with its scope. An EVM link says
-- `scope`: 'evm' (the key's link: this address on every EVM chain) or 'chain' (a contract's: this
-- address on chain `chainId` only), and `accountId`, the CAIP-10 id of the account on the chain the
-- proof was made on (for scope 'chain', the link's key). Solana links are unchanged.
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
    'scope', case when l.chain = 'evm' then case when l.contract_chain_id is null then 'evm' else 'chain' end end,
    'accountId', case when l.chain = 'evm' then 'eip155:' || l.chain_id || ':' || l.address end,
    'createdAt', to_char(l.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
$$;

-- 2. Contract-wallet checks per account: a row per check sent to a chain, for the rate.
create table public.wallet_contract_checks (
  id bigint generated always as identity primary key,
  user_id uuid not null,
  checked_at timestamptz not null default now()
);

create index wallet_contract_checks_user on public.wallet_contract_checks (user_id, checked_at);
create index wallet_contract_checks_at on public.wallet_contract_checks (checked_at);

alter table public.wallet_contract_checks enable row level security;
revoke all on table public.wallet_contract_checks from public, anon, authenticated;
revoke all on sequence public.wallet_contract_checks_id_seq from public, anon, authenticated;
grant select, insert, update, delete on table public.wallet_contract_checks to service_role;

-- The caller's challenge for this message and wallet, locked for the transaction (the row lock
-- makes "used once" hold against another session): the first refusals of wallet_link and of
-- wallet_start_contract_check, in their order (20261122000200_wallets.sql lists them).
create function public.wallet_challenge_for(
  p_user_id uuid,
  p_challenge_id uuid,
  p_message text,
  p_chain text,
  p_address_key text
)
returns public.wallet_challenges
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_challenge public.wallet_challenges;
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

  -- An expired message proves nothing any more, not even for an idempotent retry (the service
  -- refuses it by its own clock before calling, too).
  if v_challenge.expires_at <= now() then
    raise exception 'challenge_expired' using errcode = 'PT400',
      detail = 'This challenge has expired; request a new one and sign it within 10 minutes.';
  end if;
  return v_challenge;
end;
$$;

-- Before a contract wallet's signature is sent to its chain (20261124001300_contract_wallets.sql):
-- the same refusals as wallet_link below, in the same order, with the scope rule of this migration
-- (a contract proof on chain N meets the address's key link, or its contract link on chain N), then
-- the challenge's 5 checks, then the account's rate:
--   20 checks by this account in the last 10 minutes -> { started: false, retryAfterSeconds }
--                                                       (429 rate_limited; nothing is counted)
--   otherwise                                        -> { started: true, contractChecks }, the
--                                                       check counted on the challenge and the rate
-- Serialised per user (the lock wallet_link and wallet_issue_challenge take), so the rate is exact
-- under concurrency. Also forgets this user's checks older than the window.
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
  v_mine boolean;
  v_count integer;
  v_recent integer;
  v_oldest timestamptz;
begin
  perform pg_advisory_xact_lock(4361, hashtext(p_user_id::text));

  v_challenge := public.wallet_challenge_for(p_user_id, p_challenge_id, p_message, p_chain, p_address_key);

  -- The caller's link that already holds this wallet on this chain: their key's, or their
  -- contract link on this chain.
  v_mine := exists (
    select 1 from public.wallet_links l
    where l.chain = v_challenge.chain and l.address_key = v_challenge.address_key and l.user_id = p_user_id
      and (l.contract_chain_id is null or l.contract_chain_id = v_challenge.chain_id));
  if v_challenge.used_at is not null and not v_mine then
    raise exception 'challenge_already_used' using errcode = 'PT409',
      detail = 'This challenge has already been used; request a new one.';
  end if;
  if v_challenge.used_at is null and v_challenge.retired_at is not null then
    raise exception 'challenge_expired' using errcode = 'PT400',
      detail = 'This challenge was replaced by newer ones (at most 5 are open at a time); request a new one.';
  end if;
  if exists (
    select 1 from public.wallet_links l
    where l.chain = v_challenge.chain and l.address_key = v_challenge.address_key and l.user_id <> p_user_id
      and (l.contract_chain_id is null or l.contract_chain_id = v_challenge.chain_id)) then
    raise exception 'wallet_already_linked' using errcode = 'PT409',
      detail = 'This wallet is already linked to another account.';
  end if;
  if not v_mine then
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

  delete from public.wallet_contract_checks c
  where c.user_id = p_user_id and c.checked_at <= now() - interval '10 minutes';
  select count(*), min(c.checked_at) into v_recent, v_oldest
  from public.wallet_contract_checks c
  where c.user_id = p_user_id and c.checked_at > now() - interval '10 minutes';
  if v_recent >= 20 then
    return jsonb_build_object(
      'started', false,
      'retryAfterSeconds', greatest(1, ceil(extract(epoch from (v_oldest + interval '10 minutes' - now())))::integer));
  end if;

  insert into public.wallet_contract_checks (user_id) values (p_user_id);
  update public.wallet_challenges set contract_checks = contract_checks + 1 where id = v_challenge.id;
  return jsonb_build_object('started', true, 'contractChecks', v_challenge.contract_checks + 1);
end;
$$;

-- Consume a challenge and create the link (20261124001300_contract_wallets.sql, whose outcomes and
-- their order are those of 20261122000200_wallets.sql), with the scope rule of this migration:
--   challenge used: a link of the caller holds the wallet on the challenge's chain -> alreadyLinked
--   a link of another user holds it where this proof reaches (a key proof: the address on any
--     chain; a contract proof: the address's key link or its contract link on this chain) -> 409
--   a link of the caller already holds what this proof would (their key link; for a contract proof
--     also their contract link on this chain) -> challenge consumed, { alreadyLinked: true }
--   a key proof where the caller holds contract links of the address -> those are replaced by the
--     key's link (which holds the address on every chain), counted as one wallet
-- Links of one address by two users are decided one at a time (an advisory lock on the address,
-- taken after the user's), because two scopes can overlap without sharing a key: the unique
-- constraint cannot see a key link of A and a contract link of B at once.
create or replace function public.wallet_link(
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
  v_scope bigint;
  v_count integer;
begin
  perform pg_advisory_xact_lock(4361, hashtext(p_user_id::text));
  perform pg_advisory_xact_lock(4362, hashtext(p_chain || ':' || p_address_key));

  v_challenge := public.wallet_challenge_for(p_user_id, p_challenge_id, p_message, p_chain, p_address_key);
  if v_challenge.used_at is not null then
    select * into v_link from public.wallet_links l
    where l.user_id = p_user_id and l.chain = v_challenge.chain and l.address_key = v_challenge.address_key
      and (l.contract_chain_id is null or l.contract_chain_id = v_challenge.chain_id)
    order by l.contract_chain_id nulls first
    limit 1;
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

  -- The scope this proof gives: every chain for a key, the challenge's chain for a contract.
  v_scope := case when p_kind = 'eoa' then null else v_challenge.chain_id end;

  if exists (
    select 1 from public.wallet_links l
    where l.chain = v_challenge.chain and l.address_key = v_challenge.address_key and l.user_id <> p_user_id
      and (v_scope is null or l.contract_chain_id is null or l.contract_chain_id = v_scope)) then
    raise exception 'wallet_already_linked' using errcode = 'PT409',
      detail = 'This wallet is already linked to another account.';
  end if;

  select * into v_link from public.wallet_links l
  where l.chain = v_challenge.chain and l.address_key = v_challenge.address_key and l.user_id = p_user_id
    and (l.contract_chain_id is null or l.contract_chain_id = v_scope)
  order by l.contract_chain_id nulls first
  limit 1;
  if found then
    update public.wallet_challenges set used_at = now() where id = v_challenge.id;
    return jsonb_build_object('link', public.wallet_link_json(v_link), 'alreadyLinked', true);
  end if;

  -- A key proof replaces the caller's contract links of the address: the count leaves them out.
  select count(*) into v_count from public.wallet_links l
  where l.user_id = p_user_id
    and not (v_scope is null and l.chain = v_challenge.chain and l.address_key = v_challenge.address_key);
  if v_count >= 10 then
    raise exception 'too_many_wallets' using errcode = 'PT409',
      detail = 'An account can link at most 10 wallets; unlink one first.';
  end if;
  if v_scope is null then
    delete from public.wallet_links l
    where l.user_id = p_user_id and l.chain = v_challenge.chain and l.address_key = v_challenge.address_key;
  end if;

  insert into public.wallet_links (user_id, chain, address, address_key, chain_id, cluster, challenge_id, kind)
  values (p_user_id, v_challenge.chain, v_challenge.address, v_challenge.address_key,
          v_challenge.chain_id, v_challenge.cluster, v_challenge.id, p_kind)
  on conflict do nothing
  returning * into v_link;
  if not found then
    -- Cannot happen under the address lock; kept so a unique violation is never a 500.
    raise exception 'wallet_already_linked' using errcode = 'PT409',
      detail = 'This wallet is already linked to another account.';
  end if;

  update public.wallet_challenges set used_at = now() where id = v_challenge.id;
  return jsonb_build_object('link', public.wallet_link_json(v_link), 'alreadyLinked', false);
end;
$$;

-- Retention (20261126000500_flat_cost_at_scale.sql), now also for the rate's rows: a check older
-- than the 10-minute window counts for nothing. Both in batches of 1000 until the deadline.
create or replace function public.wallets_maintain(p_now timestamptz, p_deadline timestamptz)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_batch integer;
  v_deleted integer := 0;
  v_checks_batch integer := 0;
  v_checks_deleted integer := 0;
begin
  loop
    delete from public.wallet_challenges c
    where c.id = any (array(
      select x.id from public.wallet_challenges x
      where x.expires_at < p_now - interval '1 day'
      order by x.expires_at
      limit 1000
      for update skip locked));
    get diagnostics v_batch = row_count;
    v_deleted := v_deleted + v_batch;
    exit when v_batch < 1000 or clock_timestamp() >= p_deadline;
  end loop;
  if v_batch < 1000 then
    loop
      delete from public.wallet_contract_checks c
      where c.id = any (array(
        select x.id from public.wallet_contract_checks x
        where x.checked_at <= p_now - interval '10 minutes'
        order by x.checked_at
        limit 1000
        for update skip locked));
      get diagnostics v_checks_batch = row_count;
      v_checks_deleted := v_checks_deleted + v_checks_batch;
      exit when v_checks_batch < 1000 or clock_timestamp() >= p_deadline;
    end loop;
  end if;
  return jsonb_build_object(
    'challengesDeleted', v_deleted, 'contractChecksDeleted', v_checks_deleted,
    'done', v_batch < 1000 and v_checks_batch < 1000);
end;
$$;

-- Forgetting a user (20261123000200_hardening.sql) also forgets when they checked contract wallets.
-- The answer keeps its shape.
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
  delete from public.wallet_contract_checks where user_id = p_user_id;
  return jsonb_build_object('walletLinks', v_links, 'walletChallenges', v_challenges);
end;
$$;

do $$
declare
  v_fn text;
begin
  foreach v_fn in array array[
    'public.wallet_link_json(public.wallet_links)',
    'public.wallet_challenge_for(uuid, uuid, text, text, text)',
    'public.wallet_start_contract_check(uuid, uuid, text, text, text)',
    'public.wallet_link(uuid, uuid, text, text, text, text)',
    'public.wallets_maintain(timestamptz, timestamptz)',
    'public.wallets_forget_user(uuid)'
  ] loop
    execute format('revoke all on function %s from public, anon, authenticated', v_fn);
    execute format('grant execute on function %s to service_role', v_fn);
  end loop;
end;
$$;
