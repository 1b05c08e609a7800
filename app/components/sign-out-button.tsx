'use client';

import { signOut } from '../actions.ts';
import { browserSupabase, type SupabaseBrowserSettings } from './supabase-browser.ts';

/**
 * "Sign out". With Supabase Auth the browser signs out first: supabase-js forgets the session it
 * keeps in localStorage (or its next tab switch or token refresh would hand it to the server
 * again) and asks the Auth server to end it (POST /auth/v1/logout?scope=local: this browser's
 * session; the user's other devices stay signed in). Only then does the server drop the cookie.
 * Local sign-in has no browser session, so there it is the server action alone (no JavaScript needed).
 */
export function SignOutButton({ supabase }: { supabase?: SupabaseBrowserSettings }) {
  async function signOutOfSupabaseThenServer() {
    try {
      // Scope local removes the stored session before it calls the Auth server, so an unreachable
      // Auth server cannot leave this browser signed in.
      await browserSupabase(supabase!).auth.signOut({ scope: 'local' });
    } finally {
      await signOut();
    }
  }
  return (
    <form action={supabase ? signOutOfSupabaseThenServer : signOut} className="inline">
      {' '}<button type="submit">Sign out</button>
    </form>
  );
}
