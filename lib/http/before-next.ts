import http from 'node:http';
import type { Duplex } from 'node:stream';
import { trustedClientAddress } from '../auth/failure-throttle.ts';
import { getConfig, isDeployed, namesThisMachine } from '../config.ts';
import { log } from '../log.ts';
import { ApiError, problemParts, type ProblemCode } from './problem.ts';
import { acceptRequestId } from './request-id.ts';

/**
 * What the Node HTTP server answers itself, before Next sees a request: the client mistakes Next or
 * Node would otherwise answer before any code of ours runs (proxy.ts included), with no body or a
 * bare 500. Each gets problem+json like every other refusal. Installed by instrumentation.ts.
 */

/**
 * The headers next.config.mjs gives every response (and every /api one), which these answers, made
 * before Next, must carry themselves (tests/http/server-contract.server.test.ts compares them with an
 * answer of Next's), with the `Server-Timing` every answer has (no database call here).
 */
const HEADERS_OF_EVERY_ANSWER: Readonly<Record<string, string>> = {
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'strict-origin-when-cross-origin',
  'x-frame-options': 'DENY',
  'content-security-policy': "default-src 'none'; frame-ancestors 'none'",
  'server-timing': 'db;desc="0 calls";dur=0.0, total;dur=0.0',
};

/** The methods Next hands to a route handler (its HTTP_METHODS); a request with any other never reaches one. */
const ROUTED_METHODS: readonly string[] = ['GET', 'HEAD', 'OPTIONS', 'POST', 'PUT', 'PATCH', 'DELETE'];
const ROUTED = new Set(ROUTED_METHODS);

/**
 * What a log line names of a request: its method and path, each bounded. Never a whole URL's path
 * (absolute-form, or a target before it is rewritten): the URL may carry a user name and password.
 */
function loggedTarget(method: string | undefined, target: string | undefined): { method: string; path: string } {
  const path = /^https?:\/\//i.test(target ?? '') ? '(a URL)' : (target ?? '').split('?')[0]!.slice(0, 256);
  return { method: (method ?? '').slice(0, 32), path };
}

/** The X-Request-Id a Node request carries, as acceptRequestId takes it (one value, or none). */
function requestIdHeaderOf(request: http.IncomingMessage | undefined): string | null {
  const header = request?.headers['x-request-id'];
  return typeof header === 'string' ? header : null;
}

/** A problem answered before Next: problemParts with the headers of every answer, and its log line. */
function answerBeforeNextParts(code: ProblemCode, detail: string, headers: Record<string, string>, requestIdHeader: string | null, logged: Record<string, unknown>) {
  const requestId = acceptRequestId(requestIdHeader);
  const parts = problemParts(new ApiError(code, { detail, headers: { ...HEADERS_OF_EVERY_ANSWER, ...headers, 'x-request-id': requestId } }), requestId);
  log.child({ requestId }).info({ ...logged, status: parts.status }, 'request');
  return { ...parts, headers: { ...parts.headers, 'content-length': String(Buffer.byteLength(parts.body)) } };
}

/**
 * The answer to a request whose method Next does not route. Next answers such a request before any
 * code of ours runs: TRACE with a bare `500 text/plain` (the Fetch standard forbids it, so the
 * `Request` Next builds throws), PROPFIND, QUERY, PURGE and the other methods Node's parser knows
 * with a bare 400. A client's mistake, so a 405 problem+json here, with a request id and a log line
 * like every other answer. No route is reached, so `Allow` names what the server routes at all;
 * OPTIONS on a path names the methods that path takes.
 */
function unroutedMethodAnswer(method: string, path: string, requestIdHeader: string | null) {
  return answerBeforeNextParts('method_not_allowed',
    `This service does not answer ${method.slice(0, 32)} requests; use ${ROUTED_METHODS.join(', ')} (OPTIONS on a path names the ones it takes).`,
    { allow: ROUTED_METHODS.join(', ') }, requestIdHeader, loggedTarget(method, path));
}

/**
 * The answer to a request whose request-target is not a path (RFC 9112, section 3.2), which Next
 * answers with a bare 500 (it reads the target as a URL and fails), or undefined for a path, or a
 * whole URL (absolute-form, which servers must accept). `OPTIONS *` asks about the server as a
 * whole (RFC 9110, section 9.3.7, which notes that a server's options usually depend on the
 * resource, as they do here): the resource `*` takes no method, so a 405 with an empty `Allow`
 * (section 10.2.1 allows one), whose detail says to ask a path instead. Any other method with `*`,
 * or an authority-form target (`host:port`, for CONNECT alone), is not a valid request line: 400.
 */
