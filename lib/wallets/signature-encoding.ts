import { decodeBase58 } from './address.ts';

// A wallet signature's text as bytes: what a request's schema checks (lib/wallets/schemas.ts),
// before and apart from the signature checks themselves (verify.ts, which needs viem).

export type DecodedSignature = { ok: true; bytes: Uint8Array } | { ok: false; code: 'invalid_request'; reason: string };

/** The size of an ordinary wallet's signature (r, s, v); anything else can only be a contract wallet's. */
export const EVM_SIGNATURE_BYTES = 65;
/** The size of a Solana (ed25519) signature. */
export const SOLANA_SIGNATURE_BYTES = 64;

/** Hex bytes, any length: what a contract wallet's signature holds is for its contract to judge. */
export function decodeEvmSignature(text: string): DecodedSignature {
  if (!/^0x(?:[0-9a-fA-F]{2})+$/.test(text)) {
    return { ok: false, code: 'invalid_request', reason: 'An EVM signature is "0x" followed by an even number of hexadecimal digits.' };
  }
  return { ok: true, bytes: Uint8Array.from(text.slice(2).match(/../g)!, (pair) => Number.parseInt(pair, 16)) };
}

export function decodeSolanaSignature(text: string): DecodedSignature {
  const bytes = /^[1-9A-HJ-NP-Za-km-z]{1,100}$/.test(text) ? decodeBase58(text) : undefined;
  if (!bytes) return { ok: false, code: 'invalid_request', reason: 'A Solana signature is base58 text.' };
  if (bytes.length !== SOLANA_SIGNATURE_BYTES) {
    return { ok: false, code: 'invalid_request', reason: `A Solana signature is ${SOLANA_SIGNATURE_BYTES} bytes; this one is ${bytes.length}.` };
  }
  return { ok: true, bytes };
}

