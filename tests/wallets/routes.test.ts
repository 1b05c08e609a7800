import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import * as linkIdRoute from '../../app/api/wallet-link/[linkId]/route.ts';
import * as challengeRoute from '../../app/api/wallet-link/challenge/route.ts';
import * as linkRoute from '../../app/api/wallet-link/route.ts';
import { closeDatabase, dbCallCount } from '../../lib/db/index.ts';
import { CHALLENGE_TTL_MS } from '../../lib/wallets/challenge.ts';
import { formatSignInMessage, parseSignInMessage } from '../../lib/wallets/sign-in-message.ts';
import { DATABASE_KINDS, useTestDatabase, type TestDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { callRoute, type RouteResponse } from '../support/http.ts';
import { testUser } from '../support/tokens.ts';
import { evmWallet, highSTwin, networkOf, solanaWallet, type TestWallet } from './wallets.ts';

/** The four wallet-link endpoints over real HTTP (next-test-api-route-handler), on both engines. */

type User = Awaited<ReturnType<typeof testUser>>;
const APP_ORIGIN = 'https://wallets.example.test';

const requestChallenge = (user: User, body: unknown, headers: Record<string, string> = {}) =>
  callRoute(challengeRoute, { method: 'POST', headers: { authorization: user.authorization, ...headers }, body });
const postLink = (user: User, body: unknown) => callRoute(linkRoute, { method: 'POST', headers: { authorization: user.authorization }, body });
const listLinks = (user: User) => callRoute(linkRoute, { headers: { authorization: user.authorization } });
const deleteLink = (user: User, linkId: string) =>
  callRoute(linkIdRoute, { method: 'DELETE', headers: { authorization: user.authorization }, params: { linkId } });

async function challengeFor(user: User, wallet: TestWallet) {
  const response = await requestChallenge(user, { chain: wallet.chain, address: wallet.address, ...networkOf(wallet) });
  expect(response.status).toBe(201);
  return response.body as { challengeId: string; message: string; address: string };
}

async function signedBody(wallet: TestWallet, message: string) {
  return { payload: { chain: wallet.chain, address: wallet.address, ...networkOf(wallet), message, signature: await wallet.sign(message) } };
}

/** Challenge, sign, link: the whole happy path for one user and wallet. */
async function linkFlow(user: User, wallet: TestWallet) {
  const challenge = await challengeFor(user, wallet);
  const body = await signedBody(wallet, challenge.message);
  return { challenge, body, response: await postLink(user, body) };
}

function expectProblem(response: RouteResponse, status: number, code: string) {
  expect({ status: response.status, code: response.body?.code }).toEqual({ status, code });
  expect(response.headers.get('content-type')).toBe('application/problem+json');
  expect(response.body.requestId).toBe(response.headers.get('x-request-id'));
}

describe.each(DATABASE_KINDS)('wallet-link routes on %s', (kind) => {
  let db: TestDatabase;
  let restoreEnv: () => void;
  beforeAll(async () => {
    restoreEnv = setEnv({ APP_ORIGIN, LOCAL_DEV: '1', WALLET_EVM_CHAIN_IDS: undefined, WALLET_SOLANA_CLUSTERS: undefined, SUPABASE_URL: undefined, SUPABASE_JWT_SECRET: undefined, AUTH_VERIFY_SESSION: undefined });
    db = await useTestDatabase(kind);
  });
  afterAll(async () => {
    restoreEnv();
    await closeDatabase();
    await db.close();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it.each([{ make: evmWallet }, { make: solanaWallet }])('runs challenge -> sign -> link -> list -> unlink for a $make.name, one database call per request', async ({ make }) => {
    const user = await testUser();
    const wallet = make();
    let calls = dbCallCount();
    const step = () => {
      const made = dbCallCount() - calls;
      calls = dbCallCount();
      return made;
    };

    const challenge = await requestChallenge(user, { chain: wallet.chain, address: wallet.address, ...networkOf(wallet) });
    expect(challenge.status).toBe(201);
    expect(step()).toBe(1);
    expect(Object.keys(challenge.body).sort()).toEqual(['address', 'chain', 'challengeId', 'expiresAt', 'issuedAt', 'message', 'nonce', wallet.chain === 'evm' ? 'chainId' : 'cluster'].sort());
    expect(challenge.body).toMatchObject({ chain: wallet.chain, address: wallet.address, ...networkOf(wallet) });
    expect(challenge.headers.get('cache-control')).toBe('no-store');
    const parsed = parseSignInMessage(challenge.body.message, wallet.chain);
    if (!parsed.ok) throw new Error(parsed.reason);
    expect(parsed.message).toMatchObject({ domain: 'wallets.example.test', uri: APP_ORIGIN, nonce: challenge.body.nonce, requestId: challenge.body.challengeId, issuedAt: challenge.body.issuedAt, expirationTime: challenge.body.expiresAt });
    expect(parsed.message.statement).toContain(`the account ${user.email[0]}***@e***.test`);

    const body = await signedBody(wallet, challenge.body.message);
    const linked = await postLink(user, body);
    expect(step()).toBe(1);
    expect(linked.status).toBe(201);
    expect(linked.body).toEqual({
      userId: user.userId,
      email: user.email,
      alreadyLinked: false,
      link: {
        id: expect.any(String), chain: wallet.chain, address: wallet.address, ...networkOf(wallet), kind: 'eoa', createdAt: expect.stringMatching(/Z$/),
        // An EVM key's link holds the address on every EVM chain; its CAIP-10 id names where it was proven.
        ...(wallet.chain === 'evm' ? { scope: 'evm', accountId: `eip155:1:${wallet.address}` } : {}),
      },
    });

    const again = await postLink(user, body);
    expect({ status: again.status, alreadyLinked: again.body.alreadyLinked, id: again.body.link.id }).toEqual({ status: 200, alreadyLinked: true, id: linked.body.link.id });
    step();

    const list = await listLinks(user);
    expect(step()).toBe(1);
    expect(list.status).toBe(200);
    expect(list.body).toEqual({ links: [linked.body.link] });

    const removed = await deleteLink(user, linked.body.link.id);
    expect(step()).toBe(1);
    expect(removed.status).toBe(204);
    expect(removed.text).toBe('');
    expectProblem(await deleteLink(user, linked.body.link.id), 404, 'link_not_found');
    expect((await listLinks(user)).body).toEqual({ links: [] });
  });

  it('writes the domain from APP_ORIGIN whatever Host and X-Forwarded-Host say', async () => {
    const user = await testUser();
    const response = await requestChallenge(user, { chain: 'evm', address: evmWallet().address, chainId: 8453 }, { host: 'evil.example', 'x-forwarded-host': 'evil.example' });
    expect(response.status).toBe(201);
    expect(response.body.message).toMatch(/^wallets\.example\.test wants you to sign in with your Ethereum account:\n/);
    expect(response.body.message).toContain(`\nURI: ${APP_ORIGIN}\n`);
    expect(response.body.message).not.toContain('evil');
  });

  it('answers 429 rate_limited with Retry-After after 10 challenges in a minute, and 201 for someone else', async () => {
    const user = await testUser();
    const wallet = evmWallet();
    for (let i = 0; i < 10; i++) expect((await requestChallenge(user, { chain: 'evm', address: wallet.address, chainId: 1 })).status).toBe(201);
    const limited = await requestChallenge(user, { chain: 'evm', address: wallet.address, chainId: 1 });
    expectProblem(limited, 429, 'rate_limited');
    const retryAfter = Number(limited.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(limited.body.retryAfter).toBe(retryAfter);
    expect((await requestChallenge(await testUser(), { chain: 'evm', address: wallet.address, chainId: 1 })).status).toBe(201);
  });

  it('refuses a challenge once 10 minutes have passed by the clock (400 challenge_expired, no database call)', async () => {
    const user = await testUser();
    const wallet = evmWallet();
    const challenge = await challengeFor(user, wallet);
    const body = await signedBody(wallet, challenge.message);
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(Date.now() + CHALLENGE_TTL_MS + 1_000);
    const before = dbCallCount();
    expectProblem(await postLink(user, body), 400, 'challenge_expired');
    expect(dbCallCount()).toBe(before);
  });

  // The attacks of the issue, each against a real link flow.
  it('refuses a replay of a used message by another user (400 challenge_not_found), and by its owner after unlink (409)', async () => {
    const [owner, attacker] = [await testUser(), await testUser()];
    const wallet = evmWallet();
    const { body, response } = await linkFlow(owner, wallet);
    expect(response.status).toBe(201);
    expectProblem(await postLink(attacker, body), 400, 'challenge_not_found');
    expect((await deleteLink(owner, response.body.link.id)).status).toBe(204);
    expectProblem(await postLink(owner, body), 409, 'challenge_already_used');
  });

  it('does not let the high-s twin of a used signature make a second link', async () => {
    const [owner, attacker] = [await testUser(), await testUser()];
    const wallet = evmWallet();
    const { body, response } = await linkFlow(owner, wallet);
    const twin = { payload: { ...body.payload, signature: highSTwin(body.payload.signature as `0x${string}`) } };
    const sameUser = await postLink(owner, twin);
    expect({ status: sameUser.status, id: sameUser.body.link.id }).toEqual({ status: 200, id: response.body.link.id });
    expectProblem(await postLink(attacker, twin), 400, 'challenge_not_found');
    expect((await listLinks(owner)).body.links).toHaveLength(1);
  });

  it("refuses another user's challenge signed by the wallet (400 challenge_not_found)", async () => {
    const [owner, attacker] = [await testUser(), await testUser()];
    const wallet = solanaWallet();
    const challenge = await challengeFor(owner, wallet);
    expectProblem(await postLink(attacker, await signedBody(wallet, challenge.message)), 400, 'challenge_not_found');
  });

  it('refuses a message signed by another key (422 invalid_signature)', async () => {
    const user = await testUser();
    const wallet = evmWallet();
    const challenge = await challengeFor(user, wallet);
    const body = await signedBody(wallet, challenge.message);
    body.payload.signature = await evmWallet().sign(challenge.message);
    expectProblem(await postLink(user, body), 422, 'invalid_signature');
  });

  it('refuses a Solana message naming wallet X signed by key Y (422 invalid_signature), and payload Y for message X (422 address_mismatch)', async () => {
    const user = await testUser();
    const [x, y] = [solanaWallet(), solanaWallet()];
    const challenge = await challengeFor(user, x);
    const signedByY = { payload: { chain: 'solana', address: x.address, cluster: 'mainnet', message: challenge.message, signature: await y.sign(challenge.message) } };
    expectProblem(await postLink(user, signedByY), 422, 'invalid_signature');
    expectProblem(await postLink(user, { payload: { ...signedByY.payload, address: y.address } }), 422, 'address_mismatch');
  });

  const rewrite = (message: string, change: Record<string, unknown>) => {
    const parsed = parseSignInMessage(message);
    if (!parsed.ok) throw new Error(parsed.reason);
    return formatSignInMessage({ ...parsed.message, ...change } as never);
  };
  const tampering: { name: string; change: Record<string, unknown>; payload?: Record<string, unknown>; status: number; code: string }[] = [
    { name: 'another domain', change: { domain: 'evil.example' }, status: 422, code: 'invalid_message' },
    { name: 'another chain in the message', change: { chainId: 8453 }, status: 422, code: 'invalid_message' },
    { name: 'another chain in the payload', change: {}, payload: { chainId: 8453 }, status: 422, code: 'invalid_message' },
    { name: 'a later expiry', change: { expirationTime: '2099-01-01T00:00:00.000Z' }, status: 422, code: 'invalid_message' },
    { name: 'an earlier, past expiry', change: { expirationTime: '2020-01-01T00:00:00.000Z' }, status: 400, code: 'challenge_expired' },
    { name: 'another statement', change: { statement: 'Free tokens' }, status: 422, code: 'invalid_message' },
  ];
  it.each(tampering)('refuses a wallet-signed message with $name ($status $code), and the challenge still works', async ({ change, payload, status, code }) => {
    const user = await testUser();
    const wallet = evmWallet();
    const challenge = await challengeFor(user, wallet);
    const body = await signedBody(wallet, rewrite(challenge.message, change));
    expectProblem(await postLink(user, { payload: { ...body.payload, ...payload } }), status, code);
    expect((await postLink(user, await signedBody(wallet, challenge.message))).status).toBe(201);
  });

  it('accepts the lower-case spelling of a checksummed address, and counts both spellings as one wallet', async () => {
    const [first, second] = [await testUser(), await testUser()];
    const wallet = evmWallet();
    const lower = { ...wallet, address: wallet.address.toLowerCase() as `0x${string}` };
    const challenge = await challengeFor(first, lower);
    expect(challenge.address).toBe(wallet.address);
    const linked = await postLink(first, await signedBody(lower, challenge.message));
    expect({ status: linked.status, address: linked.body.link.address }).toEqual({ status: 201, address: wallet.address });
    expectProblem((await linkFlow(second, wallet)).response, 409, 'wallet_already_linked');
  });

  it('lets exactly one of two users racing for one wallet win (the other 409), then the other after unlink', async () => {
    const [a, b] = [await testUser(), await testUser()];
    const wallet = evmWallet();
    const [ca, cb] = await Promise.all([challengeFor(a, wallet), challengeFor(b, wallet)]);
    const [ra, rb] = await Promise.all([postLink(a, await signedBody(wallet, ca.message)), postLink(b, await signedBody(wallet, cb.message))]);
    expect([ra.status, rb.status].sort()).toEqual([201, 409]);
    const [winner, loser, loserUser, winnerUser] = ra.status === 201 ? [ra, rb, b, a] : [rb, ra, a, b];
    expect(loser.body.code).toBe('wallet_already_linked');
    expect(loser.text).not.toContain(winnerUser.userId);
    expect((await deleteLink(winnerUser, winner.body.link.id)).status).toBe(204);
    expect((await linkFlow(loserUser, wallet)).response.status).toBe(201);
  });

  it('gives one link to the same user submitting twice at once (201 and 200)', async () => {
    const user = await testUser();
    const wallet = solanaWallet();
    const challenge = await challengeFor(user, wallet);
    const body = await signedBody(wallet, challenge.message);
    const responses = await Promise.all([postLink(user, body), postLink(user, body)]);
    expect(responses.map((r) => r.status).sort()).toEqual([200, 201]);
    expect((await listLinks(user)).body.links).toHaveLength(1);
  });

  it("answers 404 link_not_found for another user's link and for ids that are not UUIDs", async () => {
    const [owner, other] = [await testUser(), await testUser()];
    const { response } = await linkFlow(owner, evmWallet());
    expectProblem(await deleteLink(other, response.body.link.id), 404, 'link_not_found');
    expectProblem(await deleteLink(owner, 'nope'), 404, 'link_not_found');
    expect((await listLinks(owner)).body.links).toHaveLength(1);
  });

  const evm = evmWallet();
  const bodyErrors: { name: string; route: 'challenge' | 'link'; body: unknown; headers?: Record<string, string>; status: number; code: string }[] = [
    { name: 'malformed JSON', route: 'challenge', body: '{"chain":', headers: { 'content-type': 'application/json' }, status: 400, code: 'invalid_json' },
    { name: 'not JSON', route: 'link', body: 'payload=1', headers: { 'content-type': 'application/x-www-form-urlencoded' }, status: 415, code: 'unsupported_media_type' },
    { name: 'an oversized body', route: 'link', body: JSON.stringify({ payload: { message: 'x'.repeat(40_000) } }), headers: { 'content-type': 'application/json' }, status: 413, code: 'payload_too_large' },
    { name: 'an unknown field', route: 'challenge', body: { chain: 'evm', address: evm.address, chainId: 1, extra: true }, status: 400, code: 'invalid_request' },
    { name: 'a chain not allowed', route: 'challenge', body: { chain: 'evm', address: evm.address, chainId: 137 }, status: 400, code: 'unsupported_chain' },
    { name: 'an unknown chain family', route: 'link', body: { payload: { chain: 'bitcoin' } }, status: 400, code: 'unsupported_chain' },
    { name: 'a bad address', route: 'challenge', body: { chain: 'evm', address: '0x1234', chainId: 1 }, status: 400, code: 'invalid_address' },
    { name: 'a payload that is not an object', route: 'link', body: { payload: 'sig' }, status: 400, code: 'invalid_request' },
    { name: 'a bad signature encoding', route: 'link', body: { payload: { chain: 'evm', address: evm.address, chainId: 1, message: 'm', signature: 'zz' } }, status: 400, code: 'invalid_request' },
    { name: 'a contract-wallet signature', route: 'link', body: { payload: { chain: 'evm', address: evm.address, chainId: 1, message: 'm', signature: `0x${'ab'.repeat(200)}` } }, status: 422, code: 'unsupported_signature_type' },
  ];
  it.each(bodyErrors)('answers $status $code for $name, without touching the database', async ({ route, body, headers, status, code }) => {
    const user = await testUser();
    const before = dbCallCount();
    const response = await callRoute(route === 'challenge' ? challengeRoute : linkRoute, { method: 'POST', headers: { authorization: user.authorization, ...headers }, body });
    expectProblem(response, status, code);
    expect(dbCallCount()).toBe(before);
  });

  it('names every field of a well-shaped link that fails in `errors`: the network, the address and the signature at once, the first giving the code', async () => {
    const user = await testUser();
    const response = await callRoute(linkRoute, {
      method: 'POST', headers: { authorization: user.authorization },
      body: { payload: { chain: 'evm', address: '0x1', chainId: 7, message: 'm', signature: 'zz' } },
    });
    expectProblem(response, 400, 'unsupported_chain');
    expect((response.body as { errors: Array<{ path: string }> }).errors.map((error) => error.path)).toEqual(['payload.chainId', 'payload.address', 'payload.signature']);
    // One field alone: as before, its own code.
    const address = await callRoute(linkRoute, {
      method: 'POST', headers: { authorization: user.authorization },
      body: { payload: { chain: 'evm', address: '0x1', chainId: 1, message: 'm', signature: '0x00' } },
    });
    expectProblem(address, 400, 'invalid_address');
    expect((address.body as { errors: Array<{ path: string }> }).errors.map((error) => error.path)).toEqual(['payload.address']);
  });

  it('answers 405 with Allow for methods a route does not have', async () => {
    const cases = [
      { module: challengeRoute, method: 'GET', allow: 'POST, OPTIONS' },
      { module: linkRoute, method: 'PUT', allow: 'GET, POST, HEAD, OPTIONS' },
      { module: linkIdRoute, method: 'GET', allow: 'DELETE, OPTIONS', params: { linkId: randomUUID() } },
    ];
    for (const { module, method, allow, params } of cases) {
      const response = await callRoute(module, { method, params });
      expect({ status: response.status, allow: response.headers.get('allow') }).toEqual({ status: 405, allow });
    }
  });
});
