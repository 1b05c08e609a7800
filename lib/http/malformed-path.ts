import { log } from '../log.ts';
import { ApiError, problemResponse } from './problem.ts';
import { acceptRequestId } from './request-id.ts';

/**
 * Next decodes a path before any route runs, and when its percent-encoding is malformed
 * (`/api/wallet-link/%zz`, `/api/nope/%FF`: not RFC 3986, or not UTF-8) it answers a bare
 * `500 text/plain` of its own. Rewriting the path to something decodable works only on some
 * servers (on `next start` bound to every interface, the way users run it, the rewritten request
 * still fails), so the proxy answers such a path itself: it names nothing, so 404 problem+json,
 * with the same request id and log line as every other answer. The account page's server action
 * (app/actions.ts), which routes a path of the page's own, holds it to the same rule.
 * Returns undefined for a path that decodes.
 */
export function malformedPathResponse(request: Request): Response | undefined {
  const { pathname } = new URL(request.url);
  if (decodePath(pathname) !== undefined) return undefined;
  const requestId = acceptRequestId(request.headers.get('x-request-id'));
  const response = problemResponse(new ApiError('not_found', {
    detail: 'This path is not valid percent-encoding (RFC 3986, UTF-8), so it names nothing here; see /docs for the API.',
  }), requestId);
  response.headers.set('x-request-id', requestId);
  log.child({ requestId }).info({ method: request.method, path: pathname.slice(0, 256), status: 404 }, 'request');
  return response;
}

/** A path (or one segment of it) decoded, or undefined when its percent-encoding is malformed. */
export function decodePath(path: string): string | undefined {
  try {
    return decodeURIComponent(path);
  } catch {
    return undefined;
  }
}
