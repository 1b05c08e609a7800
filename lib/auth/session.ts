import type { SupabaseClient } from '@supabase/supabase-js';
import { createRemoteJWKSet, customFetch, decodeProtectedHeader, errors as joseErrors, jwtVerify, type JWTPayload } from 'jose';
import { getConfig, type Config } from '../config.ts';
import { DomainError, type DomainErrorCode } from '../errors.ts';
import { log } from '../log.ts';
import { isUuid } from '../uuid.ts';
import { bearerCredentials } from './authorization-header.ts';
import { DEV_ISSUER, loadDevKey } from './dev-key.ts';

/** The caller, as proven by a verified session token. */
export interface SessionUser {
  userId: string;
  email: string | null;
  /** The raw token, for the liveness check only; never log it. */
  token: string;
  claims: JWTPayload;
}

export interface AuthenticateOptions {
  /**
   * Writes ask the Auth server whether the session is still alive (the user may have signed out
   * since the token was issued), when AUTH_VERIFY_SESSION is on.
   */
  requireLiveSession?: boolean;
}

const CLOCK_TOLERANCE_SECONDS = 30;
const REALM = 'account-link';
// A UUID no user has: Supabase Auth never issues it, so a token naming it was not made for a user.
const NIL_UUID = '00000000-0000-0000-0000-000000000000';

/**
 * Verify the `Authorization: Bearer <token>` session token (RFC 6750): signature (JWKS, HS256, or
 * the dev key by configuration), `iss`, `exp`/`nbf`/`iat` with 30 s tolerance, `role = authenticated`,
 * `aud = authenticated`, `sub` a UUID other than the nil UUID, not an anonymous user.
 * 401 missing/invalid/expired, 403 wrong role or anonymous, 503 when the JWKS or Auth server is down.
 */
export async function authenticate(request: Request, options: AuthenticateOptions = {}): Promise<SessionUser> {
  return authenticateToken(readBearerToken(request.headers.get('authorization')), options);
}

/** The same checks for a token that did not come in a header (the account page's session cookie). */
export async function authenticateToken(token: string, options: AuthenticateOptions = {}): Promise<SessionUser> {
  const config = getConfig();
  const claims = await verifySessionToken(token, config);
  // jose checks `iat` only against a `maxTokenAge` (which would also make it required and bound the
  // token's age, as `exp` already does); a token issued after now is refused as one not yet valid
  // (`nbf`) is, with the same tolerance for the clocks of the Auth server and this service.
  if (typeof claims.iat === 'number' && claims.iat > Math.floor(Date.now() / 1000) + CLOCK_TOLERANCE_SECONDS) {
    throw unauthorized('invalid_token', 'The token\'s "iat" claim is not valid: it was issued in the future.');
  }

  if (claims.role !== 'authenticated') {
    throw new DomainError('forbidden_role', typeof claims.role === 'string'
      ? `Tokens with role "${claims.role.slice(0, 64)}" cannot call this API; sign in as a user.`
      : 'The token names no role (its `role` claim is missing or not a string); sign in as a user.');
  }
  const audiences = Array.isArray(claims.aud) ? claims.aud : [claims.aud];
  if (!audiences.includes('authenticated')) throw unauthorized('invalid_token', 'The token is not meant for this API (aud).');
  if (!isUuid(claims.sub) || claims.sub === NIL_UUID) throw unauthorized('invalid_token', 'The token has no user id (sub).');
  if (claims.is_anonymous === true) {
    throw new DomainError('anonymous_user_not_allowed', 'Anonymous users cannot do this; sign in with an account first.');
  }

  if (options.requireLiveSession && config.auth.verifySession) await assertSessionAlive(token, claims.sub, config);
  return { userId: claims.sub.toLowerCase(), email: typeof claims.email === 'string' && claims.email !== '' ? claims.email : null, token, claims };
}

function unauthorized(code: DomainErrorCode, detail: string): DomainError {
  // lib/http writes the RFC 6750 challenge (with error="invalid_token" when a token was refused).
  return new DomainError(code, detail, { challenge: { scheme: 'Bearer', realm: REALM } });
}

function readBearerToken(header: string | null): string {
  if (header === null || header.trim() === '') {
    throw unauthorized('missing_token', 'Send the session token as "Authorization: Bearer <token>".');
  }
  const token = bearerCredentials(header);
  if (token === null) throw unauthorized('invalid_token', 'The Authorization header must be "Bearer <token>".');
  return token;
}

