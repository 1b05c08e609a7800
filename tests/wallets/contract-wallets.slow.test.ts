import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { serializeErc8010Signature } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import * as challengeRoute from '../../app/api/wallet-link/challenge/route.ts';
import * as linkRoute from '../../app/api/wallet-link/route.ts';
import * as meRoute from '../../app/api/me/route.ts';
import { getConfig } from '../../lib/config.ts';
import { closeDatabase, dbCallCount } from '../../lib/db/index.ts';
import { buildOpenApiDocument } from '../../lib/openapi/document.ts';
import { log } from '../../lib/log.ts';
import { linkResponseSchema, problemSchema } from '../../lib/openapi/responses.ts';
import { CONTRACT_CHECK_GAS } from '../../lib/wallets/contract-signatures.ts';
import { buildContract, type OpenApiDocument } from '../conformance/contract.ts';
import { DATABASE_KINDS, useTestDatabase, type TestDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { callRoute, type RouteResponse } from '../support/http.ts';
import { startLocalChain, startRpcProxy, type LocalChain, type RpcProxy, type SmartAccountHandle } from '../../scripts/support/local-chain.ts';
import { testUser } from '../support/tokens.ts';
import { evmWallet } from './wallets.ts';

/**
 * Smart-contract wallets over real HTTP, against a real EVM: two anvil chains on loopback ports
 * (31337 and 31338, as two networks such as Ethereum and Base), each with the OpenZeppelin-based
 * SmartAccount and its factory (scripts/support/contracts/SmartAccount.sol) and the attacker's factory
 * (scripts/support/contracts/HostileFactory.sol) deployed at the same addresses. The service reaches each
 * chain through a counting proxy (scripts/support/local-chain.ts) that can also fail on demand,
 * configured as its RPC in WALLET_EVM_RPC_URLS. Every signature is made by a real key: the account
 * owner's ERC-7739 signature, as a smart wallet answers personal_sign, wrapped in ERC-6492 while the
 * account is not deployed. The second chain lets an eth_call spend up to a billion gas, as RPC
 * providers do (anvil's default is the 30M block limit).
 */

type User = Awaited<ReturnType<typeof testUser>>;
const APP_ORIGIN = 'https://wallets.example.test';
const CHAIN_ID = 31337;
const OTHER_CHAIN_ID = 31338;
const RPC_TIMEOUT_MS = 600;

const requestChallenge = (user: User, address: string, chainId = CHAIN_ID) =>
  callRoute(challengeRoute, { method: 'POST', headers: { authorization: user.authorization }, body: { chain: 'evm', address, chainId } });
const postLink = (user: User, body: unknown) => callRoute(linkRoute, { method: 'POST', headers: { authorization: user.authorization }, body });
const listLinks = async (user: User) => (await callRoute(linkRoute, { headers: { authorization: user.authorization } })).body.links as { address: string; kind: string }[];

function expectProblem(response: RouteResponse, status: number, code: string) {
  expect({ status: response.status, code: response.body?.code }).toEqual({ status, code });
  expect(response.headers.get('content-type')).toBe('application/problem+json');
}

/** The challenge (its Request ID) a link body answers. */
const challengeIdOf = (body: { payload: { message: string } }) => /\nRequest ID: (\S+)$/.exec(body.payload.message)![1]!;

/** A challenge for `address`, and the body that links it with the signature `sign` makes of its message. */
async function signedBody(user: User, address: string, sign: (message: string) => Promise<string>, chainId = CHAIN_ID) {
  const challenge = await requestChallenge(user, address, chainId);
  expect(challenge.status).toBe(201);
  const message = challenge.body.message as string;
  return { payload: { chain: 'evm', address, chainId, message, signature: await sign(message) } };
}

describe.each(DATABASE_KINDS)('smart-contract wallets (ERC-1271, ERC-6492) against a local EVM, on %s', (kind) => {
  let db: TestDatabase;
  let chain: LocalChain;
  let otherChain: LocalChain;
  let rpc: RpcProxy;
  let otherRpc: RpcProxy;
  let restoreEnv: () => void;

  beforeAll(async () => {
    [chain, otherChain] = await Promise.all([startLocalChain({ chainId: CHAIN_ID }), startLocalChain({ chainId: OTHER_CHAIN_ID, gasLimit: 1_000_000_000n })]);
    [rpc, otherRpc] = await Promise.all([startRpcProxy(chain.url), startRpcProxy(otherChain.url)]);
    restoreEnv = setEnv({
      APP_ORIGIN,
      // A public https origin is not local mode by itself; these tests use dev tokens.
      LOCAL_DEV: '1',
      WALLET_EVM_CHAIN_IDS: `1,8453,${CHAIN_ID},${OTHER_CHAIN_ID}`,
      WALLET_EVM_RPC_URLS: `${CHAIN_ID}=${rpc.url},${OTHER_CHAIN_ID}=${otherRpc.url}`,
      WALLET_EVM_RPC_TIMEOUT_MS: String(RPC_TIMEOUT_MS),
      WALLET_SOLANA_CLUSTERS: undefined,
      SUPABASE_URL: undefined,
      SUPABASE_JWT_SECRET: undefined,
      AUTH_VERIFY_SESSION: undefined,
    });
    db = await useTestDatabase(kind);
  });
  afterAll(async () => {
    restoreEnv?.();
    await closeDatabase();
    await db?.close();
    await Promise.all([rpc?.close(), otherRpc?.close()]);
    await Promise.all([chain?.stop(), otherChain?.stop()]);
  });
  beforeEach(() => {
    for (const proxy of [rpc, otherRpc]) {
      proxy.mode = 'forward';
      proxy.reset();
    }
  });

  const newAccount = (): Promise<SmartAccountHandle> => chain.smartAccount(privateKeyToAccount(generatePrivateKey()));

  it('links a deployed ERC-1271 wallet (kind erc1271), asking the chain once, in two database calls', async () => {
    const user = await testUser();
    const account = await newAccount();
    await account.deploy();
    const body = await signedBody(user, account.address, account.sign);
    rpc.reset();
    const before = dbCallCount();
    const response = await postLink(user, body);
    expect(response.status).toBe(201);
    expect(response.body.link).toMatchObject({ chain: 'evm', address: account.address, chainId: CHAIN_ID, kind: 'erc1271' });
    expect(linkResponseSchema.safeParse(response.body).success).toBe(true); // as the OpenAPI document says
    expect(rpc.methods).toEqual(['eth_call']);
    expect(dbCallCount() - before).toBe(2);
    expect(await listLinks(user)).toMatchObject([{ address: account.address, kind: 'erc1271' }]);
  });

  it('links an undeployed wallet with an ERC-6492 signature (kind erc6492), and deploys nothing', async () => {
    const user = await testUser();
    const account = await newAccount();
    const body = await signedBody(user, account.address, account.signCounterfactual);
    expect(body.payload.signature.endsWith('6492'.repeat(16))).toBe(true);
    rpc.reset();
    const block = await chain.client.getBlockNumber();
    const response = await postLink(user, body);
    expect(response.status).toBe(201);
    expect(response.body.link).toMatchObject({ address: account.address, kind: 'erc6492' });
    expect(linkResponseSchema.safeParse(response.body).success).toBe(true);
    expect(rpc.methods).toEqual(['eth_call', 'eth_getCode']);
    // Simulated in an eth_call: no transaction, no block, no code at the address.
    expect(await account.isDeployed()).toBe(false);
    expect(await chain.client.getBlockNumber()).toBe(block);
  });

  it('records erc1271 for an ERC-6492 signature whose account is deployed by now', async () => {
    const user = await testUser();
    const account = await newAccount();
    await account.deploy();
    const response = await postLink(user, await signedBody(user, account.address, account.signCounterfactual));
    expect(response.status).toBe(201);
    expect(response.body.link.kind).toBe('erc1271');
  });

  it('refuses a signature by a key that does not own the account (422), and the same challenge then links with the owner\'s', async () => {
    const user = await testUser();
    const account = await newAccount();
    await account.deploy();
    // The right scheme for the right account, made by a key that does not own it.
    const intruder = privateKeyToAccount(generatePrivateKey());
    const body = await signedBody(user, account.address, (message) => account.signWith(intruder, message));
    const refused = await postLink(user, body);
    expectProblem(refused, 422, 'invalid_signature');
    expect(refused.body.detail).toBe(`Neither the key of ${account.address} nor a smart-contract wallet at that address on chain ${CHAIN_ID} accepts this signature over this exact message.`);
    // Undeployed, wrapped with the factory call of another owner's account: invalid too.
    const undeployed = await newAccount();
    const intrudersAccount = await chain.smartAccount(intruder);
    const wrongFactoryCall = await signedBody(user, undeployed.address, (message) => intrudersAccount.signCounterfactual(message));
    expectProblem(await postLink(user, wrongFactoryCall), 422, 'invalid_signature');
    expect(await undeployed.isDeployed()).toBe(false);

    const owned = { payload: { ...body.payload, signature: await account.sign(body.payload.message) } };
    expect((await postLink(user, owned)).status).toBe(201);
  });

  it('refuses garbage of any length for an address with no code (422), never 5xx', async () => {
    const user = await testUser();
    const nobody = evmWallet();
    for (const signature of ['0x01', `0x${'ab'.repeat(65)}`, `0x${'cd'.repeat(700)}`, `0x${'00'.repeat(200)}${'6492'.repeat(16)}`]) {
      const body = await signedBody(user, nobody.address, async () => signature);
      expectProblem(await postLink(user, body), 422, 'invalid_signature');
    }
  });

  it.each([
    { mode: 'http-error' as const, what: 'answers HTTP 503' },
    { mode: 'rpc-error' as const, what: 'answers a JSON-RPC internal error' },
    { mode: 'hang' as const, what: 'never answers' },
  ])('answers 503 chain_unavailable with Retry-After when the RPC $what, linking nothing: the same signature links afterwards', async ({ mode }) => {
    const user = await testUser();
    const account = await newAccount();
    await account.deploy();
    const body = await signedBody(user, account.address, account.sign);
    rpc.mode = mode;
    const started = performance.now();
    const failed = await postLink(user, body);
    const elapsed = performance.now() - started;
    expectProblem(failed, 503, 'chain_unavailable');
    expect(problemSchema.strict().safeParse(failed.body).success).toBe(true);
    expect(Number(failed.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(failed.body.detail).toContain(`The RPC of chain ${CHAIN_ID} did not answer`);
    expect(elapsed).toBeLessThan(RPC_TIMEOUT_MS + 1500); // bounded by WALLET_EVM_RPC_TIMEOUT_MS
    if (mode === 'hang') expect(elapsed).toBeGreaterThanOrEqual(RPC_TIMEOUT_MS - 50);
    expect(await listLinks(user)).toEqual([]);

    rpc.mode = 'forward';
    const retried = await postLink(user, body);
    expect(retried.status).toBe(201);
    expect(retried.body.link.kind).toBe('erc1271');
  });

  it('takes a node\'s "execution reverted" (geth\'s -32000) as the contract\'s no: 422, and the challenge stays open', async () => {
    const user = await testUser();
    const account = await newAccount();
    await account.deploy();
    const body = await signedBody(user, account.address, account.sign);
    rpc.mode = 'geth-revert';
    expectProblem(await postLink(user, body), 422, 'invalid_signature');
    rpc.mode = 'forward';
    expect((await postLink(user, body)).status).toBe(201);
  });

  it('refuses ERC-8010 (EIP-7702 delegation) signatures as unsupported, without asking the chain', async () => {
    const user = await testUser();
    const key = privateKeyToAccount(generatePrivateKey());
    const authorization = await key.signAuthorization({ address: chain.factory, chainId: CHAIN_ID, nonce: 0 });
    const body = await signedBody(user, key.address, async (message) =>
      serializeErc8010Signature({ authorization, signature: await privateKeyToAccount(generatePrivateKey()).signMessage({ message }) }));
    rpc.reset();
    expectProblem(await postLink(user, body), 422, 'unsupported_signature_type');
    expect(rpc.requests).toBe(0);
  });

  it('answers 503 when nothing listens at the RPC address, never "invalid"', async () => {
    const down = await startRpcProxy(chain.url);
    await down.close();
    const restore = setEnv({ WALLET_EVM_RPC_URLS: `${CHAIN_ID}=${down.url}` });
    try {
      const user = await testUser();
      const account = await newAccount();
      const body = await signedBody(user, account.address, account.signCounterfactual);
      expectProblem(await postLink(user, body), 503, 'chain_unavailable');
    } finally {
      restore();
    }
  });

  it('answers 422 naming the chain, never the setting, on an allowed chain without an RPC; the log names the setting', async () => {
    const info = vi.spyOn(log, 'info');
    try {
      const user = await testUser();
      const account = await newAccount();
      // 65 bytes that do not recover the address: a bad signature, unless a contract says otherwise.
      const sixtyFive = await signedBody(user, account.address, account.sign, 8453);
      const refused = await postLink(user, sixtyFive);
      expectProblem(refused, 422, 'invalid_signature');
      expect(refused.body.detail).toContain('this service does not check them on chain 8453');
      // Longer (ERC-6492): only a contract's, so the type is unsupported there.
      const wrapped = await signedBody(user, account.address, account.signCounterfactual, 8453);
      const unsupported = await postLink(user, wrapped);
      expectProblem(unsupported, 422, 'unsupported_signature_type');
      expect(unsupported.body.detail).toContain('this service does not check them on chain 8453');
      for (const answer of [refused, unsupported]) expect(JSON.stringify([answer.body, [...answer.headers]])).not.toMatch(/WALLET_|RPC_URLS/);
      const logged = info.mock.calls.filter(([fields, text]) => (fields as { chainId?: number }).chainId === 8453 && String(text).includes('WALLET_EVM_RPC_URLS')).map(([, text]) => String(text));
      // 65 bytes are an ordinary wallet's size: logged as a signature the key did not make, not as a contract wallet turned away.
      expect(logged).toEqual([
        'a signature on chain 8453 was not made by the address\'s key (a wrong key or message; only if it came from a smart-contract wallet would an RPC for chain 8453 in WALLET_EVM_RPC_URLS help)',
        'a signature that is not 65 bytes (a smart-contract wallet\'s, or a malformed one) came for chain 8453, which has no RPC: add one to WALLET_EVM_RPC_URLS (8453=https://...) to check smart-contract wallets there',
      ]);
      expect(rpc.requests + otherRpc.requests).toBe(0);
    } finally {
      info.mockRestore();
    }
  });

  it('links an ordinary wallet on the same chain without a single RPC request', async () => {
    const user = await testUser();
    const wallet = evmWallet();
    const body = await signedBody(user, wallet.address, wallet.sign);
    rpc.reset();
    const before = dbCallCount();
    const response = await postLink(user, body);
    expect(response.status).toBe(201);
    expect(response.body.link.kind).toBe('eoa');
    expect(rpc.requests).toBe(0);
    expect(dbCallCount() - before).toBe(1);
    // A wrong key's signature is the one EOA case that asks the chain (it might be a contract's).
    const stranger = evmWallet();
    const wrong = await signedBody(user, evmWallet().address, stranger.sign);
    expectProblem(await postLink(user, wrong), 422, 'invalid_signature');
    expect(rpc.methods).toEqual(['eth_call']);
  });

  it('lets one user win when two link the same contract wallet at once', async () => {
    const [a, b] = [await testUser(), await testUser()];
    const account = await newAccount();
    await account.deploy();
    const [bodyA, bodyB] = [await signedBody(a, account.address, account.sign), await signedBody(b, account.address, account.sign)];
    const answers = await Promise.all([postLink(a, bodyA), postLink(b, bodyB)]);
    expect(answers.map((answer) => answer.status).sort()).toEqual([201, 409]);
    expect(answers.find((answer) => answer.status === 409)!.body.code).toBe('wallet_already_linked');
    expect((await listLinks(a)).length + (await listLinks(b)).length).toBe(1);
    expect(Number((await db.sql<{ n: string }>('select count(*) as n from public.wallet_links where address_key = $1', [account.address.toLowerCase()]))[0]!.n)).toBe(1);
  });

  it('asks the chain at most 5 times per challenge, then the challenge must be renewed', async () => {
    const user = await testUser();
    const account = await newAccount();
    await account.deploy();
    const body = await signedBody(user, account.address, account.sign);
    const wrong = { payload: { ...body.payload, signature: await evmWallet().sign(body.payload.message) } };
    for (let attempt = 0; attempt < 5; attempt++) expectProblem(await postLink(user, wrong), 422, 'invalid_signature');
    rpc.reset();
    const spent = await postLink(user, body);
    expectProblem(spent, 400, 'challenge_expired');
    expect(spent.body.detail).toBe('This challenge has been checked on chain 5 times; request a new one.');
    expect(rpc.requests).toBe(0);
    expect((await postLink(user, await signedBody(user, account.address, account.sign))).status).toBe(201);
  });

  // The limit bounds what a challenge can cost; a provider that failed on its own (an HTTP 5xx, a
  // refused connection) gave no answer that any request could have caused, so (as the 503 says)
  // the same signature can be sent again however often that happens.
  it('gives back a check the provider failed (HTTP 5xx, a refused connection) more often than the limit: then the same body links', async () => {
    const user = await testUser();
    const account = await newAccount();
    await account.deploy();
    const body = await signedBody(user, account.address, account.sign);
    rpc.reset();
    rpc.mode = 'http-error';
    for (let attempt = 0; attempt < 4; attempt++) {
      const before = dbCallCount();
      expectProblem(await postLink(user, body), 503, 'chain_unavailable');
      expect(dbCallCount() - before).toBe(2); // the check, then its refund
    }
    expect(rpc.requests).toBe(4); // each one did ask the chain
    const down = await startRpcProxy(chain.url);
    await down.close();
    const restore = setEnv({ WALLET_EVM_RPC_URLS: `${CHAIN_ID}=${down.url}` });
    try {
      for (let attempt = 0; attempt < 3; attempt++) expectProblem(await postLink(user, body), 503, 'chain_unavailable');
    } finally {
      restore();
    }
    expect(await listLinks(user)).toEqual([]);
    const [{ checks }] = await db.sql<{ checks: number }>('select contract_checks as checks from public.wallet_challenges where id = $1', [challengeIdOf(body)]);
    expect(checks).toBe(0);
    rpc.mode = 'forward';
    const retried = await postLink(user, body);
    expect(retried.status).toBe(201);
    expect(retried.body.link).toMatchObject({ address: account.address, kind: 'erc1271' });
  });

  // Anything else may be what the caller's contract was built to cause: a call that outlasts the
  // timeout, an answer too big to read, a JSON-RPC error. Each is a check, as a refusal is.
  it('counts a timeout, a JSON-RPC error and a refusal like any answer: after 5 the challenge is spent and the chain is not asked again', async () => {
    const user = await testUser();
    const account = await newAccount();
    await account.deploy();
    const body = await signedBody(user, account.address, account.sign);
    const wrong = { payload: { ...body.payload, signature: await evmWallet().sign(body.payload.message) } };
    const attempts = [
      { mode: 'hang' as const, send: body, answer: [503, 'chain_unavailable'] },
      { mode: 'rpc-error' as const, send: body, answer: [503, 'chain_unavailable'] },
      { mode: 'http-error' as const, send: body, answer: [503, 'chain_unavailable'] }, // given back
      { mode: 'forward' as const, send: wrong, answer: [422, 'invalid_signature'] },
      { mode: 'geth-revert' as const, send: body, answer: [422, 'invalid_signature'] },
      { mode: 'hang' as const, send: body, answer: [503, 'chain_unavailable'] },
      { mode: 'forward' as const, send: body, answer: [400, 'challenge_expired'] },
    ];
    for (const { mode, send, answer } of attempts) {
      rpc.mode = mode;
      const before = rpc.requests;
      const response = await postLink(user, send);
      expect({ mode, status: response.status, code: response.body?.code }).toEqual({ mode, status: answer[0], code: answer[1] });
      if (answer[0] === 400) {
        expect(response.body.detail).toBe('This challenge has been checked on chain 5 times; request a new one.');
        expect(rpc.requests).toBe(before);
      }
    }
    expect(await listLinks(user)).toEqual([]);
    rpc.mode = 'forward';
    expect((await postLink(user, await signedBody(user, account.address, account.sign))).status).toBe(201);
  });

  // The attack: an ERC-6492 signature whose "factory" deploys an account that answers with more
  // than the 1 MB the service reads. Sent again and again with one challenge, each such check used
  // to be given back, so one challenge bought any number of eth_calls.
  it('holds a challenge to 5 checks when the account an ERC-6492 factory deploys answers with more than 1 MB', async () => {
    const warn = vi.spyOn(log, 'warn');
    // Time enough for the node to compute and send its answer on a busy machine: the size cap, not
    // the suite's short timeout, is what ends each check here.
    const restoreTimeout = setEnv({ WALLET_EVM_RPC_TIMEOUT_MS: '15000' });
    try {
      const user = await testUser();
      const hostile = await otherChain.hostileAccount(300_000n);
      const body = await signedBody(user, hostile.address, hostile.signCounterfactual, OTHER_CHAIN_ID);
      const answers: unknown[] = [];
      for (let attempt = 0; attempt < 8; attempt++) answers.push((await postLink(user, body)).body.code);
      expect(answers).toEqual([...Array(5).fill('chain_unavailable'), ...Array(3).fill('challenge_expired')]);
      expect(otherRpc.methods.filter((method) => method === 'eth_call')).toHaveLength(5);
      // Each of the 5 was the node's answer of more than 1 MB, not read past the cap.
      expect(otherRpc.answerBytes.every((bytes) => bytes > 1024 * 1024)).toBe(true);
      expect(warn.mock.calls.filter(([fields]) => (fields as { error?: string }).error === 'ResponseBodyTooLargeError')).toHaveLength(5);

      // More data than the gas limit can pay for: the node says the call ran out of gas (anvil:
      // -32603 "EVM error MemoryOOG"), the contract's failure, so 422, counted like the rest.
      const bigger = await otherChain.hostileAccount(700_000n);
      const spent = await signedBody(user, bigger.address, bigger.signCounterfactual, OTHER_CHAIN_ID);
      otherRpc.reset();
      expectProblem(await postLink(user, spent), 422, 'invalid_signature');
      expect(otherRpc.answerBytes).toEqual([expect.any(Number)]);
      expect(otherRpc.answerBytes[0]).toBeLessThan(1024);
    } finally {
      restoreTimeout();
      warn.mockRestore();
    }
  });

  // The attack: an account that spends all the gas the call is given. Without a gas limit the node
  // gave it its own (here a billion, seconds of work): the call outlasted WALLET_EVM_RPC_TIMEOUT_MS
  // and the check was given back, without end. Now every eth_call carries a gas limit, and whether
  // it ends in the node's "out of gas" or in the timeout, it counts.
  it('sends every eth_call with a gas limit, and holds a challenge to 5 checks against an account that burns all its gas', async () => {
    const user = await testUser();
    const hostile = await otherChain.hostileAccount(0n);
    const body = await signedBody(user, hostile.address, hostile.signCounterfactual, OTHER_CHAIN_ID);
    const answers: unknown[] = [];
    for (let attempt = 0; attempt < 7; attempt++) answers.push((await postLink(user, body)).body.code);
    // (Each of the 5 is the contract's failure, 422, unless the busy machine made it outlast the timeout, 503.)
    expect(answers.slice(0, 5).every((code) => code === 'invalid_signature' || code === 'chain_unavailable')).toBe(true);
    expect(answers.slice(5)).toEqual(['challenge_expired', 'challenge_expired']);
    expect(otherRpc.callGas).toEqual(Array(5).fill(`0x${CONTRACT_CHECK_GAS.toString(16)}`));
    // And the owner of a real account is not held back by the limit.
    const account = await otherChain.smartAccount(privateKeyToAccount(generatePrivateKey()));
    expect((await postLink(user, await signedBody(user, account.address, account.signCounterfactual, OTHER_CHAIN_ID))).status).toBe(201);
  });

  it('answers 429 rate_limited with Retry-After after 20 contract checks of one account in 10 minutes, whatever their outcome, counted in the database', async () => {
    const user = await testUser();
    const account = await newAccount();
    await account.deploy();
    const wrongFor = async () => {
      const body = await signedBody(user, account.address, account.sign);
      return { body, wrong: { payload: { ...body.payload, signature: await evmWallet().sign(body.payload.message) } } };
    };
    // 3 challenges spent on wrong signatures (15 checks), 5 checks the provider failed (given back to their challenge, not to the rate).
    for (let challenge = 0; challenge < 3; challenge++) {
      const { wrong } = await wrongFor();
      for (let attempt = 0; attempt < 5; attempt++) expectProblem(await postLink(user, wrong), 422, 'invalid_signature');
    }
    const { body } = await wrongFor();
    rpc.mode = 'http-error';
    for (let attempt = 0; attempt < 5; attempt++) expectProblem(await postLink(user, body), 503, 'chain_unavailable');
    rpc.mode = 'forward';
    rpc.reset();
    const limited = await postLink(user, body);
    expectProblem(limited, 429, 'rate_limited');
    const retryAfter = Number(limited.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(600);
    expect(limited.body.retryAfter).toBe(retryAfter);
    expect(rpc.requests).toBe(0);
    const [{ checks }] = await db.sql<{ checks: number }>('select count(*)::int as checks from public.wallet_contract_checks where user_id = $1', [user.userId]);
    expect(checks).toBe(20);
    // Another account is not limited; an ordinary wallet never is (it asks no chain).
    const other = await testUser();
    const theirs = await newAccount();
    await theirs.deploy();
    expect((await postLink(other, await signedBody(other, theirs.address, theirs.sign))).status).toBe(201);
    const key = evmWallet();
    expect((await postLink(user, await signedBody(user, key.address, key.sign))).status).toBe(201);
    // Ten minutes later (the checks moved back in time), the same body links.
    await db.sql(`update public.wallet_contract_checks set checked_at = checked_at - interval '10 minutes' where user_id = $1`, [user.userId]);
    expect((await postLink(user, body)).status).toBe(201);
  });

  // tests/conformance runs without an RPC; here the chain has one, so the document must say what the
  // server then does with every signature whose shape it accepts (tests/openapi checks the words).
  it('answers every signature the OpenAPI document accepts as documented, a Safe\'s 65 bytes with v 31 or 32 included', async () => {
    const contract = buildContract(buildOpenApiDocument(getConfig()) as unknown as OpenApiDocument);
    const described = contract.requestSchema('post', '/api/wallet-link') as { properties: { payload: { oneOf: { properties: { chain: { const: string }; signature: { description: string } } }[] } } };
    expect(described.properties.payload.oneOf.find((variant) => variant.properties.chain.const === 'evm')!.properties.signature.description)
      .toContain(`on chains ${CHAIN_ID}, ${OTHER_CHAIN_ID} it is checked on that chain through its RPC`);
    const user = await testUser();
    const account = await newAccount();
    await account.deploy();
    const owner = evmWallet();
    // A Safe signs eth_sign-style with v + 4 (31, 32); 0 and 1 are its contract and approved-hash kinds.
    const safeStyle = (v: number) => async (message: string) => `${(await owner.sign(message)).slice(0, -2)}${v.toString(16).padStart(2, '0')}`;
    const cases = [
      { name: 'v 31', sign: safeStyle(31), status: 422 },
      { name: 'v 32', sign: safeStyle(32), status: 422 },
      { name: 'one byte', sign: async () => '0x01', status: 422 },
      { name: '66 bytes', sign: async () => `0x${'ab'.repeat(66)}`, status: 422 },
      { name: 'the account\'s own', sign: account.sign, status: 201 },
    ];
    for (const { name, sign, status } of cases) {
      const body = await signedBody(user, account.address, sign);
      expect({ name, verdict: contract.requestVerdict('post', '/api/wallet-link', body) }).toEqual({ name, verdict: { valid: true, errors: [] } });
      const response = await postLink(user, body);
      expect({ name, status: response.status, violations: contract.checkResponse('post', '/api/wallet-link', response) }).toEqual({ name, status, violations: [] });
    }
    const other = await newAccount();
    const down = await signedBody(user, other.address, safeStyle(31));
    rpc.mode = 'http-error';
    const unavailable = await postLink(user, down);
    expect({ status: unavailable.status, violations: contract.checkResponse('post', '/api/wallet-link', unavailable, { dependencyDown: true }) }).toEqual({ status: 503, violations: [] });
  });

  it('does not ask the chain about a challenge that cannot link: used, another user\'s, or a wallet linked elsewhere', async () => {
    const [owner, other] = [await testUser(), await testUser()];
    const account = await newAccount();
    await account.deploy();
    const body = await signedBody(owner, account.address, account.sign);
    expect((await postLink(owner, body)).status).toBe(201);
    rpc.reset();
    expectProblem(await postLink(other, body), 400, 'challenge_not_found');
    const theirs = await signedBody(other, account.address, account.sign);
    expectProblem(await postLink(other, theirs), 409, 'wallet_already_linked');
    expect(rpc.requests).toBe(0);
    // The owner sending the same body again: verified again, then 200 alreadyLinked.
    const again = await postLink(owner, body);
    expect({ status: again.status, alreadyLinked: again.body.alreadyLinked }).toEqual({ status: 200, alreadyLinked: true });
  });

  it('keeps a link after the account rotates its owner; the old owner can no longer prove it on that chain', async () => {
    const user = await testUser();
    const account = await newAccount();
    await account.deploy();
    expect((await postLink(user, await signedBody(user, account.address, account.sign))).status).toBe(201);
    const newOwner = privateKeyToAccount(generatePrivateKey());
    await account.rotateOwner(newOwner.address);
    expect(await listLinks(user)).toMatchObject([{ address: account.address, kind: 'erc1271' }]);
    const other = await testUser();
    const oldOwnerSigns = await signedBody(other, account.address, account.sign);
    expectProblem(await postLink(other, oldOwnerSigns), 409, 'wallet_already_linked');
    const userAgain = await signedBody(user, account.address, account.sign);
    expectProblem(await postLink(user, userAgain), 422, 'invalid_signature');
  });

  // The attack: an account deployed on one chain whose owner rotated its key is not deployed on the
  // other. The old key's holder signs with ERC-6492 there (the factory call deploys the account with
  // the old owner, at the same address) and links it: until now a link of the address on every chain,
  // so the real owner got 409 everywhere.
  it('links a contract wallet on its chain only: the old owner\'s ERC-6492 proof on another chain never blocks the real owner after a rotation', async () => {
    const oldOwner = privateKeyToAccount(generatePrivateKey());
    const newOwner = privateKeyToAccount(generatePrivateKey());
    const salt = `0x${randomBytes(32).toString('hex')}` as const;
    const here = await chain.smartAccount(oldOwner, salt);
    const there = await otherChain.smartAccount(oldOwner, salt);
    expect(there.address).toBe(here.address); // one address, two chains
    await here.deploy();
    await here.rotateOwner(newOwner.address);
    expect(await there.isDeployed()).toBe(false);
    const [oldHolder, realOwner, stranger] = [await testUser(), await testUser(), await testUser()];

    // The old key still proves the account where it was never deployed...
    const elsewhere = await postLink(oldHolder, await signedBody(oldHolder, there.address, there.signCounterfactual, OTHER_CHAIN_ID));
    expect(elsewhere.status).toBe(201);
    expect(elsewhere.body.link).toMatchObject({
      address: here.address, chainId: OTHER_CHAIN_ID, kind: 'erc6492', scope: 'chain', accountId: `eip155:${OTHER_CHAIN_ID}:${here.address}`,
    });
    // ...but not where it was rotated away...
    expectProblem(await postLink(oldHolder, await signedBody(oldHolder, here.address, here.sign)), 422, 'invalid_signature');
    // ...where the real owner links it.
    const ownersLink = await postLink(realOwner, await signedBody(realOwner, here.address, (message) => here.signWith(newOwner, message)));
    expect(ownersLink.status).toBe(201);
    expect(ownersLink.body.link).toMatchObject({ chainId: CHAIN_ID, kind: 'erc1271', scope: 'chain', accountId: `eip155:${CHAIN_ID}:${here.address}` });
    expect(linkResponseSchema.safeParse(ownersLink.body).success).toBe(true);

    // Each account sees its own link, in the list and in GET /api/me.
    for (const [user, chainId] of [[oldHolder, OTHER_CHAIN_ID], [realOwner, CHAIN_ID]] as const) {
      const expected = { address: here.address, chainId, scope: 'chain', accountId: `eip155:${chainId}:${here.address}` };
      expect(await listLinks(user)).toEqual([expect.objectContaining(expected)]);
      const me = await callRoute(meRoute, { headers: { authorization: user.authorization } });
      expect(me.body.wallets).toEqual([expect.objectContaining(expected)]);
    }
    // One owner per chain: a third account gets 409 on both, and the chain is not asked.
    rpc.reset();
    otherRpc.reset();
    expectProblem(await postLink(stranger, await signedBody(stranger, here.address, (message) => here.signWith(newOwner, message))), 409, 'wallet_already_linked');
    expectProblem(await postLink(stranger, await signedBody(stranger, there.address, there.signCounterfactual, OTHER_CHAIN_ID)), 409, 'wallet_already_linked');
    expect(rpc.requests + otherRpc.requests).toBe(0);
  });

  it('lets an ordinary wallet\'s link hold its address on every chain: another account\'s contract claim of it elsewhere is 409, the chain not asked', async () => {
    const [owner, other] = [await testUser(), await testUser()];
    const key = evmWallet();
    const linked = await postLink(owner, await signedBody(owner, key.address, key.sign));
    expect(linked.body.link).toMatchObject({ kind: 'eoa', scope: 'evm', accountId: `eip155:${CHAIN_ID}:${key.address}` });
    otherRpc.reset();
    expectProblem(await postLink(other, await signedBody(other, key.address, async () => `0x${'ab'.repeat(200)}`, OTHER_CHAIN_ID)), 409, 'wallet_already_linked');
    expectProblem(await postLink(other, await signedBody(other, key.address, key.sign, OTHER_CHAIN_ID)), 409, 'wallet_already_linked');
    expect(otherRpc.requests).toBe(0);
    // The owner's key proving it on another chain is the same wallet: already linked.
    const again = await postLink(owner, await signedBody(owner, key.address, key.sign, OTHER_CHAIN_ID));
    expect({ status: again.status, id: again.body.link.id }).toEqual({ status: 200, id: linked.body.link.id });
  });

  // EIP-7702: an ordinary wallet's address runs a smart account's code on one chain, with another
  // key as its signer. Both can prove the address; whoever links first holds it where the scopes meet.
  it('gives an address that is both a key\'s and (by EIP-7702 delegation) a contract\'s one owner where the scopes meet', async () => {
    const [keyHolder, delegateOwner] = [await testUser(), await testUser()];
    const key = privateKeyToAccount(generatePrivateKey());
    const signer = privateKeyToAccount(generatePrivateKey());
    const delegated = await chain.delegate(key, signer.address);
    const signedByKey = async (user: User, chainId: number) => signedBody(user, key.address, (message) => key.signMessage({ message }), chainId);

    // The delegated code's signer proves the address on this chain: a contract's link, this chain only.
    const contractLink = await postLink(delegateOwner, await signedBody(delegateOwner, key.address, (message) => delegated.signWith(signer, message)));
    expect(contractLink.status).toBe(201);
    expect(contractLink.body.link).toMatchObject({ kind: 'erc1271', scope: 'chain', accountId: `eip155:${CHAIN_ID}:${key.address}` });
    // The key's owner proves the key, but its link would hold this chain too: 409, on any chain.
    expectProblem(await postLink(keyHolder, await signedByKey(keyHolder, OTHER_CHAIN_ID)), 409, 'wallet_already_linked');
    expectProblem(await postLink(keyHolder, await signedByKey(keyHolder, CHAIN_ID)), 409, 'wallet_already_linked');

    // The other way round: once the key's owner linked it, the delegated code's signer gets 409 without a chain call.
    const [first, second] = [await testUser(), await testUser()];
    const otherKey = privateKeyToAccount(generatePrivateKey());
    const otherDelegated = await chain.delegate(otherKey, signer.address);
    const keyLink = await postLink(first, await signedBody(first, otherKey.address, (message) => otherKey.signMessage({ message }), OTHER_CHAIN_ID));
    expect(keyLink.body.link).toMatchObject({ kind: 'eoa', scope: 'evm' });
    rpc.reset();
    expectProblem(await postLink(second, await signedBody(second, otherKey.address, (message) => otherDelegated.signWith(signer, message))), 409, 'wallet_already_linked');
    expect(rpc.requests).toBe(0);
  });

  it('never shows the RPC URL (its credentials and API key) to a caller or in the log', async () => {
    const keyed = await startRpcProxy(chain.url);
    const url = new URL(keyed.url);
    const credentialed = `http://rpc-user:rpc-pass-0a1b2c@${url.host}/v2/api-key-9f8e7d6c`;
    const restore = setEnv({ WALLET_EVM_RPC_URLS: `${CHAIN_ID}=${credentialed}` });
    const warn = vi.spyOn(log, 'warn');
    try {
      const user = await testUser();
      const account = await newAccount();
      await account.deploy();
      const ok = await postLink(user, await signedBody(user, account.address, account.sign));
      expect(ok.status).toBe(201);
      // fetch refuses URLs with credentials: they went as Basic auth, the path as it was.
      expect(keyed.authorizations).toEqual([`Basic ${Buffer.from('rpc-user:rpc-pass-0a1b2c').toString('base64')}`]);
      keyed.mode = 'http-error';
      const second = await testUser();
      const other = await newAccount();
      const failed = await postLink(second, await signedBody(second, other.address, other.sign));
      expectProblem(failed, 503, 'chain_unavailable');
      const everything = JSON.stringify([failed.body, [...failed.headers], warn.mock.calls]);
      expect(warn.mock.calls.some(([fields]) => JSON.stringify(fields).includes(url.host))).toBe(true);
      for (const secret of ['rpc-pass-0a1b2c', 'api-key-9f8e7d6c', 'rpc-user']) expect(everything).not.toContain(secret);
    } finally {
      warn.mockRestore();
      restore();
      await keyed.close();
    }
  });
});
