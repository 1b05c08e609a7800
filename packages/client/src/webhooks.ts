import type { components } from './api-types.ts';

/**
 * The events the service sends to your backend (Standard Webhooks, https://www.standardwebhooks.com/):
 * their types, generated from the OpenAPI document's `webhooks`, and the signature check a receiver
 * runs before trusting a body. WebCrypto (`crypto.subtle`) and `atob`/`btoa` only: no Node API, no
 * dependency, so it runs in Node, edge functions, browsers and React Native with a WebCrypto polyfill.
 *
 *   const event = await verifyWebhook(await request.text(), request.headers, process.env.ACCOUNT_LINK_WEBHOOK_SECRET!);
 *   switch (event.type) { case 'entitlement.revoked': ...; default: // acknowledge types you do not know }
 *
 * A signature is `v1,` + base64(HMAC-SHA256(key, `${webhook-id}.${webhook-timestamp}.${body}`)), the key
 * being the base64 after `whsec_`; `webhook-signature` holds one per secret of the endpoint, separated
 * by spaces, so during a rotation a receiver holding either secret verifies.
 */

export type EntitlementGrantedEvent = components['schemas']['EntitlementGrantedEvent'];
export type EntitlementUpdatedEvent = components['schemas']['EntitlementUpdatedEvent'];
export type EntitlementRevokedEvent = components['schemas']['EntitlementRevokedEvent'];
export type WalletLinkedEvent = components['schemas']['WalletLinkedEvent'];
export type WalletUnlinkedEvent = components['schemas']['WalletUnlinkedEvent'];
export type CustomerDeletedEvent = components['schemas']['CustomerDeletedEvent'];

/** Every event the service sends, told apart by `type`. New types may be added: keep a default branch that acknowledges them. */
export type AccountLinkEvent =
  | EntitlementGrantedEvent
  | EntitlementUpdatedEvent
  | EntitlementRevokedEvent
  | WalletLinkedEvent
  | WalletUnlinkedEvent
  | CustomerDeletedEvent;

export type AccountLinkEventType = AccountLinkEvent['type'];

/** `entitlement.revoked`'s `data.reason`: these, or a value added later (`string & {}` keeps the names in editors' completion). */
export type RevokeReason = 'expired' | 'refunded' | 'transferred' | 'paused' | 'billing_issue' | 'removed' | (string & {});

/** How far `webhook-timestamp` may be from the receiver's clock, either way, by default (Standard Webhooks recommends 5 minutes). */
export const DEFAULT_WEBHOOK_TOLERANCE_SECONDS = 300;

export type WebhookVerificationFailure =
  | 'missing_header'
  | 'invalid_timestamp'
  | 'timestamp_too_old'
  | 'timestamp_too_new'
  | 'no_matching_signature'
  | 'invalid_body';

/**
 * The request is not a genuine, fresh event of the service: answer it with a 4xx (400 or 401) and
 * do nothing. `reason` says which check failed; `message` says it in words (it holds no secret).
 */
export class WebhookVerificationError extends Error {
  override name = 'WebhookVerificationError';
  readonly reason: WebhookVerificationFailure;

  constructor(reason: WebhookVerificationFailure, message: string) {
    super(message);
    this.reason = reason;
  }
}

const SECRET_PREFIX = 'whsec_';
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/**
 * The HMAC key of a secret: the bytes of the base64 after `whsec_` (a secret without the prefix is
 * read as base64 too, as Standard Webhooks' libraries do). Throws a TypeError for anything else:
 * that is the receiver's configuration to fix, not a bad request.
 */
export function decodeWebhookSecret(secret: string): Uint8Array {
  const encoded = secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret;
  if (encoded.length === 0 || !BASE64.test(encoded)) throw new TypeError('A webhook secret is `whsec_` followed by base64 (the secret itself is not repeated here)');
  return Uint8Array.from(atob(encoded), (char) => char.charCodeAt(0));
}

function toBase64(bytes: ArrayBuffer): string {
  return btoa(String.fromCharCode(...new Uint8Array(bytes)));
}

function asList(secrets: string | readonly string[]): string[] {
  const list = typeof secrets === 'string' ? [secrets] : [...secrets];
  if (list.length === 0) throw new TypeError('No webhook secret given');
  return list;
}

// Imported keys by secret and use, the most recently used last: importing cost as much as signing
// itself, on every event. The last 16 are kept (a sender's or receiver's secrets, during rotations).
const importedKeys = new Map<string, Promise<CryptoKey>>();
const IMPORTED_KEYS_KEPT = 16;

function hmacKey(secret: string, usage: 'sign' | 'verify'): Promise<CryptoKey> {
  const name = `${usage} ${secret}`;
  let key = importedKeys.get(name);
  if (key) {
    importedKeys.delete(name);
  } else {
    key = crypto.subtle.importKey('raw', decodeWebhookSecret(secret) as Uint8Array<ArrayBuffer>, { name: 'HMAC', hash: 'SHA-256' }, false, [usage]);
    // A secret that does not import is not kept (the error is the caller's to see each time).
    const imported = key;
    imported.catch(() => {
      if (importedKeys.get(name) === imported) importedKeys.delete(name);
    });
    if (importedKeys.size >= IMPORTED_KEYS_KEPT) importedKeys.delete(importedKeys.keys().next().value!);
  }
  importedKeys.set(name, key);
  return key;
}

