import { bytesToHex, isErc8010Signature } from 'viem';
import { DomainError } from '../errors.ts';
import { isUuid } from '../uuid.ts';
import { parseWalletAddress } from './address.ts';
import { noContractWallets, notAKeySignature, type LinkInput } from './schemas.ts';
import { parseSignInMessage } from './sign-in-message.ts';
import { checkSignInTimes, EVM_SIGNATURE_BYTES, verifySignature } from './verify.ts';

/**
 * What the local checks concluded. `eoa`: the wallet's own key signed, proven. `contract`: the
 * key did not sign it, but on this EVM chain a smart-contract wallet may have: only the chain can
 * say (contract-signatures.ts), and the caller asks it.
 */
export type VerifiedProof =
  | { challengeId: string; kind: 'eoa' }
  | { challengeId: string; kind: 'contract'; chainId: number };

export interface ProofOptions {
  appOrigin: string;
  now: Date;
  /** EVM chains with an RPC (WALLET_EVM_RPC_URLS): the only ones where a contract wallet can prove itself. */
  contractChains?: ReadonlySet<number> | ReadonlyMap<number, unknown>;
}

/**
 * Everything about a link request that can be decided without the database or a chain, in the
 * order that gives the most useful answer: the message is a strict sign-in message for this site
 * (422 invalid_message), it names the wallet and network of the payload (422 address_mismatch /
 * invalid_message), it has not expired by the injected clock (400 challenge_expired), and the
 * wallet's key signed exactly this text (checked locally, no RPC: `eoa`). Otherwise, on an EVM
 * chain with an RPC, the answer is `contract` (the chain decides); anywhere else 422
 * invalid_signature (65 bytes that do not recover the address) or unsupported_signature_type.
 * What needs the stored challenge (ownership, byte-for-byte equality, single use) is decided by
 * the one SQL call that follows.
 */
export async function verifyLinkProof(input: LinkInput, options: ProofOptions): Promise<VerifiedProof> {
  const parsed = parseSignInMessage(input.message, input.chain);
  if (!parsed.ok) throw invalidMessage(`The message is not a valid sign-in message: ${parsed.reason}`);
  const message = parsed.message;

  const origin = new URL(options.appOrigin);
  if (message.scheme !== undefined || message.domain !== origin.host) {
    throw invalidMessage(`The message asks to sign in to ${message.domain}, not to ${origin.host}. Sign the challenge exactly as issued.`);
  }
  if (message.uri !== origin.origin) throw invalidMessage(`The message's URI is not ${origin.origin}.`);
  // Challenge ids are issued in lower case, and the message must be the issued text.
  if (!isUuid(message.requestId) || message.requestId !== message.requestId.toLowerCase()) {
    throw invalidMessage('The message has no Request ID naming a challenge; request one from POST /api/wallet-link/challenge.');
  }

  const inMessage = parseWalletAddress(input.chain, message.address);
  if (!inMessage.ok || inMessage.addressKey !== input.addressKey) {
    throw new DomainError('address_mismatch', `The payload's address ${input.address} is not the address in the message (${message.address}).`);
  }
  const network = input.chain === 'evm' ? input.chainId : input.cluster;
  if (message.chainId !== network) {
    throw invalidMessage(`The payload's ${input.chain === 'evm' ? 'chainId' : 'cluster'} (${network}) is not the message's Chain ID (${message.chainId}).`);
  }

  const times = checkSignInTimes(message, options.now);
  if (!times.ok && times.code === 'expired') {
    throw new DomainError('challenge_expired', `${times.reason} Request a new challenge and sign it within 10 minutes.`);
  }
  if (!times.ok) throw invalidMessage(times.reason);

  if (await verifySignature(input.chain, input.message, input.signature, message.address)) return { challengeId: message.requestId, kind: 'eoa' };

  const notTheKey = `The signature was not made by the key of ${message.address} over this exact message.`;
  if (input.chain === 'solana') throw new DomainError('invalid_signature', notTheKey);
  if (isErc8010Signature(bytesToHex(input.signature))) {
    // EIP-7702 delegations (ERC-8010) are another kind of account than the three a link records.
    throw new DomainError('unsupported_signature_type', 'ERC-8010 (EIP-7702 delegation) signatures are not supported; sign with the account itself.');
  }
  if (options.contractChains?.has(input.chainId)) return { challengeId: message.requestId, kind: 'contract', chainId: input.chainId };
  if (input.signature.length === EVM_SIGNATURE_BYTES) throw new DomainError('invalid_signature', `${notTheKey} ${noContractWallets(input.chainId, 'not-the-key')}`);
  throw new DomainError('unsupported_signature_type', notAKeySignature(input.signature.length, input.chainId));
}

function invalidMessage(detail: string): DomainError {
  return new DomainError('invalid_message', detail);
}