async function verifySessionToken(token: string, config: Config): Promise<JWTPayload> {
  let alg: string | undefined;
  try {
    alg = decodeProtectedHeader(token).alg;
  } catch {
    throw unauthorized('invalid_token', 'The token is not a JWT.');
  }
  const common = { clockTolerance: CLOCK_TOLERANCE_SECONDS, requiredClaims: ['exp', 'sub'] };
  try {
    switch (config.auth.mode) {
      case 'dev-key': {
        const { publicKey } = await loadDevKey(config);
        return (await jwtVerify(token, publicKey, { ...common, algorithms: ['ES256'], issuer: DEV_ISSUER })).payload;
      }
      case 'hs256':
        return (await jwtVerify(token, await hs256Key(config), { ...common, algorithms: ['HS256'], issuer: config.auth.issuer })).payload;
      case 'supabase-jwks':
        // Projects on the legacy shared secret still sign HS256; only then is HS256 accepted.
        if (alg === 'HS256' && config.auth.jwtSecret) {
          return (await jwtVerify(token, await hs256Key(config), { ...common, algorithms: ['HS256'], issuer: config.auth.issuer })).payload;
        }
        return await verifyWithJwks(token, config.auth.supabaseUrl!, { ...common, algorithms: ['ES256', 'RS256'], issuer: config.auth.issuer });
    }
  } catch (error) {
    throw classifyVerifyError(error);
  }
}

function classifyVerifyError(error: unknown): DomainError {
  if (error instanceof DomainError) return error;
  if (error instanceof joseErrors.JWTExpired) return unauthorized('token_expired', 'The session token has expired; refresh the session.');
  if (error instanceof joseErrors.JWKSTimeout || error instanceof joseErrors.JWKSInvalid) return authUnavailable();
  if (error instanceof joseErrors.JWTClaimValidationFailed) return unauthorized('invalid_token', `The token's "${error.claim}" claim is not valid.`);
  if (error instanceof joseErrors.JWKSNoMatchingKey) return unauthorized('invalid_token', 'The token was signed by an unknown key.');
  if (error instanceof joseErrors.JOSEAlgNotAllowed) return unauthorized('invalid_token', 'The token uses a signing algorithm that is not accepted.');
  if (error instanceof joseErrors.JWSSignatureVerificationFailed) return unauthorized('invalid_token', 'The token signature does not verify.');
  if (error instanceof joseErrors.JOSEError && error.code === 'ERR_JOSE_GENERIC') return authUnavailable(); // JWKS answered non-200 or not JSON
  if (error instanceof joseErrors.JOSEError) return unauthorized('invalid_token', 'The token is malformed.');
  return authUnavailable(); // fetch failed: the JWKS could not be reached
}

function authUnavailable(): DomainError {
  return new DomainError('auth_unavailable', 'The identity provider could not be reached to verify the session. Retry shortly.');
}

/**
 * The legacy shared secret as a verification key, imported once. jose imports a secret given as
 * bytes again on every verification (WebCrypto's importKey); the imported key is what it verifies
 * with, so keeping it changes nothing about what is accepted. Only the key is kept, never a token
 * or a verdict: every token is verified in full on every request. A new secret (a new
 * configuration) is imported afresh.
 */
let hs256Imported: { secret: string; key: Promise<CryptoKey> } | undefined;
function hs256Key(config: Config): Promise<CryptoKey> {
  const secret = config.auth.jwtSecret!;
  if (hs256Imported?.secret !== secret) {
    const key = crypto.subtle.importKey('raw', new TextEncoder().encode(secret), { name: 'HMAC', hash: 'SHA-256' }, false, ['verify']);
    hs256Imported = { secret, key };
  }
  return hs256Imported.key;
}

const JWKS_TIMEOUT_MS = 5_000;

// jose caches the key set and refetches it (with a cooldown) when it meets an unknown kid.
const jwksCache = new Map<string, ReturnType<typeof createRemoteJWKSet>>();
function jwksFor(supabaseUrl: string) {
  let jwks = jwksCache.get(supabaseUrl);
  if (!jwks) {
    jwks = createRemoteJWKSet(new URL(`${supabaseUrl}/auth/v1/.well-known/jwks.json`), {
      timeoutDuration: JWKS_TIMEOUT_MS,
      cooldownDuration: 30_000,
      // jose reports any answer but 200 without its status; the status is what tells a wrong path
      // or project (404) from a project that is down or paused (5xx).
      [customFetch]: async (url: string, init: RequestInit) => {
        const response = await fetch(url, init);
        if (response.status !== 200) {
          await response.body?.cancel();
          throw new JwksAnswerError(response.status);
        }
        return response;
      },
    });
    jwksCache.set(supabaseUrl, jwks);
  }
  return jwks;
}

class JwksAnswerError extends Error {
  readonly status: number;
  constructor(status: number) {
    super(`HTTP ${status}`);
    this.status = status;
  }
}

