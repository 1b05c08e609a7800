import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { serializeErc8010Signature } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import * as challengeRoute from '../../app/api/wallet-link/challenge/route.ts';
import * as linkRoute from '../../app/api/wallet-link/route.ts';
import { getConfig } from '../../lib/config.ts';
import { closeDatabase, dbCallCount } from '../../lib/db/index.ts';
import { buildOpenApiDocument } from '../../lib/openapi/document.ts';
import { log } from '../../lib/log.ts';
import { linkResponseSchema, problemSchema } from '../../lib/openapi/responses.ts';
import { buildContract, type OpenApiDocument } from '../conformance/contract.ts';
import { DATABASE_KINDS, useTestDatabase, type TestDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { callRoute, type RouteResponse } from '../support/http.ts';
import { startLocalChain, startRpcProxy, type LocalChain, type RpcProxy, type SmartAccountHandle } from '../support/local-chain.ts';
import { testUser } from '../support/tokens.ts';
import { evmWallet } from './wallets.ts';

/**
 * Smart-contract wallets over real HTTP, against a real EVM: anvil on a loopback port with the
 * OpenZeppelin-based SmartAccount and its factory (tests/contracts/SmartAccount.sol) deployed.
 * The service reaches the chain through a counting proxy (tests/support/local-chain.ts) that can
 * also fail on demand: configured as the RPC of chain 31337 in WALLET_EVM_RPC_URLS. Every
 * signature is made by a real key: the account owner's ERC-7739 signature, as a smart wallet
 * answers personal_sign, wrapped in ERC-6492 while the account is not deployed.
 */

type User = Awaited<ReturnType<typeof testUser>>;
const APP_ORIGIN = 'https://wallets.example.test';
const CHAIN_ID = 31337;
const RPC_TIMEOUT_MS = 600;

const requestChallenge = (user: User, address: string, chainId = CHAIN_ID) =>
  callRoute(challengeRoute, { method: 'POST', headers: { authorization: user.authorization }, body: { chain: 'evm', address, chainId } });
const postLink = (user: User, body: unknown) => callRoute(linkRoute, { method: 'POST', headers: { authorization: user.authorization }, body });
const listLinks = async (user: User) => (await callRoute(linkRoute, { headers: { authorization: user.authorization } })).body.links as { address: string; kind: string }[];

function expectProblem(response: RouteResponse, status: number, code: string) {
  expect({ status: response.status, code: response.body?.code }).toEqual({ status, code });
  expect(response.headers.get('content-type')).toBe('application/problem+json');
}

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
  let rpc: RpcProxy;
  let restoreEnv: () => void;

  beforeAll(async () => {
    chain = await startLocalChain({ chainId: CHAIN_ID });
    rpc = await startRpcProxy(chain.url);
    restoreEnv = setEnv({
      APP_ORIGIN,
      // A public https origin is not local mode by itself; these tests use dev tokens.
      LOCAL_DEV: '1',
      WALLET_EVM_CHAIN_IDS: `1,8453,${CHAIN_ID}`,
      WALLET_EVM_RPC_URLS: `${CHAIN_ID}=${rpc.url}`,
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
    await rpc?.close();
    await chain?.stop();
  });
  beforeEach(() => {
    rpc.mode = 'forward';
    rpc.reset();
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
  ])('answers 503 chain_unavailable with Retry-After when the RPC $what, consuming nothing: the same signature links afterwards', async ({ mode }) => {
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

  it('answers 422 naming the chain and WALLET_EVM_RPC_URLS on an allowed chain without an RPC', async () => {
    const user = await testUser();
    const account = await newAccount();
    // 65 bytes that do not recover the address: a bad signature, unless a contract says otherwise.
    const sixtyFive = await signedBody(user, account.address, account.sign, 8453);
    const refused = await postLink(user, sixtyFive);
    expectProblem(refused, 422, 'invalid_signature');
    expect(refused.body.detail).toContain('no RPC for chain 8453');
    expect(refused.body.detail).toContain('WALLET_EVM_RPC_URLS (e.g. 8453=https://...)');
    // Longer (ERC-6492): only a contract's, so the type is unsupported there.
    const wrapped = await signedBody(user, account.address, account.signCounterfactual, 8453);
    const unsupported = await postLink(user, wrapped);
    expectProblem(unsupported, 422, 'unsupported_signature_type');
    expect(unsupported.body.detail).toContain('no RPC for chain 8453');
    expect(rpc.requests).toBe(0);
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

  // The limit bounds what definite answers cost; a chain that did not answer gave none, so (as the
  // 503 says) the challenge stays open for the same signature however often the RPC fails.
  it('does not count a check the chain did not answer: more RPC failures than the limit, then the same body links', async () => {
    const user = await testUser();
    const account = await newAccount();
    await account.deploy();
    const body = await signedBody(user, account.address, account.sign);
    rpc.reset();
    rpc.mode = 'http-error';
    for (let attempt = 0; attempt < 7; attempt++) expectProblem(await postLink(user, body), 503, 'chain_unavailable');
    rpc.mode = 'rpc-error';
    expectProblem(await postLink(user, body), 503, 'chain_unavailable');
    expect(rpc.requests).toBe(8); // each one did ask the chain
    expect(await listLinks(user)).toEqual([]);
    rpc.mode = 'forward';
    const retried = await postLink(user, body);
    expect(retried.status).toBe(201);
    expect(retried.body.link).toMatchObject({ address: account.address, kind: 'erc1271' });
  });

  it('counts only definite answers toward the limit: 4 wrong signatures and any number of RPC failures leave one check', async () => {
    const user = await testUser();
    const account = await newAccount();
    await account.deploy();
    const body = await signedBody(user, account.address, account.sign);
    const wrong = { payload: { ...body.payload, signature: await evmWallet().sign(body.payload.message) } };
    for (let attempt = 0; attempt < 4; attempt++) {
      expectProblem(await postLink(user, wrong), 422, 'invalid_signature');
      rpc.mode = attempt % 2 === 0 ? 'http-error' : 'hang';
      expectProblem(await postLink(user, body), 503, 'chain_unavailable');
      rpc.mode = 'forward';
    }
    const before = dbCallCount();
    rpc.mode = 'http-error';
    expectProblem(await postLink(user, body), 503, 'chain_unavailable');
    // The check, then its refund: a failure costs one database call more than an answer.
    expect(dbCallCount() - before).toBe(2);
    rpc.mode = 'forward';
    // The fifth definite answer is still allowed (the owner's signature), and a sixth would not be.
    expect((await postLink(user, body)).status).toBe(201);
    const nobody = evmWallet();
    const spentWrong = await signedBody(user, nobody.address, evmWallet().sign);
    for (let attempt = 0; attempt < 5; attempt++) expectProblem(await postLink(user, spentWrong), 422, 'invalid_signature');
    rpc.mode = 'http-error';
    expectProblem(await postLink(user, spentWrong), 400, 'challenge_expired');
  });

  // tests/conformance runs without an RPC; here the chain has one, so the document must say what the
  // server then does with every signature whose shape it accepts (tests/openapi checks the words).
  it('answers every signature the OpenAPI document accepts as documented, a Safe\'s 65 bytes with v 31 or 32 included', async () => {
    const contract = buildContract(buildOpenApiDocument(getConfig()) as unknown as OpenApiDocument);
    const described = contract.requestSchema('post', '/api/wallet-link') as { properties: { payload: { oneOf: { properties: { chain: { const: string }; signature: { description: string } } }[] } } };
    expect(described.properties.payload.oneOf.find((variant) => variant.properties.chain.const === 'evm')!.properties.signature.description)
      .toContain(`on chain ${CHAIN_ID} it is checked on that chain through its RPC`);
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

  it('keeps a link after the account rotates its owner; the old owner can no longer prove it', async () => {
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
