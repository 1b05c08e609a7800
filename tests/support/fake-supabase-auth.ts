import { createServer, type Server } from 'node:http';
import { randomUUID } from 'node:crypto';
import { exportJWK, generateKeyPair, jwtVerify, SignJWT, type JWK, type JWTPayload } from 'jose';
import { attachFakeRealtime, type FakeRealtime } from './fake-supabase-realtime.ts';

/**
 * A stand-in for the Supabase Auth server, speaking its wire format over real HTTP on loopback:
 *   GET /auth/v1/.well-known/jwks.json  -> { keys: [...] } (ES256 and RS256 public keys)
 *   GET /auth/v1/user                   -> the user of a live session (needs `apikey` and
 *                                          `Authorization: Bearer <access token>`), else 401/403
 *   POST /auth/v1/token?grant_type=password -> a session for a user added with addUser()
 *   POST /auth/v1/token?grant_type=refresh_token -> a new session for a refresh token it issued;
 *                                          like GoTrue, the session's `expires_at` comes from the
 *                                          project's expiry (3600 s), while the access token's own
 *                                          `exp` is what the access token hook (setAccessTokenHook)
 *                                          leaves, so the two can differ
 *   POST /auth/v1/otp                   -> 200 (a magic link "sent")
 *   POST /auth/v1/logout?scope=global|local|others -> 204; ends the sessions of the scope, as
 *                                          GoTrue's Logout does (internal/api/logout.go): `local`
 *                                          the token's own session, `global` every session of its
 *                                          user, `others` all but its own; needs `apikey` and a
 *                                          Bearer access token (401 without one, 403 for a bad
 *                                          token or an ended session, 400 for another scope)
 * with CORS headers, so a browser page can call it as it calls Supabase. It also mints access
 * tokens shaped like Supabase's, signed with its private keys, and serves Realtime on the same
 * origin, as a Supabase project does (tests/support/fake-supabase-realtime.ts).
 */
export interface FakeSupabaseAuth {
  url: string;
  issuer: string;
  apiKey: string;
  /** Mint an access token; `claims` override the defaults, `header` the protected header. */
  mint(options?: { userId?: string; email?: string; claims?: JWTPayload; alg?: 'ES256' | 'RS256'; kid?: string; expiresIn?: number }): Promise<string>;
  /** Sign the user out: /auth/v1/user answers 403 session_not_found for their tokens from now on. */
  revoke(userId: string): void;
  /** Every logout call that ended sessions, in order: whose, which session, which scope. */
  logouts: { userId: string; sessionId: string; scope: 'global' | 'local' | 'others' }[];
  /** A user who can sign in with e-mail and password; returns the user id. */
  addUser(email: string, password: string): string;
  /**
   * Run before every access token this server issues for a session (sign-in, refresh), as Supabase's
   * Custom Access Token Hook does: it may change the claims, `exp` included.
   */
  setAccessTokenHook(hook: ((claims: JWTPayload) => JWTPayload) | undefined): void;
  /** The refresh-token grants it answered, in order. */
  refreshes: string[];
  /** E-mails a magic link was requested for. */
  magicLinks: string[];
  /** Make every request fail with this HTTP status (e.g. 503), or undefined to answer normally. */
  failWith(status: number | undefined): void;
  requests: { path: string; apikey: string | undefined; authorization: string | undefined }[];
  /** Realtime at /realtime/v1/websocket, taking the tokens this server signs. */
  realtime: FakeRealtime;
  close(): Promise<void>;
}

