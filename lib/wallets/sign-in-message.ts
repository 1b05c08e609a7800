import { ABNF_RULES, isUri, parseDomain, parseRfc3339 } from './abnf.ts';
import { isEip55Address, parseSolanaAddress, type ChainFamily } from './address.ts';

/**
 * Sign-in messages: EIP-4361 (Sign-In with Ethereum) and its Solana sibling (the Sign-In With
 * Solana layout of the wallet standard: same fields, "Solana account", cluster names as Chain ID,
 * and no blank statement line when there is no statement).
 *
 * The parser is strict on purpose: every line in its place and order, every field checked against
 * its ABNF rule (EIP-55 address, 8+ alphanumeric nonce, RFC 3986 URIs, RFC 3339 timestamps that
 * name real days, a one-line statement), nothing before or after. The service also compares the
 * submitted message byte for byte with the one it issued; the parser is what makes a message that
 * was not built by a conforming serializer fail early and with a precise reason.
 */

interface SignInFields {
  scheme?: string;
  domain: string;
  address: string;
  /** Absent (undefined) and empty ('') are different messages. */
  statement?: string;
  uri: string;
  version: '1';
  nonce: string;
  issuedAt: string;
  expirationTime?: string;
  notBefore?: string;
  requestId?: string;
  resources?: string[];
}

export type SignInMessage =
  | (SignInFields & { family: 'evm'; chainId: number })
  | (SignInFields & { family: 'solana'; chainId: string });

export type ParseResult = { ok: true; message: SignInMessage } | { ok: false; reason: string };

const ACCOUNT_NAMES: Record<ChainFamily, string> = { evm: 'Ethereum', solana: 'Solana' };
const HEADER_SUFFIX: Record<ChainFamily, string> = {
  evm: ' wants you to sign in with your Ethereum account:',
  solana: ' wants you to sign in with your Solana account:',
};
/** Generous for any real message; bounds the work a hostile one can cause. */
export const MAX_MESSAGE_LENGTH = 4096;
/** Solana clusters as wallets write them ("mainnet", "devnet", "solana:mainnet"). */
const CLUSTER = /^[a-z0-9][a-z0-9-]*(?::[a-z0-9-]+)?$/;

/** Parse a sign-in message strictly; `family` restricts it to one account kind. */
export function parseSignInMessage(text: string, family?: ChainFamily): ParseResult {
  const fail = (reason: string): ParseResult => ({ ok: false, reason });
  if (typeof text !== 'string' || text.length === 0) return fail('The message is empty.');
  if (text.length > MAX_MESSAGE_LENGTH) return fail(`The message is longer than ${MAX_MESSAGE_LENGTH} characters.`);
  const lines = text.split('\n');
  let at = 0;
  const next = () => lines[at++];

  const header = next()!;
  const detected = (Object.keys(HEADER_SUFFIX) as ChainFamily[]).find((kind) => header.endsWith(HEADER_SUFFIX[kind]));
  if (!detected) return fail('Line 1 must end with "wants you to sign in with your Ethereum account:" (or "Solana account:").');
  if (family && detected !== family) return fail(`This is a ${ACCOUNT_NAMES[detected]} message, not a ${ACCOUNT_NAMES[family]} one.`);
  const domainPart = parseDomain(header.slice(0, -HEADER_SUFFIX[detected].length));
  if (!domainPart) return fail('Line 1 must start with the domain (an RFC 3986 authority, optionally with a scheme).');

  const address = next();
  if (address === undefined) return fail('Line 2 must be the address.');
  if (detected === 'evm' && !isEip55Address(address)) return fail('Line 2 must be the address in EIP-55 checksum form.');
  if (detected === 'solana' && !parseSolanaAddress(address).ok) return fail('Line 2 must be a base58 Solana address of 32 bytes.');
  if (next() !== '') return fail('Line 3 must be empty.');

  let statement: string | undefined;
  if (detected === 'evm') {
    // [ statement LF ] LF: "stmt", "" | "", "" (empty statement) | "" (none)
    if (lines[at] !== '') {
      statement = lines[at];
      at += 1;
      if (lines[at] !== '') return fail('The statement must be one line followed by an empty line.');
      at += 1;
    } else if (lines[at + 1] === '') {
      statement = '';
      at += 2;
    } else {
      at += 1;
    }
  } else if (lines[at + 1] === '') {
    // Solana layout: the statement and its blank line are there only when there is a statement.
    statement = lines[at];
    at += 2;
  }
  if (statement !== undefined && !ABNF_RULES.statement.test(statement)) {
    return fail('The statement may only use letters, digits, spaces and URI punctuation, on one line.');
  }

  const field = (label: string) => {
    const line = lines[at];
    if (line === undefined || !line.startsWith(`${label}: `)) return undefined;
    at += 1;
    return line.slice(label.length + 2);
  };
  const lineNo = () => at + 1;

  const uri = field('URI');
  if (uri === undefined || !isUri(uri)) return fail(`Line ${lineNo()} must be "URI: " and an RFC 3986 URI.`);
  const version = field('Version');
  if (version !== '1') return fail(`Line ${lineNo()} must be "Version: 1".`);
  const chainIdText = field('Chain ID');
  if (chainIdText === undefined) return fail(`Line ${lineNo()} must be "Chain ID: ".`);
  let chainId: number | string;
  if (detected === 'evm') {
    chainId = Number(chainIdText);
    if (!ABNF_RULES['chain-id'].test(chainIdText) || !Number.isSafeInteger(chainId)) return fail('The Chain ID must be a decimal chain id.');
  } else {
    chainId = chainIdText;
    if (!CLUSTER.test(chainIdText)) return fail('The Chain ID must be a Solana cluster name.');
  }
  const nonce = field('Nonce');
  if (nonce === undefined || !ABNF_RULES.nonce.test(nonce)) return fail(`Line ${lineNo()} must be "Nonce: " and at least 8 letters or digits.`);
  const issuedAt = field('Issued At');
  if (issuedAt === undefined || parseRfc3339(issuedAt) === undefined) return fail(`Line ${lineNo()} must be "Issued At: " and an RFC 3339 date-time.`);

  const expirationTime = field('Expiration Time');
  if (expirationTime !== undefined && parseRfc3339(expirationTime) === undefined) return fail('The Expiration Time must be an RFC 3339 date-time.');
  const notBefore = field('Not Before');
  if (notBefore !== undefined && parseRfc3339(notBefore) === undefined) return fail('The Not Before time must be an RFC 3339 date-time.');
  const requestId = field('Request ID');
  if (requestId !== undefined && !ABNF_RULES['request-id'].test(requestId)) return fail('The Request ID may only use URI path characters.');

  let resources: string[] | undefined;
  if (lines[at] === 'Resources:') {
    at += 1;
    resources = [];
    while (at < lines.length) {
      const line = lines[at]!;
      if (!line.startsWith('- ') || !isUri(line.slice(2))) return fail(`Line ${lineNo()} must be "- " and an RFC 3986 URI.`);
      resources.push(line.slice(2));
      at += 1;
    }
  }
  if (at < lines.length) return fail(`Line ${lineNo()} is not expected here (fields are out of order, or there is trailing text).`);

  const fields: SignInFields = {
    ...(domainPart.scheme !== undefined ? { scheme: domainPart.scheme } : {}),
    domain: domainPart.domain,
    address,
    ...(statement !== undefined ? { statement } : {}),
    uri,
    version: '1',
    nonce,
    issuedAt,
    ...(expirationTime !== undefined ? { expirationTime } : {}),
    ...(notBefore !== undefined ? { notBefore } : {}),
    ...(requestId !== undefined ? { requestId } : {}),
    ...(resources !== undefined ? { resources } : {}),
  };
  const message: SignInMessage = detected === 'evm' ? { ...fields, family: 'evm', chainId: chainId as number } : { ...fields, family: 'solana', chainId: chainId as string };
  return { ok: true, message };
}

