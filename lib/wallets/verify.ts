import { ed25519 } from '@noble/curves/ed25519.js';
import { bytesToHex, recoverMessageAddress } from 'viem';
import { parseRfc3339 } from './abnf.ts';
import { decodeBase58, type ChainFamily } from './address.ts';
import { EVM_SIGNATURE_BYTES, SOLANA_SIGNATURE_BYTES } from './signature-encoding.ts';
import { parseSignInMessage, type SignInMessage } from './sign-in-message.ts';

/**
 * Signature checks, offline and pure: no RPC node, no clock of their own (callers pass `now`).
 *
 * EVM: a 65-byte secp256k1 signature over the EIP-191 `personal_sign` hash of the message, which
 * must recover the address written in the message. Signatures are malleable (the high-s twin of a
 * valid signature is valid too), so a signature is never used as an identifier; the single-use
 * challenge is the replay defence. Any other signature (longer, ERC-6492's magic suffix, or 65
 * bytes that do not recover the address) may be a smart-contract wallet's, which only its chain
 * can check: see contract-signatures.ts. Decoding accepts any non-empty hex for that reason.
 *
 * Solana: a 64-byte ed25519 signature over the UTF-8 message bytes, checked with the public key
 * decoded from the address written in the message, never a key the client supplies.
 */

// Decoding a signature's text needs none of the checks below (nor viem): it lives apart, so the
// routes that only validate requests (a challenge) do not load them.
export { decodeEvmSignature, decodeSolanaSignature, EVM_SIGNATURE_BYTES, type DecodedSignature } from './signature-encoding.ts';

/** Does this 65-byte signature of `message` (personal_sign) recover `address`? Local: no RPC, ever. */
export async function verifyEvmSignature(message: string, signature: Uint8Array, address: string): Promise<boolean> {
  if (signature.length !== EVM_SIGNATURE_BYTES || ![0, 1, 27, 28].includes(signature[64]!)) return false;
  try {
    const recovered = await recoverMessageAddress({ message, signature: bytesToHex(signature) });
    return recovered.toLowerCase() === address.toLowerCase();
  } catch {
    return false; // r or s out of range, no point with that x: not a signature of anything
  }
}

const utf8 = new TextEncoder();

/** Is this ed25519 signature of the UTF-8 message valid for the public key the address encodes? */
export function verifySolanaSignature(message: string, signature: Uint8Array, address: string): boolean {
  const publicKey = decodeBase58(address);
  if (!publicKey || publicKey.length !== 32 || signature.length !== SOLANA_SIGNATURE_BYTES) return false;
  try {
    // zip215: false = RFC 8032 strict decoding (canonical encodings only).
    return ed25519.verify(signature, utf8.encode(message), publicKey, { zip215: false });
  } catch {
    return false;
  }
}

export function verifySignature(family: ChainFamily, message: string, signature: Uint8Array, address: string): Promise<boolean> {
  return family === 'evm' ? verifyEvmSignature(message, signature, address) : Promise.resolve(verifySolanaSignature(message, signature, address));
}

export type TimeCheck = { ok: true } | { ok: false; code: 'expired' | 'not_yet_valid'; reason: string };

/** Expiration Time and Not Before against the injected clock. */
export function checkSignInTimes(message: SignInMessage, now: Date): TimeCheck {
  const at = now.getTime();
  if (message.expirationTime !== undefined && parseRfc3339(message.expirationTime)! <= at) {
    return { ok: false, code: 'expired', reason: `The message expired at ${message.expirationTime}.` };
  }
  if (message.notBefore !== undefined && parseRfc3339(message.notBefore)! > at) {
    return { ok: false, code: 'not_yet_valid', reason: `The message is not valid before ${message.notBefore}.` };
  }
  return { ok: true };
}

export interface VerifySignInOptions {
  /** The clock; EIP-4361 verifiers default to the message's Issued At when none is given. */
  now: Date;
  /** The domain the signature must be bound to (this service's host). */
  domain?: string;
  /** The nonce the verifier issued. */
  nonce?: string;
  family?: ChainFamily;
}

export type VerifySignInResult =
  | { ok: true; message: SignInMessage }
  | { ok: false; code: 'malformed' | 'domain' | 'nonce' | 'expired' | 'not_yet_valid' | 'signature'; reason: string };

/**
 * The whole EIP-4361 verification of one message text and signature bytes: strict parse, domain
 * binding, nonce, time window, signature. The wallet-link flow adds its own checks on top
 * (see proof.ts); this is the general rule, also run against the reference vectors.
 */
export async function verifySignIn(text: string, signature: Uint8Array, options: VerifySignInOptions): Promise<VerifySignInResult> {
  const parsed = parseSignInMessage(text, options.family);
  if (!parsed.ok) return { ok: false, code: 'malformed', reason: parsed.reason };
  const message = parsed.message;
  if (options.domain !== undefined && message.domain !== options.domain) {
    return { ok: false, code: 'domain', reason: `The message is for ${message.domain}, not ${options.domain}.` };
  }
  if (options.nonce !== undefined && message.nonce !== options.nonce) return { ok: false, code: 'nonce', reason: 'The nonce is not the one issued.' };
  const times = checkSignInTimes(message, options.now);
  if (!times.ok) return times;
  if (!(await verifySignature(message.family, text, signature, message.address))) {
    return { ok: false, code: 'signature', reason: `The signature was not made by the key of ${message.address}.` };
  }
  return { ok: true, message };
}
