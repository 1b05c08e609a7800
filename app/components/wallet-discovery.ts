import { getWallets } from '@wallet-standard/app';
import type { Wallet, WalletAccount } from '@wallet-standard/base';
import { StandardConnect, type StandardConnectFeature } from '@wallet-standard/features';
import { SolanaSignMessage, type SolanaSignMessageFeature } from '@solana/wallet-standard-features';
import { createStore } from 'mipd';
import { PageError } from './api-client.ts';

/**
 * Every wallet installed in this browser, for the account page to list (browser-only code).
 *
 *   - EVM: EIP-6963. Each wallet announces itself (`eip6963:announceProvider`) with a name, an icon
 *     and its own EIP-1193 provider, so several can coexist without fighting over
 *     `window.ethereum`; mipd's store collects the announcements. `window.ethereum` is the
 *     fallback only while no wallet has announced.
 *   - Solana: the Wallet Standard (`getWallets()` of @wallet-standard/app), wallets with
 *     `standard:connect` and `solana:signMessage`. `window.phantom.solana` / `window.solana` is
 *     the fallback while none is registered.
 *
 * What a wallet announces is its own text: names and icons are treated as untrusted (shown as
 * text and as an <img> of a data: image only, see safeIcon).
 */

export interface Eip1193Provider {
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

export type DiscoveredWallet =
  | { key: string; family: 'evm'; name: string; icon?: string; provider: Eip1193Provider }
  | { key: string; family: 'solana'; name: string; icon?: string; solana: SolanaSigner };

/** A Solana wallet, whichever way it was found: share an account, sign bytes with it. */
export interface SolanaSigner {
  connect(): Promise<string>;
  signMessage(address: string, message: Uint8Array): Promise<Uint8Array>;
}

const MAX_NAME_LENGTH = 64;
const MAX_ICON_LENGTH = 256 * 1024;

/** A wallet's name as shown: trimmed, control characters out, at most 64 characters. */
export function displayName(name: unknown, fallback: string): string {
  const text = typeof name === 'string' ? name.replace(/[\u0000-\u001f\u007f]/g, '').trim() : '';
  if (!text) return fallback;
  return text.length > MAX_NAME_LENGTH ? `${text.slice(0, MAX_NAME_LENGTH - 1)}…` : text;
}

/**
 * An icon the page will draw: EIP-6963 and the Wallet Standard both say data URIs (RFC 2397) of
 * an image. Anything else (an http URL that would tell a server who visits, `javascript:`, a
 * data: HTML page) is dropped; an <img> never runs scripts, even those inside an SVG.
 */
export function safeIcon(icon: unknown): string | undefined {
  if (typeof icon !== 'string' || icon.length > MAX_ICON_LENGTH) return undefined;
  return /^data:image\/(?:png|jpeg|gif|webp|svg\+xml|avif|x-icon|vnd\.microsoft\.icon)[;,]/i.test(icon) ? icon : undefined;
}

/** Watch the installed wallets; `onChange` gets the whole list each time it changes. Returns the unsubscribe. */
export function watchWallets(onChange: (wallets: DiscoveredWallet[]) => void): () => void {
  const evmStore = createStore();
  const standard = getWallets();
  const publish = () => onChange([...evmWallets(evmStore.getProviders()), ...solanaWallets(standard.get())]);
  const unsubscribeEvm = evmStore.subscribe(publish);
  const unsubscribeRegister = standard.on('register', publish);
  const unsubscribeUnregister = standard.on('unregister', publish);
  publish();
  return () => {
    unsubscribeEvm();
    unsubscribeRegister();
    unsubscribeUnregister();
    evmStore.destroy();
  };
}

type AnnouncedProvider = ReturnType<ReturnType<typeof createStore>['getProviders']>[number];

function evmWallets(announced: readonly AnnouncedProvider[]): DiscoveredWallet[] {
  const wallets: DiscoveredWallet[] = [];
  for (const detail of announced) {
    // An announcement is a window event anyone on the page can send: take only well-formed ones.
    if (typeof detail?.info?.uuid !== 'string' || typeof detail.provider?.request !== 'function') continue;
    wallets.push({
      key: `evm:${detail.info.uuid}`,
      family: 'evm',
      name: displayName(detail.info.name, 'Ethereum wallet'),
      icon: safeIcon(detail.info.icon),
      provider: detail.provider as Eip1193Provider,
    });
  }
  if (wallets.length === 0 && typeof window.ethereum?.request === 'function') {
    wallets.push({ key: 'evm:window.ethereum', family: 'evm', name: 'Browser wallet', provider: window.ethereum });
  }
  return wallets;
}

type SolanaStandardWallet = Wallet & { features: StandardConnectFeature & SolanaSignMessageFeature };

function solanaWallets(registered: readonly Wallet[]): DiscoveredWallet[] {
  const wallets: DiscoveredWallet[] = [];
  registered.forEach((wallet, index) => {
    if (!(StandardConnect in wallet.features) || !(SolanaSignMessage in wallet.features)) return;
    const standard = wallet as SolanaStandardWallet;
    wallets.push({ key: `solana:${index}:${wallet.name}`, family: 'solana', name: displayName(wallet.name, 'Solana wallet'), icon: safeIcon(wallet.icon), solana: standardSigner(standard) });
  });
  const injected = window.phantom?.solana ?? window.solana;
  if (wallets.length === 0 && injected && typeof injected.signMessage === 'function') {
    wallets.push({ key: 'solana:window.solana', family: 'solana', name: 'Browser wallet', solana: injectedSigner(injected) });
  }
  return wallets;
}

function standardSigner(wallet: SolanaStandardWallet): SolanaSigner {
  let accounts: readonly WalletAccount[] = [];
  return {
    async connect() {
      ({ accounts } = await wallet.features[StandardConnect].connect());
      const account = accounts.find((candidate) => candidate.features.includes(SolanaSignMessage)) ?? accounts[0];
      if (!account) throw new PageError('The wallet shared no account.');
      return account.address;
    },
    async signMessage(address, message) {
      const account = accounts.find((candidate) => candidate.address === address);
      if (!account) throw new PageError('The wallet no longer shares this account.');
      const [signed] = await wallet.features[SolanaSignMessage].signMessage({ account, message });
      if (!signed) throw new PageError('The wallet returned no signature.');
      return signed.signature;
    },
  };
}

function injectedSigner(provider: InjectedSolanaProvider): SolanaSigner {
  return {
    async connect() {
      const connected = await provider.connect();
      const address = (connected && connected.publicKey?.toBase58()) ?? provider.publicKey?.toBase58();
      if (!address) throw new PageError('The wallet shared no account.');
      return address;
    },
    async signMessage(_address, message) {
      const signed = await provider.signMessage(message, 'utf8');
      return signed instanceof Uint8Array ? signed : signed.signature;
    },
  };
}
