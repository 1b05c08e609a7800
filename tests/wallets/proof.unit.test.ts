import { ed25519 } from '@noble/curves/ed25519.js';
import { base58 } from '@scure/base';
import { describe, expect, it, vi } from 'vitest';
import { DomainError } from '../../lib/errors.ts';
import { problemFromDomainError, type ApiError } from '../../lib/http/problem.ts';
import { log } from '../../lib/log.ts';
import { parseEvmAddress, parseSolanaAddress } from '../../lib/wallets/address.ts';
import { buildChallenge, CHALLENGE_TTL_MS, maskEmail } from '../../lib/wallets/challenge.ts';
import { toWalletLink, toWalletLinks } from '../../lib/wallets/links.ts';
import { verifyLinkProof } from '../../lib/wallets/proof.ts';
import { parseChallengeRequest, parseLinkRequest, type ChallengeInput } from '../../lib/wallets/schemas.ts';
import { formatSignInMessage, parseSignInMessage } from '../../lib/wallets/sign-in-message.ts';
import { decodeEvmSignature, verifyEvmSignature } from '../../lib/wallets/verify.ts';
import { evmWallet, highSTwin, solanaWallet, type TestWallet } from './wallets.ts';

const CONFIG = { wallet: { evmChainIds: [1, 8453], solanaClusters: ['mainnet'], evmRpcUrls: new Map<number, string>() } };
const APP_ORIGIN = 'https://app.example.com';
const NOW = new Date('2026-11-22T10:00:00.000Z');
const USER = { userId: '6f1d3c1e-4b0a-4d53-9f55-1f0f6d2b8c11', email: 'jane.doe@example.com' };

/** The domain error a call ends in, as the API would answer it (status from lib/http's table). */
async function apiError(promise: Promise<unknown> | (() => unknown)): Promise<ApiError> {
  try {
    await (typeof promise === 'function' ? promise() : promise);
  } catch (error) {
    if (error instanceof DomainError) return problemFromDomainError(error);
    throw error;
  }
  throw new Error('expected a DomainError');
}

const network = (wallet: TestWallet) => (wallet.chain === 'evm' ? { chainId: 1 } : { cluster: 'mainnet' });

/** A challenge as the service issues it, and the link request a wallet would send back. */
async function signedChallenge(wallet: TestWallet, overrides: { now?: Date; appOrigin?: string } = {}) {
  const input = parseChallengeRequest({ chain: wallet.chain, address: wallet.address, ...network(wallet) }, CONFIG);
  const challenge = buildChallenge(input, { user: USER, appOrigin: overrides.appOrigin ?? APP_ORIGIN, now: overrides.now ?? NOW });
  const signature = await wallet.sign(challenge.message);
  const body = { payload: { chain: wallet.chain, address: wallet.address, ...network(wallet), message: challenge.message, signature } };
  return { challenge, body, link: () => parseLinkRequest(body, CONFIG) };
}

describe('wallet addresses', () => {
  const WETH = '0xC02aaA39b223FE8D0A0e5C4F27eAD9083C756Cc2';
  const evm = { address: WETH };
  const lower = WETH.toLowerCase();
  const evmCases: { name: string; raw: string; ok: boolean }[] = [
    { name: 'EIP-55 checksummed', raw: WETH, ok: true },
    { name: 'all lower case', raw: lower, ok: true },
    { name: 'all upper case', raw: `0x${WETH.slice(2).toUpperCase()}`, ok: true },
    { name: 'mixed case with a wrong checksum', raw: '0xC02aaA39b223FE8D0A0e5C4F27eAD9083C756CC2', ok: false },
    { name: '39 hex digits', raw: WETH.slice(0, -1), ok: false },
    { name: 'no 0x', raw: WETH.slice(2), ok: false },
    { name: 'not hex', raw: `0x${'g'.repeat(40)}`, ok: false },
  ];
  it.each(evmCases)('EVM: $name', ({ raw, ok }) => {
    const result = parseEvmAddress(raw);
    expect(result.ok).toBe(ok);
    if (result.ok) expect(result).toEqual({ ok: true, address: evm.address, addressKey: lower });
  });

  const solana = solanaWallet();
  const offCurve = (() => {
    for (let i = 1; ; i++) {
      const bytes = new Uint8Array(32).fill(i);
      if (!ed25519.utils.isValidPublicKey(bytes, false)) return base58.encode(bytes);
    }
  })();
  const solanaCases: { name: string; raw: string; ok: boolean }[] = [
    { name: 'an ed25519 public key', raw: solana.address, ok: true },
    { name: '31 bytes', raw: base58.encode(new Uint8Array(31).fill(7)), ok: false },
    { name: '33 bytes', raw: base58.encode(new Uint8Array(33).fill(7)), ok: false },
    { name: 'a character outside base58 (0)', raw: `0${solana.address.slice(1)}`, ok: false },
    { name: 'an off-curve point (program-derived address)', raw: offCurve, ok: false },
    { name: 'an EVM address', raw: evm.address, ok: false },
  ];
  it.each(solanaCases)('Solana: $name', ({ raw, ok }) => {
    expect(parseSolanaAddress(raw).ok).toBe(ok);
  });
});

