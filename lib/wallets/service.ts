import { publishAccountChange } from '../account-changes.ts';
import type { SessionUser } from '../auth/session.ts';
import { getConfig } from '../config.ts';
import { callDb } from '../db/index.ts';
import { DomainError } from '../errors.ts';
import { log } from '../log.ts';
import { buildChallenge } from './challenge.ts';
import { toWalletLink, toWalletLinks, type WalletLink, type WalletLinkRow } from './links.ts';
import type { ContractProofKind } from './contract-signatures.ts';
import { isUuid } from '../uuid.ts';
import type { ChallengeInput, LinkInput } from './schemas.ts';

/**
 * The wallet-link use cases. Each makes exactly one database call (one SQL function in
 * supabase/schemas/05_wallets.sql), after
 * every check that needs no database; linking a smart-contract wallet makes two, around the call
 * to its chain, or three when the chain's provider failed (see linkWallet).
 * `now` is injectable for the tests; the routes use the real clock.
 */

type User = Pick<SessionUser, 'userId' | 'email'>;

export type ChallengeResponse = Omit<ReturnType<typeof buildChallenge>, 'addressKey'>;

type IssueResult = { issued: true; retiredChallenges: number } | { issued: false; retryAfterSeconds: number };

/** Issue the message to sign: 10 a minute per user (counted in the database), 5 open at most. */
export async function issueChallenge(user: User, input: ChallengeInput, now = new Date()): Promise<ChallengeResponse> {
  const challenge = buildChallenge(input, { user, appOrigin: getConfig().appOrigin, now });
  const result = await callDb<IssueResult>('wallet_issue_challenge', {
    p_user_id: user.userId,
    p_challenge_id: challenge.challengeId,
    p_chain: challenge.chain,
    p_address: challenge.address,
    p_address_key: challenge.addressKey,
    p_chain_id: challenge.chainId ?? null,
    p_cluster: challenge.cluster ?? null,
    p_nonce: challenge.nonce,
    p_message: challenge.message,
    p_issued_at: challenge.issuedAt,
    p_expires_at: challenge.expiresAt,
  });
  if (!result.issued) {
    const seconds = Math.max(1, Math.ceil(result.retryAfterSeconds));
    throw new DomainError('rate_limited', `At most 10 challenges a minute per account; retry in ${seconds} s.`, { retryAfterSeconds: seconds });
  }
  const { addressKey: _key, ...response } = challenge;
  void _key;
  return response;
}

export interface LinkResult {
  userId: string;
  email: string | null;
  link: WalletLink;
  /** The wallet was already linked to this caller: nothing changed. */
  alreadyLinked: boolean;
}

/**
 * Verify the signed challenge, then consume it and create the link in one SQL call.
 *
 * An ordinary wallet's signature is checked locally (no RPC). Any other EVM signature is a
 * smart-contract wallet's to check on its chain: first the challenge is checked (and the check
 * counted) without consuming it, so a chain is only asked about an open challenge of this
 * caller, at most 5 times per challenge and 20 times per account in 10 minutes (429 beyond); then
 * the chain answers (ERC-6492 / ERC-1271); only a valid answer links. An invalid signature (422)
 * or a chain that gave no verdict (503) leaves the challenge open for another try. The check is
 * given back to the challenge (public.wallet_refund_contract_check)
 * before the 503 only when the provider failed in a way no request can cause (an HTTP 5xx, a
 * refused connection): a timeout or an oversized answer may be what the caller's contract was
 * built for, so it counts (supabase/schemas/05_wallets.sql says why).
 */