function signedContent(id: string, timestamp: number, body: string): Uint8Array<ArrayBuffer> {
  return new TextEncoder().encode(`${id}.${timestamp}.${body}`);
}

export interface SignWebhookInput {
  /** `webhook-id`. */
  id: string;
  /** `webhook-timestamp`: Unix seconds, or a Date (its whole seconds). */
  timestamp: number | Date;
  /** The exact body sent. */
  body: string;
  /** Every secret that signs (several during a rotation). */
  secrets: string | readonly string[];
}

/** The `webhook-signature` header value: `v1,<base64>` for each secret, separated by spaces. */
export async function signWebhook({ id, timestamp, body, secrets }: SignWebhookInput): Promise<string> {
  const seconds = timestamp instanceof Date ? Math.floor(timestamp.getTime() / 1000) : timestamp;
  if (!Number.isSafeInteger(seconds) || seconds < 0) throw new TypeError('webhook-timestamp must be whole Unix seconds');
  const content = signedContent(id, seconds, body);
  const signatures = await Promise.all(asList(secrets).map(async (secret) => `v1,${toBase64(await crypto.subtle.sign('HMAC', await hmacKey(secret, 'sign'), content))}`));
  return signatures.join(' ');
}

export interface VerifyWebhookOptions {
  /** How far `webhook-timestamp` may be from `now`, either way (default 300 s). */
  toleranceSeconds?: number;
  /** The receiver's clock (default: now). */
  now?: Date;
}

type HeaderSource = Headers | Record<string, string | string[] | undefined>;

function header(headers: HeaderSource, name: string): string | undefined {
  if (typeof (headers as Headers).get === 'function') return (headers as Headers).get(name) ?? undefined;
  const record = headers as Record<string, string | string[] | undefined>;
  const key = Object.keys(record).find((candidate) => candidate.toLowerCase() === name);
  const value = key === undefined ? undefined : record[key];
  return Array.isArray(value) ? value.join(' ') : value;
}

function required(headers: HeaderSource, name: string): string {
  const value = header(headers, name)?.trim();
  if (!value) throw new WebhookVerificationError('missing_header', `The ${name} header is missing: not an event of the account-link service`);
  return value;
}

function fromBase64(value: string): Uint8Array<ArrayBuffer> | undefined {
  if (!BASE64.test(value)) return undefined;
  return Uint8Array.from(atob(value), (char) => char.charCodeAt(0));
}

/**
 * Check that `body` is an event the service signed with one of `secrets`, sent within the
 * tolerance of `now`, and return it parsed. `body` must be the raw text received (not re-serialised
 * JSON: a single changed byte fails the check). Throws WebhookVerificationError otherwise.
 *
 * The signatures are checked with WebCrypto's HMAC verify, which compares in constant time, so the
 * time taken says nothing about how much of a forged signature was right.
 */
export async function verifyWebhook(body: string, headers: HeaderSource, secrets: string | readonly string[], options: VerifyWebhookOptions = {}): Promise<AccountLinkEvent> {
  const id = required(headers, 'webhook-id');
  const timestampText = required(headers, 'webhook-timestamp');
  const signatureText = required(headers, 'webhook-signature');
  const keys = await Promise.all(asList(secrets).map((secret) => hmacKey(secret, 'verify')));

  if (!/^[0-9]{1,15}$/.test(timestampText)) throw new WebhookVerificationError('invalid_timestamp', 'The webhook-timestamp header is not Unix seconds');
  const timestamp = Number(timestampText);
  const now = Math.floor((options.now ?? new Date()).getTime() / 1000);
  const tolerance = options.toleranceSeconds ?? DEFAULT_WEBHOOK_TOLERANCE_SECONDS;
  if (now - timestamp > tolerance) throw new WebhookVerificationError('timestamp_too_old', `The event was signed ${now - timestamp} s ago, more than the ${tolerance} s allowed: a replay, or a clock that is wrong`);
  if (timestamp - now > tolerance) throw new WebhookVerificationError('timestamp_too_new', `The event is signed ${timestamp - now} s in the future, more than the ${tolerance} s allowed: a clock that is wrong`);

  // Other versions (v1a: asymmetric) are not what this service sends: they are skipped, not failed.
  const signatures = signatureText.split(' ').flatMap((entry) => {
    const [version, value] = entry.split(',', 2);
    const bytes = version === 'v1' && value ? fromBase64(value) : undefined;
    return bytes ? [bytes] : [];
  });
  const content = signedContent(id, timestamp, body);
  let matched = false;
  for (const key of keys) {
    for (const signature of signatures) {
      // Every pair is checked even after a match, so the time taken does not say which secret matched.
      if (await crypto.subtle.verify('HMAC', key, signature, content)) matched = true;
    }
  }
  if (!matched) throw new WebhookVerificationError('no_matching_signature', 'No signature in webhook-signature matches a secret: a forged or altered request, or the wrong secret');

  let event: unknown;
  try {
    event = JSON.parse(body);
  } catch {
    throw new WebhookVerificationError('invalid_body', 'The body is not JSON');
  }
  const candidate = event as { type?: unknown; timestamp?: unknown; data?: unknown } | null;
  if (candidate === null || typeof candidate !== 'object' || typeof candidate.type !== 'string' || typeof candidate.timestamp !== 'string' || candidate.data === null || typeof candidate.data !== 'object') {
    throw new WebhookVerificationError('invalid_body', 'The body is not an event (`type`, `timestamp` and `data`)');
  }
  return event as AccountLinkEvent;
}
