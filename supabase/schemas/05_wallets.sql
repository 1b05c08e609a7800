-- Wallets: sign-in challenges, links proven by a signature, and the budget of smart-contract checks.
-- The proof itself is checked in TypeScript (lib/wallets); these calls consume a challenge and write
-- the link atomically. docs/wallets.md.

-- Sign-in challenges: the exact message a wallet must sign, issued to one user, used once.
create table public.wallet_challenges (
  id uuid primary key,                       -- the message's Request ID
  seq bigint generated always as identity,   -- issue order, for retiring the oldest open challenge
  user_id uuid not null,
  chain text not null check (chain in ('evm', 'solana')),
  address text not null,                     -- display form written in the message (EIP-55 / base58)
  address_key text not null,                 -- normalised form (lower-case hex / base58)
  chain_id bigint,
  cluster text,
  nonce text not null,
  message text not null,                     -- the exact text issued; a submission must equal it
  issued_at timestamptz not null,
  expires_at timestamptz not null,
  created_at timestamptz not null default now(),
  used_at timestamptz,
  retired_at timestamptz,                    -- replaced by newer challenges (at most 5 open)
  constraint wallet_challenges_network check (
    (chain = 'evm' and chain_id is not null and cluster is null)
    or (chain = 'solana' and cluster is not null and chain_id is null)),
  contract_checks integer not null default 0 -- smart-contract checks spent on it (at most 5)
);
alter table public.wallet_challenges enable row level security;
create index wallet_challenges_user_created on public.wallet_challenges (user_id, created_at);
create index wallet_challenges_expires on public.wallet_challenges (expires_at);
revoke all on table public.wallet_challenges from public, anon, authenticated;
grant select, insert, update, delete on table public.wallet_challenges to service_role;
revoke all on sequence public.wallet_challenges_seq_seq from public, anon, authenticated;

-- A wallet linked to a user, by a proof.
-- A link's scope: a smart-contract wallet is linked on its chain only (were a link's key the address
--    alone, the holder of an account's old owner key, rotated away on chain 1, could link the address
--    with an ERC-6492 signature on a chain where the account was never deployed, and the real owner
--    would get 409 everywhere). The same address on two chains is two contracts (or one and none), each with
--    its own owners; only a key is the same wallet on every EVM chain. So:
--      * a link proven by the wallet's key (`kind` 'eoa', every Solana link) holds the address on
--        every chain of its family, as before: its scope is the address;
--      * a link proven by a contract (`erc1271`, `erc6492`) holds the address on its chain only:
--        its scope is (address, chain id), the CAIP-10 account id `eip155:<chainId>:<address>`.
--    `contract_chain_id` says it (the chain of a contract's link, null for a key's), one owner per
--    scope.
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
create table public.wallet_links (
  id uuid primary key default gen_random_uuid(),
  user_id uuid not null,
  chain text not null check (chain in ('evm', 'solana')),
  address text not null,
  address_key text not null,
  chain_id bigint,
  cluster text,
  challenge_id uuid not null,                -- the proof this link was made with
  created_at timestamptz not null default now(),
  constraint wallet_links_network check (
    (chain = 'evm' and chain_id is not null and cluster is null)
    or (chain = 'solana' and cluster is not null and chain_id is null)),
  -- What proved it: the wallet's key, or a smart contract (ERC-1271, or ERC-6492 before deployment).
  kind text not null default 'eoa',
  constraint wallet_links_kind check (kind in ('eoa', 'erc1271', 'erc6492') and (chain = 'evm' or kind = 'eoa')),
  contract_chain_id bigint generated always as (case when kind = 'eoa' then null else chain_id end) stored,
  -- Nulls not distinct: one key link per address, one contract link per (address, chain).
  constraint wallet_links_one_owner unique nulls not distinct (chain, address_key, contract_chain_id)
);
alter table public.wallet_links enable row level security;
create index wallet_links_user on public.wallet_links (user_id, created_at);
revoke all on table public.wallet_links from public, anon, authenticated;
grant select, insert, update, delete on table public.wallet_links to service_role;
-- Every column: a link is shaped by wallet_link_json, which takes the whole row.
grant select on public.wallet_links to authenticated;

-- Contract-wallet checks per account: a row per check sent to a chain, for the rate.
-- A contract-wallet check costs an RPC call, so checks are bounded per account, whatever their
--    outcome: at most 20 in any 10 minutes (then 429 with Retry-After), counted in
--    wallet_contract_checks (a row per check, kept 10 minutes).
--    A challenge allows 5 checks; a check is given back (wallet_refund_contract_check) only when
--    the RPC provider failed in a way the caller cannot cause (an HTTP 5xx, a refused connection);
--    an answer over the size cap or a call that outlasts the timeout counts like any answer.
create table public.wallet_contract_checks (
  id bigint generated always as identity primary key,
  user_id uuid not null,
  checked_at timestamptz not null default now()
);
alter table public.wallet_contract_checks enable row level security;
create index wallet_contract_checks_user on public.wallet_contract_checks (user_id, checked_at);
create index wallet_contract_checks_at on public.wallet_contract_checks (checked_at);
revoke all on table public.wallet_contract_checks from public, anon, authenticated;
grant select, insert, update, delete on table public.wallet_contract_checks to service_role;
revoke all on sequence public.wallet_contract_checks_id_seq from public, anon, authenticated;