describe('challenges', () => {
  const fixedRandom = { uuid: () => '3f2c8a4e-1b2d-4c5e-8f9a-0b1c2d3e4f5a', bytes: (n: number) => new Uint8Array(n).fill(0xab) };

  it('writes the exact EIP-4361 message: domain and URI from APP_ORIGIN, masked e-mail, nonce, 10-minute expiry, challenge id', () => {
    const wallet = evmWallet();
    const input = parseChallengeRequest({ chain: 'evm', address: wallet.address.toLowerCase(), chainId: 8453 }, CONFIG);
    const challenge = buildChallenge(input, { user: USER, appOrigin: APP_ORIGIN, now: NOW, random: fixedRandom });
    expect(challenge.message).toBe([
      'app.example.com wants you to sign in with your Ethereum account:',
      wallet.address,
      '',
      'Link this wallet to the account j***@e***.com on app.example.com. Signing proves you own the wallet; it sends no transaction and costs nothing.',
      '',
      'URI: https://app.example.com',
      'Version: 1',
      'Chain ID: 8453',
      `Nonce: ${'ab'.repeat(16)}`,
      'Issued At: 2026-11-22T10:00:00.000Z',
      'Expiration Time: 2026-11-22T10:10:00.000Z',
      'Request ID: 3f2c8a4e-1b2d-4c5e-8f9a-0b1c2d3e4f5a',
    ].join('\n'));
    expect(challenge).toMatchObject({ challengeId: '3f2c8a4e-1b2d-4c5e-8f9a-0b1c2d3e4f5a', chain: 'evm', address: wallet.address, chainId: 8453, issuedAt: NOW.toISOString() });
    expect(Date.parse(challenge.expiresAt) - NOW.getTime()).toBe(CHALLENGE_TTL_MS);
  });

  it('writes the Sign-In With Solana layout with the cluster as Chain ID', () => {
    const wallet = solanaWallet();
    const input = parseChallengeRequest({ chain: 'solana', address: wallet.address, cluster: 'mainnet' }, CONFIG);
    const challenge = buildChallenge(input, { user: USER, appOrigin: 'http://localhost:3000', now: NOW, random: fixedRandom });
    expect(challenge.message.split('\n').slice(0, 7)).toEqual([
      'localhost:3000 wants you to sign in with your Solana account:',
      wallet.address,
      '',
      'Link this wallet to the account j***@e***.com on localhost:3000. Signing proves you own the wallet; it sends no transaction and costs nothing.',
      '',
      'URI: http://localhost:3000',
      'Version: 1',
    ]);
    expect(parseSignInMessage(challenge.message, 'solana')).toMatchObject({ ok: true, message: { chainId: 'mainnet', requestId: challenge.challengeId } });
    expect(challenge).toMatchObject({ cluster: 'mainnet' });
    expect(challenge).not.toHaveProperty('chainId');
  });

  it('uses 128 fresh random bits per nonce and a fresh id per challenge', () => {
    const input: ChallengeInput = { chain: 'evm', ...parseEvmAddress(evmWallet().address), chainId: 1 } as ChallengeInput;
    const challenges = Array.from({ length: 20 }, () => buildChallenge(input, { user: USER, appOrigin: APP_ORIGIN, now: NOW }));
    expect(new Set(challenges.map((c) => c.nonce)).size).toBe(20);
    expect(new Set(challenges.map((c) => c.challengeId)).size).toBe(20);
    for (const c of challenges) expect(c.nonce).toMatch(/^[0-9a-f]{32}$/);
  });

  it('names the account by user id when the token has no e-mail', () => {
    const input: ChallengeInput = { chain: 'evm', ...parseEvmAddress(evmWallet().address), chainId: 1 } as ChallengeInput;
    const { message } = buildChallenge(input, { user: { userId: USER.userId, email: null }, appOrigin: APP_ORIGIN, now: NOW });
    expect(message).toContain(`to the account with user id ${USER.userId} on app.example.com`);
  });

  const masks: { email: string; masked: string }[] = [
    { email: 'jane.doe@example.com', masked: 'j***@e***.com' },
    { email: 'a@b.co', masked: 'a***@b***.co' },
    { email: 'root@localhost', masked: 'r***@l***' },
    { email: '"weird{}"@example.org', masked: '****@e***.org' },
    { email: 'ünïcode@exämple.de', masked: '****@e***.de' },
    { email: 'x@sub.domain.museum', masked: 'x***@s***.museum' },
  ];
  it.each(masks)('masks $email as $masked, in characters a statement may hold', ({ email, masked }) => {
    expect(maskEmail(email)).toBe(masked);
    const input: ChallengeInput = { chain: 'evm', ...parseEvmAddress(evmWallet().address), chainId: 1 } as ChallengeInput;
    const { message } = buildChallenge(input, { user: { userId: USER.userId, email }, appOrigin: APP_ORIGIN, now: NOW });
    expect(parseSignInMessage(message).ok).toBe(true);
  });
});

