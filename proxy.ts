import { NextResponse, type NextRequest } from 'next/server';

const LINK_PREFIX = '/api/wallet-link/';

/**
 * Next decodes a dynamic route segment before the route runs, and when the percent-encoding is
 * malformed (`DELETE /api/wallet-link/%zz`, `%FF`) it answers a bare `500 Internal Server Error`
 * (text/plain, nothing logged): a client mistake turned into a server error. Such a segment cannot
 * be a link id, so it is re-encoded as the literal text it is (`%` -> `%25`) and the route answers
 * it like any other id that is not a UUID: 404 link_not_found, problem+json, logged, with a request
 * id. Only `/api/wallet-link/{linkId}` is matched, the one dynamic route; well-formed ids pass
 * untouched.
 */
export function proxy(request: NextRequest) {
  const pathname = new URL(request.url).pathname;
  const segment = pathname.slice(LINK_PREFIX.length);
  try {
    decodeURIComponent(segment);
    return NextResponse.next();
  } catch {
    const url = request.nextUrl.clone();
    url.pathname = `${LINK_PREFIX}${segment.replaceAll('%', '%25')}`;
    return NextResponse.rewrite(url);
  }
}

export const config = {
  // /api/wallet-link/{linkId} only: not /api/wallet-link itself nor /api/wallet-link/challenge.
  matcher: '/api/wallet-link/:linkId((?!challenge$)[^/]+)',
};
