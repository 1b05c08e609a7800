import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { ed25519 } from '@noble/curves/ed25519.js';
import { base58 } from '@scure/base';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import type { Hex } from 'viem';
import { hasChromium, launchChromium } from '../support/browser.ts';
import { ensureProductionBuild, startNextServer, type NextServer } from '../support/next-server.ts';

/**
 * The account page in a real browser (Debian's Chromium driven by playwright-core) against the
 * production build in embedded mode. The page's own code links a wallet through an EIP-1193
 * provider injected before the page loads, backed by a viem local account: real keys, real
 * signatures, real API calls.
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

  beforeAll(async () => {
    ensureProductionBuild();
    dataDir = mkdtempSync(path.join(tmpdir(), 'account-link-browser-'));
    server = await startNextServer({
      env: { EMBEDDED_DB_DIR: path.join(dataDir, 'pglite'), APP_ORIGIN: undefined, DATABASE_URL: undefined, SUPABASE_URL: undefined, LOG_LEVEL: 'warn' },
    });
    browser = await launchChromium();
  }, 240_000);

  afterAll(async () => {
    await browser?.close();
    await server?.stop();
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
    await page.getByRole('button', { name: 'Link an Ethereum wallet' }).click();
    await page.getByRole('status').filter({ hasText: `Linked ${owner.address}.` }).waitFor();
    await expect.poll(() => page.getByTestId('wallet-address').allTextContents()).toEqual([owner.address]);

    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: path.join(ARTIFACTS, 'account-page-signed-in.png'), fullPage: true });

    // Unlink.
    await page.getByRole('button', { name: `Unlink ${owner.address}` }).click();
    await page.getByText('No wallet linked yet.').waitFor();

    // A signature by another key: the API refuses it and the page shows the API's message.
    walletMode = 'wrong-key';
    await page.getByRole('button', { name: 'Link an Ethereum wallet' }).click();
    // (Next adds an empty role=alert route announcer outside <main>.)
    const refused = page.locator('main [role="alert"]');
    await refused.waitFor();
    expect(await refused.textContent()).toBe(`The signature was not made by the key of ${owner.address} over this exact message.`);
    expect(await page.getByTestId('wallet-address').count()).toBe(0);

    // The person says no in their wallet.
    walletMode = 'reject';
    await page.getByRole('button', { name: 'Link an Ethereum wallet' }).click();
    await page.locator('main [role="alert"]').filter({ hasText: 'You rejected the request in your wallet.' }).waitFor();

    // A wallet on a chain this service does not accept, which will not switch: the page says which chains work.
    walletMode = 'sign';
    walletChainId = 137;
    walletSwitches = false;
    await page.getByRole('button', { name: 'Link an Ethereum wallet' }).click();
    await page.locator('main [role="alert"]').filter({ hasText: 'Your wallet is on chain 137; switch it to one of these chains and try again: 1, 8453.' }).waitFor();
    // One that switches when asked: linked on the first accepted chain.
    walletSwitches = true;
    await page.getByRole('button', { name: 'Link an Ethereum wallet' }).click();
    await page.getByRole('status').filter({ hasText: `Linked ${owner.address}.` }).waitFor();
    expect(walletChainId).toBe(1);
    // (The status shows before the refreshed list does.)
    await page.getByText('Ethereum (chain 1)').waitFor();
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
    expect(await page.getByRole('button', { name: 'Link an Ethereum wallet' }).count()).toBe(0);
    expect(await page.getByText('Linking a wallet needs JavaScript and a browser wallet.').isVisible()).toBe(true);
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('button', { name: 'Sign in locally' }).waitFor();
    await context.close();
  });

  it('says so plainly when the browser has no wallet', async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    await signInLocally(page, 'nowallet@example.com');
    await page.getByRole('button', { name: 'Link an Ethereum wallet' }).click();
    const alert = page.locator('main [role="alert"]');
    await alert.waitFor();
    expect(await alert.textContent()).toBe('No Ethereum wallet found in this browser. Install one (for example MetaMask) and reload.');
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
    await page.getByRole('button', { name: 'Link a Solana wallet' }).click();
    await page.getByRole('status').filter({ hasText: `Linked ${address}.` }).waitFor();
    await expect.poll(() => page.getByTestId('wallet-address').allTextContents()).toEqual([address]);
    expect(await page.getByText('Solana (mainnet)').isVisible()).toBe(true);
    await page.getByRole('button', { name: `Unlink ${address}` }).click();
    await page.getByText('No wallet linked yet.').waitFor();
    await context.close();
  });
});
