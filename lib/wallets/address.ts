import { ed25519 } from '@noble/curves/ed25519.js';
import { base58 } from '@scure/base';
import { checksumAddress } from 'viem';

export type ChainFamily = 'evm' | 'solana';
export const CHAIN_FAMILIES: readonly ChainFamily[] = ['evm', 'solana'];

/** A wallet address in both forms the service needs. */
export interface WalletAddress {
  /** Canonical display form: EIP-55 checksummed hex, or base58. Shown to users and written in messages. */
  address: string;
  /** The form uniqueness is decided on: lower-case hex for EVM (case is only a checksum), base58 for Solana. */
  addressKey: string;
}

export type AddressResult = ({ ok: true } & WalletAddress) | { ok: false; reason: string };

const EVM_HEX = /^0x[0-9a-fA-F]{40}$/;

/**
 * `0x` + 40 hex digits. All-lower or all-upper case carries no checksum and is accepted; mixed case
 * is an EIP-55 checksum and must be right, because a wrong one usually means a mistyped address.
 */
export function parseEvmAddress(raw: string): AddressResult {
  if (!EVM_HEX.test(raw)) return { ok: false, reason: 'An EVM address is "0x" followed by 40 hexadecimal digits.' };
  const digits = raw.slice(2);
  const checksummed = checksumAddress(`0x${digits.toLowerCase()}`);
  const uncased = digits === digits.toLowerCase() || digits === digits.toUpperCase();
  if (!uncased && raw !== checksummed) {
    return { ok: false, reason: 'The address mixes upper and lower case but is not a valid EIP-55 checksum; check it for typos.' };
  }
  return { ok: true, address: checksummed, addressKey: checksummed.toLowerCase() };
}

/** True when the text is exactly the EIP-55 form (what a sign-in message must carry). */
export function isEip55Address(raw: string): boolean {
  return EVM_HEX.test(raw) && checksumAddress(`0x${raw.slice(2).toLowerCase()}`) === raw;
}

const BASE58 = /^[1-9A-HJ-NP-Za-km-z]+$/;

/**
 * Base58 that decodes to exactly 32 bytes, and a point on the ed25519 curve: an off-curve address
 * (a program-derived address) has no private key, so no wallet could ever sign a challenge for it.
 */
export function parseSolanaAddress(raw: string): AddressResult {
  if (raw.length < 32 || raw.length > 44 || !BASE58.test(raw)) {
    return { ok: false, reason: 'A Solana address is 32 to 44 base58 characters.' };
  }
  const bytes = decodeBase58(raw);
  if (!bytes || bytes.length !== 32) return { ok: false, reason: 'A Solana address must decode to exactly 32 bytes.' };
  if (!ed25519.utils.isValidPublicKey(bytes, false)) {
    return { ok: false, reason: 'This address is not an ed25519 public key (a program-derived address cannot sign).' };
  }
  // Base58 has one spelling per byte string, so the input is already canonical.
  return { ok: true, address: raw, addressKey: raw };
}

export function parseWalletAddress(chain: ChainFamily, raw: string): AddressResult {
  return chain === 'evm' ? parseEvmAddress(raw) : parseSolanaAddress(raw);
}

export function decodeBase58(text: string): Uint8Array | undefined {
  try {
    return base58.decode(text);
  } catch {
    return undefined;
  }
}
