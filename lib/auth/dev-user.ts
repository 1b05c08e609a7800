import { createHash } from 'node:crypto';

/**
 * Local mode's one dev user: the README's examples, `npm run token`, `npm run link-wallet` and
 * `npm run sample-event` name them by default, and the account page's local sign-in with this
 * e-mail signs them in, so what each example does shows on the page.
 */
export const DEV_USER = { id: '6f1c2b9e-3d4a-4b5c-8d7e-9f0a1b2c3d4e', email: 'ana@example.com' } as const;

/**
 * Local sign-in (local mode only) names the user by e-mail; the same e-mail always maps to the
 * same user id, so wallets linked yesterday are still there today. The dev user's e-mail maps to
 * the dev user's id.
 */
export function localUserIdFor(email: string): string {
  const normalized = email.trim().toLowerCase();
  if (normalized === DEV_USER.email) return DEV_USER.id;
  const hex = createHash('sha256').update(`local-dev-user:${normalized}`).digest('hex');
  // Shape it as an RFC 9562 version-8 (custom) UUID.
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-8${hex.slice(13, 16)}-${((parseInt(hex[16]!, 16) & 0x3) | 0x8).toString(16)}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

/**
 * Who a dev command acts as: the user and e-mail given; an e-mail alone, the user the page's local
 * sign-in gives it; nothing, the dev user.
 */
export function devIdentity(options: { user?: string; email?: string }): { userId: string; email: string } {
  if (options.user) return { userId: options.user, email: options.email ?? (options.user === DEV_USER.id ? DEV_USER.email : `${options.user.slice(0, 8)}@example.test`) };
  if (options.email) return { userId: localUserIdFor(options.email), email: options.email.trim().toLowerCase() };
  return { userId: DEV_USER.id, email: DEV_USER.email };
}
