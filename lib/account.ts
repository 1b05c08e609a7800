import type { SessionUser } from './auth/session.ts';

/**
 * The caller's account as GET /api/me shows it. Later domains add their parts here (wallets,
 * entitlements, leagues), read in one SQL function call.
 */
export async function getAccount(user: SessionUser) {
  return { userId: user.userId, email: user.email };
}
