import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as linkIdRoute from '../../app/api/wallet-link/[linkId]/route.ts';
import * as challengeRoute from '../../app/api/wallet-link/challenge/route.ts';
import * as linkRoute from '../../app/api/wallet-link/route.ts';
import { closeDatabase, dbCallCount } from '../../lib/db/index.ts';
import { DATABASE_KINDS, describeOn, useTestDatabase, type TestDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { startFakeSupabaseAuth, type FakeSupabaseAuth } from '../support/fake-supabase-auth.ts';
import { callRoute, type RouteResponse } from '../support/http.ts';
import { testUser } from '../support/tokens.ts';
import { evmWallet } from './wallets.ts';

/**
 * Who may call the wallet-link endpoints: the session-token error table on all four, and the
 * liveness check of challenge, link and unlink against a stand-in Supabase Auth server over real HTTP.
 */

const wallet = evmWallet();
// Valid bodies, so that only the credential decides the answer (bodies are parsed first).
const endpoints: { name: string; call: (authorization?: string) => Promise<RouteResponse> }[] = [
  { name: 'POST /api/wallet-link/challenge', call: (authorization) => callRoute(challengeRoute, { method: 'POST', headers: authorization === undefined ? {} : { authorization }, body: { chain: 'evm', address: wallet.address, chainId: 1 } }) },
  {
    name: 'POST /api/wallet-link',
    call: (authorization) => callRoute(linkRoute, {
      method: 'POST',
      headers: authorization === undefined ? {} : { authorization },
      body: { payload: { chain: 'evm', address: wallet.address, chainId: 1, message: 'm', signature: `0x${'11'.repeat(64)}1b` } },
    }),
  },
  { name: 'GET /api/wallet-link', call: (authorization) => callRoute(linkRoute, { headers: authorization === undefined ? {} : { authorization } }) },
  { name: 'DELETE /api/wallet-link/{linkId}', call: (authorization) => callRoute(linkIdRoute, { method: 'DELETE', headers: authorization === undefined ? {} : { authorization }, params: { linkId: randomUUID() } }) },
];

describeOn('pglite')('session tokens on the wallet-link endpoints (embedded dev key)', () => {
  let db: TestDatabase;
  let restoreEnv: () => void;
  beforeAll(async () => {
    restoreEnv = setEnv({ SUPABASE_URL: undefined, SUPABASE_JWT_SECRET: undefined, AUTH_VERIFY_SESSION: undefined });
    db = await useTestDatabase('pglite');
  });
  afterAll(async () => {
    restoreEnv();
    await closeDatabase();
    await db.close();
  });

  const tamper = (token: string) => {
    const [header, payload, signature] = token.split('.');
    const claims = JSON.parse(Buffer.from(payload!, 'base64url').toString('utf8'));
    const forged = Buffer.from(JSON.stringify({ ...claims, sub: randomUUID() })).toString('base64url');
    return `${header}.${forged}.${signature}`;
  };
  const cases: { name: string; authorization: () => Promise<string | undefined>; status: number; code: string }[] = [
    { name: 'no Authorization header', authorization: async () => undefined, status: 401, code: 'missing_token' },
    { name: 'a Basic credential', authorization: async () => 'Basic dXNlcjpwYXNz', status: 401, code: 'invalid_token' },
    { name: 'a token that is not a JWT', authorization: async () => 'Bearer not.a.jwt', status: 401, code: 'invalid_token' },
    { name: 'an expired token', authorization: async () => (await testUser({ expiresInSeconds: -120 })).authorization, status: 401, code: 'token_expired' },
    { name: 'a tampered token', authorization: async () => `Bearer ${tamper((await testUser()).token)}`, status: 401, code: 'invalid_token' },
    { name: 'an anonymous user', authorization: async () => (await testUser({ isAnonymous: true })).authorization, status: 403, code: 'anonymous_user_not_allowed' },
    { name: 'the service role', authorization: async () => (await testUser({ role: 'service_role' })).authorization, status: 403, code: 'forbidden_role' },
  ];
  const matrix = endpoints.flatMap((endpoint) => cases.map((c) => ({ ...c, endpoint: endpoint.name, call: endpoint.call })));

  it.each(matrix)('$endpoint: $name -> $status $code, no database call', async ({ call, authorization, status, code }) => {
    const before = dbCallCount();
    const response = await call(await authorization());
    expect({ status: response.status, code: response.body?.code }).toEqual({ status, code });
    expect(response.headers.get('content-type')).toBe('application/problem+json');
    if (status === 401) expect(response.headers.get('www-authenticate')).toMatch(/^Bearer realm="account-link"/);
    expect(dbCallCount()).toBe(before);
  });
});

describe.each(DATABASE_KINDS)('session liveness (AUTH_VERIFY_SESSION) against a Supabase Auth stand-in over HTTP, on %s', (kind) => {
  let auth: FakeSupabaseAuth;
  let db: TestDatabase;
  let restoreEnv: () => void;
  beforeAll(async () => {
    auth = await startFakeSupabaseAuth();
    restoreEnv = setEnv({ SUPABASE_URL: auth.url, SUPABASE_PUBLISHABLE_KEY: auth.apiKey, SUPABASE_JWT_SECRET: undefined, AUTH_VERIFY_SESSION: 'true', LOCAL_DEV: '1' });
    db = await useTestDatabase(kind);
  });
  afterAll(async () => {
    restoreEnv();
    await closeDatabase();
    await db.close();
    await auth.close().catch(() => undefined);
  });

  const askChallenge = (token: string, address: string = wallet.address) =>
    callRoute(challengeRoute, { method: 'POST', headers: { authorization: `Bearer ${token}` }, body: { chain: 'evm', address, chainId: 1 } });
  const postSigned = async (token: string, message: string, signer = wallet) => callRoute(linkRoute, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}` },
    body: { payload: { chain: 'evm', address: signer.address, chainId: 1, message, signature: await signer.sign(message) } },
  });

  /** Challenge and link with a Supabase-shaped token; returns the link response. */
  async function link(token: string) {
    const challenge = await askChallenge(token);
    expect(challenge.status).toBe(201);
    return postSigned(token, challenge.body.message);
  }

  it('links and unlinks with a live session, asking the Auth server each time (challenge, link, unlink)', async () => {
    const userId = randomUUID();
    const token = await auth.mint({ userId, email: 'live@example.com' });
    const asked = () => auth.requests.filter((r) => r.path === '/auth/v1/user').length;
    const before = asked();
    const challenge = await askChallenge(token);
    expect(challenge.status).toBe(201);
    expect(asked() - before).toBe(1);
    const linked = await postSigned(token, challenge.body.message);
    expect(linked.status).toBe(201);
    expect(linked.body).toMatchObject({ userId, email: 'live@example.com' });
    expect(asked() - before).toBe(2);
    const removed = await callRoute(linkIdRoute, { method: 'DELETE', headers: { authorization: `Bearer ${token}` }, params: { linkId: linked.body.link.id } });
    expect(removed.status).toBe(204);
    expect(asked() - before).toBe(3);
  });

  it('answers 401 session_revoked to a challenge request once the user signed out, storing no challenge', async () => {
    const userId = randomUUID();
    const token = await auth.mint({ userId });
    const other = evmWallet();
    expect((await askChallenge(token, other.address)).status).toBe(201);
    auth.revoke(userId);
    const before = dbCallCount();
    const refused = await askChallenge(token, other.address);
    expect({ status: refused.status, code: refused.body.code }).toEqual({ status: 401, code: 'session_revoked' });
    expect(refused.headers.get('www-authenticate')).toMatch(/^Bearer realm="account-link", error="invalid_token"/);
    expect(dbCallCount()).toBe(before);
    expect(await db.sql('select 1 from public.wallet_challenges where user_id = $1', [userId])).toHaveLength(1);
  });

  it('answers 401 session_revoked to challenge, link and unlink once the user signed out, changing nothing', async () => {
    const userId = randomUUID();
    const token = await auth.mint({ userId });
    const linked = await link(token);
    expect(linked.status).toBe(201);
    const other = evmWallet();
    const pending = await askChallenge(token, other.address);
    expect(pending.status).toBe(201);
    auth.revoke(userId);
    const unlink = await callRoute(linkIdRoute, { method: 'DELETE', headers: { authorization: `Bearer ${token}` }, params: { linkId: linked.body.link.id } });
    expect({ status: unlink.status, code: unlink.body.code }).toEqual({ status: 401, code: 'session_revoked' });
    const challenge = await askChallenge(token);
    expect({ status: challenge.status, code: challenge.body.code }).toEqual({ status: 401, code: 'session_revoked' });
    // A challenge issued while the session was alive links nothing once it is signed out.
    const late = await postSigned(token, pending.body.message, other);
    expect({ status: late.status, code: late.body.code }).toEqual({ status: 401, code: 'session_revoked' });
    const list = await callRoute(linkRoute, { headers: { authorization: `Bearer ${token}` } });
    expect(list.body.links).toHaveLength(1);
  });

  it('answers 503 auth_unavailable with Retry-After when the Auth server fails, then when it is down', async () => {
    const token = await auth.mint();
    const challenge = await callRoute(challengeRoute, { method: 'POST', headers: { authorization: `Bearer ${token}` }, body: { chain: 'evm', address: wallet.address, chainId: 1 } });
    const body = { payload: { chain: 'evm', address: wallet.address, chainId: 1, message: challenge.body.message, signature: await wallet.sign(challenge.body.message) } };
    const post = () => callRoute(linkRoute, { method: 'POST', headers: { authorization: `Bearer ${token}` }, body });

    auth.failWith(503);
    const failing = await post();
    expect({ status: failing.status, code: failing.body.code }).toEqual({ status: 503, code: 'auth_unavailable' });
    expect(Number(failing.headers.get('retry-after'))).toBeGreaterThan(0);

    auth.failWith(undefined);
    await auth.close();
    const down = await post();
    expect({ status: down.status, code: down.body.code }).toEqual({ status: 503, code: 'auth_unavailable' });
    expect(Number(down.headers.get('retry-after'))).toBeGreaterThan(0);
  });
});
