/**
 * The public shape of a wallet link, shared by POST/GET /api/wallet-link and GET /api/me.
 * The SQL functions (wallet_link, account_wallets) return rows already in this shape; the mapper
 * types them and normalises `createdAt` to ISO 8601 UTC.
 */
export type WalletLink =
  | { id: string; chain: 'evm'; address: string; chainId: number; createdAt: string }
  | { id: string; chain: 'solana'; address: string; cluster: string; createdAt: string };

/** A link as the SQL functions return it (`public.wallet_link_json`). */
export interface WalletLinkRow {
  id: string;
  chain: 'evm' | 'solana';
  address: string;
  chainId?: number | string | null;
  cluster?: string | null;
  createdAt: string;
}

export function toWalletLink(row: WalletLinkRow): WalletLink {
  const createdAt = new Date(row.createdAt).toISOString();
  if (row.chain === 'evm') return { id: row.id, chain: 'evm', address: row.address, chainId: Number(row.chainId), createdAt };
  return { id: row.id, chain: 'solana', address: row.address, cluster: String(row.cluster), createdAt };
}

/** For `public.account_wallets(p_user_id)`'s JSON array (null or absent = no links). */
export function toWalletLinks(rows: readonly WalletLinkRow[] | null | undefined): WalletLink[] {
  return (rows ?? []).map(toWalletLink);
}
