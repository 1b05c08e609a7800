import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { hexToBytes, type Hex } from 'viem';
import { ABNF_RULES, parseRfc3339, type AbnfRule } from '../../lib/wallets/abnf.ts';
import { createSignInMessage, formatSignInMessage, parseSignInMessage, type SignInMessage } from '../../lib/wallets/sign-in-message.ts';
import { decodeEvmSignature, verifySignIn } from '../../lib/wallets/verify.ts';
import { solanaWallet } from './wallets.ts';

/** The SIWE reference vectors (copied from the shared test vectors, with their README and licences noted there): spruceid/siwe and its successor. */
const VECTORS = path.resolve('tests', 'wallets', 'vectors', 'siwe');
const SUCCESSOR = path.join(VECTORS, 'signinwithethereum-e9f5b4e');
const SETS = [
  { name: 'spruceid/siwe', dir: VECTORS },
  { name: 'signinwithethereum/siwe', dir: SUCCESSOR },
];
const load = <T>(dir: string, file: string): Record<string, T> => JSON.parse(readFileSync(path.join(dir, file), 'utf8'));

type Fields = Record<string, unknown>;

/** A vector's field object as this module's message (chainId stays as given, so bad ones stay bad). */
function asMessage(fields: Fields): SignInMessage {
  const { scheme, time: _time, signature: _signature, domainBinding: _domain, matchNonce: _nonce, ...rest } = fields;
  void _time; void _signature; void _domain; void _nonce;
  return { ...(scheme ? { scheme } : {}), ...rest, family: 'evm' } as unknown as SignInMessage;
}

describe.each(SETS)('EIP-4361 parsing vectors of $name', ({ dir }) => {
  const negative = Object.entries(load<string>(dir, 'parsing_negative.json'));
  const positive = Object.entries(load<{ message: string; fields: Fields }>(dir, 'parsing_positive.json'));

  it('has the vectors the README describes', () => {
    expect(negative.length).toBe(29);
    expect(positive.length).toBeGreaterThanOrEqual(19);
  });

  it.each(negative)('rejects %s', (_name, message) => {
    const result = parseSignInMessage(message);
    expect(result.ok).toBe(false);
  });

  it.each(positive)('parses %s, every field, and writes it back byte for byte', (_name, { message, fields }) => {
    const result = parseSignInMessage(message);
    if (!result.ok) throw new Error(result.reason);
    for (const [name, value] of Object.entries(fields)) {
      expect({ name, value: (result.message as unknown as Fields)[name] ?? null }).toEqual({ name, value });
    }
    expect(formatSignInMessage(result.message)).toBe(message);
  });

  it.each(Object.entries(load<Fields>(dir, 'parsing_negative_objects.json')))('refuses to build a message from %s', (_name, fields) => {
    expect(() => createSignInMessage(asMessage(fields))).toThrow();
  });
});

describe('successor-only vectors: URIs, resources, optional fields, ABNF characters', () => {
  const messages = (file: string) => Object.entries(load<{ msg: string; items?: Fields } | string>(SUCCESSOR, file));

  it.each([...messages('valid_uris.json'), ...messages('valid_resources.json'), ...messages('valid_specification.json')])('parses %s', (_name, vector) => {
    const { msg, items } = vector as { msg: string; items?: Fields };
    const result = parseSignInMessage(msg);
    if (!result.ok) throw new Error(result.reason);
    for (const [name, value] of Object.entries(items ?? {})) {
      expect({ name, value: (result.message as unknown as Fields)[name] ?? null }).toEqual({ name, value });
    }
  });

  it.each([...messages('invalid_uris.json'), ...messages('invalid_resources.json')])('rejects %s', (_name, message) => {
    expect(parseSignInMessage(message as string).ok).toBe(false);
  });

  const chars = [...Object.entries(load<{ rule: AbnfRule; input: string; answer: boolean }>(SUCCESSOR, 'valid_chars.json')),
    ...Object.entries(load<{ rule: AbnfRule; input: string; answer: boolean }>(SUCCESSOR, 'invalid_chars.json'))];
  it.each(chars)('ABNF rule: %s', (_name, { rule, input, answer }) => {
    expect(ABNF_RULES[rule].test(input)).toBe(answer);
  });

  it.each(Object.entries(load<{ msg: Fields; error?: string }>(SUCCESSOR, 'message_objects.json')))('message object: %s', (name, { msg }) => {
    const build = () => createSignInMessage(asMessage(msg));
    if (name.startsWith('valid')) expect(build).not.toThrow();
    else expect(build).toThrow();
  });
});

type VerificationVector = Fields & { signature: Hex; time?: string; domainBinding?: string; matchNonce?: string };

