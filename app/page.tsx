import Link from 'next/link';
import { cookies } from 'next/headers';
import { DEV_USER } from '#lib/auth/dev-user.ts';
import { authenticateToken } from '#lib/auth/session.ts';
import { getAccount } from '#lib/account.ts';
import { getConfig, type Config } from '#lib/config.ts';
import { toApiError } from '#lib/http/route.ts';
import { SESSION_COOKIE } from '#lib/web/session-cookie.ts';
import { signInLocally } from './actions.ts';
import { RefreshPurchasesButton } from './components/refresh-purchases.tsx';
import { SignOutButton } from './components/sign-out-button.tsx';
import type { SupabaseBrowserSettings } from './components/supabase-browser.ts';
import { SupabaseSignIn } from './components/supabase-sign-in.tsx';
import { PROOF_KIND_LABELS } from './components/proof-kinds.ts';
import { UnlinkButton, WalletLinker } from './components/wallet-linker.tsx';

// Per-user page: rendered for each request, never cached.
export const dynamic = 'force-dynamic';

const SIGN_IN_ERRORS: Record<string, string> = {
  'invalid-email': 'Enter a valid e-mail address.',
  'local-sign-in-unavailable': 'Local sign-in is only available in local development mode.',
};

type Account = Awaited<ReturnType<typeof getAccount>>;

// GET / - the account page: sign in, see your account, link and unlink wallets
export default async function AccountPage({ searchParams }: { searchParams: Promise<Record<string, string | string[] | undefined>> }) {
  const { error: errorParam } = await searchParams;
  let config: Config;
  try {
    config = getConfig();
  } catch (error) {
    // The reason (what to set) is in the server log; a visitor learns only that it is refused.
    return <Shell><p role="alert">{toApiError(error).message}</p></Shell>;
  }

  const token = (await cookies()).get(SESSION_COOKIE)?.value;
  let account: Account | undefined;
  let problem: string | undefined = typeof errorParam === 'string' ? SIGN_IN_ERRORS[errorParam] : undefined;
  if (token) {
    try {
      account = await getAccount(await authenticateToken(token));
    } catch (error) {
      problem = toApiError(error).message;
    }
  }

  return (
    <Shell signedIn={Boolean(account)} supabase={supabaseBrowserSettings(config)}>
      {problem && <p role="alert">{problem}</p>}
      {account ? <AccountView account={account} config={config} /> : <SignIn config={config} />}
    </Shell>
  );
}

/** The account page signs in with Supabase Auth in the browser when it is set up (not with local sign-in). */
function supabaseBrowserSettings(config: Config): SupabaseBrowserSettings | undefined {
  const { supabaseUrl: url, publishableKey } = config.frontend;
  return config.auth.mode !== 'dev-key' && url && publishableKey ? { url, publishableKey } : undefined;
}

function Shell({ children, signedIn = false, supabase }: { children: React.ReactNode; signedIn?: boolean; supabase?: SupabaseBrowserSettings }) {
  return (
    <main>
      <header className="site">
        <div>
          <h1>Your account</h1>
          <p className="muted">Wallets, subscriptions and leagues linked to your sign-in.</p>
        </div>
        <nav aria-label="Site">
          <Link href="/docs">API reference</Link>
          {signedIn && <SignOutButton supabase={supabase} />}
        </nav>
      </header>
      {children}
    </main>
  );
}

function SignIn({ config }: { config: Config }) {
  if (config.auth.mode === 'dev-key') {
    return (
      <section className="panel" aria-labelledby="local-sign-in">
        <h2 id="local-sign-in">Local sign-in <span className="badge warn">development only</span></h2>
        <p className="muted">
          This service runs in local development mode, without an Auth server. Sign in as any e-mail to get a dev token
          (the same e-mail is always the same user; {DEV_USER.email} is the dev user that <code>npm run token</code> and{' '}
          <code>npm run sample-event</code> act as). This form does not exist when Supabase is configured or deployed.
        </p>
        <form action={signInLocally}>
          <label htmlFor="local-email">E-mail</label>
          <input id="local-email" name="email" type="email" autoComplete="email" required defaultValue={DEV_USER.email} />
          <div className="row">
            <button type="submit" className="primary">Sign in locally</button>
          </div>
        </form>
      </section>
    );
  }
  const supabase = supabaseBrowserSettings(config);
  return (
    <section className="panel" aria-labelledby="sign-in">
      <h2 id="sign-in">Sign in</h2>
      {supabase ? (
        <SupabaseSignIn url={supabase.url} publishableKey={supabase.publishableKey} />
      ) : (
        <p>Set NEXT_PUBLIC_SUPABASE_URL and NEXT_PUBLIC_SUPABASE_PUBLISHABLE_KEY to sign in here.</p>
      )}
    </section>
  );
}