/** Write the message text for these fields (no validation; see createSignInMessage). */
export function formatSignInMessage(message: SignInMessage): string {
  const lines = [
    `${message.scheme !== undefined ? `${message.scheme}://` : ''}${message.domain}${HEADER_SUFFIX[message.family]}`,
    message.address,
    '',
  ];
  if (message.family === 'evm') {
    if (message.statement !== undefined) lines.push(message.statement);
    lines.push('');
  } else if (message.statement !== undefined) {
    lines.push(message.statement, '');
  }
  lines.push(`URI: ${message.uri}`, `Version: ${message.version}`, `Chain ID: ${message.chainId}`, `Nonce: ${message.nonce}`, `Issued At: ${message.issuedAt}`);
  if (message.expirationTime !== undefined) lines.push(`Expiration Time: ${message.expirationTime}`);
  if (message.notBefore !== undefined) lines.push(`Not Before: ${message.notBefore}`);
  if (message.requestId !== undefined) lines.push(`Request ID: ${message.requestId}`);
  if (message.resources !== undefined) lines.push('Resources:', ...message.resources.map((resource) => `- ${resource}`));
  return lines.join('\n');
}

/**
 * Build message text from fields, refusing fields that would not survive a strict parse unchanged
 * (a missing field, a line break in the statement, a bad URI...). Throws with the reason.
 */
export function createSignInMessage(message: SignInMessage): string {
  const required = ['domain', 'address', 'uri', 'version', 'chainId', 'nonce', 'issuedAt'] as const;
  for (const name of required) {
    if (message[name] === undefined || message[name] === null) throw new Error(`The ${name} field is required.`);
  }
  const text = formatSignInMessage(message);
  const parsed = parseSignInMessage(text, message.family);
  if (!parsed.ok) throw new Error(parsed.reason);
  if (formatSignInMessage(parsed.message) !== text || !sameFields(parsed.message, message)) {
    throw new Error('A field does not survive a round trip (does it contain a line break?).');
  }
  return text;
}

function sameFields(a: SignInMessage, b: SignInMessage): boolean {
  const keys = new Set([...Object.keys(a), ...Object.keys(b)].filter((key) => (a as never)[key] !== undefined || (b as never)[key] !== undefined));
  return [...keys].every((key) => JSON.stringify((a as never)[key]) === JSON.stringify((b as never)[key]));
}
