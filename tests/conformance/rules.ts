import { ed25519 } from '@noble/curves/ed25519.js';
import { base58 } from '@scure/base';
import { checksumAddress } from 'viem';
import { MORE_FIELD_ERRORS_PATH } from '../../lib/errors.ts';

/**
 * Rules the server enforces that JSON Schema cannot say (a checksum, a point on a curve, the server
 * clock, uniqueness by a key, a size in bytes, nesting depth): the document states each in words,
 * in the description of its field or body. A body the schema accepts may be refused only for one
 * of these, when the body really breaks it; `phrase` is the text the document must carry.
 */
export interface DescribedRule {
  path: string;
  code: string;
  /** Which `errors[].path` of the refusal this rule explains. */
  field: RegExp;
  phrase: string;
  broken(body: unknown): boolean;
}

const MAX_CLOCK_SKEW_MS = 5 * 60_000;

type Body = Record<string, unknown>;
const payloadOf = (body: unknown) => ((body as Body)?.payload ?? {}) as Body;

function eip55Holds(address: unknown): boolean {
  if (typeof address !== 'string' || !/^0x[0-9a-fA-F]{40}$/.test(address)) return true; // the pattern's business
  const digits = address.slice(2);
  return digits === digits.toLowerCase() || digits === digits.toUpperCase() || checksumAddress(`0x${digits.toLowerCase()}`) === address;
}

function decodes(text: unknown): Uint8Array | undefined {
  try {
    return base58.decode(String(text));
  } catch {
    return undefined;
  }
}

function solanaKeyHolds(address: unknown): boolean {
  const bytes = decodes(address);
  if (!bytes || bytes.length !== 32) return false;
  try {
    ed25519.Point.fromBytes(bytes);
    return true;
  } catch {
    return false;
  }
}

function timestampsOf(body: unknown): string[] {
  const b = (body ?? {}) as Body;
  const leagues = Array.isArray(b.leagues) ? (b.leagues as Body[]) : [];
  const deleted = Array.isArray(b.deleted) ? (b.deleted as Body[]) : [];
  return [b.sentAt, ...leagues.map((l) => l?.updatedAt), ...deleted.map((d) => d?.deletedAt)].filter((t): t is string => typeof t === 'string');
}

function hasDuplicates(values: unknown[]): boolean {
  const strings = values.filter((value) => typeof value === 'string');
  return new Set(strings).size !== strings.length;
}

function depthOf(value: unknown): number {
  if (value === null || typeof value !== 'object') return 0;
  return 1 + Math.max(0, ...Object.values(value as object).map(depthOf));
}

const leaguesOf = (body: unknown) => (Array.isArray((body as Body)?.leagues) ? ((body as Body).leagues as Body[]) : []);

/** A name the document's `\S` lets through that shows as blank: only invisible characters. */
function invisibleNames(body: unknown): boolean {
  const invisible = (value: unknown) => typeof value === 'string' && /\S/.test(value) && !/[^\p{White_Space}\p{Cc}\p{Default_Ignorable_Code_Point}]/u.test(value);
  return leaguesOf(body).some((l) => [l?.name, l?.sport, l?.season].some(invisible)
    || (Array.isArray(l?.members) ? (l.members as Body[]) : []).some((m) => invisible(m?.displayName)));
}

const challenge = '/api/wallet-link/challenge';
const link = '/api/wallet-link';
const leagues = '/api/webhooks/leagues-sync';

export const DESCRIBED_RULES: DescribedRule[] = [
  { path: challenge, code: 'invalid_address', field: /^address$/, phrase: 'correct EIP-55 checksum', broken: (b) => (b as Body)?.chain === 'evm' && !eip55Holds((b as Body).address) },
  { path: challenge, code: 'invalid_address', field: /^address$/, phrase: 'point on the curve', broken: (b) => (b as Body)?.chain === 'solana' && !solanaKeyHolds((b as Body).address) },
  { path: link, code: 'invalid_address', field: /^payload\.address$/, phrase: 'correct EIP-55 checksum', broken: (b) => payloadOf(b).chain === 'evm' && !eip55Holds(payloadOf(b).address) },
  { path: link, code: 'invalid_address', field: /^payload\.address$/, phrase: 'point on the curve', broken: (b) => payloadOf(b).chain === 'solana' && !solanaKeyHolds(payloadOf(b).address) },
  { path: link, code: 'invalid_request', field: /^payload\.signature$/, phrase: 'decodes to exactly 64 bytes', broken: (b) => payloadOf(b).chain === 'solana' && decodes(payloadOf(b).signature)?.length !== 64 },
  {
    path: leagues, code: 'invalid_request', field: /(^sentAt|\.updatedAt|\.deletedAt)$/, phrase: 'minutes ahead of the server clock',
    broken: (b) => timestampsOf(b).some((t) => !(Date.parse(t) >= 0) || Date.parse(t) > Date.now() + MAX_CLOCK_SKEW_MS),
  },
  {
    path: leagues, code: 'invalid_request', field: /^leagues\.\d+\.(name|sport|season|members\.\d+\.displayName)$/, phrase: 'at least one visible character',
    broken: invisibleNames,
  },
  {
    path: leagues, code: 'invalid_request', field: /\.settings$/, phrase: 'bytes as JSON',
    broken: (b) => leaguesOf(b).some((l) => Buffer.byteLength(JSON.stringify(l?.settings ?? {})) > 16 * 1024),
  },
  {
    path: leagues, code: 'invalid_request', field: /^(leagues|deleted)\.\d+\.externalId$/, phrase: 'at most once in the delivery',
    broken: (b) => hasDuplicates([...leaguesOf(b), ...(Array.isArray((b as Body)?.deleted) ? ((b as Body).deleted as Body[]) : [])].map((item) => item?.externalId)),
  },
  {
    path: leagues, code: 'invalid_request', field: /^leagues\.\d+\.members\.\d+\.externalUserId$/, phrase: 'each `externalUserId` at most once',
    broken: (b) => leaguesOf(b).some((l) => hasDuplicates((Array.isArray(l?.members) ? (l.members as Body[]) : []).map((m) => m?.externalUserId))),
  },
  ...[challenge, link, leagues, '/api/webhooks/subscription-billing', '/api/admin/billing/sync'].map((path) => ({
    path, code: 'invalid_json', field: /.*/, phrase: 'nesting at most 64 levels', broken: (b: unknown) => depthOf(b) > 64,
  })),
];

/** Codes that refuse a request for what its body is, not for the state it meets. */
export const SHAPE_CODES = new Set(['invalid_request', 'invalid_json', 'invalid_address', 'unsupported_chain', 'payload_too_large', 'unsupported_media_type']);

/**
 * Is this refusal of a schema-valid body explained by a described rule the body breaks? Every
 * failing field the answer names must be one such rule's field.
 */
export function explainedRefusal(path: string, body: unknown, problem: { code: string; errors?: { path: string }[] }): boolean {
  // The answer's code is a broken rule's; each field it lists, a broken rule's of any code (a
  // wallet link names its network, address and signature at once, the first giving the code).
  const broken = DESCRIBED_RULES.filter((rule) => rule.path === path && rule.broken(body));
  if (!broken.some((rule) => rule.code === problem.code)) return false;
  // (The entry that says how many more were found than listed names no field.)
  const fields = problem.errors?.map((error) => error.path).filter((field) => field !== MORE_FIELD_ERRORS_PATH) ?? ['(body)'];
  return fields.every((field) => broken.some((rule) => rule.field.test(field)));
}
