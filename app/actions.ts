'use server';

import { cookies } from 'next/headers';
import { redirect } from 'next/navigation';
import { z } from 'zod';
import { mintDevToken } from '#lib/auth/dev-key.ts';
import { authenticateToken } from '#lib/auth/session.ts';
import { getConfig, type Config } from '#lib/config.ts';
import { toApiError } from '#lib/http/route.ts';
import { localUserIdFor, SESSION_COOKIE, sessionCookieOptions } from '#lib/web/session-cookie.ts';

const LOCAL_SESSION_SECONDS = 8 * 3600;
// What a browser's e-mail field accepts (dev@localhost too), within the length an address can have.
const localSignInSchema = z.object({ email: z.string().trim().max(254).regex(/^[^@\s]+@[^@\s]+$/) });

/**
 * Local mode only: sign in as any e-mail with a dev token (there is no Auth server locally). The
 * action exists in every build, so it checks for itself that local sign-in is on: a refused
 * configuration (getConfig throws) or any real auth setting means no.
 */
export async function signInLocally(formData: FormData): Promise<void> {
  const config = localSignInConfig();
  if (!config) redirect('/?error=local-sign-in-unavailable');
  const parsed = localSignInSchema.safeParse({ email: formData.get('email') });
  if (!parsed.success) redirect('/?error=invalid-email');
  const email = parsed.data.email.toLowerCase();
  const token = await mintDevToken(config, { userId: localUserIdFor(email), email, expiresInSeconds: LOCAL_SESSION_SECONDS });
  (await cookies()).set(SESSION_COOKIE, token, sessionCookieOptions(config, new Date(Date.now() + LOCAL_SESSION_SECONDS * 1000)));
  redirect('/');
}

/** The configuration when local sign-in is on (local mode, dev-key auth), else undefined. */
function localSignInConfig(): Config | undefined {
  try {
    const config = getConfig();
    return config.local && config.auth.mode === 'dev-key' ? config : undefined;
  } catch {
    return undefined;
  }
}

/** After a Supabase Auth sign-in (or token refresh) in the browser: keep the access token for the page. */
export async function adoptSession(accessToken: string): Promise<{ error?: string }> {
  try {
    const user = await authenticateToken(accessToken);
    const expiresAt = new Date(Number(user.claims.exp) * 1000);
    (await cookies()).set(SESSION_COOKIE, accessToken, sessionCookieOptions(getConfig(), expiresAt));
    return {};
  } catch (error) {
    return { error: toApiError(error).message };
  }
}

/**
 * The signed-in page's access token, fetched by the page's scripts at the moment they call the API,
 * so the token is never written into the HTML (the cookie itself is httpOnly).
 */
export async function sessionToken(): Promise<string | null> {
  return (await cookies()).get(SESSION_COOKIE)?.value ?? null;
}

export async function signOut(): Promise<void> {
  (await cookies()).delete(SESSION_COOKIE);
  redirect('/');
}
