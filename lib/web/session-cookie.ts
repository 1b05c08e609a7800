import { authenticate, authenticateToken, type SessionUser } from '../auth/session.ts';
import type { Config } from '../config.ts';

/**
 * The account page keeps the signed-in user's access token in an httpOnly cookie, so the page can
 * render server-side (and without JavaScript). The API itself takes only `Authorization: Bearer`,
 * which is why it needs no CSRF defence; the one exception is the read-only stream of account
 * changes (GET /api/me/events), which a browser's EventSource opens without headers
 * (authenticateBearerOrPageSession below).
 */
export const SESSION_COOKIE = 'account_session';

/** Secure whenever not in local mode (where APP_ORIGIN must be https anyway), and on any https origin. */
export function sessionCookieOptions(config: Pick<Config, 'local' | 'appOrigin'>, expiresAt: Date) {
  return {
    httpOnly: true,
    sameSite: 'lax' as const,
    secure: !config.local || config.appOrigin.startsWith('https://'),
    path: '/',
    expires: expiresAt,
  };
}

/** The id local sign-in gives an e-mail (lib/auth/dev-user.ts). */
export { localUserIdFor } from '../auth/dev-user.ts';

/**
 * The caller of a route a browser's EventSource calls (GET /api/me/events): EventSource cannot send
 * an Authorization header, so besides `Authorization: Bearer` (which wins when sent) the account
 * page's own session cookie is taken, on this read-only route alone. Only from this site: the
 * cookie is SameSite=Lax (no other site's page sends it with its requests), a request the browser
 * marks as coming from another site (Sec-Fetch-Site) is not taken as the user's, and no answer of
 * this service allows credentials across origins, so no other site can read the stream.
 */
export async function authenticateBearerOrPageSession(request: Request): Promise<SessionUser> {
  if (request.headers.has('authorization')) return authenticate(request);
  const token = pageSessionToken(request);
  return token ? authenticateToken(token) : authenticate(request); // none: the usual 401 missing_token
}

/** The session cookie's token, unless the browser says another site made the request. */
export function pageSessionToken(request: Request): string | undefined {
  const site = request.headers.get('sec-fetch-site');
  if (site !== null && site !== 'same-origin' && site !== 'none') return undefined;
  for (const pair of (request.headers.get('cookie') ?? '').split(';')) {
    const at = pair.indexOf('=');
    if (at > 0 && pair.slice(0, at).trim() === SESSION_COOKIE) return pair.slice(at + 1).trim() || undefined;
  }
  return undefined;
}