describe('request bodies', () => {
  const evm = evmWallet();
  const solana = solanaWallet();
  const challengeCases: { name: string; body: unknown; code: string; path?: string }[] = [
    { name: 'not an object', body: [1], code: 'invalid_request' },
    { name: 'no chain', body: { address: evm.address, chainId: 1 }, code: 'invalid_request' },
    { name: 'an unknown chain family', body: { chain: 'bitcoin', address: 'bc1q', chainId: 1 }, code: 'unsupported_chain', path: 'chain' },
    { name: 'an unknown field', body: { chain: 'evm', address: evm.address, chainId: 1, referrer: 'x' }, code: 'invalid_request' },
    { name: 'a cluster on an EVM request', body: { chain: 'evm', address: evm.address, chainId: 1, cluster: 'mainnet' }, code: 'invalid_request' },
    { name: 'chainId as a string', body: { chain: 'evm', address: evm.address, chainId: '1' }, code: 'invalid_request' },
    { name: 'chainId 1.5', body: { chain: 'evm', address: evm.address, chainId: 1.5 }, code: 'invalid_request' },
    { name: 'a chain not on the allow-list', body: { chain: 'evm', address: evm.address, chainId: 10 }, code: 'unsupported_chain', path: 'chainId' },
    { name: 'a cluster not on the allow-list', body: { chain: 'solana', address: solana.address, cluster: 'devnet' }, code: 'unsupported_chain', path: 'cluster' },
    { name: 'a bad EVM checksum', body: { chain: 'evm', address: '0xC02aaA39b223FE8D0A0e5C4F27eAD9083C756CC2', chainId: 1 }, code: 'invalid_address', path: 'address' },
    { name: 'a Solana address on EVM', body: { chain: 'evm', address: solana.address, chainId: 1 }, code: 'invalid_address', path: 'address' },
    { name: 'a short Solana address', body: { chain: 'solana', address: solana.address.slice(0, 20), cluster: 'mainnet' }, code: 'invalid_address', path: 'address' },
  ];
  it.each(challengeCases)('challenge: $name -> $code', async ({ body, code, path }) => {
    const error = await apiError(() => parseChallengeRequest(body, CONFIG));
    expect(error.code).toBe(code);
    expect(error.status).toBe(400);
    if (path) expect(error.options.errors?.[0]?.path).toBe(path);
  });

  const payload = { chain: 'evm', address: evm.address, chainId: 1, message: 'x', signature: `0x${'11'.repeat(64)}1b` };
  const linkCases: { name: string; body: unknown; code: string; status: number }[] = [
    { name: 'no payload', body: {}, code: 'invalid_request', status: 400 },
    { name: 'an unknown top-level field', body: { payload, extra: 1 }, code: 'invalid_request', status: 400 },
    { name: 'an unknown payload field', body: { payload: { ...payload, publicKey: 'x' } }, code: 'invalid_request', status: 400 },
    { name: 'an unknown chain family', body: { payload: { ...payload, chain: 'tron' } }, code: 'unsupported_chain', status: 400 },
    { name: 'an odd-length hex signature', body: { payload: { ...payload, signature: `0x${'11'.repeat(64)}1b1` } }, code: 'invalid_request', status: 400 },
    { name: 'a signature without 0x', body: { payload: { ...payload, signature: `${'11'.repeat(64)}1b` } }, code: 'invalid_request', status: 400 },
    { name: 'an empty signature', body: { payload: { ...payload, signature: '0x' } }, code: 'invalid_request', status: 400 },
    // Not 65 bytes: only a smart-contract wallet's, and chain 1 has no RPC in this configuration.
    { name: 'a 64-byte EVM signature, no RPC for the chain', body: { payload: { ...payload, signature: `0x${'11'.repeat(64)}` } }, code: 'unsupported_signature_type', status: 422 },
    { name: 'a 66-byte signature, no RPC for the chain', body: { payload: { ...payload, signature: `0x${'11'.repeat(66)}` } }, code: 'unsupported_signature_type', status: 422 },
    {
      name: 'an ERC-6492 wrapped signature',
      body: { payload: { ...payload, signature: `0x${'00'.repeat(300)}${'6492'.repeat(16)}` } },
      code: 'unsupported_signature_type',
      status: 422,
    },
    { name: 'a Solana signature of 63 bytes', body: { payload: { chain: 'solana', address: solana.address, cluster: 'mainnet', message: 'x', signature: base58.encode(new Uint8Array(63).fill(1)) } }, code: 'invalid_request', status: 400 },
    { name: 'a hex Solana signature', body: { payload: { chain: 'solana', address: solana.address, cluster: 'mainnet', message: 'x', signature: `0x${'11'.repeat(64)}` } }, code: 'invalid_request', status: 400 },
  ];
  it.each(linkCases)('link: $name -> $status $code', async ({ body, code, status }) => {
    const error = await apiError(() => parseLinkRequest(body, CONFIG));
    expect({ code: error.code, status: error.status }).toEqual({ code, status });
  });

  it('names the chain to the caller, and the variable to set only in the log, when a contract-wallet signature has no RPC to check it', async () => {
    const info = vi.spyOn(log, 'info');
    try {
      const error = await apiError(() => parseLinkRequest({ payload: { ...payload, chainId: 8453, signature: `0x${'ab'.repeat(200)}` } }, CONFIG));
      expect(error.options.detail).toBe("This 200-byte signature is not an account key's (65 bytes), so only a smart-contract wallet's check (ERC-1271/ERC-6492) could accept it. Smart-contract wallets are checked on their chain, and this service does " +
        'not check them on chain 8453: link an ordinary wallet there, or this wallet on a chain where smart-contract wallets are accepted.');
      expect(error.options.errors).toEqual([{ path: 'payload.signature', message: error.options.detail }]);
      expect(JSON.stringify(error.options)).not.toMatch(/WALLET_|RPC_URL/);
      expect(info).toHaveBeenCalledWith({ chainId: 8453 }, expect.stringContaining('add one to WALLET_EVM_RPC_URLS (8453=https://...)'));
    } finally {
      info.mockRestore();
    }
  });

  it('lets any signature through to the chain where there is an RPC (its contract judges it)', () => {
    const withRpc = { wallet: { ...CONFIG.wallet, evmRpcUrls: new Map([[1, 'https://rpc.example/v2/key']]) } };
    for (const signature of [`0x${'11'.repeat(64)}`, `0x${'11'.repeat(66)}`, `0x${'00'.repeat(300)}${'6492'.repeat(16)}`, '0x01']) {
      expect(parseLinkRequest({ payload: { ...payload, signature } }, withRpc).signature).toEqual(Uint8Array.from(Buffer.from(signature.slice(2), 'hex')));
    }
  });
});

