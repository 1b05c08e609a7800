import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { generateKeyPair, SignJWT, type JWTPayload } from 'jose';
import * as meRoute from '../../app/api/me/route.ts';
import { authenticate } from '../../lib/auth/session.ts';
import { DomainError } from '../../lib/errors.ts';
import { freePort } from '../../scripts/support/postgres-server.ts';
import { describeOn, useTestDatabase, type TestDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { startFakeSupabaseAuth, type FakeSupabaseAuth } from '../support/fake-supabase-auth.ts';
import { callRoute } from '../support/http.ts';
import { captureLogs, type LogCapture } from '../support/log-capture.ts';
import { testUser } from '../support/tokens.ts';

const HS256_SECRET = 'legacy-jwt-secret-that-is-at-least-32-characters-long';

/** Sign arbitrary JWTs (wrong keys, odd claims) the way a forger or a misconfigured client would. */
async function signWith(alg: 'ES256' | 'HS256', claims: JWTPayload, header: Record<string, unknown> = {}, key?: CryptoKey | Uint8Array) {
  const signingKey = key ?? (alg === 'HS256' ? new TextEncoder().encode(HS256_SECRET) : (await generateKeyPair('ES256')).privateKey);
  return new SignJWT(claims).setProtectedHeader({ alg, typ: 'JWT', ...header }).sign(signingKey);
}

function unsignedToken(claims: JWTPayload): string {
  const part = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
  return `${part({ alg: 'none', typ: 'JWT' })}.${part(claims)}.`;
}

describeOn('pglite')('session tokens (RFC 6750) against a JWKS served over real HTTP', () => {
  let auth: FakeSupabaseAuth;
  let db: TestDatabase;
  let restoreEnv: () => void;

  beforeAll(async () => {
    auth = await startFakeSupabaseAuth();
    // LOCAL_DEV: an Auth server but no database or webhook secrets, which only local mode allows.
    restoreEnv = setEnv({ SUPABASE_URL: auth.url, SUPABASE_PUBLISHABLE_KEY: auth.apiKey, SUPABASE_JWT_SECRET: undefined, AUTH_VERIFY_SESSION: 'false', LOCAL_DEV: '1' });
    db = await useTestDatabase('pglite');
  });
  afterAll(async () => {
    restoreEnv();
    await db.close();
    await auth.close();
  });

  const baseClaims = (overrides: JWTPayload = {}): JWTPayload => {
    const now = Math.floor(Date.now() / 1000);
    return { iss: auth.issuer, aud: 'authenticated', role: 'authenticated', sub: randomUUID(), email: 'x@example.test', iat: now, exp: now + 600, ...overrides };
  };
  const me = (authorization?: string) => callRoute(meRoute, { headers: authorization === undefined ? {} : { authorization } });

  it('accepts an ES256 token from the JWKS and answers the caller', async () => {
    const userId = randomUUID();
    const token = await auth.mint({ userId, email: 'ana@example.com' });
    const response = await me(`Bearer ${token}`);
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({ userId, email: 'ana@example.com' });
  });

  it('accepts an RS256 token from the JWKS', async () => {
    expect((await me(`Bearer ${await auth.mint({ alg: 'RS256' })}`)).status).toBe(200);
  });

  it('accepts a token expired by less than the 30 s clock tolerance', async () => {
    expect((await me(`Bearer ${await auth.mint({ expiresIn: -10 })}`)).status).toBe(200);
  });

  it('accepts a token issued less than the 30 s clock tolerance in the future (iat)', async () => {
    expect((await me(`Bearer ${await auth.mint({ claims: { iat: Math.floor(Date.now() / 1000) + 10 } })}`)).status).toBe(200);
  });

  const cases: { name: string; authorization: () => Promise<string | undefined>; status: number; code: string }[] = [
    { name: 'missing header', authorization: async () => undefined, status: 401, code: 'missing_token' },
    { name: 'empty header', authorization: async () => '', status: 401, code: 'missing_token' },
    { name: 'Basic scheme', authorization: async () => 'Basic dXNlcjpwYXNz', status: 401, code: 'invalid_token' },
    { name: 'two tokens', authorization: async () => `Bearer ${await auth.mint()}, Bearer ${await auth.mint()}`, status: 401, code: 'invalid_token' },
    { name: 'not a JWT', authorization: async () => 'Bearer not-a-jwt', status: 401, code: 'invalid_token' },
    { name: 'expired', authorization: async () => `Bearer ${await auth.mint({ expiresIn: -120 })}`, status: 401, code: 'token_expired' },
    { name: 'not yet valid (nbf)', authorization: async () => `Bearer ${await auth.mint({ claims: { nbf: Math.floor(Date.now() / 1000) + 600 } })}`, status: 401, code: 'invalid_token' },
    { name: 'issued in the future (iat)', authorization: async () => `Bearer ${await auth.mint({ claims: { iat: Math.floor(Date.now() / 1000) + 120 } })}`, status: 401, code: 'invalid_token' },
    {
      name: 'tampered payload (bad signature)',
      authorization: async () => {
        const [header, , signature] = (await auth.mint()).split('.');
        const forged = Buffer.from(JSON.stringify(baseClaims())).toString('base64url');
        return `Bearer ${header}.${forged}.${signature}`;
      },
      status: 401,
      code: 'invalid_token',
    },
    { name: 'unknown kid', authorization: async () => `Bearer ${await signWith('ES256', baseClaims(), { kid: 'someone-elses-key' })}`, status: 401, code: 'invalid_token' },
    { name: 'known kid, wrong key', authorization: async () => `Bearer ${await signWith('ES256', baseClaims(), { kid: 'es-key-1' })}`, status: 401, code: 'invalid_token' },
    { name: 'wrong issuer', authorization: async () => `Bearer ${await auth.mint({ claims: { iss: 'https://evil.example/auth/v1' } })}`, status: 401, code: 'invalid_token' },
    { name: 'wrong audience', authorization: async () => `Bearer ${await auth.mint({ claims: { aud: 'other' } })}`, status: 401, code: 'invalid_token' },
    { name: 'alg none', authorization: async () => `Bearer ${unsignedToken(baseClaims())}`, status: 401, code: 'invalid_token' },
    { name: 'HS256 when no JWT secret is configured', authorization: async () => `Bearer ${await signWith('HS256', baseClaims())}`, status: 401, code: 'invalid_token' },
    { name: 'sub not a UUID', authorization: async () => `Bearer ${await auth.mint({ claims: { sub: 'service-account' } })}`, status: 401, code: 'invalid_token' },
    { name: 'sub the nil UUID', authorization: async () => `Bearer ${await auth.mint({ claims: { sub: '00000000-0000-0000-0000-000000000000' } })}`, status: 401, code: 'invalid_token' },
    { name: 'role anon (the anon key)', authorization: async () => `Bearer ${await auth.mint({ claims: { role: 'anon' } })}`, status: 403, code: 'forbidden_role' },
    { name: 'role service_role (the service key)', authorization: async () => `Bearer ${await auth.mint({ claims: { role: 'service_role' } })}`, status: 403, code: 'forbidden_role' },
    { name: 'anonymous user', authorization: async () => `Bearer ${await auth.mint({ claims: { is_anonymous: true } })}`, status: 403, code: 'anonymous_user_not_allowed' },
  ];

  it.each(cases)('refuses: $name -> $status $code', async ({ authorization, status, code }) => {
    const response = await me(await authorization());
    expect(response.status).toBe(status);
    expect(response.headers.get('content-type')).toBe('application/problem+json');
    expect(response.body).toMatchObject({ status, code });
    if (status === 401) {
      const challenge = response.headers.get('www-authenticate');
      expect(challenge).toMatch(/^Bearer realm="account-link"/);
      if (code !== 'missing_token') expect(challenge).toContain('error="invalid_token"');
      else expect(challenge).not.toContain('error=');
    }
  });

  it('names the iat claim of a token issued more than 30 s in the future, as it names nbf', async () => {
    const now = Math.floor(Date.now() / 1000);
    const issuedLater = await me(`Bearer ${await auth.mint({ claims: { iat: now + 120 } })}`);
    expect(issuedLater.body).toMatchObject({ status: 401, code: 'invalid_token', detail: expect.stringContaining('"iat" claim') });
    const notYetValid = await me(`Bearer ${await auth.mint({ claims: { nbf: now + 120 } })}`);
    expect(notYetValid.body).toMatchObject({ status: 401, code: 'invalid_token', detail: expect.stringContaining('"nbf" claim') });
  });

  it('says a token whose sub is the nil UUID has no user id, as for a sub that is no UUID', async () => {
    for (const sub of ['00000000-0000-0000-0000-000000000000', 'service-account']) {
      const response = await me(`Bearer ${await auth.mint({ claims: { sub } })}`);
      expect({ sub, body: response.body }).toMatchObject({ sub, body: { status: 401, code: 'invalid_token', detail: 'The token has no user id (sub).' } });
    }
  });

  it('says a token names no role when its role claim is missing or not a string (not role "undefined")', async () => {
    for (const role of [undefined, { admin: true }]) {
      const response = await me(`Bearer ${await auth.mint({ claims: { role } })}`);
      expect(response.body).toMatchObject({ status: 403, code: 'forbidden_role', detail: expect.stringMatching(/^The token names no role/) });
    }
  });

  it('accepts HS256 only when SUPABASE_JWT_SECRET is set (legacy projects)', async () => {
    const restore = setEnv({ SUPABASE_JWT_SECRET: HS256_SECRET });
    try {
      expect((await me(`Bearer ${await signWith('HS256', baseClaims())}`)).status).toBe(200);
      expect((await me(`Bearer ${await signWith('HS256', baseClaims(), {}, new TextEncoder().encode('wrong-secret-wrong-secret-wrong-secret'))}`)).status).toBe(401);
    } finally {
      restore();
    }
  });

  it('verifies HS256 with the secret configured now: a rotated secret refuses tokens signed with the old one', async () => {
    const rotated = 'rotated-jwt-secret-that-is-at-least-32-characters-long';
    const signedWithOld = await signWith('HS256', baseClaims());
    let restore = setEnv({ SUPABASE_JWT_SECRET: HS256_SECRET });
    try {
      expect((await me(`Bearer ${signedWithOld}`)).status).toBe(200);
    } finally {
      restore();
    }
    restore = setEnv({ SUPABASE_JWT_SECRET: rotated });
    try {
      expect((await me(`Bearer ${signedWithOld}`)).status).toBe(401);
      expect((await me(`Bearer ${await signWith('HS256', baseClaims(), {}, new TextEncoder().encode(rotated))}`)).status).toBe(200);
    } finally {
      restore();
    }
  });

  it('answers 503 auth_unavailable (not 401) when the JWKS cannot be fetched', async () => {
    const down = await startFakeSupabaseAuth();
    const restore = setEnv({ SUPABASE_URL: down.url });
    try {
      down.failWith(503);
      const token = await down.mint();
      const response = await me(`Bearer ${token}`);
      expect(response.status).toBe(503);
      expect(response.body).toMatchObject({ code: 'auth_unavailable' });
      expect(response.headers.get('retry-after')).toBeTruthy();
      await down.close();
      const refused = await me(`Bearer ${token}`);
      expect(refused.status).toBe(503);
    } finally {
      restore();
    }
  });

  it('does not accept a dev-key token when Supabase auth is configured', async () => {
    const restore = setEnv({ SUPABASE_URL: undefined });
    const devUser = await testUser();
    restore();
    expect((await me(devUser.authorization)).status).toBe(401);
  });

  describe('session liveness (auth.getUser) for writes', () => {
    let restore: () => void;
    beforeAll(() => {
      restore = setEnv({ AUTH_VERIFY_SESSION: 'true' });
    });
    afterAll(() => restore());

    const writeRequest = (token: string) => new Request('http://localhost/api/wallet-link', { method: 'POST', headers: { authorization: `Bearer ${token}` } });
    const codeOf = async (promise: Promise<unknown>) => promise.then(() => 'ok', (error) => (error instanceof DomainError ? error.code : String(error)));

    it('passes a live session and sends the apikey and the token to the Auth server', async () => {
      const token = await auth.mint();
      expect(await codeOf(authenticate(writeRequest(token), { requireLiveSession: true }))).toBe('ok');
      const call = auth.requests.findLast((request) => request.path === '/auth/v1/user');
      expect(call).toMatchObject({ apikey: auth.apiKey, authorization: `Bearer ${token}` });
    });

    it('refuses a signed-out session with 401 session_revoked, but reads do not ask', async () => {
      const userId = randomUUID();
      const token = await auth.mint({ userId });
      auth.revoke(userId);
      expect(await codeOf(authenticate(writeRequest(token), { requireLiveSession: true }))).toBe('session_revoked');
      expect(await codeOf(authenticate(writeRequest(token)))).toBe('ok');
    });

    it('answers 503 auth_unavailable when the Auth server fails', async () => {
      const token = await auth.mint();
      auth.failWith(502);
      try {
        expect(await codeOf(authenticate(writeRequest(token), { requireLiveSession: true }))).toBe('auth_unavailable');
      } finally {
        auth.failWith(undefined);
      }
    });
  });
});

describeOn('pglite')('embedded mode: the local dev key', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await useTestDatabase('pglite');
  });
  afterAll(() => db.close());

  it('accepts a token minted with the dev key (what `npm run token` prints)', async () => {
    const user = await testUser({ email: 'dev@example.test' });
    const response = await callRoute(meRoute, { headers: { authorization: user.authorization } });
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({ userId: user.userId, email: 'dev@example.test' });
  });

  it('refuses an anonymous dev user and an expired dev token', async () => {
    const anonymous = await testUser({ isAnonymous: true });
    expect((await callRoute(meRoute, { headers: { authorization: anonymous.authorization } })).body).toMatchObject({ code: 'anonymous_user_not_allowed' });
    const expired = await testUser({ expiresInSeconds: -120 });
    expect((await callRoute(meRoute, { headers: { authorization: expired.authorization } })).body).toMatchObject({ code: 'token_expired' });
  });
});