-- The public shape of a link: { id, chain, address, chainId | cluster, createdAt } (ISO 8601 UTC),
-- with its scope. An EVM link says
-- `scope`: 'evm' (the key's link: this address on every EVM chain) or 'chain' (a contract's: this
-- address on chain `chainId` only), and `accountId`, the CAIP-10 id of the account on the chain the
-- proof was made on (for scope 'chain', the link's key). Solana links are unchanged.
-- As json, its keys in the API's order (GET /api/me copies it into its answer as it is).
create or replace function public.wallet_link_api_json(l public.wallet_links)
returns json
language plpgsql
stable
set search_path = ''
as $$
begin
  return json_strip_nulls(json_build_object(
    'id', l.id,
    'chain', l.chain,
    'address', l.address,
    'chainId', l.chain_id,
    'cluster', l.cluster,
    'kind', l.kind,
    'scope', case when l.chain = 'evm' then case when l.contract_chain_id is null then 'evm' else 'chain' end end,
    'accountId', case when l.chain = 'evm' then 'eip155:' || l.chain_id || ':' || l.address end,
    'createdAt', to_char(l.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')));
end;
$$;
revoke all on function public.wallet_link_api_json(wallet_links) from public, anon, authenticated;
grant execute on function public.wallet_link_api_json(wallet_links) to authenticated, service_role;

-- The same as jsonb, for the SQL that reads or compares its fields.
create or replace function public.wallet_link_json(l public.wallet_links)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return public.wallet_link_api_json(l)::jsonb;
end;
$$;
revoke all on function public.wallet_link_json(wallet_links) from public, anon, authenticated;
grant execute on function public.wallet_link_json(wallet_links) to authenticated, service_role;

-- Issue a challenge built by the service. Per user, serialised by an advisory lock so the counts
-- are exact under concurrency:
--   * at most 10 challenges in any minute: otherwise nothing is stored and the answer says when
--     the oldest one in the window leaves it ({ issued: false, retryAfterSeconds });
--   * at most 5 open (unused, unexpired) challenges: the oldest beyond 5 are retired, so a user
--     who abandoned a few wallet prompts is never locked out, and old prompts stop working.
-- Also sweeps a bounded batch of challenges that expired more than a day ago (any user).
--
-- 4. Every challenge request sweeps a few long-expired challenges: asked oldest first, so the
--    expiry index answers it even when nothing is due.
create or replace function public.wallet_issue_challenge(
  p_user_id uuid,
  p_challenge_id uuid,
  p_chain text,
  p_address text,
  p_address_key text,
  p_chain_id bigint,
  p_cluster text,
  p_nonce text,
  p_message text,
  p_issued_at timestamptz,
  p_expires_at timestamptz
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_recent integer;
  v_oldest timestamptz;
  v_retired integer;
begin
  perform pg_advisory_xact_lock(4361, hashtext(p_user_id::text));
  -- An erased user (public.forget_user) is gone. A session token minted before still verifies until
  -- it expires where the service does not ask the Auth server (HS256, AUTH_VERIFY_SESSION off): it
  -- must not link a wallet again, which would also tell a wallet.linked after the user's last
  -- event, customer.deleted. (The same id signing up again is unerased: billing_unerase_user.)
  if public.billing_ids_erased(array[p_user_id::text]) then
    raise exception 'session_revoked' using errcode = 'PT401', detail = 'This account was deleted; sign in again.';
  end if;

  select count(*), min(c.created_at) into v_recent, v_oldest
  from public.wallet_challenges c
  where c.user_id = p_user_id and c.created_at > now() - interval '1 minute';
  if v_recent >= 10 then
    return jsonb_build_object(
      'issued', false,
      'retryAfterSeconds', greatest(1, ceil(extract(epoch from (v_oldest + interval '1 minute' - now())))::integer));
  end if;

  insert into public.wallet_challenges
    (id, user_id, chain, address, address_key, chain_id, cluster, nonce, message, issued_at, expires_at)
  values
    (p_challenge_id, p_user_id, p_chain, p_address, p_address_key, p_chain_id, p_cluster, p_nonce, p_message, p_issued_at, p_expires_at);

  update public.wallet_challenges
  set retired_at = now()
  where id in (
    select c.id from public.wallet_challenges c
    where c.user_id = p_user_id and c.used_at is null and c.retired_at is null and c.expires_at > now()
    order by c.seq desc
    offset 5);
  get diagnostics v_retired = row_count;

  -- Oldest first, through wallet_challenges_expires: when nothing is due (the usual case), one
  -- index probe; without the order the planner may read the table hoping to meet 100 due rows.
  delete from public.wallet_challenges
  where id in (
    select c.id from public.wallet_challenges c
    where c.expires_at < now() - interval '1 day'
    order by c.expires_at
    limit 100);

  return jsonb_build_object('issued', true, 'challengeId', p_challenge_id, 'retiredChallenges', v_retired);
end;
$$;
revoke all on function public.wallet_issue_challenge(uuid,uuid,text,text,text,bigint,text,text,text,timestamp with time zone,timestamp with time zone) from public, anon, authenticated;
grant execute on function public.wallet_issue_challenge(uuid,uuid,text,text,text,bigint,text,text,text,timestamp with time zone,timestamp with time zone) to service_role;

-- Wallet links: one-time sign-in challenges and the wallets they proved, EVM and Solana.
--
-- Every request of /api/wallet-link is ONE call of one function below:
--   POST   /api/wallet-link/challenge -> wallet_issue_challenge  (rate limit + insert + retire)
--   POST   /api/wallet-link           -> wallet_link             (consume challenge + insert link)
--   GET    /api/wallet-link           -> account_wallets          (also used by GET /api/me)
--   DELETE /api/wallet-link/{linkId}  -> wallet_unlink
-- Signatures are verified in the service before the call; the functions decide what needs the
-- stored rows (owner, byte-for-byte message, single use, uniqueness, limits) under locks.
--
-- User ids come from verified session tokens, not from a row in auth.users (dev tokens have none),
-- so there is no foreign key to auth.users; a trigger removes a deleted user's rows instead.
--
-- Unlink one of the caller's wallets. Someone else's link and no link are the same 404.
create or replace function public.wallet_unlink(p_user_id uuid, p_link_id uuid)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_id uuid;
begin
  delete from public.wallet_links where id = p_link_id and user_id = p_user_id returning id into v_id;
  if not found then
    raise exception 'link_not_found' using errcode = 'PT404',
      detail = 'There is no link with this id among your wallets.';
  end if;
  return jsonb_build_object('id', v_id);
end;
$$;
revoke all on function public.wallet_unlink(uuid,uuid) from public, anon, authenticated;
grant execute on function public.wallet_unlink(uuid,uuid) to service_role;

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
-- Forgetting a user's wallets (public.forget_user, 07_account.sql, calls it): their links, their
-- challenges and when they checked contract wallets.
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
revoke all on function public.wallets_forget_user(uuid) from public, anon, authenticated;
grant execute on function public.wallets_forget_user(uuid) to service_role;

-- Before a contract wallet's signature is sent to its chain: is there anything to link? The same
-- refusals, in the same order, as wallet_link below (which stays the authority: it checks again
-- under its locks when the link is made), then one more check counted on the challenge. Nothing
-- is consumed; the count is kept even when the chain then says no or does not answer.
--   more than 5 checks of this challenge -> 400 challenge_expired (ask for a new one)
--
-- Before a contract wallet's signature is sent to its chain: the same refusals as wallet_link below,
-- in the same order, with the scope rule of wallet_links (the note above that table)
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
revoke all on function public.wallet_start_contract_check(uuid,uuid,text,text,text) from public, anon, authenticated;
grant execute on function public.wallet_start_contract_check(uuid,uuid,text,text,text) to service_role;

-- Consume a challenge and create the link, with the scope rule of wallet_links (the note above that table):
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
revoke all on function public.wallet_link(uuid,uuid,text,text,text,text) from public, anon, authenticated;
grant execute on function public.wallet_link(uuid,uuid,text,text,text,text) to service_role;

-- A contract-wallet check the chain did not answer is not a check (an RPC failure or timeout does
-- not consume the challenge, so the user can retry with the same signature).
--
-- wallet_start_contract_check counts a check on the challenge
-- before the chain is asked, so that at most 5 chain calls per challenge are in flight or spent
-- (concurrent requests included). Until now the count was kept whatever happened next, so after
-- five 503 chain_unavailable answers the same signature got 400 challenge_expired. From here on the
-- count is of definite answers: the service counts the check as before, and when the chain gave no
-- answer (an RPC error, a non-JSON-RPC answer, a timeout) it gives the check back with the function
-- below, in the same request, before answering 503. A definite "no" (422 invalid_signature: a wrong
-- owner, a reverting contract) stays counted, so the limit still bounds how many signatures one
-- challenge lets a caller try on chain.
--
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
revoke all on function public.wallet_refund_contract_check(uuid,uuid) from public, anon, authenticated;
grant execute on function public.wallet_refund_contract_check(uuid,uuid) to service_role;

-- The caller's challenge for this message and wallet, locked for the transaction (the row lock
-- makes "used once" hold against another session): the first refusals of wallet_link and of
-- wallet_start_contract_check, in their order (wallet_link lists them).
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
revoke all on function public.wallet_challenge_for(uuid,uuid,text,text,text) from public, anon, authenticated;
grant execute on function public.wallet_challenge_for(uuid,uuid,text,text,text) to service_role;
