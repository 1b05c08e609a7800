import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { localUserIdFor } from '../../lib/web/session-cookie.ts';
import { hasChromium, launchChromium } from '../support/browser.ts';
import { startFakeRevenueCat, v1Entitlement, v1Subscription, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { startNextServer, type NextServer } from '../../scripts/support/next-server.ts';
import { migratedEmbeddedDbDir } from '../support/databases.ts';
import { requireProductionBuild } from '../support/production-build.ts';

/**
 * "Refresh purchases" on the account page, in Chromium against the production build (embedded
 * mode) with a RevenueCat stand-in over real HTTP: a purchase the service never heard of by webhook
 * appears after one click; a second click within 5 s is told to wait; without a RevenueCat key the
 * button is not there.
 */
const ARTIFACTS = path.resolve('test-results');
const YEARLY = 'com.example.pro.yearly';

describe.skipIf(!hasChromium)('Refresh purchases on the account page, in Chromium', () => {
  let revenuecat: FakeRevenueCat;
  let server: NextServer;
  let browser: Browser;
  let dataDir: string;

  beforeAll(async () => {
    requireProductionBuild();
    revenuecat = await startFakeRevenueCat();
    dataDir = mkdtempSync(path.join(tmpdir(), 'account-link-refresh-'));
    server = await startNextServer({
      env: {
        EMBEDDED_DB_DIR: migratedEmbeddedDbDir(dataDir), APP_ORIGIN: undefined, DATABASE_URL: undefined, SUPABASE_URL: undefined, LOG_LEVEL: 'warn',
        REVENUECAT_SECRET_API_KEY: revenuecat.apiKey, REVENUECAT_API_URL: revenuecat.url, REVENUECAT_REQUESTS_PER_SECOND: '50',
        // A RevenueCat key is a real secret: local sign-in beside it is asked for.
        LOCAL_DEV: '1',
      },
    });
    browser = await launchChromium();
  }, 240_000);

  afterAll(async () => {
    await browser?.close();
    await server?.stop();
    await revenuecat?.close();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it('shows a purchase only RevenueCat knows after one click, and asks to wait before the next', async () => {
    const email = 'buyer@example.com';
    const purchased = Date.now() - 86_400_000;
    const expires = purchased + 365 * 86_400_000;
    revenuecat.setCustomer(localUserIdFor(email), {
      entitlements: { pro: v1Entitlement(YEARLY, { purchased, expires }) },
      subscriptions: { [YEARLY]: v1Subscription({ purchased, expires, store: 'play_store' }) },
    });

    const page = await browser.newPage();
    const pageErrors: string[] = [];
    page.on('pageerror', (error) => pageErrors.push(error.message));
    await page.goto(server.url);
    await page.getByLabel('E-mail').fill(email);
    await page.getByRole('button', { name: 'Sign in locally' }).click();
    await page.getByText('No subscription yet.').waitFor();

    await page.getByRole('button', { name: 'Refresh purchases' }).click();
    await page.getByRole('status').filter({ hasText: 'Purchases refreshed from the store: 1 active subscription.' }).waitFor();
    const row = page.locator('section[aria-labelledby="entitlements"] tbody tr');
    await expect.poll(() => row.count()).toBe(1);
    expect(await row.textContent()).toContain('pro');
    expect(await row.textContent()).toContain(YEARLY);
    expect(await row.textContent()).toContain('active');
    expect(revenuecat.requests.filter((request) => request.appUserId === localUserIdFor(email))).toHaveLength(1);

    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: path.join(ARTIFACTS, 'account-page-refreshed-purchases.png'), fullPage: true });

    // Once per 5 s: the API's 429 reaches the person as words, and RevenueCat is not asked again.
    await page.getByRole('button', { name: 'Refresh purchases' }).click();
    await page.locator('main [role="alert"]').filter({ hasText: /Purchases were refreshed a moment ago; try again in \d s\./ }).waitFor();
    expect(revenuecat.requests.filter((request) => request.appUserId === localUserIdFor(email))).toHaveLength(1);
    expect(pageErrors).toEqual([]);
    await page.close();
  });

  it('has no button when the service has no RevenueCat key', async () => {
    const plainDir = mkdtempSync(path.join(tmpdir(), 'account-link-refresh-plain-'));
    const plain = await startNextServer({
      env: { EMBEDDED_DB_DIR: migratedEmbeddedDbDir(plainDir), APP_ORIGIN: undefined, DATABASE_URL: undefined, SUPABASE_URL: undefined, LOG_LEVEL: 'warn', REVENUECAT_SECRET_API_KEY: undefined },
    });
    try {
      const page = await browser.newPage();
      await page.goto(plain.url);
      await page.getByLabel('E-mail').fill('plain@example.com');
      await page.getByRole('button', { name: 'Sign in locally' }).click();
      await page.getByText('No subscription yet.').waitFor();
      expect(await page.getByRole('button', { name: 'Refresh purchases' }).count()).toBe(0);
      await page.close();
    } finally {
      await plain.stop();
      rmSync(plainDir, { recursive: true, force: true });
    }
  }, 120_000); // it starts a server of its own
});
