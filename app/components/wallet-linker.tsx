'use client';

import { base58 } from '@scure/base';
import { useEffect, useState, useSyncExternalStore } from 'react';
import { expectData, type WalletLink } from '#client';
import { useAccount } from '#client/react';
import { describeEvmChain } from '#lib/wallets/chains.ts';
import { pageApi, PageError, walletErrorMessage } from './api-client.ts';
import { PROOF_KIND_LABELS } from './proof-kinds.ts';
import { watchWallets, type DiscoveredWallet, type Eip1193Provider, type SolanaSigner } from './wallet-discovery.ts';

const toHex = (text: string) => `0x${Array.from(new TextEncoder().encode(text), (b) => b.toString(16).padStart(2, '0')).join('')}`;

/**
 * The wallet's chain when it is one this service accepts; otherwise ask the wallet to switch to the
 * first accepted one (EIP-3326), and say which chains work when it will not.
 */
async function allowedChain(provider: Eip1193Provider, allowed: number[]): Promise<number> {
  const current = Number.parseInt(String(await provider.request({ method: 'eth_chainId' })), 16);
  if (allowed.includes(current)) return current;
  const wanted = allowed[0]!;
  try {
    await provider.request({ method: 'wallet_switchEthereumChain', params: [{ chainId: `0x${wanted.toString(16)}` }] });
    return wanted;
  } catch {
    throw new PageError(`Your wallet is on ${describeEvmChain(current)}; switch it to one of these chains and try again: ${allowed.map(describeEvmChain).join(', ')}.`);
  }
}

function linkedNotice(result: { alreadyLinked: boolean; link: WalletLink }): string {
  const kind = result.link.kind === 'eoa' ? '' : `: ${PROOF_KIND_LABELS[result.link.kind]}`;
  return result.alreadyLinked ? `${result.link.address} was already linked.` : `Linked ${result.link.address}${kind}.`;
}

/** Challenge -> personal_sign in the chosen EVM wallet -> link. Only that wallet is asked for anything. */
async function linkEvmWallet(provider: Eip1193Provider, evmChainIds: number[]): Promise<string> {
  const [address] = (await provider.request({ method: 'eth_requestAccounts' })) as string[];
  if (!address) throw new PageError('The wallet shared no account.');
  const chainId = await allowedChain(provider, evmChainIds);
  const challenge = await expectData(pageApi.POST('/api/wallet-link/challenge', { body: { chain: 'evm', address, chainId } }));
  // Smart wallets answer with an ERC-1271 signature, or ERC-6492 before their account is deployed:
  // the service checks either on this chain.
  const signature = (await provider.request({ method: 'personal_sign', params: [toHex(challenge.message), address] })) as string;
  return linkedNotice(await expectData(pageApi.POST('/api/wallet-link', {
    body: { payload: { chain: 'evm', address: challenge.address, chainId, message: challenge.message, signature } },
  })));
}

/** Challenge -> signMessage in the chosen Solana wallet -> link. */
async function linkSolanaWallet(wallet: SolanaSigner, cluster: string): Promise<string> {
  const address = await wallet.connect();
  const challenge = await expectData(pageApi.POST('/api/wallet-link/challenge', { body: { chain: 'solana', address, cluster } }));
  const signature = base58.encode(await wallet.signMessage(address, new TextEncoder().encode(challenge.message)));
  return linkedNotice(await expectData(pageApi.POST('/api/wallet-link', {
    body: { payload: { chain: 'solana', address: challenge.address, cluster, message: challenge.message, signature } },
  })));
}

const noSubscription = () => () => undefined;
const FAMILY_NAMES = { evm: 'Ethereum', solana: 'Solana' } as const;

/** Every wallet installed in this browser, by name and icon: pick one, sign the challenge in it, linked. */
export function WalletLinker({ evmChainIds, solanaClusters }: { evmChainIds: number[]; solanaClusters: string[] }) {
  const { refresh } = useAccount();
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const [wallets, setWallets] = useState<DiscoveredWallet[]>([]);
  // Linking needs the wallet's scripts: the list appears once the page's JavaScript runs
  // (false in the server's HTML, true in the browser).
  const interactive = useSyncExternalStore(noSubscription, () => true, () => false);
  useEffect(() => watchWallets(setWallets), []);

  const shown = wallets.filter((wallet) => wallet.family === 'evm' || solanaClusters.length > 0);

  async function link(wallet: DiscoveredWallet) {
    setBusy(true);
    setError(null);
    setNotice(null);
    try {
      setNotice(wallet.family === 'evm' ? await linkEvmWallet(wallet.provider, evmChainIds) : await linkSolanaWallet(wallet.solana, solanaClusters[0]!));
      await refresh();
    } catch (e) {
      setError(walletErrorMessage(e));
    } finally {
      setBusy(false);
    }
  }

  if (!interactive) return <p className="muted">Linking a wallet needs JavaScript and a browser wallet.</p>;
  return (
    <div>
      {shown.length === 0 ? (
        <p className="muted">
          No wallet found in this browser. Install one (for example MetaMask{solanaClusters.length > 0 ? ' or Phantom' : ''}) and reload.
        </p>
      ) : (
        <>
          <p className="muted">Link a wallet installed in this browser:</p>
          <ul className="wallets" aria-label="Wallets in this browser">
            {shown.map((wallet) => (
              <li key={wallet.key}>
                <button type="button" onClick={() => link(wallet)} disabled={busy} aria-label={`Link ${wallet.name} (${FAMILY_NAMES[wallet.family]})`}>
                  {wallet.icon ? (
                    // A data: image from the wallet's announcement; next/image would proxy it for nothing.
                    // eslint-disable-next-line @next/next/no-img-element
                    <img src={wallet.icon} alt="" width={24} height={24} data-testid="wallet-icon" />
                  ) : (
                    <span className="wallet-icon-placeholder" aria-hidden="true" />
                  )}
                  <span data-testid="wallet-name">{wallet.name}</span>
                  <span className="muted">{FAMILY_NAMES[wallet.family]}</span>
                </button>
              </li>
            ))}
          </ul>
        </>
      )}
      {busy && <p className="muted" aria-live="polite">Waiting for your wallet…</p>}
      {error && <p role="alert">{error}</p>}
      {notice && <p role="status">{notice}</p>}
    </div>
  );
}

/** Unlink one wallet (DELETE /api/wallet-link/{id}). */
export function UnlinkButton({ linkId, address }: { linkId: string; address: string }) {
  const { refresh } = useAccount();
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  return (
    <>
      <button
        type="button"
        className="danger"
        disabled={busy}
        aria-label={`Unlink ${address}`}
        onClick={async () => {
          setBusy(true);
          setError(null);
          try {
            await expectData(pageApi.DELETE('/api/wallet-link/{linkId}', { params: { path: { linkId } } }));
            await refresh();
          } catch (e) {
            setError(walletErrorMessage(e));
          } finally {
            setBusy(false);
          }
        }}
      >
        Unlink
      </button>
      {error && <span role="alert">{error}</span>}
    </>
  );
}