/**
 * Verify against the project's JWKS. When the key set cannot be had, every signed-in call answers
 * 503 auth_unavailable, and the caller's answer cannot say why (it names no setting or host): the
 * log does, once per cause (the JWKS host and what went wrong: a refused connection, a host that
 * does not resolve, an HTTP status, a timeout), not once per request. Once the key set answers
 * again, a new failure is logged again. Never the token.
 */
async function verifyWithJwks(token: string, supabaseUrl: string, options: Parameters<typeof jwtVerify>[2]): Promise<JWTPayload> {
  const host = new URL(supabaseUrl).host;
  try {
    const { payload } = await jwtVerify(token, jwksFor(supabaseUrl), options);
    forgetJwksFailures(host);
    return payload;
  } catch (error) {
    const cause = jwksFailureCause(error);
    if (cause === null) throw error;
    logJwksFailureOnce(host, cause);
    throw authUnavailable();
  }
}

/** Why the key set could not be had, in an operator's words; null when the error is about the token. */
export function jwksFailureCause(error: unknown): string | null {
  if (error instanceof JwksAnswerError) {
    return `answered HTTP ${error.status}${error.status === 404 ? ' (no such project or path: check the project ref in SUPABASE_URL)' : error.status >= 500 ? ' (the project is down or paused?)' : ''}`;
  }
  if (error instanceof joseErrors.JWKSTimeout) return `did not answer within ${JWKS_TIMEOUT_MS / 1000} s`;
  if (error instanceof joseErrors.JWKSInvalid) return 'answered JSON that is not a key set';
  if (error instanceof joseErrors.JOSEError && error.code === 'ERR_JOSE_GENERIC') return 'answered something that is not JSON';
  if (error instanceof joseErrors.JOSEError) return null;
  if (error instanceof TypeError && error.message === 'fetch failed') {
    const code = (error.cause as { code?: unknown } | undefined)?.code;
    const words: Record<string, string> = {
      ECONNREFUSED: 'refused the connection',
      ENOTFOUND: 'does not resolve (no such host: check the project ref in SUPABASE_URL)',
      EAI_AGAIN: 'could not be resolved (DNS)',
      ECONNRESET: 'reset the connection',
      ETIMEDOUT: 'did not accept a connection in time',
    };
    return typeof code === 'string' ? `${words[code] ?? 'could not be reached'} (${code})` : `could not be reached (${String((error.cause as Error | undefined)?.message ?? error.message)})`;
  }
  return null;
}

const loggedJwksFailures = new Set<string>();

function logJwksFailureOnce(host: string, cause: string): void {
  const key = `${host}\n${cause}`;
  if (loggedJwksFailures.has(key)) return;
  loggedJwksFailures.add(key);
  log.error({ jwksHost: host, cause },
    `session tokens cannot be verified: the JWKS at ${host} ${cause}; every signed-in call answers 503 auth_unavailable until it answers (logged once for this cause)`);
}

function forgetJwksFailures(host: string): void {
  if (loggedJwksFailures.size === 0) return;
  for (const key of loggedJwksFailures) if (key.startsWith(`${host}\n`)) loggedJwksFailures.delete(key);
}

// supabase-js is loaded at the first liveness check, not with the routes that read this module:
// reads (GET /api/me) never ask, and a cold start should not load what its request does not use.
const authClients = new Map<string, Promise<SupabaseClient>>();
function authClient(config: Config): Promise<SupabaseClient> {
  const key = `${config.auth.supabaseUrl}|${config.auth.apiKey}`;
  let client = authClients.get(key);
  if (!client) {
    client = import('@supabase/supabase-js').then(({ createClient }) => createClient(config.auth.supabaseUrl!, config.auth.apiKey!, {
      auth: { persistSession: false, autoRefreshToken: false, detectSessionInUrl: false },
    }));
    authClients.set(key, client);
    client.catch(() => authClients.delete(key));
  }
  return client;
}

/** Ask the Auth server (`GET /auth/v1/user`) whether this session is still signed in. */
async function assertSessionAlive(token: string, userId: string, config: Config): Promise<void> {
  let result: Awaited<ReturnType<SupabaseClient['auth']['getUser']>>;
  try {
    result = await (await authClient(config)).auth.getUser(token);
  } catch {
    throw authUnavailable();
  }
  const { data, error } = result;
  if (error) {
    const status = (error as { status?: number }).status ?? 0;
    if (status === 0 || status >= 500 || error.name === 'AuthRetryableFetchError') throw authUnavailable();
    throw unauthorized('session_revoked', 'This session has been signed out; sign in again.');
  }
  if (data.user?.id?.toLowerCase() !== userId.toLowerCase()) {
    throw unauthorized('session_revoked', 'This session no longer belongs to the token\'s user; sign in again.');
  }
}
