/**
 * The public shape of a wallet link, shared by POST/GET /api/wallet-link and GET /api/me.
 * The SQL functions (wallet_link, account_wallets) return rows already in this shape; the mapper
 * types them for the wallet routes and normalises `createdAt` to ISO 8601 UTC. GET /api/me answers
 * account_wallets' JSON as it is (kept between reads: get_account_json).
 */
export type WalletLink =
  | { id: string; chain: 'evm'; address: string; chainId: number; kind: WalletProofKind; scope: EvmLinkScope; accountId: string; createdAt: string }
  | { id: string; chain: 'solana'; address: string; cluster: string; kind: 'eoa'; createdAt: string };

/**
 * What proved the wallet when it was linked: its own key (`eoa`; every Solana wallet), a deployed
 * smart-contract wallet (`erc1271`), or one not deployed yet (`erc6492`).
 */
export const WALLET_PROOF_KINDS = ['eoa', 'erc1271', 'erc6492'] as const;
export type WalletProofKind = (typeof WALLET_PROOF_KINDS)[number];

/**
 * Where an EVM link holds its address. `evm`: on every EVM chain, because the wallet's key proved
 * it and a key is the same wallet everywhere. `chain`: on chain `chainId` only, because a contract
 * proved it, and the same address on another chain is another contract (or none), with owners of
 * its own. One account holds a scope; scopes that overlap (a key's link and any contract link of
 * its address) too.
 */
export const EVM_LINK_SCOPES = ['evm', 'chain'] as const;
export type EvmLinkScope = (typeof EVM_LINK_SCOPES)[number];

/** A link as the SQL functions return it (`public.wallet_link_json`). */
export interface WalletLinkRow {
  id: string;
  chain: 'evm' | 'solana';
  address: string;
  chainId?: number | string | null;
  cluster?: string | null;
  kind: WalletProofKind;
  /** EVM links: see EvmLinkScope. */
  scope?: EvmLinkScope;
  /** EVM links: CAIP-10 `eip155:<chainId>:<address>`, the account on the chain the proof was made on. */
  accountId?: string;
  createdAt: string;
}

export function toWalletLink(row: WalletLinkRow): WalletLink {
  const createdAt = new Date(row.createdAt).toISOString();
  if (row.chain === 'evm') {
    return { id: row.id, chain: 'evm', address: row.address, chainId: Number(row.chainId), kind: row.kind, scope: row.scope!, accountId: row.accountId!, createdAt };
  }
  return { id: row.id, chain: 'solana', address: row.address, cluster: String(row.cluster), kind: 'eoa', createdAt };
}

/** For `public.account_wallets(p_user_id)`'s JSON array (null or absent = no links). */
export function toWalletLinks(rows: readonly WalletLinkRow[] | null | undefined): WalletLink[] {
  return (rows ?? []).map(toWalletLink);
}