const formatTime = (iso: string | null | undefined, empty = '—') => (iso ? new Date(iso).toLocaleString('en-GB', { dateStyle: 'medium', timeStyle: 'short', timeZone: 'UTC' }) + ' UTC' : empty);

/** Until when access lasts, as a person reads it: in grace, the grace end; no expiry, lifetime. */
function accessUntil(entitlement: Account['entitlements'][number]): string {
  if (!entitlement.active) return entitlement.expiresAt ? `ended ${formatTime(entitlement.expiresAt)}` : '—';
  if (entitlement.status === 'grace' && entitlement.graceExpiresAt) return `${formatTime(entitlement.graceExpiresAt)} (grace period)`;
  return entitlement.expiresAt ? formatTime(entitlement.expiresAt) : 'lifetime';
}

function AccountView({ account, config }: { account: Account; config: Config }) {
  return (
    <>
      <section className="panel" aria-labelledby="who">
        <h2 id="who">Signed in</h2>
        <dl>
          <dt className="muted">E-mail</dt>
          <dd data-testid="email">{account.email ?? '(none)'}</dd>
          <dt className="muted">User id</dt>
          <dd className="mono" data-testid="user-id">{account.userId}</dd>
        </dl>
      </section>

      <section className="panel" aria-labelledby="wallets">
        <h2 id="wallets">Wallets</h2>
        {account.wallets.length === 0 ? (
          <p className="muted">No wallet linked yet.</p>
        ) : (
          <div className="table-scroll"><table>
            <thead><tr><th scope="col">Chain</th><th scope="col">Address</th><th scope="col">Proof</th><th scope="col">Linked</th><th scope="col"><span className="muted">Action</span></th></tr></thead>
            <tbody>
              {account.wallets.map((wallet) => (
                <tr key={wallet.id}>
                  <td>{wallet.chain === 'evm' ? `Ethereum (chain ${wallet.chainId})` : `Solana (${wallet.cluster})`}</td>
                  <td className="mono" data-testid="wallet-address">{wallet.address}</td>
                  <td data-testid="wallet-kind">{PROOF_KIND_LABELS[wallet.kind]}</td>
                  <td>{formatTime(wallet.createdAt)}</td>
                  <td><UnlinkButton linkId={wallet.id} address={wallet.address} /></td>
                </tr>
              ))}
            </tbody>
          </table></div>
        )}
        <WalletLinker evmChainIds={config.wallet.evmChainIds} solanaClusters={config.wallet.solanaClusters} />
      </section>

      <section className="panel" aria-labelledby="entitlements">
        <h2 id="entitlements">Subscriptions</h2>
        {account.entitlements.length === 0 ? (
          <p className="muted">No subscription yet.</p>
        ) : (
          <div className="table-scroll"><table>
            <thead><tr><th scope="col">Entitlement</th><th scope="col">Access</th><th scope="col">Until</th><th scope="col">Renews</th></tr></thead>
            <tbody>
              {account.entitlements.map((entitlement) => (
                <tr key={entitlement.id}>
                  <td>{entitlement.id}<div className="muted">{entitlement.productId}</div></td>
                  <td>
                    <span className={entitlement.active ? 'badge ok' : 'badge warn'}>{entitlement.active ? 'active' : 'inactive'}</span>{' '}
                    <span className="muted">{entitlement.status.replace(/_/g, ' ')}</span>
                  </td>
                  <td>{accessUntil(entitlement)}</td>
                  <td>{entitlement.active && entitlement.willRenew ? 'yes' : 'no'}</td>
                </tr>
              ))}
            </tbody>
          </table></div>
        )}
        {config.revenuecat && <RefreshPurchasesButton />}
      </section>

      <section className="panel" aria-labelledby="leagues">
        <h2 id="leagues">Leagues</h2>
        {account.leagues.length === 0 ? (
          <p className="muted">No league yet.</p>
        ) : (
          <div className="table-scroll"><table>
            <thead><tr><th scope="col">League</th><th scope="col">Season</th><th scope="col">Status</th><th scope="col">Role</th></tr></thead>
            <tbody>
              {account.leagues.map((league) => (
                <tr key={`${league.source}:${league.externalId}`}>
                  <td>{league.name}<div className="muted">{league.source}</div></td>
                  <td>{league.sport.toUpperCase()} {league.season}</td>
                  <td>{league.status.replace(/_/g, ' ')}</td>
                  <td>{league.role}</td>
                </tr>
              ))}
            </tbody>
          </table></div>
        )}
      </section>
    </>
  );
}
