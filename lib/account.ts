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
 * The caller's account as the account page shows it: identity from the verified token, and the
 * user's wallets, entitlements (access and status as of `now`) and leagues, read in ONE SQL function
 * call (`get_account_json`). RevenueCat's app_user_id is the user's id.
 */
export async function getAccount(user: Pick<SessionUser, 'userId' | 'email'>, now: Date = new Date()): Promise<Account> {
  return JSON.parse(await getAccountJson(user, now)) as Account;
}

/**
 * The caller's account as GET /api/me's body: the JSON of `Account`, in its order. The wallets and
 * leagues come from the database as the API's JSON already (kept between reads there) and are copied
 * into the body as they are: parsing and writing them again was a tenth of the request's CPU. Only
 * the entitlements, which come as rows, are mapped here.
 */
export async function getAccountJson(user: Pick<SessionUser, 'userId' | 'email'>, now: Date = new Date()): Promise<string> {
  const parts = accountParts(await callDb<string>('get_account_json', { p_user_id: user.userId, p_now: now }));
  return `{"userId":${JSON.stringify(user.userId)},"email":${JSON.stringify(user.email)},"wallets":${parts.wallets},`
    + `"entitlements":${JSON.stringify(toEntitlementViews(JSON.parse(parts.entitlements) as EntitlementRow[]))},"leagues":${parts.leagues}}`;
}

const WALLETS = '{"wallets":';
const ENTITLEMENTS = ',"entitlements":';
const LEAGUES = ',"leagues":';

/**
 * The three JSON texts of get_account_json's answer, `{"wallets":W,"entitlements":E,"leagues":L}`
 * as 07_account.sql concatenates it. Each separator is found where it is: a comma followed by a
 * quote never occurs inside a JSON string (a quote there is escaped), and no wallet has a key
 * `entitlements`, no entitlement a key `leagues`. Anything else is refused, not guessed at.
 */
export function accountParts(text: string): { wallets: string; entitlements: string; leagues: string } {
  const entitlements = text.indexOf(ENTITLEMENTS);
  const leagues = text.indexOf(LEAGUES, entitlements + ENTITLEMENTS.length);
  if (!text.startsWith(WALLETS) || !text.endsWith('}') || entitlements < 0 || leagues < 0) {
    throw new Error('get_account_json answered an account of an unknown shape');
  }
  return {
    wallets: text.slice(WALLETS.length, entitlements),
    entitlements: text.slice(entitlements + ENTITLEMENTS.length, leagues),
    leagues: text.slice(leagues + LEAGUES.length, -1),
  };
}
