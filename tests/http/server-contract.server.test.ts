import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { gzipSync } from 'node:zlib';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mintDevToken } from '../../lib/auth/dev-key.ts';
import { DEV_WEBHOOK_SECRETS } from '../../lib/config.ts';
import { fixture } from '../billing/fixtures.ts';
import { authorizationGrammarCases } from '../support/authorization-grammar.ts';
import { migratedEmbeddedDbDir } from '../support/databases.ts';
import { startNextServer, type NextServer } from '../../scripts/support/next-server.ts';
import { requireProductionBuild } from '../support/production-build.ts';

/**
 * The HTTP contract as a client meets it on the production server (`next build` + `next start`),
 * once bound to 127.0.0.1 and once started the way users start it (no `-H`, every interface),
 * because Next's request handling differs between the two:
 *   - a path with a trailing slash is answered by the same route as without (no redirect: a
 *     billing provider counts a 308 as a failed delivery), for every route and method;
 *   - a malformed percent-encoding anywhere under /api is a problem+json 404, never a bare 500;
 *   - the page's server action answers a malformed escape in its path with that same 404;
 *   - the Authorization grammar holds over real HTTP too;
 *   - the page's icon exists;
 *   - a method Next does not route is a 405 problem+json, and what Node's parser refuses a 400
 *     or 431 problem+json, answered by the Node server before Next;
 *   - what Next answers, before any code of ours runs, to paths with repeated slashes or
 *     backslashes: pinned here so the API notes in docs/http.md stay exact across upgrades.
 */

const UUID = '00000000-0000-4000-8000-000000000000';
const METHODS = ['GET', 'HEAD', 'OPTIONS', 'POST', 'PUT', 'PATCH', 'DELETE'];

/** Every route under app/api as a concrete path (the catch-all as an unknown path). */
function apiPaths(dir = 'app/api', prefix = '/api'): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    if (entry.isFile()) return entry.name === 'route.ts' ? [prefix] : [];
    const segment = entry.name.startsWith('[[...') ? 'no/such/path' : entry.name.startsWith('[') ? UUID : entry.name;
    return apiPaths(path.join(dir, entry.name), `${prefix}/${segment}`);
  });
}

/**
 * One request over a raw socket (fetch refuses TRACE, and no client library sends a lower-case or
 * unknown method as it is): status, content type and the decoded body.
 */
function rawRequest(port: number, method: string, pathname: string, extraHeaders = '', rawBody: string | Buffer = '', hostHeader = 'Host: 127.0.0.1\r\n'): Promise<{ status: number; type: string | null; location: string | null; allow: string | null; header: (name: string) => string | null; body: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.on('data', (chunk) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('end', () => {
      const text = Buffer.concat(chunks).toString('latin1');
      const [head = '', ...rest] = text.split('\r\n\r\n');
      const headers = head.split('\r\n');
      const header = (name: string) => headers.find((line) => line.toLowerCase().startsWith(`${name}:`))?.slice(name.length + 1).trim() ?? null;
      let body = rest.join('\r\n\r\n');
      if (header('transfer-encoding') === 'chunked') {
        let decoded = '';
        for (let at = 0; ;) {
          const lineEnd = body.indexOf('\r\n', at);
          const size = Number.parseInt(body.slice(at, lineEnd), 16);
          if (!size) break;
          decoded += body.slice(lineEnd + 2, lineEnd + 2 + size);
          at = lineEnd + 2 + size + 2;
        }
        body = decoded;
      }
      // No answer at all (the connection closed): status 0.
      resolve({ status: text ? Number(headers[0]?.split(' ')[1]) : 0, type: header('content-type'), location: header('location'), allow: header('allow'), header, body });
    });
    // One write, so the parser reads the request and any malformed body in one pass.
    socket.write(Buffer.concat([Buffer.from(`${method} ${pathname} HTTP/1.1\r\n${hostHeader}${extraHeaders}Connection: close\r\n\r\n`), Buffer.from(rawBody)]));
  });
}

const MALFORMED_PATHS = ['/api/wallet-link/%zz', '/api/nope/%FF', '/api/%', '/api/wallet-link/%C0%AF', '/api/webhooks/subscription-billing/%E0%A4%A', '/api/me%', '/api/health/%00%zz/'];

