import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { hasChromium, launchChromium } from '../support/browser.ts';
import { startNextServer, type NextServer } from '../../scripts/support/next-server.ts';
import { migratedEmbeddedDbDir } from '../support/databases.ts';
import { requireProductionBuild } from '../support/production-build.ts';

/**
 * The pages' browser hardening, on the production server in Chromium: a nonce-based
 * Content-Security-Policy that the account page and the API reference both work under (no
 * violation reported while they sign in, render and call the API), the other headers, and the
 * session token kept on the server: the cookie is httpOnly and no response the page receives
 * (HTML, server actions, API calls) carries the token.
 */
describe.skipIf(!hasChromium)('page security headers and the session token, in Chromium', () => {
  let server: NextServer;
  let browser: Browser;
  let dataDir: string;

  beforeAll(async () => {
    requireProductionBuild();
    dataDir = mkdtempSync(path.join(tmpdir(), 'account-link-browser-security-'));
    server = await startNextServer({
      env: { EMBEDDED_DB_DIR: migratedEmbeddedDbDir(dataDir), APP_ORIGIN: undefined, DATABASE_URL: undefined, SUPABASE_URL: undefined, LOCAL_DEV: undefined, LOG_LEVEL: 'warn' },
    });
    browser = await launchChromium();
  }, 240_000);

  afterAll(async () => {
    await browser?.close();
    await server?.stop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it.each(['/', '/docs'])('%s sends a nonce-based CSP (new nonce each time), frame-ancestors none, nosniff and a Referrer-Policy', async (pathname) => {
    const [first, second] = [await fetch(`${server.url}${pathname}`), await fetch(`${server.url}${pathname}`)];
    const policy = first.headers.get('content-security-policy') ?? '';
    const nonce = /'nonce-([A-Za-z0-9+/=]+)'/.exec(policy)?.[1];
    expect(nonce).toBeTruthy();
    expect(policy).toMatch(/script-src 'self' 'nonce-[^']+' 'strict-dynamic'(;|$)/);
    expect(policy).toContain("frame-ancestors 'none'");
    expect(policy).toContain("object-src 'none'");
    expect(second.headers.get('content-security-policy')).not.toContain(nonce!);
    // Next's scripts carry this response's nonce.
    expect(await first.text()).toContain(`nonce="${nonce}"`);
    expect({ nosniff: first.headers.get('x-content-type-options'), referrer: first.headers.get('referrer-policy'), frame: first.headers.get('x-frame-options') })
      .toEqual({ nosniff: 'nosniff', referrer: 'strict-origin-when-cross-origin', frame: 'DENY' });
  });

  it('API answers may load nothing and are never sniffed', async () => {
    const response = await fetch(`${server.url}/api/health/live`);
    expect({ csp: response.headers.get('content-security-policy'), nosniff: response.headers.get('x-content-type-options') })
      .toEqual({ csp: "default-src 'none'; frame-ancestors 'none'", nosniff: 'nosniff' });
  });

  /** Collects CSP violations (the DOM event and the console's report) and every text response. */
  async function watchedPage(): Promise<{ page: Page; violations: string[]; bodies: string[] }> {
    const context = await browser.newContext();
    await context.addInitScript(() => {
      document.addEventListener('securitypolicyviolation', (event) => {
        console.error(`CSP violation: ${event.violatedDirective} blocked ${event.blockedURI}`);
      });
      // A wallet that shares an account and a chain, then declines to sign: enough for the page
      // to ask the API for a challenge.
      (window as unknown as { ethereum: unknown }).ethereum = {
        async request({ method }: { method: string }) {
          if (method === 'eth_requestAccounts') return ['0x52908400098527886E0F7030069857D2E4169EE7'];
          if (method === 'eth_chainId') return '0x1';
          throw Object.assign(new Error('User rejected the request.'), { code: 4001 });
        },
      };
    });
    const page = await context.newPage();
    const violations: string[] = [];
    const bodies: string[] = [];
    page.on('console', (message) => {
      if (/content security policy|CSP violation/i.test(message.text())) violations.push(message.text());
    });
    // Every response body, read in full before the page gets it (a listener on the page cannot
    // read streamed bodies such as server actions' answers).
    await context.route('**/*', async (route) => {
      try {
        const response = await route.fetch({ maxRedirects: 0 });
        const body = await response.body();
        bodies.push(`${route.request().method()} ${new URL(route.request().url()).pathname}\n${body.toString('utf8')}`);
        await route.fulfill({ response, body });
      } catch {
        // The context closed while a late request (a prefetch) was in flight.
      }
    });
    return { page, violations, bodies };
  }

  it('the account page signs in, renders and calls the API under its CSP, and its scripts never receive the session token', async () => {
    const { page, violations, bodies } = await watchedPage();
    await page.goto(server.url);
    await page.getByLabel('E-mail').fill('csp@example.com');
    await page.getByRole('button', { name: 'Sign in locally' }).click();
    await page.getByTestId('user-id').waitFor();

    // The page's script asks the API for a challenge (through the server), then the wallet declines.
    await page.getByRole('button', { name: 'Link Browser wallet (Ethereum)' }).click();
    await page.getByRole('alert').filter({ hasText: 'You rejected the request in your wallet.' }).waitFor();

    const cookie = (await page.context().cookies()).find((c) => c.name === 'account_session');
    expect(cookie).toMatchObject({ httpOnly: true, sameSite: 'Lax' });
    expect(await page.evaluate(() => document.cookie)).not.toContain('account_session');
    const carrying = bodies.filter((body) => body.includes(cookie!.value) || body.includes(cookie!.value.split('.')[2]!));
    expect(carrying.map((body) => body.split('\n')[0])).toEqual([]);
    // Server actions were among what was read: sign-in, and the API call made through the server.
    expect(bodies.filter((body) => body.startsWith('POST /\n')).length).toBeGreaterThanOrEqual(2);
    // The challenge reached the page: the API was called as the signed-in user.
    expect(bodies.some((body) => body.includes('wants you to sign in with your Ethereum account'))).toBe(true);
    expect(violations).toEqual([]);
    await page.context().close();
  });

  it('the API reference renders Swagger UI under its CSP', async () => {
    const { page, violations } = await watchedPage();
    await page.goto(`${server.url}/docs`);
    await page.locator('.swagger-ui .info .title').first().waitFor();
    await page.locator('#problem-invalid_request').waitFor();
    expect(violations).toEqual([]);
    await page.context().close();
  });

  it('answers /favicon.ico, so a page load asks for nothing that is missing', async () => {
    const { page, bodies } = await watchedPage();
    const missing: string[] = [];
    page.on('response', (response) => {
      if (response.status() >= 400) missing.push(`${response.status()} ${response.url()}`);
    });
    await page.goto(server.url);
    await page.getByRole('button', { name: 'Sign in locally' }).waitFor();
    expect((await fetch(`${server.url}/favicon.ico`)).status).toBe(200);
    expect(missing).toEqual([]);
    expect(bodies.length).toBeGreaterThan(0);
    await page.context().close();
  });
});
