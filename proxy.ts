import { NextResponse, type NextRequest } from 'next/server';
import { getConfig } from './lib/config.ts';
import { malformedPathResponse } from './lib/http/malformed-path.ts';
import { contentSecurityPolicy, newNonce } from './lib/web/content-security-policy.ts';

/**
 * Runs before routing, for the requests the matcher below selects:
 *   - /api paths with a `%`: a malformed percent-encoding gets a problem+json 404 here, because
 *     Next would answer it with a bare 500 before any route runs (lib/http/malformed-path.ts);
 *   - pages: a fresh nonce and the Content-Security-Policy built on it. Next reads the policy from
 *     the request headers and puts the nonce on the scripts it renders, so pages are rendered per
 *     request (they are anyway: the account page is per user).
 */
export function proxy(request: NextRequest) {
  if (request.nextUrl.pathname.startsWith('/api/')) return malformedPathResponse(request) ?? NextResponse.next();

  const policy = contentSecurityPolicy({ nonce: newNonce(), connectTo: supabaseOrigin(), development: process.env.NODE_ENV === 'development' });
  const headers = new Headers(request.headers);
  headers.set('content-security-policy', policy);
  const response = NextResponse.next({ request: { headers } });
  response.headers.set('content-security-policy', policy);
  return response;
}

/**
 * Where the page's supabase-js connects, when Supabase Auth is set up: Auth over http(s), and the
 * account's live updates over Realtime's WebSocket (ws/wss on the same host, named explicitly).
 */
function supabaseOrigin(): string[] {
  try {
    const url = getConfig().frontend.supabaseUrl;
    if (!url) return [];
    const { origin } = new URL(url);
    return [origin, origin.replace(/^http/, 'ws')];
  } catch {
    return []; // a refused configuration: the page says so and signs no one in
  }
}

export const config = {
  matcher: [
    // /api paths that contain a percent sign (ordinary API requests skip the proxy).
    '/api/:path(.*%.*)',
    // Pages; not the API, Next's static files or the icon.
    '/((?!api/|_next/static|_next/image|favicon.ico).*)',
  ],
};
