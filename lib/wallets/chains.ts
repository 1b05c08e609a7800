/**
 * What people call the EVM chains a deployment is likely to accept (WALLET_EVM_CHAIN_IDS), for
 * pages and messages a person reads: "Base", not "Ethereum (chain 8453)". The names are the chains'
 * own, as viem's chain definitions spell them (tests/wallets/chains.test.ts checks each); a chain
 * not listed is named by its id. A table rather than viem/chains itself, which would bring every
 * chain viem knows into the account page's bundle.
 */
export const EVM_CHAIN_NAMES: Readonly<Record<number, string>> = {
  1: 'Ethereum',
  10: 'OP Mainnet',
  56: 'BNB Smart Chain',
  137: 'Polygon',
  324: 'ZKsync Era',
  8453: 'Base',
  42161: 'Arbitrum One',
  42220: 'Celo',
  43114: 'Avalanche',
  59144: 'Linea Mainnet',
  81457: 'Blast',
  534352: 'Scroll',
  7777777: 'Zora',
  11155111: 'Sepolia',
  84532: 'Base Sepolia',
  31337: 'Anvil',
};

/** "Base (chain 8453)"; a chain the table does not know: "EVM chain 12345". */
export function describeEvmChain(chainId: number): string {
  const name = EVM_CHAIN_NAMES[chainId];
  return name ? `${name} (chain ${chainId})` : `EVM chain ${chainId}`;
}
