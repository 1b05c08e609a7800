'use client';

import { base58 } from '@scure/base';
import { useRouter } from 'next/navigation';
import { useState, useSyncExternalStore } from 'react';
import { callApi, PageError, walletErrorMessage } from './api-client.ts';

interface Eip1193Provider {
  request(args: { method: string; params?: unknown[] }): Promise<unknown>;
}
interface InjectedSolanaProvider {
  connect(): Promise<{ publicKey: { toBase58(): string } } | void>;
  publicKey?: { toBase58(): string } | null;
  signMessage(message: Uint8Array, encoding?: 'utf8'): Promise<{ signature: Uint8Array } | Uint8Array>;
}
declare global {
  interface Window {
    ethereum?: Eip1193Provider;
    solana?: InjectedSolanaProvider;
    phantom?: { solana?: InjectedSolanaProvider };
  }
}

interface Challenge {
  challengeId: string;
  address: string;
  message: string;
}

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
    throw new PageError(`Your wallet is on chain ${current}; switch it to one of these chains and try again: ${allowed.join(', ')}.`);
  }
}

const noSubscription = () => () => undefined;

/** "Link an Ethereum wallet" / "Link a Solana wallet": challenge -> sign in the wallet -> link. */
export function WalletLinker({ evmChainIds, solanaClusters }: { evmChainIds: number[]; solanaClusters: string[] }) {
  const router = useRouter();
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  // Linking needs the wallet's scripts: the buttons appear once the page's JavaScript runs
  // (false in the server's HTML, true in the browser).
  const interactive = useSyncExternalStore(noSubscription, () => true, () => false);

  async function run(task: () => Promise<string>) {
    setBusy(true);
    setError(null);
    setNotice(null);
    try {
      setNotice(await task());
      router.refresh();
    } catch (e) {
      setError(walletErrorMessage(e));
    } finally {
      setBusy(false);
    }
  }

  const linkEthereum = () =>
    run(async () => {
      const provider = window.ethereum;
      if (!provider) throw new PageError('No Ethereum wallet found in this browser. Install one (for example MetaMask) and reload.');
      const [address] = (await provider.request({ method: 'eth_requestAccounts' })) as string[];
      if (!address) throw new PageError('The wallet shared no account.');
      const chainId = await allowedChain(provider, evmChainIds);
      const challenge = await callApi<Challenge>('/api/wallet-link/challenge', { method: 'POST', body: { chain: 'evm', address, chainId } });
      const signature = (await provider.request({ method: 'personal_sign', params: [toHex(challenge.message), address] })) as string;
      const result = await callApi<{ alreadyLinked: boolean; link: { address: string } }>('/api/wallet-link', {
        method: 'POST',
        body: { payload: { chain: 'evm', address: challenge.address, chainId, message: challenge.message, signature } },
      });
      return result.alreadyLinked ? `${result.link.address} was already linked.` : `Linked ${result.link.address}.`;
    });

  const linkSolana = () =>
    run(async () => {
      const provider = window.phantom?.solana ?? window.solana;
      if (!provider) throw new PageError('No Solana wallet found in this browser. Install one (for example Phantom) and reload.');
      const connected = await provider.connect();
      const address = (connected && connected.publicKey?.toBase58()) ?? provider.publicKey?.toBase58();
      if (!address) throw new PageError('The wallet shared no account.');
      const cluster = solanaClusters[0];
      const challenge = await callApi<Challenge>('/api/wallet-link/challenge', { method: 'POST', body: { chain: 'solana', address, cluster } });
      const signed = await provider.signMessage(new TextEncoder().encode(challenge.message), 'utf8');
      const signature = base58.encode(signed instanceof Uint8Array ? signed : signed.signature);
      const result = await callApi<{ alreadyLinked: boolean; link: { address: string } }>('/api/wallet-link', {
        method: 'POST',
        body: { payload: { chain: 'solana', address: challenge.address, cluster, message: challenge.message, signature } },
      });
      return result.alreadyLinked ? `${result.link.address} was already linked.` : `Linked ${result.link.address}.`;
    });

  if (!interactive) return <p className="muted">Linking a wallet needs JavaScript and a browser wallet.</p>;
  return (
    <div>
      <div className="row">
        <button type="button" className="primary" onClick={linkEthereum} disabled={busy}>Link an Ethereum wallet</button>
        {solanaClusters.length > 0 && <button type="button" onClick={linkSolana} disabled={busy}>Link a Solana wallet</button>}
      </div>
      {busy && <p className="muted" aria-live="polite">Waiting for your wallet…</p>}
      {error && <p role="alert">{error}</p>}
      {notice && <p role="status">{notice}</p>}
    </div>
  );
}

/** Unlink one wallet (DELETE /api/wallet-link/{id}). */
export function UnlinkButton({ linkId, address }: { linkId: string; address: string }) {
  const router = useRouter();
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
            await callApi(`/api/wallet-link/${encodeURIComponent(linkId)}`, { method: 'DELETE' });
            router.refresh();
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