describe('a JWKS that cannot be had (a typo in the project ref, a paused project)', () => {
  let restoreEnv: () => void;
  let notFound: Server;
  let notFoundUrl: string;
  let closedUrl: string;
  let capture: LogCapture;

  beforeAll(async () => {
    // A server that answers 404 to everything (a project ref that names no project), and a port nothing listens on.
    notFound = createServer((_req, res) => res.writeHead(404, { 'content-type': 'application/json' }).end('{"message":"no Route matched with those values"}'));
    await new Promise<void>((resolve) => notFound.listen(0, '127.0.0.1', resolve));
    notFoundUrl = `http://127.0.0.1:${(notFound.address() as AddressInfo).port}`;
    closedUrl = `http://127.0.0.1:${await freePort()}`;
    restoreEnv = setEnv({ SUPABASE_URL: closedUrl, SUPABASE_PUBLISHABLE_KEY: 'sb_publishable_test', SUPABASE_JWT_SECRET: undefined, AUTH_VERIFY_SESSION: 'false', LOCAL_DEV: '1' });
    // The real pino output, captured at its destination.
    capture = captureLogs('info');
  });
  afterAll(async () => {
    capture.stop();
    restoreEnv();
    await new Promise((resolve) => notFound.close(resolve));
  });

  const jwksLines = () => capture.lines.filter((line) => line.msg !== 'request');
  const callMe = async (supabaseUrl: string) => {
    const restore = setEnv({ SUPABASE_URL: supabaseUrl });
    try {
      // A well-formed ES256 token for that project: only the key set can say whether it is good.
      const token = await signWith('ES256', { iss: `${supabaseUrl}/auth/v1`, aud: 'authenticated', role: 'authenticated', sub: randomUUID(), exp: Math.floor(Date.now() / 1000) + 600 }, { kid: 'k1' });
      return { token, response: await callRoute(meRoute, { headers: { authorization: `Bearer ${token}` } }) };
    } finally {
      restore();
    }
  };

  it('answers 503 auth_unavailable, and logs the host and the error once per cause, never the token', async () => {
    const first = await callMe(closedUrl);
    const second = await callMe(closedUrl);
    for (const { response } of [first, second]) {
      expect({ status: response.status, code: response.body.code }).toEqual({ status: 503, code: 'auth_unavailable' });
      expect(response.text).not.toContain('127.0.0.1');
    }
    const closedHost = new URL(closedUrl).host;
    // Two calls, one cause: one line, naming the host and the error.
    expect(jwksLines()).toEqual([expect.objectContaining({ level: 'error', jwksHost: closedHost, cause: 'refused the connection (ECONNREFUSED)' })]);
    expect(jwksLines()[0]!.msg).toBe(`session tokens cannot be verified: the JWKS at ${closedHost} refused the connection (ECONNREFUSED); every signed-in call answers 503 auth_unavailable until it answers (logged once for this cause)`);

    // Another cause (a 404: no such project), twice: a second line, once.
    const third = await callMe(notFoundUrl);
    await callMe(notFoundUrl);
    expect(third.response.status).toBe(503);
    expect(jwksLines()).toHaveLength(2);
    expect(jwksLines()[1]).toMatchObject({ jwksHost: new URL(notFoundUrl).host, cause: expect.stringMatching(/^answered HTTP 404 \(no such project or path/) });

    // The request lines say 503 for each of the four; no line carries a token.
    expect(capture.lines.filter((line) => line.msg === 'request').map((line) => line.status)).toEqual([503, 503, 503, 503]);
    const text = JSON.stringify(capture.lines);
    for (const { token } of [first, second, third]) expect(text).not.toContain(token.split('.')[2]);
  });
});