describe('proof of ownership (pure, injected clock)', () => {
  it.each([{ make: evmWallet }, { make: solanaWallet }])('accepts a challenge signed by its wallet ($make.name)', async ({ make }) => {
    const { challenge, link } = await signedChallenge(make());
    expect(await verifyLinkProof(link(), { appOrigin: APP_ORIGIN, now: NOW })).toEqual({ challengeId: challenge.challengeId, kind: 'eoa' });
  });

  it('hands a signature the key did not make to the chain, only where the chain has an RPC', async () => {
    const { body, challenge } = await signedChallenge(evmWallet());
    const stranger = { payload: { ...body.payload, signature: await evmWallet().sign(body.payload.message) } };
    const v29 = { payload: { ...body.payload, signature: `${body.payload.signature.slice(0, -2)}1d` } };
    const long = { payload: { ...body.payload, signature: `0x${'ab'.repeat(200)}` } };
    const rpcFor1 = { wallet: { ...CONFIG.wallet, evmRpcUrls: new Map([[1, 'https://rpc.example']]) } };
    for (const tampered of [stranger, v29, long]) {
      expect(await verifyLinkProof(parseLinkRequest(tampered, rpcFor1), { appOrigin: APP_ORIGIN, now: NOW, contractChains: rpcFor1.wallet.evmRpcUrls }))
        .toEqual({ challengeId: challenge.challengeId, kind: 'contract', chainId: 1 });
    }
    // No RPC for chain 1: 65 bytes that do not recover are a bad signature, and the answer says how contract wallets would work.
    for (const tampered of [stranger, v29]) {
      const error = await apiError(async () => verifyLinkProof(parseLinkRequest(tampered, CONFIG), { appOrigin: APP_ORIGIN, now: NOW, contractChains: new Map([[8453, 'x']]) }));
      expect({ code: error.code, status: error.status }).toEqual({ code: 'invalid_signature', status: 422 });
      expect(error.options.detail).toContain('this service does not check them on chain 1');
      expect(error.options.detail).not.toContain('WALLET_EVM_RPC_URLS');
    }
    // The key's own signature never goes to a chain, RPC or not.
    expect(await verifyLinkProof(parseLinkRequest(body, rpcFor1), { appOrigin: APP_ORIGIN, now: NOW, contractChains: rpcFor1.wallet.evmRpcUrls })).toEqual({ challengeId: challenge.challengeId, kind: 'eoa' });
  });

  it('accepts the payload address in lower case against the checksummed message', async () => {
    const wallet = evmWallet();
    const { body, challenge } = await signedChallenge(wallet);
    const request = parseLinkRequest({ payload: { ...body.payload, address: wallet.address.toLowerCase() } }, CONFIG);
    expect(await verifyLinkProof(request, { appOrigin: APP_ORIGIN, now: NOW })).toEqual({ challengeId: challenge.challengeId, kind: 'eoa' });
  });

  it('accepts the high-s twin of a signature (malleability is why the nonce, not the signature, stops replays)', async () => {
    const wallet = evmWallet();
    const { body } = await signedChallenge(wallet);
    const twin = highSTwin(body.payload.signature as `0x${string}`);
    expect(twin).not.toBe(body.payload.signature);
    const decoded = decodeEvmSignature(twin);
    expect(decoded.ok && (await verifyEvmSignature(body.payload.message, decoded.bytes, wallet.address))).toBe(true);
  });

  type Case = { name: string; wallet: () => TestWallet; tamper: (ctx: Awaited<ReturnType<typeof signedChallenge>> & { wallet: TestWallet }) => Promise<unknown>; now?: Date; code: string };
  const resign = async (wallet: TestWallet, body: { payload: Record<string, unknown> }, message: string) =>
    ({ payload: { ...body.payload, message, signature: await wallet.sign(message) } });
  const rewrite = (message: string, change: (m: ReturnType<typeof parseSignInMessage> & { ok: true }) => object) => {
    const parsed = parseSignInMessage(message);
    if (!parsed.ok) throw new Error(parsed.reason);
    return formatSignInMessage({ ...parsed.message, ...change(parsed as never) } as never);
  };
  const cases: Case[] = [
    { name: 'a message for another domain, properly signed', wallet: evmWallet, code: 'invalid_message', tamper: ({ wallet, body }) => resign(wallet, body, rewrite(body.payload.message, () => ({ domain: 'evil.example' }))) },
    { name: 'the domain with a scheme prefix', wallet: evmWallet, code: 'invalid_message', tamper: ({ wallet, body }) => resign(wallet, body, rewrite(body.payload.message, () => ({ scheme: 'https' }))) },
    { name: 'another URI', wallet: evmWallet, code: 'invalid_message', tamper: ({ wallet, body }) => resign(wallet, body, rewrite(body.payload.message, () => ({ uri: 'https://evil.example' }))) },
    { name: 'no Request ID', wallet: evmWallet, code: 'invalid_message', tamper: ({ wallet, body }) => resign(wallet, body, rewrite(body.payload.message, () => ({ requestId: undefined }))) },
    { name: 'a message that is not EIP-4361', wallet: evmWallet, code: 'invalid_message', tamper: ({ wallet, body }) => resign(wallet, body, 'Please sign to link your wallet') },
    { name: 'a Solana message on the EVM chain', wallet: evmWallet, code: 'invalid_message', tamper: async ({ body }) => ({ payload: { ...body.payload, message: (await signedChallenge(solanaWallet())).challenge.message } }) },
    { name: 'payload chainId 8453, message Chain ID 1', wallet: evmWallet, code: 'invalid_message', tamper: async ({ body }) => ({ payload: { ...body.payload, chainId: 8453 } }) },
    { name: 'payload names another EVM wallet', wallet: evmWallet, code: 'address_mismatch', tamper: async ({ body }) => ({ payload: { ...body.payload, address: evmWallet().address } }) },
    { name: 'signed by another key', wallet: evmWallet, code: 'invalid_signature', tamper: async ({ body }) => ({ payload: { ...body.payload, signature: await evmWallet().sign(body.payload.message) } }) },
    { name: 'a signature over other text', wallet: evmWallet, code: 'invalid_signature', tamper: async ({ wallet, body }) => ({ payload: { ...body.payload, signature: await wallet.sign(`${body.payload.message} `) } }) },
    { name: 'a message whose expiry was pushed back (signature no longer matches)', wallet: evmWallet, code: 'invalid_signature', tamper: async ({ body }) => ({ payload: { ...body.payload, message: rewrite(body.payload.message, () => ({ expirationTime: '2099-01-01T00:00:00.000Z' })) } }) },
    { name: 'expired by the clock', wallet: evmWallet, now: new Date(NOW.getTime() + CHALLENGE_TTL_MS), code: 'challenge_expired', tamper: async ({ body }) => body },
    { name: 'Solana: message naming wallet X signed by key Y', wallet: solanaWallet, code: 'invalid_signature', tamper: async ({ body }) => ({ payload: { ...body.payload, signature: await solanaWallet().sign(body.payload.message) } }) },
    { name: 'Solana: payload names key Y, message names wallet X', wallet: solanaWallet, code: 'address_mismatch', tamper: async ({ body }) => { const y = solanaWallet(); return { payload: { ...body.payload, address: y.address, signature: await y.sign(body.payload.message) } }; } },
    { name: 'Solana: another cluster in the payload than the message', wallet: solanaWallet, code: 'unsupported_chain', tamper: async ({ body }) => ({ payload: { ...body.payload, cluster: 'devnet' } }) },
  ];
  it.each(cases)('refuses $name -> $code', async ({ wallet: make, tamper, now, code }) => {
    const wallet = make();
    const signed = await signedChallenge(wallet);
    const error = await apiError(async () => verifyLinkProof(parseLinkRequest(await tamper({ ...signed, wallet }), CONFIG), { appOrigin: APP_ORIGIN, now: now ?? NOW }));
    expect(error.code).toBe(code);
  });

  it('never writes Not Before, so an issued challenge is valid from the moment it is issued', async () => {
    const { challenge } = await signedChallenge(evmWallet());
    expect(challenge.message).not.toContain('Not Before');
  });
});

