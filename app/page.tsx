import Link from 'next/link';
import { cookies } from 'next/headers';
import { DEV_USER } from '#lib/auth/dev-user.ts';
import { authenticateToken } from '#lib/auth/session.ts';
import { getAccount } from '#lib/account.ts';
import type { Account as ClientAccount } from '#client';
import { getConfig, type Config } from '#lib/config.ts';
import { toApiError } from '#lib/http/route.ts';
import { SESSION_COOKIE } from '#lib/web/session-cookie.ts';
import { signInLocally } from './actions.ts';
import { AccountView, LiveAccount, type LiveChannelSettings } from './components/account-view.tsx';
import { SignOutButton } from './components/sign-out-button.tsx';
import type { SupabaseBrowserSettings } from './components/supabase-browser.ts';
import { SupabaseSignIn } from './components/supabase-sign-in.tsx';

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
      {account ? (
        // GET /api/me's own body (getAccount), which tests/conformance holds to the document the client's types come from.
        <LiveAccount initialAccount={account as ClientAccount} live={liveChannel(config)}>
          <AccountView evmChainIds={config.wallet.evmChainIds} solanaClusters={config.wallet.solanaClusters} canRefreshPurchases={Boolean(config.revenuecat)} />
        </LiveAccount>
      ) : <SignIn config={config} />}
    </Shell>
  );
}

/**
 * Where the page hears of changes to the account: Supabase Realtime when it signs in with Supabase
 * (the database broadcasts on the user's private channel), else in local mode the service's own
 * stream (GET /api/me/events); elsewhere nowhere (the page shows what it read).
 */
function liveChannel(config: Config): LiveChannelSettings | undefined {
  const supabase = supabaseBrowserSettings(config);
  if (supabase) return { kind: 'supabase', supabase };
  return config.local ? { kind: 'service' } : undefined;
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