export async function linkWallet(user: User, input: LinkInput, now = new Date()): Promise<LinkResult> {
  const config = getConfig();
  // The signature checks (viem, the curves) load at the first link, not with every route of this
  // module: a challenge, a list or an unlink never runs them, and a cold start pays for what it loads.
  const { verifyLinkProof } = await import('./proof.ts');
  const proof = await verifyLinkProof(input, { appOrigin: config.appOrigin, now, contractChains: config.wallet.evmRpcUrls });
  let kind: 'eoa' | ContractProofKind = 'eoa';
  if (proof.kind === 'contract') {
    const started = await callDb<ContractCheckStart>('wallet_start_contract_check', {
      p_user_id: user.userId,
      p_challenge_id: proof.challengeId,
      p_message: input.message,
      p_chain: input.chain,
      p_address_key: input.addressKey,
    });
    if (!started.started) {
      const seconds = Math.max(1, Math.ceil(started.retryAfterSeconds));
      throw new DomainError('rate_limited', `At most 20 smart-contract wallet checks per account in 10 minutes; retry in ${seconds} s.`, { retryAfterSeconds: seconds });
    }
    const rpc = { chainId: proof.chainId, url: config.wallet.evmRpcUrls.get(proof.chainId)!, timeoutMs: config.wallet.evmRpcTimeoutMs };
    const { verifyContractSignature } = await import('./contract-signatures.ts');
    const check = await verifyContractSignature(rpc, { address: input.address, message: input.message, signature: input.signature });
    if (check.outcome === 'unanswered') {
      if (check.providerFault) await refundContractCheck(user, proof.challengeId);
      throw new DomainError(
        'chain_unavailable',
        `The RPC of chain ${proof.chainId} did not answer, so this smart-contract wallet's signature could not be checked. Nothing was linked: retry with the same signature (a challenge allows 5 checks on chain; one the provider failed is not counted).`,
      );
    }
    if (check.outcome === 'invalid') {
      throw new DomainError('invalid_signature', `Neither the key of ${input.address} nor a smart-contract wallet at that address on chain ${proof.chainId} accepts this signature over this exact message.`);
    }
    kind = check.kind;
  }
  const result = await callDb<{ link: WalletLinkRow; alreadyLinked: boolean }>('wallet_link', {
    p_user_id: user.userId,
    p_challenge_id: proof.challengeId,
    p_message: input.message,
    p_chain: input.chain,
    p_address_key: input.addressKey,
    p_kind: kind,
  });
  if (!result.alreadyLinked) publishAccountChange([user.userId], 'wallets', now);
  return { userId: user.userId, email: user.email, link: toWalletLink(result.link), alreadyLinked: result.alreadyLinked };
}

/** What wallet_start_contract_check answers: the check counted, or the account's rate says wait. */
type ContractCheckStart = { started: true; contractChecks: number } | { started: false; retryAfterSeconds: number };

/**
 * Give back the check counted for a chain whose provider failed. The caller still gets the chain's
 * 503 if this fails too (the database is then likely down as well); the check then stays counted,
 * which costs the user one of their 5 tries, never a wrong answer.
 */
async function refundContractCheck(user: User, challengeId: string): Promise<void> {
  try {
    await callDb('wallet_refund_contract_check', { p_user_id: user.userId, p_challenge_id: challengeId });
  } catch (error) {
    log.warn({ err: { message: (error as Error).message }, challengeId }, 'could not give back a contract check the chain did not answer');
  }
}

/** The caller's links, oldest first. */
export async function listWalletLinks(user: User): Promise<{ links: WalletLink[] }> {
  return { links: toWalletLinks(await callDb<WalletLinkRow[]>('account_wallets', { p_user_id: user.userId })) };
}

/** Remove one of the caller's links; someone else's (or no) link is 404 link_not_found alike. */
export async function unlinkWallet(user: User, linkId: string | undefined): Promise<void> {
  // Any UUID spelling Postgres would accept as a link id; anything else cannot be one.
  if (!isUuid(linkId)) {
    throw new DomainError('link_not_found', 'There is no link with this id among your wallets.');
  }
  await callDb('wallet_unlink', { p_user_id: user.userId, p_link_id: linkId.toLowerCase() });
  publishAccountChange([user.userId], 'wallets');
}
