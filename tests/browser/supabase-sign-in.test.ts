import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Browser } from 'playwright-core';
import { startFakeSupabaseAuth, type FakeSupabaseAuth } from '../support/fake-supabase-auth.ts';
import { hasChromium, launchChromium } from '../support/browser.ts';
import { ensureProductionBuild, startNextServer, type NextServer } from '../support/next-server.ts';

/**
 * The account page with Supabase configured: the browser signs in with supabase-js against a
 * stand-in Auth server speaking Supabase's wire format (password grant, magic link, JWKS), and the
 * server verifies the resulting access token against that JWKS. No local sign-in is offered.
 */

describe.skipIf(!hasChromium)('the account page with Supabase Auth, in Chromium', () => {
  let auth: FakeSupabaseAuth;
  let server: NextServer;
  let browser: Browser;
  let dataDir: string;

  beforeAll(async () => {
    ensureProductionBuild();
    auth = await startFakeSupabaseAuth();
    dataDir = mkdtempSync(path.join(tmpdir(), 'account-link-browser-supabase-'));
    server = await startNextServer({
      env: {
        EMBEDDED_DB_DIR: path.join(dataDir, 'pglite'),
        SUPABASE_URL: auth.url,
        SUPABASE_PUBLISHABLE_KEY: auth.apiKey,
        NEXT_PUBLIC_SUPABASE_URL: auth.url,
        NEXT_PUBLIC_SUPABASE_PUBLISHABLE_KEY: auth.apiKey,
        AUTH_VERIFY_SESSION: 'true',
        // Supabase Auth without a database or webhook secrets: only local mode allows that.
        LOCAL_DEV: '1',
        DATABASE_URL: undefined,
        LOG_LEVEL: 'warn',
      },
    });
    browser = await launchChromium();
  }, 240_000);

  afterAll(async () => {
    await browser?.close();
    await server?.stop();
    await auth?.close();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it('signs in with e-mail and password, refuses a wrong one, and sends magic links', async () => {
    const userId = auth.addUser('bea@example.com', 'correct horse battery staple');
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(server.url);
    expect(await page.getByRole('button', { name: 'Sign in locally' }).count()).toBe(0);

    await page.getByLabel('E-mail').fill('bea@example.com');
    await page.getByLabel('Password').fill('wrong password');
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await page.locator('main [role="alert"]').filter({ hasText: 'Invalid login credentials' }).waitFor();

    await page.getByRole('button', { name: 'E-mail me a sign-in link' }).click();
    await page.getByRole('status').filter({ hasText: 'We sent a sign-in link to bea@example.com.' }).waitFor();
    expect(auth.magicLinks).toContain('bea@example.com');

    await page.getByLabel('Password').fill('correct horse battery staple');
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await page.getByTestId('user-id').waitFor();
    expect(await page.getByTestId('user-id').textContent()).toBe(userId);
    expect(await page.getByTestId('email').textContent()).toBe('bea@example.com');
    await context.close();
  });
});
