import { createClient } from '@supabase/supabase-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { refreshAtTokenExpiry } from '../../packages/client/src/live.ts';
import { startFakeSupabaseAuth, type FakeSupabaseAuth } from '../support/fake-supabase-auth.ts';

/**
 * The access token hook lowers a token's `exp` to the earliest end of the user's entitlements, but
 * Supabase Auth reports the session's `expires_at` from the project's expiry (computed before the
 * hook), which is what supabase-js refreshes by. refreshAtTokenExpiry refreshes at the token's own
 * `exp`: real supabase-js against the Auth stand-in, whose sessions' tokens go through a hook.
 */
describe('refreshAtTokenExpiry', () => {
  let auth: FakeSupabaseAuth;
  beforeAll(async () => {
    auth = await startFakeSupabaseAuth();
  });
  afterAll(() => auth?.close());

  const signIn = async () => {
    const email = `refresh-${Math.random().toString(36).slice(2)}@example.test`;
    auth.addUser(email, 'password-1');
    const supabase = createClient(auth.url, auth.apiKey, { auth: { persistSession: false, autoRefreshToken: false } });
    const { data, error } = await supabase.auth.signInWithPassword({ email, password: 'password-1' });
    if (error) throw error;
    return { supabase, session: data.session! };
  };
  const expOf = (token: string) => (JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString('utf8')) as { exp: number }).exp;

  it('refreshes shortly before a lowered exp, though the session says it lasts an hour', async () => {
    // An entitlement ends in 12 s: the hook ends the token then.
    auth.setAccessTokenHook((claims) => ({ ...claims, exp: Math.floor(Date.now() / 1000) + 12 }));
    try {
      const { supabase, session } = await signIn();
      expect(session.expires_at! - expOf(session.access_token)).toBeGreaterThan(3000);
      const before = auth.refreshes.length;
      auth.setAccessTokenHook(undefined); // after the renewal, a full hour again
      const stop = refreshAtTokenExpiry(supabase);
      try {
        await expect.poll(() => auth.refreshes.length, { timeout: 15_000, interval: 100 }).toBe(before + 1);
        await expect.poll(async () => (await supabase.auth.getSession()).data.session?.access_token !== session.access_token, { timeout: 5_000 }).toBe(true);
        const fresh = (await supabase.auth.getSession()).data.session!;
        expect(expOf(fresh.access_token)).toBeGreaterThan(expOf(session.access_token));
      } finally {
        stop();
      }
    } finally {
      auth.setAccessTokenHook(undefined);
    }
  }, 30_000);

  it('leaves a token alone whose exp is the session\'s own (supabase-js refreshes those)', async () => {
    const { supabase } = await signIn();
    const before = auth.refreshes.length;
    const stop = refreshAtTokenExpiry(supabase, { leadSeconds: 3600 }); // would refresh at once if it scheduled anything
    try {
      // Give a refresh the chance to happen: one round trip to the stand-in and back.
      await supabase.auth.getUser();
      await new Promise((resolve) => setImmediate(resolve));
      expect(auth.refreshes.length).toBe(before);
    } finally {
      stop();
    }
  });
});