export async function startFakeSupabaseAuth(): Promise<FakeSupabaseAuth> {
  const es = await generateKeyPair('ES256', { extractable: true });
  const rs = await generateKeyPair('RS256', { extractable: true });
  const keys: JWK[] = [
    { ...(await exportJWK(es.publicKey)), kid: 'es-key-1', alg: 'ES256', use: 'sig' },
    { ...(await exportJWK(rs.publicKey)), kid: 'rs-key-1', alg: 'RS256', use: 'sig' },
  ];
  const revoked = new Set<string>();
  // Sessions by id (the access token's session_id claim), and those a logout ended.
  const sessions = new Map<string, string>();
  const endedSessions = new Set<string>();
  const logouts: FakeSupabaseAuth['logouts'] = [];
  const apiKey = `sb_publishable_${randomUUID()}`;
  let failStatus: number | undefined;
  const requests: FakeSupabaseAuth['requests'] = [];
  const users = new Map<string, { id: string; email: string }>();
  const passwords = new Map<string, { id: string; password: string }>();
  const magicLinks: string[] = [];
  let mintToken: (options: { userId: string; email: string }) => Promise<string> = async () => '';
  let accessTokenHook: ((claims: JWTPayload) => JWTPayload) | undefined;
  const refreshTokens = new Map<string, { id: string; email: string }>();
  const refreshes: string[] = [];

  const server: Server = createServer(async (req, res) => {
    const path = (req.url ?? '').split('?')[0]!;
    requests.push({ path, apikey: req.headers.apikey as string | undefined, authorization: req.headers.authorization });
    const cors = {
      'access-control-allow-origin': '*',
      'access-control-allow-methods': 'GET, POST, PUT, DELETE, OPTIONS',
      'access-control-allow-headers': String(req.headers['access-control-request-headers'] ?? 'authorization, apikey, content-type'),
    };
    const send = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json', ...cors });
      res.end(JSON.stringify(body));
    };
    if (req.method === 'OPTIONS') {
      res.writeHead(204, cors);
      return res.end();
    }
    if (failStatus) return send(failStatus, { code: failStatus, error_code: 'unexpected_failure', msg: 'Auth server failure' });
    if (path === '/auth/v1/.well-known/jwks.json') return send(200, { keys });
    if (req.method === 'POST' && (path === '/auth/v1/token' || path === '/auth/v1/otp')) {
      let raw = '';
      for await (const chunk of req) raw += chunk;
      const body = JSON.parse(raw || '{}') as { email?: string; password?: string; refresh_token?: string };
      if (req.headers.apikey !== apiKey) return send(401, { message: 'Invalid API key' });
      if (path === '/auth/v1/otp') {
        magicLinks.push(String(body.email));
        return send(200, {});
      }
      let account: { id: string; email: string } | undefined;
      if (new URL(req.url ?? '', 'http://auth.invalid').searchParams.get('grant_type') === 'refresh_token') {
        account = refreshTokens.get(String(body.refresh_token));
        if (!account) return send(400, { code: 400, error_code: 'refresh_token_not_found', msg: 'Invalid Refresh Token: Refresh Token Not Found' });
        refreshTokens.delete(String(body.refresh_token));
        refreshes.push(String(body.refresh_token));
      } else {
        const login = passwords.get(String(body.email));
        if (!login || login.password !== body.password) return send(400, { code: 400, error_code: 'invalid_credentials', msg: 'Invalid login credentials' });
        account = { id: login.id, email: String(body.email) };
      }
      const accessToken = await mintToken({ userId: account.id, email: account.email });
      const now = Math.floor(Date.now() / 1000);
      const refreshToken = randomUUID();
      refreshTokens.set(refreshToken, account);
      return send(200, {
        access_token: accessToken, token_type: 'bearer', expires_in: 3600, expires_at: now + 3600, refresh_token: refreshToken,
        user: { id: account.id, aud: 'authenticated', role: 'authenticated', email: account.email, is_anonymous: false, app_metadata: {}, user_metadata: {}, created_at: new Date().toISOString() },
      });
    }
    if (path === '/auth/v1/user' || (req.method === 'POST' && path === '/auth/v1/logout')) {
      if (req.headers.apikey !== apiKey) return send(401, { message: 'Invalid API key' });
      const token = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];
      if (!token) return send(401, { code: 401, error_code: 'no_authorization', msg: 'This endpoint requires a valid Bearer token' });
      const claims = decodeClaims(token);
      const user = claims?.sub ? users.get(claims.sub) : undefined;
      if (!user) return send(403, { code: 403, error_code: 'bad_jwt', msg: 'invalid JWT' });
      const sessionId = String(claims?.session_id ?? '');
      if (revoked.has(user.id) || endedSessions.has(sessionId)) {
        return send(403, { code: 403, error_code: 'session_not_found', msg: 'Session from session_id claim in JWT does not exist' });
      }
      if (path === '/auth/v1/user') return send(200, { id: user.id, aud: 'authenticated', role: 'authenticated', email: user.email, is_anonymous: false });
      const scope = new URL(req.url ?? '', 'http://auth.invalid').searchParams.get('scope') || 'global';
      if (scope !== 'global' && scope !== 'local' && scope !== 'others') {
        return send(400, { code: 400, error_code: 'validation_failed', msg: `Unsupported logout scope "${scope}"` });
      }
      for (const [id, owner] of sessions) {
        if (owner === user.id && (scope === 'global' || (scope === 'local') === (id === sessionId))) endedSessions.add(id);
      }
      logouts.push({ userId: user.id, sessionId, scope });
      res.writeHead(204, cors);
      return res.end();
    }
    send(404, { message: 'not found' });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  const url = `http://127.0.0.1:${port}`;
  const issuer = `${url}/auth/v1`;
  const realtime = attachFakeRealtime(server, async (token) => {
    try {
      const { payload } = await jwtVerify(token, async (header) => (header.alg === 'RS256' ? rs.publicKey : es.publicKey), { issuer, audience: 'authenticated' });
      return typeof payload.sub === 'string' ? payload.sub : null;
    } catch {
      return null;
    }
  });

  const fake: FakeSupabaseAuth = {
    url,
    issuer,
    apiKey,
    requests,
    realtime,
    magicLinks,
    logouts,
    refreshes,
    setAccessTokenHook: (hook) => {
      accessTokenHook = hook;
    },
    addUser(email, password) {
      const id = randomUUID();
      passwords.set(email, { id, password });
      return id;
    },
    async mint(options = {}) {
      const userId = options.userId ?? randomUUID();
      const email = options.email ?? `user-${userId.slice(0, 8)}@example.test`;
      users.set(userId, { id: userId, email });
      const alg = options.alg ?? 'ES256';
      const now = Math.floor(Date.now() / 1000);
      const payload: JWTPayload = {
        iss: issuer, aud: 'authenticated', sub: userId, iat: now, exp: now + (options.expiresIn ?? 3600),
        email, role: 'authenticated', aal: 'aal1', is_anonymous: false, session_id: randomUUID(),
        ...options.claims,
      };
      sessions.set(String(payload.session_id), userId);
      return new SignJWT(payload)
        .setProtectedHeader({ alg, kid: options.kid ?? (alg === 'ES256' ? 'es-key-1' : 'rs-key-1'), typ: 'JWT' })
        .sign(alg === 'ES256' ? es.privateKey : rs.privateKey);
    },
    revoke: (userId) => revoked.add(userId),
    failWith: (status) => {
      failStatus = status;
    },
    close: () => new Promise((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
  // Sessions' tokens go through the hook, as Supabase Auth's do; tokens a test mints directly do not.
  mintToken = async (options) => {
    if (!accessTokenHook) return fake.mint(options);
    const now = Math.floor(Date.now() / 1000);
    const claims = accessTokenHook({ iss: issuer, aud: 'authenticated', sub: options.userId, iat: now, exp: now + 3600, email: options.email, role: 'authenticated' });
    return fake.mint({ ...options, expiresIn: Number(claims.exp) - now, claims });
  };
  return fake;
}

function decodeClaims(token: string): { sub?: string; session_id?: string } | undefined {
  try {
    return JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString('utf8'));
  } catch {
    return undefined;
  }
}
