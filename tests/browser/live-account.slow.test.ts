import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Browser } from 'playwright-core';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mintDevToken } from '../../lib/auth/dev-key.ts';
import { DEV_WEBHOOK_SECRETS } from '../../lib/config.ts';
import { localUserIdFor } from '../../lib/web/session-cookie.ts';
import { fixture } from '../billing/fixtures.ts';
import { hasChromium, launchChromium } from '../support/browser.ts';
import { startNextServer, type NextServer } from '../../scripts/support/next-server.ts';
import { migratedEmbeddedDbDir } from '../support/databases.ts';
import { requireProductionBuild } from '../support/production-build.ts';

/**
 * The account page follows the account without a reload, in Chromium against the production build
 * in local mode: with the page open and signed in, a RevenueCat webhook for that user, then its
 * refund, then a wallet linked from outside the page (API calls with a real key) each show on the
 * page within two seconds of the call that made them. The page hears them on the service's own
 * stream (GET /api/me/events) and reads the account again through the typed client.
 */
const ARTIFACTS = path.resolve('test-results');
const DAY = 86_400_000;
const WITHIN_TWO_SECONDS = { timeout: 2_000, interval: 50 };

describe.skipIf(!hasChromium)('the account page, live, in Chromium', () => {
  let server: NextServer;
  let browser: Browser;
  let dataDir: string;

  beforeAll(async () => {
    requireProductionBuild();
    dataDir = mkdtempSync(path.join(tmpdir(), 'account-link-live-'));
    server = await startNextServer({
      env: { EMBEDDED_DB_DIR: migratedEmbeddedDbDir(dataDir), APP_ORIGIN: undefined, DATABASE_URL: undefined, SUPABASE_URL: undefined, LOG_LEVEL: 'warn', REVENUECAT_SECRET_API_KEY: undefined },
    });
    browser = await launchChromium();
  }, 240_000);

  afterAll(async () => {
    await browser?.close();
    await server?.stop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  const webhook = async (body: unknown) => {
    const response = await fetch(`${server.url}/api/webhooks/subscription-billing`, {
      method: 'POST',
      headers: { authorization: `Bearer ${DEV_WEBHOOK_SECRETS.subscription}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    expect(response.status).toBe(200);
  };

  it('shows a purchase, its refund and a wallet linked elsewhere, each within two seconds, without a reload', async () => {
    const email = 'live@example.com';
    const userId = localUserIdFor(email);
    const page = await browser.newPage();
    const pageErrors: string[] = [];
    page.on('pageerror', (error) => pageErrors.push(error.message));
    let navigations = 0;
    page.on('framenavigated', (frame) => {
      if (frame === page.mainFrame()) navigations++;
    });

    await page.goto(server.url);
    await page.getByLabel('E-mail').fill(email);
    await page.getByRole('button', { name: 'Sign in locally' }).click();
    await page.getByText('No subscription yet.').waitFor();
    // The page is listening (its stream is open) before anything happens.
    const liveness = page.getByTestId('live-updates');
    await expect.poll(() => liveness.getAttribute('data-live'), { timeout: 15_000 }).toBe('true');
    expect(await liveness.textContent()).toBe('Live: changes show as they happen');
    const loaded = navigations;

    const subscription = page.locator('section[aria-labelledby="entitlements"] tbody tr');
    const now = Date.now();
    const user = { app_user_id: userId, original_app_user_id: userId, aliases: [userId] };

    // A purchase, dated now.
    await webhook(fixture('initial-purchase', { ...user, id: randomUUID(), event_timestamp_ms: now, purchased_at_ms: now - 1_000, expiration_at_ms: now + 30 * DAY }));
    await expect.poll(() => subscription.allTextContents(), WITHIN_TWO_SECONDS).toEqual([expect.stringMatching(/^procom\.example\.pro\.monthlyactive\d{1,2} \w{3} \d{4}.*yes$/)]);

    // Its refund (RevenueCat: CANCELLATION with cancel_reason CUSTOMER_SUPPORT).
    await webhook(fixture('cancellation-customer-support', { ...user, id: randomUUID(), event_timestamp_ms: now + 1_000, purchased_at_ms: now - 1_000, expiration_at_ms: now + 1_000 }));
    await expect.poll(() => subscription.allTextContents(), WITHIN_TWO_SECONDS).toEqual([expect.stringMatching(/^procom\.example\.pro\.monthlyinactive refunded.*no$/)]);

    // A wallet linked from outside the page: the user's token, a challenge, a real key's signature.
    const token = await mintDevToken({ embeddedDbDir: path.join(dataDir, 'pglite') }, { userId, email });
    const wallet = privateKeyToAccount(generatePrivateKey());
    const api = (route: string, body: unknown) => fetch(`${server.url}${route}`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const challenge = (await (await api('/api/wallet-link/challenge', { chain: 'evm', address: wallet.address, chainId: 8453 })).json()) as { message: string };
    const linked = await api('/api/wallet-link', { payload: { chain: 'evm', address: wallet.address, chainId: 8453, message: challenge.message, signature: await wallet.signMessage({ message: challenge.message }) } });
    expect(linked.status).toBe(201);
    await expect.poll(() => page.getByTestId('wallet-address').allTextContents(), WITHIN_TWO_SECONDS).toEqual([wallet.address]);

    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: path.join(ARTIFACTS, 'account-page-live.png'), fullPage: true });
    expect(navigations).toBe(loaded); // no reload, no navigation: the page changed in place
    expect(pageErrors).toEqual([]);
    await page.close();
  });

});
