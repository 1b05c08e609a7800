-- Wallet links (issue 4): one-time sign-in challenges and the wallets they proved, EVM and Solana.
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
    or (chain = 'solana' and cluster is not null and chain_id is null))
);

create index wallet_challenges_user_created on public.wallet_challenges (user_id, created_at);
create index wallet_challenges_expires on public.wallet_challenges (expires_at);

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
  -- One owner per wallet across all users: the same EVM key on another chain id is the same wallet.
  constraint wallet_links_one_owner unique (chain, address_key),
  constraint wallet_links_network check (
    (chain = 'evm' and chain_id is not null and cluster is null)
    or (chain = 'solana' and cluster is not null and chain_id is null))
);

create index wallet_links_user on public.wallet_links (user_id, created_at);

alter table public.wallet_challenges enable row level security;
alter table public.wallet_links enable row level security;
revoke all on table public.wallet_challenges, public.wallet_links from public, anon, authenticated;
grant select, insert, update, delete on table public.wallet_challenges, public.wallet_links to service_role;

-- The public shape of a link: { id, chain, address, chainId | cluster, createdAt } (ISO 8601 UTC).
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
    'createdAt', to_char(l.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
$$;

-- Issue a challenge built by the service. Per user, serialised by an advisory lock so the counts
-- are exact under concurrency:
--   * at most 10 challenges in any minute: otherwise nothing is stored and the answer says when
--     the oldest one in the window leaves it ({ issued: false, retryAfterSeconds });
--   * at most 5 open (unused, unexpired) challenges: the oldest beyond 5 are retired, so a user
--     who abandoned a few wallet prompts is never locked out, and old prompts stop working.
-- Also sweeps a bounded batch of challenges that expired more than a day ago (any user).
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

  delete from public.wallet_challenges
  where id in (
    select c.id from public.wallet_challenges c
    where c.expires_at < now() - interval '1 day'
    limit 100);

  return jsonb_build_object('issued', true, 'challengeId', p_challenge_id, 'retiredChallenges', v_retired);
end;
$$;

-- Consume a challenge and create the link, atomically. The service has already checked the
-- message (strict parse, this site, not expired by its clock) and the signature over it.
-- Outcomes, in order:
--   challenge unknown or another user's          -> 400 challenge_not_found (same answer for both)
--   message not byte-for-byte the issued one     -> 422 invalid_message
--   wallet in the payload not the challenge's    -> 422 address_mismatch
--   challenge expired                            -> 400 challenge_expired
--   challenge used: wallet linked to the caller  -> { alreadyLinked: true } (an idempotent retry)
--   challenge used otherwise                     -> 409 challenge_already_used
--   challenge retired by newer ones              -> 400 challenge_expired
--   wallet linked to the caller already          -> challenge consumed, { alreadyLinked: true }
--   wallet linked to another user                -> 409 wallet_already_linked (who is not said)
--   caller already has 10 wallets                -> 409 too_many_wallets
--   otherwise                                    -> challenge consumed, link inserted
-- A raised error rolls everything back: a refused request changes nothing.
create or replace function public.wallet_link(
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
  -- One link request per user at a time keeps the 10-wallet count exact; the challenge row lock
  -- makes "used once" hold even against another session.
  perform pg_advisory_xact_lock(4361, hashtext(p_user_id::text));

  select * into v_challenge from public.wallet_challenges where id = p_challenge_id for update;
  if not found or v_challenge.user_id <> p_user_id then
    raise exception 'challenge_not_found' using errcode = 'PT400',
      detail = 'No challenge with this Request ID was issued to you; request a new one from POST /api/wallet-link/challenge.';
  end if;
  -- Deterministic collations compare text byte for byte for equality.
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

  insert into public.wallet_links (user_id, chain, address, address_key, chain_id, cluster, challenge_id)
  values (p_user_id, v_challenge.chain, v_challenge.address, v_challenge.address_key,
          v_challenge.chain_id, v_challenge.cluster, v_challenge.id)
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

-- The caller's links, oldest first, as a JSON array of the public link shape. GET /api/wallet-link
-- answers with it, and GET /api/me embeds it as `wallets`.
create or replace function public.account_wallets(p_user_id uuid)
returns jsonb
language sql
stable
security definer
set search_path = ''
as $$
  select coalesce(jsonb_agg(public.wallet_link_json(l) order by l.created_at, l.id), '[]'::jsonb)
  from public.wallet_links l
  where l.user_id = p_user_id
$$;

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

-- A deleted Supabase user takes their wallet links and challenges along.
create or replace function public.wallets_delete_user_rows()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  delete from public.wallet_links where user_id = old.id;
  delete from public.wallet_challenges where user_id = old.id;
  return old;
end;
$$;

create trigger wallets_delete_user_rows
after delete on auth.users
for each row execute function public.wallets_delete_user_rows();

revoke all on function public.wallet_link_json(public.wallet_links) from public, anon, authenticated;
revoke all on function public.wallet_issue_challenge(uuid, uuid, text, text, text, bigint, text, text, text, timestamptz, timestamptz) from public, anon, authenticated;
revoke all on function public.wallet_link(uuid, uuid, text, text, text) from public, anon, authenticated;
revoke all on function public.account_wallets(uuid) from public, anon, authenticated;
revoke all on function public.wallet_unlink(uuid, uuid) from public, anon, authenticated;
revoke all on function public.wallets_delete_user_rows() from public, anon, authenticated;
grant execute on function public.wallet_link_json(public.wallet_links) to service_role;
grant execute on function public.wallet_issue_challenge(uuid, uuid, text, text, text, bigint, text, text, text, timestamptz, timestamptz) to service_role;
grant execute on function public.wallet_link(uuid, uuid, text, text, text) to service_role;
grant execute on function public.account_wallets(uuid) to service_role;
grant execute on function public.wallet_unlink(uuid, uuid) to service_role;
grant execute on function public.wallets_delete_user_rows() to service_role;
