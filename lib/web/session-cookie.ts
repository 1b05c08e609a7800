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

/** The id local sign-in gives an e-mail (lib/auth/dev-user.ts). */
export { localUserIdFor } from '../auth/dev-user.ts';
