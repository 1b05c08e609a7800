import http from 'node:http';
import { log } from '../log.ts';
import { ApiError, problemResponse } from './problem.ts';
import { acceptRequestId } from './request-id.ts';

/** The methods Next hands to a route handler (its HTTP_METHODS); a request with any other never reaches one. */
export const ROUTED_METHODS: readonly string[] = ['GET', 'HEAD', 'OPTIONS', 'POST', 'PUT', 'PATCH', 'DELETE'];
const ROUTED = new Set(ROUTED_METHODS);

/**
 * The answer to a request whose method Next does not route, or undefined for one it does. Next
 * answers such a request before any code of ours runs (proxy.ts included): TRACE with a bare
 * `500 text/plain` (the Fetch standard forbids them, so the `Request` Next builds throws),
 * PROPFIND, QUERY, PURGE and the other methods Node's parser knows with a bare 400. A client's
 * mistake, so a 405 problem+json here, with a request id and a log line like every other answer.
 * No route is reached, so `Allow` names what the server routes at all; OPTIONS on a path names the
 * methods that path takes.
 */
export function unroutedMethodResponse(method: string, path: string, requestIdHeader: string | null): Response | undefined {
  if (ROUTED.has(method)) return undefined;
  const requestId = acceptRequestId(requestIdHeader);
  const response = problemResponse(new ApiError('method_not_allowed', {
    detail: `This service does not answer ${method.slice(0, 32)} requests; use ${ROUTED_METHODS.join(', ')} (OPTIONS on a path names the ones it takes).`,
    headers: { allow: ROUTED_METHODS.join(', '), 'x-request-id': requestId },
  }), requestId);
  log.child({ requestId }).info({ method: method.slice(0, 32), path: path.slice(0, 256), status: response.status }, 'request');
  return response;
}

let installed = false;

/**
 * Answer unrouted methods (unroutedMethodResponse) in the Node HTTP server, before Next sees the
 * request. `next start` and `next dev` serve through a `node:http` Server, whose parser hands each
 * request to the server's 'request' event; this wraps that event for every such server of the
 * process, once (instrumentation.ts installs it when the server starts). Every other request goes
 * on to Next untouched, at the cost of one set lookup.
 */
export function answerUnroutedMethodsBeforeNext(): void {
  if (installed) return;
  installed = true;
  const emit = http.Server.prototype.emit;
  http.Server.prototype.emit = function emitUnlessUnrouted(this: http.Server, event: string | symbol, ...args: unknown[]): boolean {
    if (event === 'request') {
      const [request, response] = args as [http.IncomingMessage, http.ServerResponse];
      if (!ROUTED.has(request.method ?? '')) {
        const header = request.headers['x-request-id'];
        void send(unroutedMethodResponse(request.method ?? '', (request.url ?? '').split('?')[0]!, typeof header === 'string' ? header : null)!, response);
        return true;
      }
    }
    return Reflect.apply(emit, this, [event, ...args]) as boolean;
  } as typeof emit;
}

async function send(answer: Response, response: http.ServerResponse): Promise<void> {
  const body = await answer.text();
  response.writeHead(answer.status, { ...Object.fromEntries(answer.headers), 'content-length': Buffer.byteLength(body) });
  response.end(body);
}
