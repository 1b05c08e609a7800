import type { SessionUser } from './auth/session.ts';
import { toEntitlementViews, type EntitlementRow } from './billing/entitlement-view.ts';
import { callDb } from './db/index.ts';
import { toAccountLeagues } from './leagues/account-leagues.ts';
import { toWalletLinks, type WalletLinkRow } from './wallets/links.ts';

interface AccountRows {
  wallets: WalletLinkRow[] | null;
  entitlements: EntitlementRow[] | null;
  leagues: unknown;
}

/**
 * The caller's account as GET /api/me and the account page show it: identity from the verified
 * token, and the user's wallets, entitlements (access and status as of `now`) and leagues, read in ONE
 * SQL function call (`get_account`). RevenueCat's app_user_id is the user's id.
 */
export async function getAccount(user: Pick<SessionUser, 'userId' | 'email'>, now: Date = new Date()) {
  const rows = await callDb<AccountRows>('get_account', { p_user_id: user.userId, p_now: now });
  return {
    userId: user.userId,
    email: user.email,
    wallets: toWalletLinks(rows.wallets),
    entitlements: toEntitlementViews(rows.entitlements),
    leagues: toAccountLeagues(rows.leagues),
  };
}

export type Account = Awaited<ReturnType<typeof getAccount>>;
