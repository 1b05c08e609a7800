import type { WalletProofKind } from '#lib/wallets/links.ts';

/** How the account page names what proved a wallet (a link's `kind`); shared by the server page and the linker. */
export const PROOF_KIND_LABELS: Record<WalletProofKind, string> = {
  eoa: 'Key signature',
  erc1271: 'Smart account (ERC-1271)',
  erc6492: 'Smart account, not yet deployed (ERC-6492)',
};
