import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { DEV_WEBHOOK_SECRETS } from '../../lib/config.ts';
import { fixture } from '../billing/fixtures.ts';
import { migratedEmbeddedDbDir } from '../support/databases.ts';
import { startFakeSupabaseAuth, type FakeSupabaseAuth } from '../support/fake-supabase-auth.ts';
import { hasChromium, launchChromium } from '../support/browser.ts';
import { startNextServer, type NextServer } from '../../scripts/support/next-server.ts';
import { requireProductionBuild } from '../support/production-build.ts';

/**
 * The account page with Supabase configured: the browser signs in with supabase-js against a
 * stand-in Auth server speaking Supabase's wire format (password grant, magic link, JWKS), and the
 * server verifies the resulting access token against that JWKS. No local sign-in is offered.
 * Signing out ends the Auth session (supabase-js's signOut, seen by the stand-in as GoTrue's
 * logout call) and the browser's stored session with it, so nothing signs the page back in.
 * Signed in, the page follows the account on Supabase Realtime (the stand-in serves it too): it
 * joins the user's private topic with their token, and a broadcast there shows the change.
 */

/**
 * What the browser does when the user switches to another tab and back: `visibilitychange` with the
 * document hidden, then visible. Headless Chromium never hides a tab (bringToFront leaves every tab
 * "visible"), so the two transitions are played here, then the page gets time to react.
 */
async function switchTabAwayAndBack(page: Page): Promise<void> {
  await page.evaluate(async () => {
    for (const state of ['hidden', 'visible'] as const) {
      Object.defineProperty(document, 'visibilityState', { value: state, configurable: true });
      Object.defineProperty(document, 'hidden', { value: state === 'hidden', configurable: true });
      document.dispatchEvent(new Event('visibilitychange', { bubbles: true }));
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  });
  await page.waitForTimeout(2000);
}

describe.skipIf(!hasChromium)('the account page with Supabase Auth, in Chromium', () => {
  let auth: FakeSupabaseAuth;
  let server: NextServer;
  let browser: Browser;
  let dataDir: string;

  beforeAll(async () => {
    requireProductionBuild();
    auth = await startFakeSupabaseAuth();
    dataDir = mkdtempSync(path.join(tmpdir(), 'account-link-browser-supabase-'));
    server = await startNextServer({
      env: {
        EMBEDDED_DB_DIR: migratedEmbeddedDbDir(dataDir),
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

  it('signs out for real: the Auth session ends, and neither a tab switch nor a reload signs back in', async () => {
    const userId = auth.addUser('cy@example.com', 'another correct horse');
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(server.url);
    await page.getByLabel('E-mail').fill('cy@example.com');
    await page.getByLabel('Password').fill('another correct horse');
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await page.getByTestId('user-id').waitFor();
    // supabase-js keeps the session (with its refresh token) in localStorage.
    const storedSessions = () => page.evaluate(() =>
      Object.keys(localStorage).filter((key) => /^sb-.+-auth-token$/.test(key)).map((key) => JSON.parse(localStorage.getItem(key)!) as { access_token: string }));
    const [stored] = await storedSessions();
    const [storageKey, storedValue] = await page.evaluate(() => {
      const key = Object.keys(localStorage).find((name) => /^sb-.+-auth-token$/.test(name))!;
      return [key, localStorage.getItem(key)!];
    });
    const accessToken = stored!.access_token;
    const sessionId = JSON.parse(Buffer.from(accessToken.split('.')[1]!, 'base64url').toString('utf8')).session_id as string;

    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('button', { name: 'Sign in', exact: true }).waitFor();
    // GoTrue's POST /auth/v1/logout?scope=local with the session's token: this session ends (the
    // user's other devices stay signed in), and the browser forgets it.
    expect(auth.logouts).toEqual([{ userId, sessionId, scope: 'local' }]);
    expect(await storedSessions()).toEqual([]);

    // Switch tabs: supabase-js recovers the stored session when its tab is shown again, the moment
    // it used to sign the page back in (with the session left in localStorage).
    await switchTabAwayAndBack(page);
    expect(await page.getByTestId('user-id').count()).toBe(0);

    await page.reload();
    await page.getByRole('button', { name: 'Sign in', exact: true }).waitFor();
    await switchTabAwayAndBack(page);
    expect(await page.getByTestId('user-id').count()).toBe(0);
    expect(await storedSessions()).toEqual([]);

    // Even the ended session put back where supabase-js keeps it is not taken back: the server asks
    // the Auth server before it adopts a session.
    await page.evaluate(([key, value]) => localStorage.setItem(key!, value!), [storageKey!, storedValue!]);
    await switchTabAwayAndBack(page);
    await page.locator('main [role="alert"]').filter({ hasText: 'This session has been signed out; sign in again.' }).waitFor();
    expect(await page.getByTestId('user-id').count()).toBe(0);

    // The access token of the ended session still verifies until it expires (a JWT), but a write
    // asks the Auth server, which says the session is gone (a live one would get 404 here).
    const write = await fetch(`${server.url}/api/wallet-link/${randomUUID()}`, { method: 'DELETE', headers: { authorization: `Bearer ${accessToken}` } });
    expect({ status: write.status, code: ((await write.json()) as { code: string }).code }).toEqual({ status: 401, code: 'session_revoked' });
    await context.close();
  });

  it("follows the account on the user's private Realtime topic: a broadcast there shows a purchase within two seconds", async () => {
    const userId = auth.addUser('di@example.com', 'live horse battery staple');
    const context = await browser.newContext();
    const page = await context.newPage();
    const pageErrors: string[] = [];
    page.on('pageerror', (error) => pageErrors.push(error.message));
    await page.goto(server.url);
    await page.getByLabel('E-mail').fill('di@example.com');
    await page.getByLabel('Password').fill('live horse battery staple');
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await page.getByText('No subscription yet.').waitFor();
    await expect.poll(() => page.getByTestId('live-updates').getAttribute('data-live'), { timeout: 15_000 }).toBe('true');
    // supabase-js in the page joined user:<id> as a private channel, with this user's token.
    expect(auth.realtime.joins.filter((join) => join.userId === userId)).toEqual([{ topic: `user:${userId}`, private: true, userId, allowed: true }]);

    // A purchase is stored (this server's embedded database has no Realtime; a Supabase database
    // sends the broadcast itself, in the same transaction): the broadcast, as it sends it.
    const now = Date.now();
    const purchase = fixture('initial-purchase', { id: randomUUID(), app_user_id: userId, original_app_user_id: userId, aliases: [userId], event_timestamp_ms: now, purchased_at_ms: now, expiration_at_ms: now + 86_400_000 });
    const stored = await fetch(`${server.url}/api/webhooks/subscription-billing`, { method: 'POST', headers: { authorization: `Bearer ${DEV_WEBHOOK_SECRETS.subscription}`, 'content-type': 'application/json' }, body: JSON.stringify(purchase) });
    expect(stored.status).toBe(200);
    const subscription = page.locator('section[aria-labelledby="entitlements"] tbody tr');
    expect(await subscription.count()).toBe(0); // nothing tells the page yet
    expect(auth.realtime.send(`user:${userId}`, 'account_changed', { what: 'entitlements', at: new Date().toISOString() })).toBe(1);
    await expect.poll(() => subscription.allTextContents(), { timeout: 2_000, interval: 50 }).toEqual([expect.stringMatching(/^procom\.example\.pro\.monthlyactive\d{1,2} \w{3} \d{4}/)]);
    expect(pageErrors).toEqual([]);
    await context.close();
  });
});
