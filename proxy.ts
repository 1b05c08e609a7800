import { NextResponse, type NextRequest } from 'next/server';

/**
 * Next decodes dynamic route segments before a route runs, and when the percent-encoding is
 * malformed (`/api/wallet-link/%zz`, `/api/nope/%FF`) it answers a bare `500 Internal Server Error`
 * (text/plain, nothing logged): a client mistake turned into a server error. Such a path cannot
 * name anything, so it is re-encoded as the literal text it is (`%` -> `%25`) and the routes answer
 * it as problem+json like any other unknown id or path (404 link_not_found, 404 not_found).
 * Only paths with a `%` reach this function (see the matcher), so ordinary requests skip it.
 */
export function proxy(request: NextRequest) {
  const pathname = new URL(request.url).pathname;
  try {
    decodeURIComponent(pathname);
    return NextResponse.next();
  } catch {
    const url = request.nextUrl.clone();
    url.pathname = pathname.replaceAll('%', '%25');
    return NextResponse.rewrite(url);
  }
}

export const config = {
  // /api paths that contain a percent sign.
  matcher: '/api/:path(.*%.*)',
};
