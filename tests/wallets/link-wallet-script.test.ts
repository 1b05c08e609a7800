import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import * as linkIdRoute from '../../app/api/wallet-link/[linkId]/route.ts';
import * as challengeRoute from '../../app/api/wallet-link/challenge/route.ts';
import * as linkRoute from '../../app/api/wallet-link/route.ts';
import { DEV_USER, localUserIdFor } from '../../lib/auth/dev-user.ts';
import { closeDatabase } from '../../lib/db/index.ts';
import { describeOn, useTestDatabase, type TestDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { freePort } from '../../scripts/support/postgres-server.ts';
import { startRouteServer, type RouteServer } from '../support/route-server.ts';

/**
 * `node scripts/link-wallet.ts` as a newcomer runs it: a child process under this Node (24), talking
 * HTTP to a loopback server that hands each request to the real route handlers (the team does not
 * start `next dev` in tests), with the embedded dev key both sides share.
 */

describeOn('pglite')('scripts/link-wallet.ts', () => {
  let db: TestDatabase;
  let server: RouteServer;
  let baseUrl: string;
  let restoreEnv: () => void;
  beforeAll(async () => {
    restoreEnv = setEnv({ APP_ORIGIN: undefined, SUPABASE_URL: undefined, SUPABASE_JWT_SECRET: undefined, AUTH_VERIFY_SESSION: undefined, DATABASE_URL: undefined });
    db = await useTestDatabase('pglite');
    server = await startRouteServer([
      [/^\/api\/wallet-link\/challenge$/, challengeRoute],
      [/^\/api\/wallet-link$/, linkRoute],
      [/^\/api\/wallet-link\/(?<linkId>[^/]+)$/, linkIdRoute],
    ]);
    baseUrl = server.url;
  });
  afterAll(async () => {
    await server.close();
    restoreEnv();
    await closeDatabase();
    await db.close();
  });

  it('mints a dev token, signs a challenge with a throwaway key, links it and prints the link', async () => {
    const userId = '0b6c6a52-7d4f-4c59-9d3b-5f1f1f0b2a11';
    const { stdout } = await promisify(execFile)(process.execPath, ['scripts/link-wallet.ts', '--base-url', baseUrl, '--chain-id', '8453', '--user', userId, '--email', 'new.comer@example.com'], {
      env: { ...process.env, LOG_LEVEL: 'silent' },
    });
    expect(stdout).toContain('1. POST /api/wallet-link/challenge -> 201');
    expect(stdout).toContain('localhost:3000 wants you to sign in with your Ethereum account:');
    expect(stdout).toContain('Link this wallet to the account n***@e***.com on localhost:3000.');
    expect(stdout).toContain('3. POST /api/wallet-link -> 201');
    const linked = JSON.parse(stdout.slice(stdout.indexOf('{')));
    expect(linked).toMatchObject({ userId, email: 'new.comer@example.com', alreadyLinked: false, link: { chain: 'evm', chainId: 8453 } });
    const rows = await db.sql<{ address: string }>('select address from public.wallet_links where user_id = $1', [userId]);
    expect(rows.map((row) => row.address)).toEqual([linked.link.address]);
  });

  it('links to the dev user by default: the user the README, `npm run token` and the page\'s local sign-in as ana@example.com name', async () => {
    const { stdout } = await promisify(execFile)(process.execPath, ['scripts/link-wallet.ts', '--base-url', baseUrl], { env: { ...process.env, LOG_LEVEL: 'silent' } });
    expect(stdout).toContain(`Dev user ${DEV_USER.id} (${DEV_USER.email})`);
    expect(JSON.parse(stdout.slice(stdout.indexOf('{')))).toMatchObject({ userId: DEV_USER.id, email: DEV_USER.email });
    expect(localUserIdFor('Ana@Example.com ')).toBe(DEV_USER.id);
  });

  it('says what to do when the service is not running', async () => {
    const url = `http://127.0.0.1:${await freePort()}`;
    const run = promisify(execFile)(process.execPath, ['scripts/link-wallet.ts', '--base-url', url], { env: { ...process.env, LOG_LEVEL: 'silent' } });
    await expect(run).rejects.toMatchObject({ code: 1, stderr: expect.stringContaining(`Could not reach the service at ${url}: is it running? Start it with \`npm run dev\`, or pass --base-url.`) });
  });
});
