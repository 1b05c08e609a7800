import { request as httpRequest } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OPERATOR_SECRET_FAILURES } from '../../lib/auth/operator-secret.ts';
import { startNextServer, type NextServer } from '../../scripts/support/next-server.ts';
import { migratedEmbeddedDbDir } from '../support/databases.ts';
import { requireProductionBuild } from '../support/production-build.ts';

/**
 * What the production server (`next build` + `next start`) trusts of a request's own words about
 * where it came from, and what it answers to a request-target that is no path. Found by an outside
 * review, reproduced here as they did it:
 *   - the wrong-secret throttle counted a client under the address its X-Forwarded-For named: 30
 *     guesses with new headers were never throttled, and ten naming 127.0.0.1 locked that address
 *     out. Off Vercel the Node server now replaces the header with the connection's address (or,
 *     with TRUSTED_PROXY_HOPS, the entry the operator's own proxies wrote) before Next sees it;
 *   - `OPTIONS *` and `GET *` got Next's bare 500.
 * Clients are told apart by the loopback address they connect from (127.0.0.2, ...: all of 127/8 is
 * this machine), on a server bound to 127.0.0.1 and on one started without -H (IPv6 `::`, where an
 * IPv4 client's address arrives as ::ffff:127.0.0.2).
 */

const ADMIN_SECRET = 'admin-secret-for-client-address-tests-0123456789';
const FRONTEND = 'https://app.example.com';
const { maxFailures } = OPERATOR_SECRET_FAILURES;

interface Answer { status: number; headers: Record<string, string | string[] | undefined>; body: string }

/** One request from `from` (a loopback address of this machine), with the request-target as given. */
function send(server: NextServer, options: { from: string; method?: string; target?: string; headers?: Record<string, string> }): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const request = httpRequest({
      host: '127.0.0.1', port: server.port, localAddress: options.from, method: options.method ?? 'GET', path: options.target ?? '/api/admin/status',
      headers: { connection: 'close', ...options.headers }, agent: false,
    }, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (body += chunk));
      response.on('end', () => resolve({ status: response.statusCode!, headers: response.headers, body }));
    });
    request.on('error', reject);
    request.end();
  });
}

const guess = (server: NextServer, from: string, headers: Record<string, string> = {}) => send(server, { from, headers: { authorization: 'Bearer wrong-guess', ...headers } });
const operator = (server: NextServer, from: string, headers: Record<string, string> = {}) => send(server, { from, headers: { authorization: `Bearer ${ADMIN_SECRET}`, ...headers } });

function serverEnv(dataDir: string, more: Record<string, string | undefined> = {}): Record<string, string | undefined> {
  return {
    // Local mode on this machine's embedded database, with a real admin secret beside it.
    EMBEDDED_DB_DIR: migratedEmbeddedDbDir(dataDir), LOCAL_DEV: '1', ADMIN_API_SECRET: ADMIN_SECRET, CORS_ORIGINS: FRONTEND,
    DATABASE_URL: undefined, SUPABASE_URL: undefined, APP_ORIGIN: undefined, VERCEL: undefined, TRUSTED_PROXY_HOPS: undefined, LOG_LEVEL: 'warn', ...more,
  };
}