describe.each(SETS)('EIP-4361 verification vectors of $name, with their clock', ({ dir }) => {
  /** Upstream's rule: the clock is `time` when given, else the message's Issued At. */
  const verify = (vector: VerificationVector) => {
    const text = formatSignInMessage(asMessage(vector));
    const decoded = decodeEvmSignature(vector.signature);
    if (!decoded.ok) return Promise.resolve({ ok: false as const, code: 'malformed' });
    const now = new Date(parseRfc3339(vector.time ?? String(vector.issuedAt)) ?? Number.NaN);
    return verifySignIn(text, decoded.bytes, { now, domain: vector.domainBinding, nonce: vector.matchNonce, family: 'evm' });
  };

  it.each(Object.entries(load<VerificationVector>(dir, 'verification_positive.json')))('verifies %s', async (_name, vector) => {
    const result = await verify(vector);
    expect(result).toMatchObject({ ok: true });
  });

  /** Why each negative vector must fail: the right check has to catch it, not an earlier accident. */
  const reasons: Record<string, string> = {
    'expired message': 'expired',
    'domain binding': 'domain',
    'custom time': 'expired',
    'custom nonce': 'nonce',
    'malformed signature': 'malformed',
    'wrong signature': 'signature',
    'not yet valid': 'not_yet_valid',
    'invalid issuedAt': 'malformed',
    'invalid notBefore': 'malformed',
    'invalid expirationTime': 'malformed',
  };
  it.each(Object.entries(load<VerificationVector>(dir, 'verification_negative.json')))('refuses %s', async (name, vector) => {
    expect(await verify(vector)).toMatchObject({ ok: false, code: reasons[name] });
  });

  it('refuses a valid vector once its signature bytes change', async () => {
    const [, vector] = Object.entries(load<VerificationVector>(dir, 'verification_positive.json'))[0]!;
    const bytes = hexToBytes(vector.signature);
    bytes[10]! ^= 1;
    const text = formatSignInMessage(asMessage(vector));
    expect(await verifySignIn(text, bytes, { now: new Date(String(vector.issuedAt)) })).toMatchObject({ ok: false, code: 'signature' });
  });
});

describe('strictness beyond the vectors', () => {
  const valid = [
    'localhost:3000 wants you to sign in with your Ethereum account:',
    '0xC02aaA39b223FE8D0A0e5C4F27eAD9083C756Cc2',
    '',
    'Link this wallet.',
    '',
    'URI: http://localhost:3000',
    'Version: 1',
    'Chain ID: 1',
    'Nonce: 0123456789abcdef0123456789abcdef',
    'Issued At: 2026-11-22T10:00:00.000Z',
    'Expiration Time: 2026-11-22T10:10:00.000Z',
    'Request ID: 3f2c8a4e-1b2d-4c5e-8f9a-0b1c2d3e4f5a',
  ].join('\n');

  it('accepts the reference message this suite starts from', () => {
    expect(parseSignInMessage(valid)).toMatchObject({ ok: true, message: { family: 'evm', chainId: 1, requestId: '3f2c8a4e-1b2d-4c5e-8f9a-0b1c2d3e4f5a' } });
  });

  const cases: { name: string; message: string }[] = [
    { name: 'a trailing line break', message: `${valid}\n` },
    { name: 'CRLF line ends', message: valid.replaceAll('\n', '\r\n') },
    { name: 'a leading space', message: ` ${valid}` },
    { name: 'an impossible date (31 April)', message: valid.replace('2026-11-22T10:10', '2026-04-31T10:10') },
    { name: 'hour 24', message: valid.replace('T10:00', 'T24:00') },
    { name: 'a date without time zone', message: valid.replace('10:00:00.000Z', '10:00:00.000') },
    { name: 'a Solana header over an EVM address', message: valid.replace('Ethereum account', 'Solana account') },
    { name: 'two Request IDs', message: `${valid}\nRequest ID: again` },
    { name: 'a percent sign in the statement', message: valid.replace('Link this wallet.', '100% sure') },
    { name: 'a Unicode statement', message: valid.replace('Link this wallet.', 'Lien du portefeuille \u00e9') },
    { name: 'an unknown field', message: valid.replace('Version: 1', 'Version: 1\nColor: blue') },
    { name: 'a chain id beyond 2^53', message: valid.replace('Chain ID: 1', 'Chain ID: 99999999999999999999') },
    { name: 'a message over 4096 characters', message: valid.replace('Link this wallet.', 'a'.repeat(4100)) },
  ];
  it.each(cases)('rejects $name', ({ message }) => {
    expect(parseSignInMessage(message).ok).toBe(false);
  });

  it('reads a Solana message in the wallet-standard layout, with and without a statement', () => {
    const { address } = solanaWallet();
    const solana = (statement: string | undefined) => formatSignInMessage({
      family: 'solana', domain: 'example.com', address, uri: 'https://example.com', version: '1',
      chainId: 'mainnet', nonce: 'abcdefgh1234', issuedAt: '2026-11-22T10:00:00Z', ...(statement !== undefined ? { statement } : {}),
    });
    expect(solana('Hi.')).toBe(`example.com wants you to sign in with your Solana account:\n${address}\n\nHi.\n\nURI: https://example.com\nVersion: 1\nChain ID: mainnet\nNonce: abcdefgh1234\nIssued At: 2026-11-22T10:00:00Z`);
    expect(solana(undefined)).toBe(`example.com wants you to sign in with your Solana account:\n${address}\n\nURI: https://example.com\nVersion: 1\nChain ID: mainnet\nNonce: abcdefgh1234\nIssued At: 2026-11-22T10:00:00Z`);
    expect(parseSignInMessage(solana('Hi.'), 'solana')).toMatchObject({ ok: true, message: { statement: 'Hi.', chainId: 'mainnet' } });
    expect(parseSignInMessage(solana(undefined), 'solana')).toMatchObject({ ok: true, message: { chainId: 'mainnet' } });
    expect(parseSignInMessage(solana('Hi.'), 'evm').ok).toBe(false);
    expect(parseSignInMessage(solana('Hi.').replace(address, `0${address.slice(1)}`), 'solana').ok).toBe(false);
  });
});
