import type { SessionUser } from './auth/session.ts';
import { toEntitlementViews, type EntitlementRow, type EntitlementView } from './billing/entitlement-view.ts';
import { callDb } from './db/index.ts';
import type { AccountLeague } from './leagues/account-leagues.ts';
import type { WalletLink } from './wallets/links.ts';

/** The caller's account as GET /api/me answers it. */
export interface Account {
  userId: string;
  email: string | null;
  wallets: WalletLink[];
  entitlements: EntitlementView[];
  leagues: AccountLeague[];
}

/**
 * The caller's account as GET /api/me and the account page show it: identity from the verified
 * token, and the user's wallets, entitlements (access and status as of `now`) and leagues, read in
 * ONE SQL function call (`get_account_json`), which answers JSON text. The wallets and leagues come in
 * the API's shape (kept between reads in the database); the entitlements as rows, mapped here.
 * RevenueCat's app_user_id is the user's id.
 */
export async function getAccount(user: Pick<SessionUser, 'userId' | 'email'>, now: Date = new Date()): Promise<Account> {
  const text = await callDb<string>('get_account_json', { p_user_id: user.userId, p_now: now });
  const parts = JSON.parse(text) as { wallets: WalletLink[]; entitlements: EntitlementRow[]; leagues: AccountLeague[] };
  return {
    userId: user.userId,
    email: user.email,
    wallets: parts.wallets,
    entitlements: toEntitlementViews(parts.entitlements),
    leagues: parts.leagues,
  };
}
