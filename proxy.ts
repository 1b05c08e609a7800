import { NextResponse, type NextRequest } from 'next/server';
import { malformedPathResponse } from './lib/http/malformed-path.ts';

/**
 * Runs before routing, for the requests the matcher below selects:
 *   - /api paths with a `%`: a malformed percent-encoding gets a problem+json 404 here, because
 *     Next would answer it with a bare 500 before any route runs (lib/http/malformed-path.ts).
 */
export function proxy(request: NextRequest) {
  return malformedPathResponse(request) ?? NextResponse.next();
}

export const config = {
  // /api paths that contain a percent sign (ordinary API requests skip the proxy).
  matcher: '/api/:path(.*%.*)',
};
