import { ed25519 } from '@noble/curves/ed25519.js';
import { base58 } from '@scure/base';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { bytesToHex, hexToBytes, type Hex } from 'viem';

/** Real wallets for the tests: an EVM key (signs like personal_sign) and an ed25519 key pair (Solana). */

export function evmWallet(privateKey: Hex = generatePrivateKey()) {
  const account = privateKeyToAccount(privateKey);
  return {
    chain: 'evm' as const,
    address: account.address,
    /** EIP-191 personal_sign of the UTF-8 message, as a browser wallet answers it. */
    sign: (message: string) => account.signMessage({ message }),
  };
}

export function solanaWallet() {
  const { secretKey, publicKey } = ed25519.keygen();
  return {
    chain: 'solana' as const,
    address: base58.encode(publicKey),
    /** signMessage of the UTF-8 bytes, base58-encoded as clients send it. */
    sign: async (message: string) => base58.encode(ed25519.sign(new TextEncoder().encode(message), secretKey)),
  };
}

export type TestWallet = ReturnType<typeof evmWallet> | ReturnType<typeof solanaWallet>;

const SECP256K1_N = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n;

/** The high-s twin of a 65-byte signature: s' = n - s and the other recovery id. Recovers the same key. */
export function highSTwin(signature: Hex): Hex {
  const bytes = hexToBytes(signature);
  const s = BigInt(bytesToHex(bytes.slice(32, 64)));
  const twin = new Uint8Array(bytes);
  twin.set(hexToBytes(`0x${(SECP256K1_N - s).toString(16).padStart(64, '0')}`), 32);
  const v = bytes[64]!;
  twin[64] = v === 27 ? 28 : v === 28 ? 27 : v ^ 1;
  return bytesToHex(twin);
}

/** The network field of a challenge request for this wallet's family (defaults: the config's first). */
export function networkOf(wallet: TestWallet): { chainId: number } | { cluster: string } {
  return wallet.chain === 'evm' ? { chainId: 1 } : { cluster: 'mainnet' };
}