describe.each([
  { binding: 'bound to 127.0.0.1 (-H)', everyInterface: false },
  { binding: 'started without -H (every interface)', everyInterface: true },
])('the production server $binding', ({ everyInterface }) => {
  let server: NextServer;
  let dataDir: string;

  beforeAll(async () => {
    requireProductionBuild();
    dataDir = mkdtempSync(path.join(tmpdir(), 'account-link-client-address-'));
    server = await startNextServer({ everyInterface, env: serverEnv(dataDir) });
  }, 240_000);
  afterAll(async () => {
    await server?.stop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it(`throttles 30 wrong secrets from one connection after ${maxFailures}, however each names itself in X-Forwarded-For and X-Real-IP`, async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 30; i++) {
      const named = `198.51.100.${i + 1}`;
      statuses.push((await guess(server, '127.0.0.2', { 'x-forwarded-for': named, 'x-real-ip': named })).status);
    }
    expect(statuses).toEqual([...Array<number>(maxFailures).fill(401), ...Array<number>(30 - maxFailures).fill(429)]);
    // The right secret from the same connection address is refused too; from another it works.
    expect((await operator(server, '127.0.0.2', { 'x-forwarded-for': '203.0.113.9' })).status).toBe(429);
    expect((await operator(server, '127.0.0.1')).status).toBe(200);
  });

  it('does not lock 127.0.0.1 out for ten wrong secrets that name it', async () => {
    for (let i = 0; i < maxFailures; i++) {
      expect((await guess(server, '127.0.0.3', { 'x-forwarded-for': '127.0.0.1', 'x-real-ip': '127.0.0.1' })).status).toBe(401);
    }
    expect((await operator(server, '127.0.0.1')).status).toBe(200);
    expect((await guess(server, '127.0.0.3')).status).toBe(429);
  });

  // RFC 9112, section 3.2.4: the asterisk-form is for a server-wide OPTIONS alone.
  // (An authority-form target with another method than CONNECT Node's parser refuses itself, before
  // the request's headers are read: the 400 of lib/http/before-next.ts with a request id of its own.)
  it.each([
    { method: 'OPTIONS', target: '*', status: 405, code: 'method_not_allowed', allow: '', id: 'req-asterisk-1' },
    { method: 'GET', target: '*', status: 400, code: 'invalid_request', allow: undefined, id: 'req-asterisk-1' },
    { method: 'POST', target: '*', status: 400, code: 'invalid_request', allow: undefined, id: 'req-asterisk-1' },
    { method: 'GET', target: '127.0.0.1:80', status: 400, code: 'invalid_request', allow: undefined, id: expect.stringMatching(/^[0-9a-f-]{36}$/) },
  ])('answers $method $target with problem+json $status, never Next\'s bare 500', async ({ method, target, status, code, allow, id }) => {
    const answer = await send(server, { from: '127.0.0.1', method, target, headers: { 'x-request-id': 'req-asterisk-1' } });
    expect({ status: answer.status, type: answer.headers['content-type'], allow: answer.headers.allow, id: answer.headers['x-request-id'] })
      .toEqual({ status, type: 'application/problem+json', allow, id });
    expect(JSON.parse(answer.body)).toMatchObject({ status, code, requestId: answer.headers['x-request-id'] });
    // And it goes on serving.
    expect((await send(server, { from: '127.0.0.1', target: '/api/health' })).status).toBe(200);
  });

  // CORS_ORIGINS is set: every answer depends on Origin, and says so.
  it('says Vary: Origin on every API answer while CORS_ORIGINS is set, refusals and other origins included', async () => {
    const cases: { method?: string; target: string; headers: Record<string, string> }[] = [
      { target: '/api/health', headers: { origin: FRONTEND } },
      { target: '/api/health', headers: { origin: 'https://evil.example' } },
      { target: '/api/health', headers: {} },
      { target: '/api/me', headers: { origin: 'https://evil.example' } },
      { target: '/api/no/such/path', headers: { origin: FRONTEND } },
      { method: 'OPTIONS', target: '/api/me', headers: { origin: 'https://evil.example', 'access-control-request-method': 'GET' } },
    ];
    const varies: string[] = [];
    for (const { method, target, headers } of cases) {
      const answer = await send(server, { from: '127.0.0.1', method, target, headers });
      // Next adds its own names (rsc, ..., Accept-Encoding); what matters here is what CORS adds.
      const names = String(answer.headers.vary ?? '').split(',').map((name) => name.trim()).filter((name) => /^(origin|access-control-)/i.test(name));
      varies.push(`${method ?? 'GET'} ${target} ${headers.origin ?? '-'}: ${answer.status} ${names.join(', ')}`);
    }
    const preflightVary = 'Origin, Access-Control-Request-Method, Access-Control-Request-Headers';
    expect(varies).toEqual([
      `GET /api/health ${FRONTEND}: 200 Origin`,
      'GET /api/health https://evil.example: 200 Origin',
      'GET /api/health -: 200 Origin',
      'GET /api/me https://evil.example: 401 Origin',
      `GET /api/no/such/path ${FRONTEND}: 404 Origin`,
      `OPTIONS /api/me https://evil.example: 204 ${preflightVary}`,
    ]);
  });
});

describe('the production server behind a proxy of the operator\'s (TRUSTED_PROXY_HOPS=1)', () => {
  let server: NextServer;
  let dataDir: string;
  const proxy = '127.0.0.4';

  beforeAll(async () => {
    requireProductionBuild();
    dataDir = mkdtempSync(path.join(tmpdir(), 'account-link-client-address-proxy-'));
    server = await startNextServer({ env: serverEnv(dataDir, { TRUSTED_PROXY_HOPS: '1' }) });
  }, 240_000);
  afterAll(async () => {
    await server?.stop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it('counts each client under the address the proxy appended, never one the client wrote before it', async () => {
    for (let i = 0; i < maxFailures; i++) {
      // The client's own entry (left) changes every time; the proxy's (right) is the client's address.
      expect((await guess(server, proxy, { 'x-forwarded-for': `10.9.9.${i}, 198.51.100.7` })).status).toBe(401);
    }
    expect((await guess(server, proxy, { 'x-forwarded-for': '10.1.1.1, 198.51.100.7' })).status).toBe(429);
    // Another client behind the same proxy, and a request that reached the server without it, go on.
    expect((await operator(server, proxy, { 'x-forwarded-for': '198.51.100.8' })).status).toBe(200);
    expect((await operator(server, proxy)).status).toBe(200);
  });
});