function requestTargetAnswer(method: string, target: string, requestIdHeader: string | null) {
  if (target.startsWith('/') || /^https?:\/\//i.test(target)) return undefined;
  const logged = { method: method.slice(0, 32), path: target.slice(0, 256) };
  if (method === 'OPTIONS' && target === '*') {
    return answerBeforeNextParts('method_not_allowed',
      'This service answers OPTIONS for a path (OPTIONS /api/me names the methods it takes), not for the server as a whole (*).',
      { allow: '' }, requestIdHeader, logged);
  }
  return answerBeforeNextParts('invalid_request',
    `The request-target must be a path such as /api/health${target === '*' ? ' (* is for OPTIONS alone)' : ''}.`, {}, requestIdHeader, logged);
}

/** An HTTP/1.1 request without Host (RFC 9112, section 3.2, "MUST"): Node's own answer is a bare 400. */
function missingHostAnswer(request: http.IncomingMessage, requestIdHeader: string | null) {
  if (request.httpVersion !== '1.1' || request.headers.host !== undefined) return undefined;
  return answerBeforeNextParts('invalid_request', 'An HTTP/1.1 request names its Host (RFC 9112, section 3.2).', { connection: 'close' },
    requestIdHeader, loggedTarget(request.method, request.url));
}

/**
 * Whether local mode answers a request that names `host` (its Host header): this machine's own
 * names, never a public one. Local mode's doors (local sign-in, the dev signing key, the public dev
 * webhook and admin secrets) are for this machine and its LAN; a web page the developer visits can
 * make its own public name resolve to this machine (DNS rebinding) and then send requests that name
 * it, same-origin to the browser, with those secrets. So: what namesThisMachine says (an IP address,
 * as a phone on the LAN uses; a name without a dot; .localhost, .local, .test, ...) and APP_ORIGIN's host.
 */
export function isLocalModeHost(host: string, appOrigin: string): boolean {
  const name = host.toLowerCase().replace(/:\d*$/, '');
  // (APP_ORIGIN read only for a name that is not this machine's: every request in local mode asks.)
  return namesThisMachine(name) || name.replace(/\.$/, '') === new URL(appOrigin).hostname;
}

/** In local mode, a request naming a public host: 421, and nothing of the service runs (isLocalModeHost). */
function foreignHostAnswer(request: http.IncomingMessage, requestIdHeader: string | null) {
  const host = request.headers.host;
  if (host === undefined) return undefined;
  let appOrigin: string;
  try {
    const config = getConfig();
    if (!config.local) return undefined;
    appOrigin = config.appOrigin;
  } catch {
    return undefined; // a refused configuration: every route answers 503
  }
  if (isLocalModeHost(host, appOrigin)) return undefined;
  return answerBeforeNextParts('misdirected_request',
    'In local mode this service answers only for this machine\'s names (localhost, an IP address, APP_ORIGIN\'s host), not a public one: a page can point its own name at this machine.',
    { connection: 'close' }, requestIdHeader, loggedTarget(request.method, request.url));
}

/**
 * A path that reads as an /api one with its slash escaped (`/api%2fme`): Next takes `api%2fme` for
 * one segment of a page and answers its HTML 404 page. An API client gets the problem+json 404 any
 * unknown /api path gets (app/api/[[...path]]/route.ts).
 */
function encodedApiSlashAnswer(method: string, target: string, requestIdHeader: string | null) {
  const path = target.split('?')[0]!;
  if (!/^\/api%2f/i.test(path)) return undefined;
  return answerBeforeNextParts('not_found', `There is no ${path.slice(0, 256)} here; see /docs for the API.`, {}, requestIdHeader, loggedTarget(method, path));
}

/**
 * A request-target that is a whole URL (absolute-form, `POST http://host/api/... HTTP/1.1`: what a
 * client sends to a proxy) is served as its path and query, with the URL's authority as the Host
 * (RFC 9112, section 3.2.2: the server "MUST ignore the received Host header field ... and instead
 * use the host information of the request-target"). Next answered it with a 308 whose Location was
 * the URL itself: a redirect to whatever host the request line named. One that does not parse, or
 * names no host, is a 400. Done first, so that every check after it reads the path.
 */
function toOriginForm(request: http.IncomingMessage, requestIdHeader: string | null) {
  const target = request.url ?? '';
  if (!/^https?:\/\//i.test(target)) return undefined;
  // (A URL's parser would read `http:///api/me` as host `api`, path `/me`: an authority is required.)
  const url = /^https?:\/\/[^/?#\s]/i.test(target) ? URL.parse(target) : null;
  if (!url?.host) {
    return answerBeforeNextParts('invalid_request', 'The request-target is a URL this server cannot read; send its path, such as /api/health.', {}, requestIdHeader,
      loggedTarget(request.method, target));
  }
  request.url = `${url.pathname}${url.search}`;
  request.headers.host = url.host;
  return undefined;
}

/**
 * Off Vercel, the client's address as this server trusts it replaces what the request says in
 * X-Forwarded-For (and X-Real-IP is removed), before Next sees it: Next only fills X-Forwarded-For
 * from the socket when a client sent none (base-server.js), so a client reaching `next start`
 * directly could otherwise pick the address the failure throttle counts it under
 * (lib/auth/failure-throttle.ts). TRUSTED_PROXY_HOPS names the proxies of the operator's whose
 * entries are kept. On Vercel the platform's own headers are kept as they arrive: Vercel overwrites
 * them with the client's address.
 */
function settleClientAddress(request: http.IncomingMessage): void {
  if (isDeployed()) return;
  let hops = 0;
  try {
    hops = getConfig().trustedProxyHops;
  } catch {
    // A refused configuration: every route answers 503; trust no header meanwhile.
  }
  const forwarded = request.headers['x-forwarded-for'];
  request.headers['x-forwarded-for'] = trustedClientAddress(request.socket.remoteAddress, Array.isArray(forwarded) ? forwarded.join(',') : forwarded, hops);
  delete request.headers['x-real-ip'];
}

/**
 * What Node's HTTP parser refuses (its 'clientError': an unknown or lower-case method, headers over
 * its limit, a malformed request line or body framing, a request too slow to arrive), as an
 * HTTP/1.1 message to write to the socket: the statuses of Node's own answer (431, 413 for chunk
 * extensions over its limit, 408, else 400), as problem+json. The request id is the request's own
 * when its headers were read (an error in its body), else a new one.
 */
function clientErrorAnswer(errorCode: string | undefined, requestIdHeader: string | null): string {
  const [code, detail]: [ProblemCode, string] =
    errorCode === 'HPE_HEADER_OVERFLOW' ? ['request_header_fields_too_large', 'The request\'s headers are larger than this server reads.']
      : errorCode === 'HPE_CHUNK_EXTENSIONS_OVERFLOW' ? ['payload_too_large', 'The body\'s chunk extensions are larger than this server reads.']
        : errorCode === 'ERR_HTTP_REQUEST_TIMEOUT' ? ['request_timeout', 'The request did not arrive in time.']
          : ['invalid_request', 'This is not a valid HTTP/1.1 request (its method, request line, headers or body framing).'];
  const { status, headers, body } = answerBeforeNextParts(code, detail, { connection: 'close' }, requestIdHeader, { parserError: errorCode?.slice(0, 64) });
  return `HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\n${Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`).join('')}\r\n${body}`;
}

/**
 * Node answers two client mistakes itself with a bare status and no body: an HTTP/1.1 request
 * without Host (400, when the server requires one) and an Expect it does not know (417, when the
 * server has no 'checkExpectation' listener). Here the server leaves both to the events above,
 * which answer them as problem+json. And a request that asks to change protocols (`Connection:
 * Upgrade` with `Upgrade: h2c`, as `curl --http2` sends on http://, or `websocket`) went to Next's
 * upgrade handler, which serves only its own development connection under /_next/ (hot reload) and
 * closes every other without a word: a webhook sender saw a failed delivery and no reason. A server
 * may ignore Upgrade (RFC 9110, section 7.8), so any other path is answered as the request it is
 * (Node's shouldUpgradeCallback, from Node 24.9; on an older Node, as before). Once per server.
 */
const answeringHere = new WeakSet<http.Server>();
function answerHostAndExpectationHere(server: http.Server): void {
  if (answeringHere.has(server)) return;
  answeringHere.add(server);
  // (Node's createServer options, kept on the server and read for each request; not in its types.)
  const options = server as http.Server & { requireHostHeader?: boolean; shouldUpgradeCallback?: (request: http.IncomingMessage) => boolean };
  options.requireHostHeader = false;
  if (server.listenerCount('checkExpectation') === 0) server.on('checkExpectation', () => undefined); // answered by emitBeforeNext
  const upgradeToNext = options.shouldUpgradeCallback;
  if (upgradeToNext) {
    options.shouldUpgradeCallback = function upgradeOnlyNextsOwn(this: http.Server, request: http.IncomingMessage) {
      return (request.url ?? '').startsWith('/_next/') && upgradeToNext.call(this, request);
    };
  }
}

let installed = false;

/**
 * Answer unrouted methods, request-targets that are not paths and what Node's parser refuses in the
 * Node HTTP server, before Next, and settle the client's address (settleClientAddress).
 * `next start` and `next dev` serve through a `node:http` Server, whose parser hands each request to
 * the server's 'request' event and each refusal to its 'clientError' event; this wraps both events
 * for every such server of the process, once. Every other request goes on to Next untouched, at
 * the cost of a method check. (Installed when Next runs instrumentation.ts, a moment after the
 * port opens: a request in that moment gets Next's or Node's own answer, and keeps the
 * X-Forwarded-For it was sent with.)
 */
export function answerBeforeNext(): void {
  if (installed) return;
  installed = true;
  const emit = http.Server.prototype.emit;
  http.Server.prototype.emit = function emitBeforeNext(this: http.Server, event: string | symbol, ...args: unknown[]): boolean {
    if (event === 'connection') answerHostAndExpectationHere(this);
    if (event === 'checkExpectation') {
      // An Expect other than 100-continue (RFC 9110, section 10.1.1: 417 Expectation Failed).
      const [request, response] = args as [http.IncomingMessage, http.ServerResponse];
      // (Its body is not read: the connection closes with the answer.)
      const refused = answerBeforeNextParts('expectation_failed', 'This service meets no expectation but 100-continue: send the request without its Expect header.',
        { connection: 'close' }, requestIdHeaderOf(request), loggedTarget(request.method, request.url));
      response.writeHead(refused.status, refused.headers).end(refused.body);
      return true;
    }
    if (event === 'request') {
      const [request, response] = args as [http.IncomingMessage, http.ServerResponse];
      const requestIdHeader = requestIdHeaderOf(request);
      const refused = missingHostAnswer(request, requestIdHeader)
        ?? toOriginForm(request, requestIdHeader)
        ?? requestTargetAnswer(request.method ?? '', request.url ?? '', requestIdHeader)
        ?? (ROUTED.has(request.method ?? '') ? undefined : unroutedMethodAnswer(request.method ?? '', (request.url ?? '').split('?')[0]!, requestIdHeader))
        ?? encodedApiSlashAnswer(request.method ?? '', request.url ?? '', requestIdHeader)
        ?? foreignHostAnswer(request, requestIdHeader);
      if (refused) {
        response.writeHead(refused.status, refused.headers).end(refused.body);
        return true;
      }
      settleClientAddress(request);
      // A request that asked to upgrade, answered as itself (answerHostAndExpectationHere): Node has
      // already dropped whatever the client sent after its headers on this connection (a pipelined
      // request), so the connection closes with the answer and the client sends that again.
      if (request.headers.upgrade !== undefined) response.shouldKeepAlive = false;
    }
    if (event === 'clientError') {
      const [error, socket] = args as [NodeJS.ErrnoException, Duplex & { _httpMessage?: (http.ServerResponse & { _headerSent?: boolean }) | null }];
      // Written when Node's own default (socketOnError in node's lib/_http_server.js) writes its
      // answer: the socket writable, and no answer of this connection begun on the wire (a
      // pipelined request's answer must not be cut into).
      const inFlight = socket._httpMessage;
      if (socket.writable && !inFlight?._headerSent) {
        socket.write(clientErrorAnswer(error.code, requestIdHeaderOf(inFlight?.req)));
      }
      socket.destroy(error);
      return true;
    }
    return Reflect.apply(emit, this, [event, ...args]) as boolean;
  } as typeof emit;
}
