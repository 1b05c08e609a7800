import { createHash } from 'node:crypto';
import type { Config } from '../config.ts';

/**
 * The account page keeps the signed-in user's access token in an httpOnly cookie, so the page can
 * render server-side (and without JavaScript). The API itself never reads this cookie: it takes
 * only `Authorization: Bearer`, which is why it needs no CSRF defence.
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

/**
 * Local sign-in (local mode only) names the user by e-mail; the same e-mail always maps to the
 * same user id, so wallets linked yesterday are still there today.
 */
export function localUserIdFor(email: string): string {
  const hex = createHash('sha256').update(`local-dev-user:${email.trim().toLowerCase()}`).digest('hex');
  // Shape it as an RFC 9562 version-8 (custom) UUID.
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-8${hex.slice(13, 16)}-${((parseInt(hex[16]!, 16) & 0x3) | 0x8).toString(16)}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}
