import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { contentSecurityPolicy } from '../../lib/web/content-security-policy.ts';
import { hasChromium, launchChromium } from '../support/browser.ts';
import { freePort } from '../../scripts/support/postgres-server.ts';

describe('the pages\' Content-Security-Policy by mode', () => {
  it('stays strict in a production build: styles only with the nonce, no eval', () => {
    const policy = contentSecurityPolicy({ nonce: 'n0nce' });
    expect(policy).toContain("style-src 'self' 'nonce-n0nce'");
    expect(policy).not.toMatch(/unsafe-(inline|eval)/);
  });

  it('lets `next dev` run its overlay and dev tools (eval, injected styles), scripts still only with the nonce', () => {
    const policy = contentSecurityPolicy({ nonce: 'n0nce', development: true });
    expect(policy).toContain("style-src 'self' 'unsafe-inline'");
    expect(policy).toContain("script-src 'self' 'nonce-n0nce' 'strict-dynamic' 'unsafe-eval'");
  });
});

/**
 * What a newcomer sees after `npm run dev`: the account page with Next's development tools working,
 * and no Content-Security-Policy violation in the console (Next's dev tools inject styles).
 */
describe.skipIf(!hasChromium)('`next dev` in Chromium', () => {
  let dev: ChildProcess;
  let url: string;
  let browser: Browser;
  let dataDir: string;
  let output = '';

  beforeAll(async () => {
    dataDir = mkdtempSync(path.join(tmpdir(), 'account-link-dev-'));
    const port = await freePort();
    url = `http://127.0.0.1:${port}`;
    const env: Record<string, string> = {};
    for (const [key, value] of Object.entries({
      ...process.env, NODE_ENV: 'development', NEXT_TELEMETRY_DISABLED: '1', NEXT_DIST_DIR: '.next-devtest',
      EMBEDDED_DB_DIR: path.join(dataDir, 'pglite'), DATABASE_URL: undefined, SUPABASE_URL: undefined, APP_ORIGIN: undefined, LOCAL_DEV: undefined, LOG_LEVEL: 'warn',
    })) if (value !== undefined) env[key] = value;
    dev = spawn(process.execPath, ['node_modules/next/dist/bin/next', 'dev', '-p', String(port), '-H', '127.0.0.1'], { env: env as NodeJS.ProcessEnv, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    dev.stdout!.on('data', (chunk) => (output += chunk));
    dev.stderr!.on('data', (chunk) => (output += chunk));
    const deadline = Date.now() + 180_000;
    while ((await fetch(`${url}/api/health/live`).catch(() => undefined))?.status !== 200) {
      if (Date.now() > deadline || dev.exitCode !== null) throw new Error(`next dev did not come up:\n${output}`);
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    browser = await launchChromium();
  }, 240_000);

  afterAll(async () => {
    await browser?.close();
    if (dev?.pid) {
      try {
        process.kill(-dev.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it('renders the account page with no CSP violation', async () => {
    const page = await browser.newPage();
    const violations: string[] = [];
    page.on('console', (message) => {
      if (/Content Security Policy|Refused to/.test(message.text())) violations.push(message.text().slice(0, 200));
    });
    await page.exposeFunction('reportViolation', (text: string) => violations.push(text));
    await page.addInitScript(() => {
      document.addEventListener('securitypolicyviolation', (event) => {
        (window as unknown as { reportViolation(text: string): void }).reportViolation(`${event.violatedDirective} ${event.blockedURI}`);
      });
    });
    await page.goto(`${url}/`, { waitUntil: 'networkidle', timeout: 180_000 });
    await expect.poll(() => page.getByRole('heading', { name: 'Your account' }).count(), { timeout: 60_000 }).toBe(1);
    // Next's development indicator mounted (it is what injected styles before).
    await expect.poll(() => page.locator('nextjs-portal').count(), { timeout: 60_000 }).toBeGreaterThan(0);
    expect(violations).toEqual([]);
  }, 240_000);
});
