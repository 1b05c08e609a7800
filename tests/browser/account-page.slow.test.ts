import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { ed25519 } from '@noble/curves/ed25519.js';
import { base58 } from '@scure/base';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { hexToString, type Hex } from 'viem';
import { hasChromium, launchChromium } from '../support/browser.ts';
import { startLocalChain, type LocalChain } from '../../scripts/support/local-chain.ts';
import { startNextServer, type NextServer } from '../../scripts/support/next-server.ts';
import { migratedEmbeddedDbDir } from '../support/databases.ts';
import { requireProductionBuild } from '../support/production-build.ts';

/**
 * The account page in a real browser (Debian's Chromium driven by playwright-core) against the
 * production build in embedded mode. The page's own code links a wallet through wallets injected
 * before the page loads (window.ethereum, EIP-6963 announcements, a Wallet Standard wallet,
 * window.solana), backed by viem local accounts and ed25519 keys in this test: real keys, real
 * signatures, real API calls. Smart-contract wallets are checked on a real local chain (anvil,
 * chain 31337, the RPC the server is configured with).
 */
const ARTIFACTS = path.resolve('test-results');

type WalletMode = 'sign' | 'wrong-key' | 'reject';

describe.skipIf(!hasChromium)('the account page in Chromium', () => {
  let server: NextServer;
  let browser: Browser;
  let dataDir: string;
  const owner = privateKeyToAccount(generatePrivateKey());
  const stranger = privateKeyToAccount(generatePrivateKey());
  let walletMode: WalletMode = 'sign';
  let walletChainId = 1;
  let walletSwitches = true;
  let chain: LocalChain;

  beforeAll(async () => {
    requireProductionBuild();
    dataDir = mkdtempSync(path.join(tmpdir(), 'account-link-browser-'));
    chain = await startLocalChain({ chainId: 31337 });
    server = await startNextServer({
      env: {
        EMBEDDED_DB_DIR: migratedEmbeddedDbDir(dataDir), APP_ORIGIN: undefined, DATABASE_URL: undefined, SUPABASE_URL: undefined, LOG_LEVEL: 'warn',
        WALLET_EVM_CHAIN_IDS: '1,8453,31337', WALLET_EVM_RPC_URLS: `31337=${chain.url}`,
      },
    });
    browser = await launchChromium();
  }, 240_000);

  afterAll(async () => {
    await browser?.close();
    await server?.stop();
    await chain?.stop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  /** A browser context whose pages have window.ethereum, answered by the viem account in this test. */
  async function contextWithWallet(): Promise<BrowserContext> {
    const context = await browser.newContext();
    await context.exposeFunction('__testWallet', async (method: string, params: unknown[]) => {
      switch (method) {
        case 'eth_requestAccounts':
        case 'eth_accounts':
          return { result: [owner.address] };
        case 'eth_chainId':
          return { result: `0x${walletChainId.toString(16)}` };
        case 'wallet_switchEthereumChain': {
          if (!walletSwitches) return { error: { code: 4902, message: 'Unrecognized chain ID.' } };
          walletChainId = Number.parseInt((params[0] as { chainId: string }).chainId, 16);
          return { result: null };
        }
        case 'personal_sign': {
          if (walletMode === 'reject') return { error: { code: 4001, message: 'User rejected the request.' } };
          const signer = walletMode === 'wrong-key' ? stranger : owner;
          return { result: await signer.signMessage({ message: { raw: params[0] as Hex } }) };
        }
        default:
          return { error: { code: 4200, message: `Unsupported method ${method}` } };
      }
    });
    await context.addInitScript(() => {
      const call = (window as unknown as { __testWallet: (m: string, p: unknown[]) => Promise<{ result?: unknown; error?: { code: number; message: string } }> }).__testWallet;
      (window as unknown as { ethereum: unknown }).ethereum = {
        isTestWallet: true,
        async request({ method, params = [] }: { method: string; params?: unknown[] }) {
          const answer = await call(method, params);
          if (answer.error) throw Object.assign(new Error(answer.error.message), { code: answer.error.code });
          return answer.result;
        },
      };
    });
    return context;
  }

  async function signInLocally(page: Page, email: string) {
    await page.goto(server.url);
    await page.getByLabel('E-mail').fill(email);
    await page.getByRole('button', { name: 'Sign in locally' }).click();
    await page.getByTestId('email').waitFor();
  }

  it('signs in, links a wallet, lists it, unlinks it, and shows errors as messages', async () => {
    const context = await contextWithWallet();
    const page = await context.newPage();
    const pageErrors: string[] = [];
    page.on('pageerror', (error) => pageErrors.push(error.message));

    await signInLocally(page, 'ana@example.com');
    expect(await page.getByTestId('email').textContent()).toBe('ana@example.com');

    // The session cookie is httpOnly and its token is not written into the page.
    const [cookie] = (await context.cookies()).filter((c) => c.name === 'account_session');
    expect(cookie).toMatchObject({ httpOnly: true, sameSite: 'Lax' });
    const html = await (await fetch(server.url, { headers: { cookie: `account_session=${cookie!.value}` } })).text();
    expect(html).toContain('ana@example.com');
    expect(html).not.toContain(cookie!.value);
    await expect.poll(() => page.getByText('No wallet linked yet.').isVisible()).toBe(true);

    // Link: the page asks the wallet for its account, gets a challenge, has it signed, links it.
    walletMode = 'sign';
    await page.getByRole('button', { name: 'Link Browser wallet (Ethereum)' }).click();
    await page.getByRole('status').filter({ hasText: `Linked ${owner.address}.` }).waitFor();
    await expect.poll(() => page.getByTestId('wallet-address').allTextContents()).toEqual([owner.address]);

    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: path.join(ARTIFACTS, 'account-page-signed-in.png'), fullPage: true });

    // Unlink.
    await page.getByRole('button', { name: `Unlink ${owner.address}` }).click();
    await page.getByText('No wallet linked yet.').waitFor();

    // A signature by another key: the API refuses it and the page shows the API's message.
    walletMode = 'wrong-key';
    await page.getByRole('button', { name: 'Link Browser wallet (Ethereum)' }).click();
    // (Next adds an empty role=alert route announcer outside <main>.)
    const refused = page.locator('main [role="alert"]');
    await refused.waitFor();
    expect(await refused.textContent()).toBe(`The signature was not made by the key of ${owner.address} over this exact message. Smart-contract wallets are checked on ` +
      'their chain, and this service does not check them on chain 1: link an ordinary wallet there, or this wallet on a chain where smart-contract wallets are accepted.');
    expect(await page.getByTestId('wallet-address').count()).toBe(0);

    // The person says no in their wallet.
    walletMode = 'reject';
    await page.getByRole('button', { name: 'Link Browser wallet (Ethereum)' }).click();
    await page.locator('main [role="alert"]').filter({ hasText: 'You rejected the request in your wallet.' }).waitFor();

    // A wallet on a chain this service does not accept, which will not switch: the page says which chains work.
    walletMode = 'sign';
    walletChainId = 137;
    walletSwitches = false;
    await page.getByRole('button', { name: 'Link Browser wallet (Ethereum)' }).click();
    await page.locator('main [role="alert"]').filter({ hasText: 'Your wallet is on Polygon (chain 137); switch it to one of these chains and try again: Ethereum (chain 1), Base (chain 8453), Anvil (chain 31337).' }).waitFor();
    // One that switches when asked: linked on the first accepted chain.
    walletSwitches = true;
    await page.getByRole('button', { name: 'Link Browser wallet (Ethereum)' }).click();
    await page.getByRole('status').filter({ hasText: `Linked ${owner.address}.` }).waitFor();
    expect(walletChainId).toBe(1);
    // (The status shows before the refreshed list does.)
    await page.getByText('Ethereum (chain 1)').waitFor();
    expect(await page.getByTestId('wallet-kind').allTextContents()).toEqual(['Key signature']);
    await page.getByRole('button', { name: `Unlink ${owner.address}` }).click();
    await page.getByText('No wallet linked yet.').waitFor();

    // A phone's width: nothing wider than the screen.
    await page.setViewportSize({ width: 375, height: 800 });
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(375);

    expect(pageErrors).toEqual([]);
    await context.close();
  });

  it('works without JavaScript for signing in and reading the account', async () => {
    const context = await browser.newContext({ javaScriptEnabled: false });
    const page = await context.newPage();
    await signInLocally(page, 'nojs@localhost');
    expect(await page.getByTestId('email').textContent()).toBe('nojs@localhost');
    expect(await page.getByRole('heading', { name: 'Subscriptions' }).isVisible()).toBe(true);
    // Linking needs a browser wallet's scripts: no dead buttons, a plain sentence instead.
    expect(await page.getByRole('list', { name: 'Wallets in this browser' }).count()).toBe(0);
    expect(await page.getByText('Linking a wallet needs JavaScript and a browser wallet.').isVisible()).toBe(true);
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('button', { name: 'Sign in locally' }).waitFor();
    await context.close();
  });

  it('says so plainly when the browser has no wallet', async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    await signInLocally(page, 'nowallet@example.com');
    await page.getByText('No wallet found in this browser. Install one (for example MetaMask or Phantom) and reload.').waitFor();
    expect(await page.getByRole('list', { name: 'Wallets in this browser' }).count()).toBe(0);
    await context.close();
  });

  it('renders the API reference at /docs from this server alone', async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    const foreign: string[] = [];
    page.on('request', (request) => {
      if (!request.url().startsWith(server.url) && !request.url().startsWith('data:')) foreign.push(request.url());
    });
    await page.goto(`${server.url}/docs`);
    await page.locator('.opblock-summary-path', { hasText: '/api/webhooks/subscription-billing' }).first().waitFor();
    expect(await page.locator('.opblock').count()).toBeGreaterThanOrEqual(9);
    expect(await page.locator('#problem-wallet_already_linked').isVisible()).toBe(true);
    await page.screenshot({ path: path.join(ARTIFACTS, 'docs.png') });
    expect(foreign).toEqual([]);
    await context.close();
  });

  it('links and unlinks a Solana wallet through the injected provider (connect + signMessage)', async () => {
    const { secretKey, publicKey } = ed25519.keygen();
    const address = base58.encode(publicKey);
    const context = await browser.newContext();
    await context.exposeFunction('__testSolanaSign', (bytes: number[]) => Array.from(ed25519.sign(Uint8Array.from(bytes), secretKey)));
    await context.addInitScript((walletAddress: string) => {
      const sign = (window as unknown as { __testSolanaSign: (b: number[]) => Promise<number[]> }).__testSolanaSign;
      const key = { toBase58: () => walletAddress };
      (window as unknown as { solana: unknown }).solana = {
        publicKey: null,
        async connect() {
          return { publicKey: key };
        },
        async signMessage(message: Uint8Array) {
          return { signature: Uint8Array.from(await sign(Array.from(message))), publicKey: key };
        },
      };
    }, address);
    const page = await context.newPage();
    await signInLocally(page, 'sol@example.com');
    await page.getByRole('button', { name: 'Link Browser wallet (Solana)' }).click();
    await page.getByRole('status').filter({ hasText: `Linked ${address}.` }).waitFor();
    await expect.poll(() => page.getByTestId('wallet-address').allTextContents()).toEqual([address]);
    expect(await page.getByText('Solana (mainnet)').isVisible()).toBe(true);
    await page.getByRole('button', { name: `Unlink ${address}` }).click();
    await page.getByText('No wallet linked yet.').waitFor();
    await context.close();
  });
  // Two EIP-6963 wallets (an ordinary one and a smart-contract account) and one Wallet Standard
  // Solana wallet, each answered in this test by a real key.
  const ICONS = {
    eoa: 'data:image/svg+xml;base64,' + Buffer.from('<svg xmlns="http://www.w3.org/2000/svg" width="24" height="24"><rect width="24" height="24" fill="#f6851b"/></svg>').toString('base64'),
    smart: 'data:image/svg+xml;base64,' + Buffer.from('<svg xmlns="http://www.w3.org/2000/svg" width="24" height="24"><circle cx="12" cy="12" r="12" fill="#0052ff"/></svg>').toString('base64'),
    solana: 'data:image/svg+xml;base64,' + Buffer.from('<svg xmlns="http://www.w3.org/2000/svg" width="24" height="24"><rect width="24" height="24" fill="#9945ff"/></svg>').toString('base64'),
  };

  interface AnnouncedWallet { id: string; name: string; icon: string; rdns: string }

  /**
   * A browser context where wallets announce themselves as EIP-6963 says (on load and on each
   * `eip6963:requestProvider`) and a Solana wallet registers through the Wallet Standard's window
   * events; every request lands in `answer(walletId, method, params)` here, and is recorded.
   */
  async function contextWithWallets(announced: AnnouncedWallet[], answer: (id: string, method: string, params: unknown[]) => Promise<unknown>, solana?: { address: string; sign(bytes: Uint8Array): Uint8Array }) {
    const calls: { wallet: string; method: string }[] = [];
    const context = await browser.newContext();
    await context.exposeFunction('__evmWallet', async (id: string, method: string, params: unknown[]) => {
      calls.push({ wallet: id, method });
      try {
        return { result: await answer(id, method, params) };
      } catch (error) {
        return { error: { code: (error as { code?: number }).code ?? 4200, message: (error as Error).message } };
      }
    });
    if (solana) {
      await context.exposeFunction('__solanaWallet', (method: string, bytes: number[]) => {
        calls.push({ wallet: 'solana', method });
        return method === 'connect' ? solana.address : Array.from(solana.sign(Uint8Array.from(bytes)));
      });
    }
    await context.addInitScript(({ wallets, solanaWallet }) => {
      type Answer = { result?: unknown; error?: { code: number; message: string } };
      const w = window as unknown as { __evmWallet: (id: string, m: string, p: unknown[]) => Promise<Answer>; __solanaWallet: (m: string, b: number[]) => Promise<unknown> };
      const details = wallets.map(({ id, name, icon, rdns }) => ({
        info: { uuid: crypto.randomUUID(), name, icon, rdns },
        provider: {
          async request({ method, params = [] }: { method: string; params?: unknown[] }) {
            const answer = await w.__evmWallet(id, method, params);
            if (answer.error) throw Object.assign(new Error(answer.error.message), { code: answer.error.code });
            return answer.result;
          },
        },
      }));
      const announce = () => details.forEach((detail) => window.dispatchEvent(new CustomEvent('eip6963:announceProvider', { detail: Object.freeze(detail) })));
      window.addEventListener('eip6963:requestProvider', announce);
      announce();

      if (solanaWallet) {
        const account = { address: solanaWallet.address, publicKey: new Uint8Array(32), chains: ['solana:mainnet'], features: ['solana:signMessage'] };
        const wallet = {
          version: '1.0.0', name: solanaWallet.name, icon: solanaWallet.icon, chains: ['solana:mainnet'], accounts: [] as unknown[],
          features: {
            'standard:connect': { version: '1.0.0', connect: async () => { await w.__solanaWallet('connect', []); wallet.accounts = [account]; return { accounts: [account] }; } },
            'standard:events': { version: '1.0.0', on: () => () => undefined },
            'solana:signMessage': {
              version: '1.0.0',
              signMessage: (...inputs: { account: unknown; message: Uint8Array }[]) =>
                Promise.all(inputs.map(async ({ message }) => ({ signedMessage: message, signature: Uint8Array.from((await w.__solanaWallet('signMessage', Array.from(message))) as number[]) }))),
            },
          },
        };
        // The Wallet Standard's registration handshake, from the wallet's side.
        const callback = ({ register }: { register: (wallet: unknown) => void }) => register(wallet);
        window.dispatchEvent(new CustomEvent('wallet-standard:register-wallet', { detail: callback }));
        window.addEventListener('wallet-standard:app-ready', (event) => callback((event as CustomEvent).detail));
      }
    }, { wallets: announced, solanaWallet: solana ? { address: solana.address, name: 'Test Solana Wallet', icon: ICONS.solana } : undefined });
    return { context, calls };
  }

  it('lists every installed wallet (two EIP-6963, one Wallet Standard) by name and icon, links with the chosen one only, and shows what proved it', async () => {
    const eoa = privateKeyToAccount(generatePrivateKey());
    const smartOwner = privateKeyToAccount(generatePrivateKey());
    const smart = await chain.smartAccount(smartOwner);
    const solanaKeys = ed25519.keygen();
    const solanaAddress = base58.encode(solanaKeys.publicKey);
    const { context, calls } = await contextWithWallets(
      [
        { id: 'eoa', name: 'Test Key Wallet', icon: ICONS.eoa, rdns: 'com.example.keywallet' },
        { id: 'smart', name: 'Test Smart Wallet', icon: ICONS.smart, rdns: 'com.example.smartwallet' },
      ],
      async (id, method, params) => {
        const address = id === 'eoa' ? eoa.address : smart.address;
        if (method === 'eth_requestAccounts' || method === 'eth_accounts') return [address];
        if (method === 'eth_chainId') return '0x7a69'; // 31337
        if (method === 'personal_sign') {
          const message = hexToString(params[0] as Hex);
          if (id === 'eoa') return eoa.signMessage({ message });
          // Like Coinbase Smart Wallet: ERC-6492 while the account is not deployed, ERC-1271 after.
          return (await smart.isDeployed()) ? smart.sign(message) : smart.signCounterfactual(message);
        }
        throw Object.assign(new Error(`Unsupported method ${method}`), { code: 4200 });
      },
      { address: solanaAddress, sign: (bytes) => ed25519.sign(bytes, solanaKeys.secretKey) },
    );
    const page = await context.newPage();
    const pageErrors: string[] = [];
    page.on('pageerror', (error) => pageErrors.push(error.message));
    await signInLocally(page, 'many-wallets@example.com');

    const list = page.getByRole('list', { name: 'Wallets in this browser' });
    await expect.poll(() => list.getByTestId('wallet-name').allTextContents()).toEqual(['Test Key Wallet', 'Test Smart Wallet', 'Test Solana Wallet']);
    expect(await list.getByTestId('wallet-icon').evaluateAll((images) => images.map((image) => (image as HTMLImageElement).getAttribute('src')))).toEqual([ICONS.eoa, ICONS.smart, ICONS.solana]);
    expect(await list.getByTestId('wallet-icon').evaluateAll((images) => images.every((image) => (image as HTMLImageElement).naturalWidth === 24))).toBe(true);
    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: path.join(ARTIFACTS, 'account-page-wallets.png'), fullPage: true });

    // The smart wallet, not deployed yet: an ERC-6492 signature, checked on chain 31337; only it was asked.
    await page.getByRole('button', { name: 'Link Test Smart Wallet (Ethereum)' }).click();
    await page.getByRole('status').filter({ hasText: `Linked ${smart.address}: Smart account, not yet deployed (ERC-6492).` }).waitFor();
    await expect.poll(() => page.getByTestId('wallet-kind').allTextContents()).toEqual(['Smart account, not yet deployed (ERC-6492)']);
    expect(await page.getByText('Anvil (chain 31337)').isVisible()).toBe(true);
    expect(calls.filter((call) => call.wallet !== 'smart')).toEqual([]);
    expect(calls.map((call) => call.method)).toEqual(['eth_requestAccounts', 'eth_chainId', 'personal_sign']);
    expect(await smart.isDeployed()).toBe(false);

    // Deployed later, unlinked and linked again: ERC-1271 this time.
    await page.getByRole('button', { name: `Unlink ${smart.address}` }).click();
    await page.getByText('No wallet linked yet.').waitFor();
    await smart.deploy();
    await page.getByRole('button', { name: 'Link Test Smart Wallet (Ethereum)' }).click();
    await page.getByRole('status').filter({ hasText: `Linked ${smart.address}: Smart account (ERC-1271).` }).waitFor();
    await expect.poll(() => page.getByTestId('wallet-kind').allTextContents()).toEqual(['Smart account (ERC-1271)']);

    // The ordinary wallet and the Solana wallet: their own keys.
    await page.getByRole('button', { name: 'Link Test Key Wallet (Ethereum)' }).click();
    await page.getByRole('status').filter({ hasText: `Linked ${eoa.address}.` }).waitFor();
    await page.getByRole('button', { name: 'Link Test Solana Wallet (Solana)' }).click();
    await page.getByRole('status').filter({ hasText: `Linked ${solanaAddress}.` }).waitFor();
    await expect.poll(() => page.getByTestId('wallet-address').allTextContents()).toEqual([smart.address, eoa.address, solanaAddress]);
    expect(await page.getByTestId('wallet-kind').allTextContents()).toEqual(['Smart account (ERC-1271)', 'Key signature', 'Key signature']);
    expect(calls.filter((call) => call.wallet === 'solana').map((call) => call.method)).toEqual(['connect', 'signMessage']);
    await page.screenshot({ path: path.join(ARTIFACTS, 'account-page-wallet-kinds.png'), fullPage: true });

    for (const address of [smart.address, eoa.address, solanaAddress]) {
      await page.getByRole('button', { name: `Unlink ${address}` }).click();
      await expect.poll(() => page.getByTestId('wallet-address').allTextContents()).not.toContain(address);
    }
    expect(pageErrors).toEqual([]);
    await context.close();
  });

  it('shows a hostile wallet name as text and draws only data: image icons (no HTML, no script)', async () => {
    const hostileName = '<img src=x onerror="window.__pwned=1"><b>Evil</b>';
    const svgWithScript = 'data:image/svg+xml;base64,' + Buffer.from('<svg xmlns="http://www.w3.org/2000/svg" onload="window.top.__pwned=2"><script>window.top.__pwned=3</script><rect width="24" height="24"/></svg>').toString('base64');
    const { context, calls } = await contextWithWallets(
      [
        { id: 'a', name: hostileName, icon: 'javascript:window.__pwned=4', rdns: 'com.example.a' },
        { id: 'b', name: 'Scripted Icon', icon: svgWithScript, rdns: 'com.example.b' },
        { id: 'c', name: `  ${'Long'.repeat(40)}  `, icon: 'data:text/html,<script>window.top.__pwned=5</script>', rdns: 'com.example.c' },
        { id: 'd', name: 'Tracker', icon: 'https://tracker.example/pixel.png', rdns: 'com.example.d' },
      ],
      async () => {
        throw Object.assign(new Error('User rejected the request.'), { code: 4001 });
      },
    );
    const page = await context.newPage();
    const requested: string[] = [];
    page.on('request', (request) => requested.push(request.url()));
    await signInLocally(page, 'hostile@example.com');
    const list = page.getByRole('list', { name: 'Wallets in this browser' });
    await expect.poll(() => list.getByTestId('wallet-name').count()).toBe(4);
    const names = await list.getByTestId('wallet-name').allTextContents();
    expect(names[0]).toBe(hostileName);
    expect(names[1]).toBe('Scripted Icon');
    expect(names[2]).toHaveLength(64);
    // Only the SVG data: image is drawn, as an <img>; the others get the placeholder.
    expect(await list.getByTestId('wallet-icon').evaluateAll((images) => images.map((image) => (image as HTMLImageElement).getAttribute('src')))).toEqual([svgWithScript]);
    expect(await list.locator('.wallet-icon-placeholder').count()).toBe(3);
    // Nothing of the name became markup, and nothing ran.
    expect(await page.locator('main img:not([data-testid="wallet-icon"])').count()).toBe(0);
    expect(await page.locator('main b').count()).toBe(0);
    await page.getByRole('button', { name: /^Link <img src=x/ }).click();
    await page.locator('main [role="alert"]').filter({ hasText: 'You rejected the request in your wallet.' }).waitFor();
    expect(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned)).toBeUndefined();
    expect(requested.filter((url) => url.includes('tracker.example') || url.startsWith('javascript:'))).toEqual([]);
    expect(calls.map((call) => call.wallet)).toEqual(['a']);
    await context.close();
  });
});
