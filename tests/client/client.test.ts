import { testApiHandler } from 'next-test-api-route-handler';
import { describe, expect, it } from 'vitest';
import * as meRoute from '../../app/api/me/route.ts';
import * as userSyncRoute from '../../app/api/me/billing/sync/route.ts';
import * as unlinkRoute from '../../app/api/wallet-link/[linkId]/route.ts';
import * as challengeRoute from '../../app/api/wallet-link/challenge/route.ts';
import * as walletLinkRoute from '../../app/api/wallet-link/route.ts';
import { ApiProblemError, createAccountLinkClient, expectData } from '../../packages/client/src/index.ts';
import { DATABASE_KINDS, suiteDatabase } from '../support/databases.ts';
import { testUser } from '../support/tokens.ts';
import { evmWallet } from '../wallets/wallets.ts';

/**
 * The typed client (packages/client/src/index.ts) against the service's routes over real HTTP: the token
 * it is given goes out as `Authorization: Bearer` on every call, typed calls get typed answers,
 * and a refusal comes back as an ApiProblemError carrying the problem's status, code and detail.
 */
const ROUTES: { pattern: RegExp; module: unknown; params?: (match: RegExpExecArray) => Record<string, string> }[] = [
  { pattern: /^\/api\/me$/, module: meRoute },
  { pattern: /^\/api\/me\/billing\/sync$/, module: userSyncRoute },
  { pattern: /^\/api\/wallet-link\/challenge$/, module: challengeRoute },
  { pattern: /^\/api\/wallet-link$/, module: walletLinkRoute },
  { pattern: /^\/api\/wallet-link\/([^/]+)$/, module: unlinkRoute, params: (match) => ({ linkId: decodeURIComponent(match[1]!) }) },
];

/** What the client sends, over real HTTP to the route the path names (Next's own request handling). */
async function overHttp(request: Request): Promise<Response> {
  const { pathname } = new URL(request.url);
  const route = ROUTES.find(({ pattern }) => pattern.test(pathname));
  if (!route) throw new Error(`no route for ${pathname} in this test`);
  const body = ['GET', 'HEAD'].includes(request.method) ? undefined : await request.text();
  let answer: Response | undefined;
  await testApiHandler({
    appHandler: route.module as never,
    params: route.params?.(route.pattern.exec(pathname)!),
    url: pathname,
    test: async ({ fetch }) => {
      const response = await fetch({ method: request.method, headers: Object.fromEntries(request.headers), body: body || undefined });
      answer = new Response([204, 205, 304].includes(response.status) ? null : await response.arrayBuffer(), { status: response.status, headers: response.headers });
    },
  });
  return answer!;
}

describe.each(DATABASE_KINDS)('the typed client on %s', (kind) => {
  suiteDatabase(kind);

  it('sends the token it is given on every call, read anew each time', async () => {
    const ana = await testUser({ email: 'ana@example.test' });
    const bo = await testUser({ email: 'bo@example.test' });
    let current = ana.token;
    const api = createAccountLinkClient({ baseUrl: 'http://service.test', accessToken: () => current, fetch: overHttp });
    expect(await expectData(api.GET('/api/me'))).toEqual({ userId: ana.userId, email: 'ana@example.test', wallets: [], entitlements: [], leagues: [] });
    current = bo.token;
    expect((await expectData(api.GET('/api/me'))).userId).toBe(bo.userId);
  });

  it('links and unlinks a wallet with typed calls, and the account shows it in between', async () => {
    const user = await testUser();
    const api = createAccountLinkClient({ baseUrl: 'http://service.test', accessToken: async () => user.token, fetch: overHttp });
    const wallet = evmWallet();
    const challenge = await expectData(api.POST('/api/wallet-link/challenge', { body: { chain: 'evm', address: wallet.address, chainId: 8453 } }));
    const { data, response } = await api.POST('/api/wallet-link', {
      body: { payload: { chain: 'evm', address: wallet.address, chainId: 8453, message: challenge.message, signature: await wallet.sign(challenge.message) } },
    });
    expect(response.status).toBe(201);
    expect(data).toMatchObject({ userId: user.userId, alreadyLinked: false, link: { chain: 'evm', address: wallet.address, kind: 'eoa' } });
    expect((await expectData(api.GET('/api/me'))).wallets.map((link) => link.address)).toEqual([wallet.address]);
    expect(await expectData(api.DELETE('/api/wallet-link/{linkId}', { params: { path: { linkId: data!.link.id } } }))).toBeUndefined();
    expect((await expectData(api.GET('/api/me'))).wallets).toEqual([]);
  });

  it('turns a refusal into an ApiProblemError with the status, the code and the detail to show', async () => {
    const anonymous = createAccountLinkClient({ baseUrl: 'http://service.test', fetch: overHttp });
    const refused = await expectData(anonymous.GET('/api/me')).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(ApiProblemError);
    expect(refused).toMatchObject({ status: 401, code: 'missing_token', message: 'Send the session token as "Authorization: Bearer <token>".' });

    const user = await testUser();
    const api = createAccountLinkClient({ baseUrl: 'http://service.test', accessToken: () => user.token, fetch: overHttp });
    // No RevenueCat key in this run: the refresh says what the server lacks.
    const unconfigured = await expectData(api.POST('/api/me/billing/sync')).catch((error: unknown) => error);
    expect(unconfigured).toMatchObject({ status: 503, code: 'sync_not_configured' });
    const badAddress = await expectData(api.POST('/api/wallet-link/challenge', { body: { chain: 'evm', address: '0x12', chainId: 8453 } })).catch((error: unknown) => error);
    expect(badAddress).toMatchObject({ status: 400, code: 'invalid_address', problem: { errors: [{ path: 'address', message: expect.any(String) }] } });
  });
});