describe('the link mapper for GET /api/me', () => {
  it('types the rows of account_wallets and normalises createdAt', () => {
    const rows = [
      {
        id: 'a', chain: 'evm' as const, address: '0xC02aaA39b223FE8D0A0e5C4F27eAD9083C756Cc2', chainId: 8453, kind: 'erc1271' as const,
        scope: 'chain' as const, accountId: 'eip155:8453:0xC02aaA39b223FE8D0A0e5C4F27eAD9083C756Cc2', createdAt: '2026-11-22T10:00:00.123Z',
      },
      { id: 'b', chain: 'solana' as const, address: 'So11111111111111111111111111111111111111112', cluster: 'mainnet', kind: 'eoa' as const, createdAt: '2026-11-22T10:00:01.000+00:00' },
    ];
    expect(toWalletLinks(rows)).toEqual([
      { id: 'a', chain: 'evm', address: rows[0]!.address, chainId: 8453, kind: 'erc1271', scope: 'chain', accountId: rows[0]!.accountId, createdAt: '2026-11-22T10:00:00.123Z' },
      { id: 'b', chain: 'solana', address: rows[1]!.address, cluster: 'mainnet', kind: 'eoa', createdAt: '2026-11-22T10:00:01.000Z' },
    ]);
    expect(toWalletLinks(null)).toEqual([]);
    expect(toWalletLink(rows[0]!)).not.toHaveProperty('cluster');
  });
});