describe.each([
  { binding: 'bound to 127.0.0.1 (-H)', everyInterface: false },
  { binding: 'started without -H (every interface)', everyInterface: true },
])('the production server $binding', ({ everyInterface }) => {
  let server: NextServer;
  let dataDir: string;
  let token: string;

  beforeAll(async () => {
    requireProductionBuild();
    dataDir = mkdtempSync(path.join(tmpdir(), 'account-link-contract-'));
    const embeddedDbDir = migratedEmbeddedDbDir(dataDir);
    token = await mintDevToken({ embeddedDbDir }, { userId: UUID, email: 'contract@example.test' });
    server = await startNextServer({
      everyInterface,
      env: {
        EMBEDDED_DB_DIR: embeddedDbDir, DATABASE_URL: undefined, SUPABASE_URL: undefined, SUPABASE_JWT_SECRET: undefined, APP_ORIGIN: undefined,
        SUBSCRIPTION_WEBHOOK_SECRET: undefined, LEAGUES_WEBHOOK_SECRET: undefined, LOCAL_DEV: undefined, VERCEL: undefined, LOG_LEVEL: 'warn',
      },
    });
  }, 240_000);
  afterAll(async () => {
    await server?.stop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  const request = async (method: string, pathname: string, headers: Record<string, string> = {}, body?: string) => {
    const response = await fetch(`${server.url}${pathname}`, { method, headers, body, redirect: 'manual' });
    const text = await response.text();
    let json: { code?: string; requestId?: string } | undefined;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    return { status: response.status, type: response.headers.get('content-type'), allow: response.headers.get('allow'), location: response.headers.get('location'), requestId: response.headers.get('x-request-id'), code: json?.code, bodyRequestId: json?.requestId };
  };

  it.each(apiPaths())('%s: with a trailing slash it answers as without, for every method, with no redirect', async (pathname) => {
    for (const method of METHODS) {
      const body = ['GET', 'HEAD'].includes(method) ? undefined : '{}';
      const headers: Record<string, string> = body ? { 'content-type': 'application/json' } : {};
      const plain = await request(method, pathname, headers, body);
      const slashed = await request(method, `${pathname}/`, headers, body);
      expect({ method, status: slashed.status, type: slashed.type, allow: slashed.allow, code: slashed.code, location: slashed.location })
        .toEqual({ method, status: plain.status, type: plain.type, allow: plain.allow, code: plain.code, location: null });
    }
  });

  it('delivers a billing webhook to the URL pasted with a trailing slash (200, stored once)', async () => {
    const body = JSON.stringify(fixture('initial-purchase', { id: `evt-slash-${Date.now()}` }));
    const headers = { authorization: `Bearer ${DEV_WEBHOOK_SECRETS.subscription}`, 'content-type': 'application/json' };
    expect((await request('POST', '/api/webhooks/subscription-billing/', headers, body)).status).toBe(200);
    expect((await request('GET', '/api/me/', { authorization: `Bearer ${token}` })).status).toBe(200);
  });

  it.each(['/api', '/api/'])('%s itself (no route) is a problem+json 404 for every method, like any unknown /api path', async (pathname) => {
    for (const method of METHODS) {
      const answer = await request(method, pathname);
      const unknown = await request(method, '/api/no/such/path');
      expect({ method, status: answer.status, type: answer.type, code: answer.code, location: answer.location })
        .toEqual({ method, status: unknown.status, type: unknown.type, code: unknown.code, location: null });
      if (method === 'GET') expect({ status: answer.status, type: answer.type, code: answer.code }).toEqual({ status: 404, type: 'application/problem+json', code: 'not_found' });
    }
  });

  it.each(MALFORMED_PATHS)('%s (malformed percent-encoding) is a problem+json 404 for every method', async (pathname) => {
    for (const method of METHODS) {
      const answer = await request(method, pathname);
      expect({ method, status: answer.status, type: answer.type, code: answer.code })
        .toEqual({ method, status: 404, type: 'application/problem+json', code: method === 'HEAD' ? undefined : 'not_found' });
      expect(answer.requestId).toMatch(/^[0-9a-f-]{36}$/);
      if (method !== 'HEAD') expect(answer.bodyRequestId).toBe(answer.requestId);
    }
  });

  // The account page calls the API through a server action (app/actions.ts) with a path of its own;
  // a malformed escape there threw a URIError: Next's 500. It gets what the proxy answers such a
  // path with, and arguments that are not a page request get a 400, both as the action's result.
  it.each([
    { name: 'a malformed escape in the path', args: { method: 'DELETE', path: '/api/wallet-link/%zz' }, status: 404, code: 'not_found' },
    { name: 'a malformed UTF-8 escape in the path', args: { method: 'DELETE', path: '/api/wallet-link/%E0%A4%A' }, status: 404, code: 'not_found' },
    { name: 'a malformed escape in another page path', args: { method: 'POST', path: '/api/me/billing/sync%' }, status: 404, code: 'not_found' },
    { name: 'arguments that are no page request', args: { method: 'GET', path: 5 }, status: 400, code: 'invalid_request' },
    { name: 'a GET with a body', args: { method: 'GET', path: '/api/me', body: 1 }, status: 400, code: 'invalid_request' },
    // React decodes "$n1" as a BigInt and "$0" as the arguments themselves: neither is JSON.
    { name: 'a body that is a BigInt', args: { method: 'POST', path: '/api/wallet-link/challenge', body: '$n1' }, status: 400, code: 'invalid_request' },
    { name: 'a body that contains itself', args: { method: 'POST', path: '/api/wallet-link/challenge', body: { self: '$0' } }, status: 400, code: 'invalid_request' },
  ])('the page\'s server action answers $name with $status in its result, never a 500', async ({ args, status, code }) => {
    const manifest = JSON.parse(readFileSync(path.join('.next', 'server', 'server-reference-manifest.json'), 'utf8')) as { node: Record<string, { exportedName: string }> };
    const [actionId] = Object.entries(manifest.node).find(([, action]) => action.exportedName === 'callApiAsSignedInUser')!;
    const response = await fetch(`${server.url}/`, {
      method: 'POST',
      headers: { 'next-action': actionId, 'content-type': 'text/plain;charset=UTF-8', accept: 'text/x-component', origin: server.url },
      body: JSON.stringify([args]),
    });
    const payload = await response.text();
    expect({ status: response.status, type: response.headers.get('content-type') }).toEqual({ status: 200, type: 'text/x-component' });
    // The RSC payload: line "1:" is the action's value.
    const result = JSON.parse(/^1:(.*)$/m.exec(payload)![1]!) as { status: number; body: { code: string } };
    expect({ status: result.status, code: result.body.code }).toEqual({ status, code });
  });

  it('reads the Authorization header by its grammar on a session route and the billing webhook', async () => {
    const results: string[] = [];
    for (const { name, header, accepted } of authorizationGrammarCases('CREDENTIAL')) {
      const me = await request('GET', '/api/me', { authorization: header.replaceAll('CREDENTIAL', token) });
      const billing = await request('POST', '/api/webhooks/subscription-billing', { authorization: header.replaceAll('CREDENTIAL', DEV_WEBHOOK_SECRETS.subscription), 'content-type': 'application/json' },
        JSON.stringify(fixture('initial-purchase', { id: `evt-grammar-${everyInterface}-${results.length}` })));
      results.push(`${name}: me ${me.status}, billing ${billing.status}`);
      const expected = accepted ? 200 : 401;
      expect(`${name}: me ${me.status}, billing ${billing.status}`).toBe(`${name}: me ${expected}, billing ${expected}`);
    }
  });

  // A method Next does not route never reaches a route or proxy.ts: Next answered TRACE with a bare
  // 500 (the Fetch standard forbids it, so the Request Next builds throws) and PROPFIND, QUERY,
  // PURGE... with a bare 400; what Node's HTTP parser refuses (a method it does not know, a
  // lower-case one, headers over its limit) Node answered with no body. The Node server answers
  // all of them first, as problem+json (lib/http/before-next.ts, installed by instrumentation.ts).
  // Still out of reach: CONNECT, which Node closes unanswered (nothing here tunnels).
  it('answers methods nobody routes and requests Node\'s parser refuses with problem+json, and keeps serving', async () => {
    const answers: string[] = [];
    const cases: [method: string, pathname: string, headers?: string][] = [['TRACE', '/api/health'], ['TRACE', '/api/webhooks/subscription-billing'], ['TRACE', '/'],
      ['PROPFIND', '/api/health'], ['QUERY', '/api/me'], ['PURGE', '/api/webhooks/subscription-billing'],
      ['TRACK', '/api/wallet-link'], ['FOO', '/api/health'], ['get', '/api/health'], ['GET', '/api/health', `x-big: ${'a'.repeat(20_000)}\r\n`],
      ['GET', '/api/health', 'content-length: 5\r\ntransfer-encoding: chunked\r\n'], ['CONNECT', '127.0.0.1:80']];
    // Each answer made before Next carries what Next's own answers carry (next.config.mjs's headers).
    const nextAnswer = await rawRequest(server.port, 'GET', '/api/no/such/path');
    const sharedHeaders = ['x-content-type-options', 'referrer-policy', 'x-frame-options', 'content-security-policy'];
    const expectedHeaders = Object.fromEntries(sharedHeaders.map((name) => [name, nextAnswer.header(name)]));
    expect(Object.values(expectedHeaders).every(Boolean)).toBe(true);
    for (const [method, pathname, headers] of cases) {
      const answer = await rawRequest(server.port, method, pathname, headers);
      const body = answer.type === 'application/problem+json' ? (JSON.parse(answer.body) as { code: string; status: number; detail: string; requestId: string }) : undefined;
      if (body) {
        expect({ status: body.status, requestId: answer.header('x-request-id'), detail: typeof body.detail, timing: answer.header('server-timing')?.startsWith('db;') })
          .toEqual({ status: answer.status, requestId: body.requestId, detail: 'string', timing: true });
        expect(Object.fromEntries(sharedHeaders.map((name) => [name, answer.header(name)]))).toEqual(expectedHeaders);
      }
      answers.push(`${method}${headers ? ` (${headers.slice(0, 14)})` : ''} ${pathname}: ${answer.status} ${answer.type ?? '-'} ${body ? body.code : JSON.stringify(answer.body)} allow=${answer.allow ?? '-'}`);
    }
    const unrouted = 'application/problem+json method_not_allowed allow=GET, HEAD, OPTIONS, POST, PUT, PATCH, DELETE';
    const refused = 'application/problem+json invalid_request allow=-';
    expect(answers).toEqual([
      `TRACE /api/health: 405 ${unrouted}`,
      `TRACE /api/webhooks/subscription-billing: 405 ${unrouted}`,
      `TRACE /: 405 ${unrouted}`,
      `PROPFIND /api/health: 405 ${unrouted}`,
      `QUERY /api/me: 405 ${unrouted}`,
      `PURGE /api/webhooks/subscription-billing: 405 ${unrouted}`,
      `TRACK /api/wallet-link: 400 ${refused}`,
      `FOO /api/health: 400 ${refused}`,
      `get /api/health: 400 ${refused}`,
      'GET (x-big: aaaaaaa) /api/health: 431 application/problem+json request_header_fields_too_large allow=-',
      `GET (content-length) /api/health: 400 ${refused}`,
      'CONNECT 127.0.0.1:80: 0 - "" allow=-',
    ]);
    expect((await request('GET', '/api/health')).status).toBe(200);
  });

  // A whole URL as the request-target (what a client sends to a proxy) is served as its path; Next
  // answered it with a 308 to that URL, whatever host it named.
  it('serves a request whose target is a whole URL (absolute-form) as its path, never redirecting to the host it names', async () => {
    const health = await rawRequest(server.port, 'GET', 'http://evil.example/api/health');
    expect({ status: health.status, location: health.location, body: JSON.parse(health.body) as unknown }).toEqual({ status: 200, location: null, body: expect.objectContaining({ status: 'ok' }) });
    const webhook = await rawRequest(server.port, 'POST', 'http://evil.example/api/webhooks/subscription-billing?x=1', 'content-type: application/json\r\ncontent-length: 2\r\n', '{}');
    expect({ status: webhook.status, location: webhook.location, type: webhook.type }).toEqual({ status: 401, location: null, type: 'application/problem+json' });
    // Read as its path by every check after: an escaped /api slash is the API's 404 there too.
    const escaped = await rawRequest(server.port, 'GET', 'http://evil.example/api%2fme');
    expect({ status: escaped.status, type: escaped.type }).toEqual({ status: 404, type: 'application/problem+json' });
    // A URL that does not parse, or names no host: a 400, never served as some other path.
    for (const target of ['http://exa mple/api/health', 'http:///api/me', 'http://example:99999/api/health']) {
      const answer = await rawRequest(server.port, 'GET', target);
      expect({ target, status: answer.status, type: answer.type }).toEqual({ target, status: 400, type: 'application/problem+json' });
    }
  });

  // Node answers both itself with a bare status and no body unless the server leaves them to it.
  it('answers an HTTP/1.1 request without Host (400) and an Expect it cannot meet (417) with problem+json, and keeps serving', async () => {
    const noHost = await rawRequest(server.port, 'GET', '/api/health', 'x-request-id: req-no-host\r\n', '', '');
    expect({ status: noHost.status, type: noHost.type, id: noHost.header('x-request-id'), body: JSON.parse(noHost.body) as unknown })
      .toEqual({ status: 400, type: 'application/problem+json', id: 'req-no-host', body: expect.objectContaining({ code: 'invalid_request', detail: expect.stringContaining('Host') }) });
    const expectation = await rawRequest(server.port, 'POST', '/api/webhooks/subscription-billing', 'expect: 200-ok\r\ncontent-type: application/json\r\ncontent-length: 2\r\n', '{}');
    expect({ status: expectation.status, type: expectation.type, code: (JSON.parse(expectation.body) as { code: string }).code })
      .toEqual({ status: 417, type: 'application/problem+json', code: 'expectation_failed' });
    expect((await request('GET', '/api/health')).status).toBe(200);
  });

  // Next's upgrade handler closed every such request without an answer (it serves only its own
  // development connection); a server may ignore Upgrade and answer the request (RFC 9110, 7.8).
  it('answers a request that asks to change protocols (h2c, websocket) as the request it is', async () => {
    const h2c = 'connection: Upgrade, HTTP2-Settings\r\nupgrade: h2c\r\nhttp2-settings: AAMAAABkAARAAAAAAAIAAAAA\r\n';
    const event = JSON.stringify(fixture('initial-purchase', { id: `evt-upgrade-${everyInterface}-${Date.now()}` }));
    const webhook = await rawRequest(server.port, 'POST', '/api/webhooks/subscription-billing',
      `${h2c}authorization: Bearer ${DEV_WEBHOOK_SECRETS.subscription}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(event)}\r\n`, event);
    expect({ status: webhook.status, body: JSON.parse(webhook.body) as unknown }).toEqual({ status: 200, body: { received: true } });
    const websocket = 'connection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n';
    expect((await rawRequest(server.port, 'GET', '/api/health', websocket)).status).toBe(200);
    const unknown = await rawRequest(server.port, 'GET', '/api/no/such/path', websocket);
    expect({ status: unknown.status, type: unknown.type }).toEqual({ status: 404, type: 'application/problem+json' });
    const unauthenticated = await rawRequest(server.port, 'GET', '/api/wallet-link', websocket);
    expect({ status: unauthenticated.status, type: unauthenticated.type }).toEqual({ status: 401, type: 'application/problem+json' });
  });

  // Node drops what a client pipelined after a request that asked to upgrade, once it is answered as
  // itself: that answer closes the connection, so the client sends the rest again.
  it('closes the connection after answering a request that asked to upgrade, so a request pipelined behind it is sent again', async () => {
    const { text, closed } = await new Promise<{ text: string; closed: boolean }>((resolve, reject) => {
      const socket = connect(server.port, '127.0.0.1');
      let received = '';
      socket.on('data', (chunk) => { received += chunk.toString('latin1'); });
      socket.on('error', reject);
      socket.on('end', () => resolve({ text: received, closed: true }));
      socket.write('GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n'
        + 'GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
    });
    const head = text.split('\r\n\r\n')[0] ?? '';
    expect({ status: head.split(' ')[1], connection: /^connection: (.*)$/im.exec(head)?.[1], closed }).toEqual({ status: '200', connection: 'close', closed: true });
  });

  it('in local mode answers only for this machine\'s names: a public Host gets 421 problem+json before anything runs (a DNS-rebinding page), an IP address or a local name is served', async () => {
    for (const [method, target, host] of [['GET', '/api/health', 'rebind.attacker.net'], ['POST', '/', `rebind.attacker.net:${server.port}`], ['GET', 'http://rebind.attacker.net/api/me', '127.0.0.1']] as const) {
      const answer = await rawRequest(server.port, method, target, '', '', `Host: ${host}\r\n`);
      expect({ target, status: answer.status, type: answer.type, body: JSON.parse(answer.body) as unknown }).toEqual({
        target, status: 421, type: 'application/problem+json', body: expect.objectContaining({ code: 'misdirected_request', detail: expect.stringContaining('this machine\'s names') }),
      });
    }
    for (const host of [`192.168.1.20:${server.port}`, '[fe80::1]', 'my-laptop', 'my-laptop.local', `localhost:${server.port}`]) {
      expect({ host, status: (await rawRequest(server.port, 'GET', '/api/health', '', '', `Host: ${host}\r\n`)).status }).toEqual({ host, status: 200 });
    }
  });

  it('answers an /api path whose slash is escaped (/api%2fme) with the problem+json 404 of an unknown /api path, not Next\'s HTML page', async () => {
    for (const pathname of ['/api%2fme', '/api%2Fwallet-link?x=1']) {
      const answer = await rawRequest(server.port, 'GET', pathname);
      expect({ status: answer.status, type: answer.type, body: JSON.parse(answer.body) as unknown })
        .toEqual({ status: 404, type: 'application/problem+json', body: expect.objectContaining({ code: 'not_found', detail: `There is no ${pathname.split('?')[0]} here; see /docs for the API.` }) });
    }
  });

  it('answers a body Node\'s parser refuses after reading the headers with that request\'s id: 400, or 413 for chunk extensions over its limit', async () => {
    const chunked = 'x-request-id: req-chunked-1\r\ntransfer-encoding: chunked\r\n';
    const invalid = await rawRequest(server.port, 'POST', '/api/webhooks/subscription-billing', chunked, 'zz\r\n');
    const oversized = await rawRequest(server.port, 'POST', '/api/webhooks/subscription-billing', chunked, `5;${'e'.repeat(20_000)}\r\nhello\r\n0\r\n\r\n`);
    for (const [answer, status, code] of [[invalid, 400, 'invalid_request'], [oversized, 413, 'payload_too_large']] as const) {
      expect({ status: answer.status, type: answer.type, id: answer.header('x-request-id'), body: JSON.parse(answer.body) as unknown })
        .toEqual({ status, type: 'application/problem+json', id: 'req-chunked-1', body: expect.objectContaining({ status, code, requestId: 'req-chunked-1' }) });
    }
  });

  it('refuses a body in a transfer coding other than chunked (gzip, deflate) with 415, as it refuses a content coding; a chunked one is read', async () => {
    const headers = `authorization: Bearer ${DEV_WEBHOOK_SECRETS.subscription}\r\ncontent-type: application/json\r\n`;
    const gzipped = gzipSync(Buffer.from('{"event":{"id":"transfer-coded","type":"TEST"}}'));
    const chunk = (bytes: Buffer) => Buffer.concat([Buffer.from(`${bytes.length.toString(16)}\r\n`), bytes, Buffer.from('\r\n0\r\n\r\n')]);
    for (const coding of ['gzip, chunked', 'deflate, chunked', 'GZip ,chunked']) {
      const answer = await rawRequest(server.port, 'POST', '/api/webhooks/subscription-billing', `${headers}transfer-encoding: ${coding}\r\n`, chunk(gzipped));
      expect({ coding, status: answer.status, type: answer.type, body: JSON.parse(answer.body) as unknown })
        .toEqual({ coding, status: 415, type: 'application/problem+json', body: expect.objectContaining({ code: 'unsupported_media_type', detail: expect.stringContaining('transfer coding') }) });
    }
    const plain = await rawRequest(server.port, 'POST', '/api/webhooks/subscription-billing', `${headers}transfer-encoding: chunked\r\n`,
      chunk(Buffer.from(JSON.stringify({ api_version: '1.0', event: { id: `chunked-${crypto.randomUUID()}`, type: 'TEST', app_user_id: 'chunked-test', event_timestamp_ms: Date.now() } }))));
    expect({ status: plain.status, body: plain.body }).toEqual({ status: 200, body: '{"received":true}' });
  });

  // Not what this service would choose (the route's own answer, or a problem+json 404; never a 3xx
  // for a webhook), and out of its reach: Next's router answers a path with `//` or `\` anywhere
  // with a 308 to the path with them collapsed, as the very first step of routing
  // (node_modules/next/dist/server/lib/router-utils/resolve-routes.js, and base-server.js in
  // minimal mode: vercel/next.js#27738), before headers, redirects, rewrites and proxy.ts, with no
  // setting to turn it off (skipTrailingSlashRedirect covers the trailing slash only,
  // skipProxyUrlNormalize only what the proxy sees). Backslashes are sent over a raw socket: fetch
  // and browsers turn them into slashes before sending.
  it.each([
    ['//api/webhooks/subscription-billing', '/api/webhooks/subscription-billing'],
    ['/api/webhooks//subscription-billing', '/api/webhooks/subscription-billing'],
    ['/api/webhooks/subscription-billing//', '/api/webhooks/subscription-billing/'],
    ['/api\\webhooks\\subscription-billing', '/api/webhooks/subscription-billing'],
    ['/api//health?check=1', '/api/health?check=1'],
    ['//api/wallet-link/%zz', '/api/wallet-link/%zz'],
  ])('%s: repeated slashes or backslashes get Next\'s bare 308 to %s, for every method, before any code of ours', async (pathname, location) => {
    for (const method of METHODS) {
      const answer = await rawRequest(server.port, method, pathname);
      expect({ method, status: answer.status, location: answer.location, type: answer.type, body: method === 'HEAD' ? '' : answer.body })
        .toEqual({ method, status: 308, location, type: null, body: method === 'HEAD' ? '' : location });
    }
  });

  it('delivers a billing webhook sent to a URL with a doubled slash only to a sender that follows the 308 (with its method and body)', async () => {
    const body = JSON.stringify(fixture('initial-purchase', { id: `evt-doubled-${everyInterface}-${Date.now()}` }));
    const headers = { authorization: `Bearer ${DEV_WEBHOOK_SECRETS.subscription}`, 'content-type': 'application/json' };
    const refused = await request('POST', '/api/webhooks//subscription-billing', headers, body);
    expect({ status: refused.status, location: refused.location, requestId: refused.requestId }).toEqual({ status: 308, location: '/api/webhooks/subscription-billing', requestId: null });
    const followed = await fetch(`${server.url}/api/webhooks//subscription-billing`, { method: 'POST', headers, body, redirect: 'follow' });
    expect({ status: followed.status, redirected: followed.redirected, body: await followed.json() }).toEqual({ status: 200, redirected: true, body: { received: true } });
  });

  it.each(['/api/bench-floor', '/api/bench-store-floor', '/api/bench-read-floor'])('has no bench floor: %s is a route only in the bench\'s own build', async (floorPath) => {
    const floor = await request('POST', floorPath, { 'content-type': 'application/json' }, '{"event":{"id":"x","type":"TEST"}}');
    expect({ status: floor.status, type: floor.type, code: floor.code }).toEqual({ status: 404, type: 'application/problem+json', code: 'not_found' });
  });

  it('serves the page icon', async () => {
    const response = await fetch(`${server.url}/favicon.ico`);
    expect({ status: response.status, type: response.headers.get('content-type') }).toEqual({ status: 200, type: 'image/x-icon' });
    expect((await response.arrayBuffer()).byteLength).toBeGreaterThan(0);
  });
});
