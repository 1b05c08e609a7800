'use client';

import { useRouter } from 'next/navigation';
import { useEffect, useState } from 'react';
import { adoptSession } from '../actions.ts';
import { browserSupabase } from './supabase-browser.ts';

/**
 * Sign-in through Supabase Auth from the browser (e-mail + password, or a magic link). The session's
 * access token is handed to the server (adoptSession) so the page can render the account; token
 * refreshes, and the session supabase-js recovers from localStorage when its tab is shown again,
 * are handed over the same way. After "Sign out" there is nothing to recover: the sign-out button
 * signs supabase-js out first (sign-out-button.tsx), and the server refuses a session the Auth
 * server has ended.
 */
export function SupabaseSignIn({ url, publishableKey }: { url: string; publishableKey: string }) {
  const router = useRouter();
  // Made in the browser only (effects and handlers), never while rendering on the server.
  const supabase = () => browserSupabase({ url, publishableKey });
  const [email, setEmail] = useState('');
  const [password, setPassword] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);

  useEffect(() => {
    const { data } = browserSupabase({ url, publishableKey }).auth.onAuthStateChange(async (event, session) => {
      if ((event === 'SIGNED_IN' || event === 'TOKEN_REFRESHED') && session) {
        const result = await adoptSession(session.access_token);
        if (result.error) setError(result.error);
        else router.refresh();
      }
    });
    return () => data.subscription.unsubscribe();
  }, [url, publishableKey, router]);

  async function withPassword(event: React.FormEvent) {
    event.preventDefault();
    setBusy(true);
    setError(null);
    const { error: signInError } = await supabase().auth.signInWithPassword({ email, password });
    if (signInError) setError(signInError.message);
    setBusy(false);
  }

  async function withMagicLink() {
    setBusy(true);
    setError(null);
    const { error: otpError } = await supabase().auth.signInWithOtp({ email, options: { emailRedirectTo: window.location.origin } });
    if (otpError) setError(otpError.message);
    else setNotice(`We sent a sign-in link to ${email}.`);
    setBusy(false);
  }

  return (
    <form onSubmit={withPassword}>
      <label htmlFor="email">E-mail</label>
      <input id="email" type="email" autoComplete="email" required value={email} onChange={(e) => setEmail(e.target.value)} />
      <label htmlFor="password">Password</label>
      <input id="password" type="password" autoComplete="current-password" value={password} onChange={(e) => setPassword(e.target.value)} />
      <div className="row">
        <button type="submit" className="primary" disabled={busy || !password}>Sign in</button>
        <button type="button" disabled={busy || !email} onClick={withMagicLink}>E-mail me a sign-in link</button>
      </div>
      {error && <p role="alert">{error}</p>}
      {notice && <p role="status">{notice}</p>}
    </form>
  );
}
