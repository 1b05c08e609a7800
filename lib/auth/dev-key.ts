import { linkSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { exportJWK, generateKeyPair, importJWK, SignJWT, type JWK } from 'jose';
import type { Config } from '../config.ts';

/**
 * The local dev signing key for local mode (never outside it): an ES256 key pair kept in
 * a git-ignored file beside the embedded database, made on first use, so `npm run token` and the
 * running service agree without any configuration.
 */
export const DEV_ISSUER = 'account-link-dev';
export const DEV_KEY_ID = 'dev-key-1';

export function devKeyPath(config: Pick<Config, 'embeddedDbDir'>): string {
  return path.join(/*turbopackIgnore: true*/ path.dirname(config.embeddedDbDir), 'dev-jwt-key.json');
}

type KeyPair = { privateKey: CryptoKey; publicKey: CryptoKey };
const loaded = new Map<string, Promise<KeyPair>>();

export function loadDevKey(config: Pick<Config, 'embeddedDbDir'>): Promise<KeyPair> {
  const file = devKeyPath(config);
  let pair = loaded.get(file);
  if (!pair) {
    pair = readOrCreateKey(file);
    loaded.set(file, pair);
  }
  return pair;
}

async function readOrCreateKey(file: string): Promise<KeyPair> {
  let jwk: JWK;
  try {
    jwk = JSON.parse(readFileSync(file, 'utf8')) as JWK;
  } catch {
    const { privateKey } = await generateKeyPair('ES256', { extractable: true });
    const created = { ...(await exportJWK(privateKey)), kid: DEV_KEY_ID, alg: 'ES256' };
    mkdirSync(path.dirname(file), { recursive: true });
    // Write aside, then link into place: atomic, and fails if another process got there first.
    const temp = `${file}.${process.pid}.tmp`;
    writeFileSync(temp, JSON.stringify(created), { mode: 0o600 });
    try {
      linkSync(temp, file);
      jwk = created;
    } catch {
      jwk = JSON.parse(readFileSync(file, 'utf8')) as JWK; // another process made it first
    } finally {
      rmSync(temp, { force: true });
    }
  }
  const { d: _private, ...publicJwk } = jwk;
  void _private;
  return {
    privateKey: (await importJWK(jwk, 'ES256')) as CryptoKey,
    publicKey: (await importJWK(publicJwk, 'ES256')) as CryptoKey,
  };
}

export interface DevTokenOptions {
  userId: string;
  email?: string;
  isAnonymous?: boolean;
  role?: string;
  expiresInSeconds?: number;
}

/** Mint a token shaped like a Supabase access token, signed with the dev key. */
export async function mintDevToken(config: Pick<Config, 'embeddedDbDir'>, options: DevTokenOptions): Promise<string> {
  const { privateKey } = await loadDevKey(config);
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({
    email: options.email ?? '',
    role: options.role ?? 'authenticated',
    is_anonymous: options.isAnonymous ?? false,
    aal: 'aal1',
    session_id: crypto.randomUUID(),
  })
    .setProtectedHeader({ alg: 'ES256', kid: DEV_KEY_ID, typ: 'JWT' })
    .setIssuer(DEV_ISSUER)
    .setAudience('authenticated')
    .setSubject(options.userId)
    .setIssuedAt(now)
    .setExpirationTime(now + (options.expiresInSeconds ?? 3600))
    .sign(privateKey);
}
