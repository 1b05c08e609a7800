'use server';

import { randomUUID } from 'node:crypto';
import { cookies } from 'next/headers';
import { redirect } from 'next/navigation';
import { z } from 'zod';
import { mintDevToken } from '#lib/auth/dev-key.ts';
import { authenticateToken } from '#lib/auth/session.ts';
import { getConfig, type Config } from '#lib/config.ts';
import { decodePath, malformedPathResponse } from '#lib/http/malformed-path.ts';
import { ApiError, fieldErrors, problemResponse } from '#lib/http/problem.ts';
import { toApiError } from '#lib/http/route.ts';
import { localUserIdFor, SESSION_COOKIE, sessionCookieOptions } from '#lib/web/session-cookie.ts';
import * as catchAllRoute from './api/[[...path]]/route.ts';
import * as billingSyncRoute from './api/me/billing/sync/route.ts';
import * as meRoute from './api/me/route.ts';
import * as walletLinkIdRoute from './api/wallet-link/[linkId]/route.ts';
import * as challengeRoute from './api/wallet-link/challenge/route.ts';
import * as walletLinkRoute from './api/wallet-link/route.ts';

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

/**
 * After a Supabase Auth sign-in (or token refresh) in the browser: keep the access token for the
 * page. The Auth server is asked first (when AUTH_VERIFY_SESSION is on) whether the session still
 * exists, so a session ended by a sign-out, here or anywhere, is never taken back.
 */
export async function adoptSession(accessToken: string): Promise<{ error?: string }> {
  try {
    const user = await authenticateToken(accessToken, { requireLiveSession: true });
    const expiresAt = new Date(Number(user.claims.exp) * 1000);
    (await cookies()).set(SESSION_COOKIE, accessToken, sessionCookieOptions(getConfig(), expiresAt));
    return {};
  } catch (error) {
    return { error: toApiError(error).message };
  }
}

/** What the account page's scripts ask the API for, on behalf of the signed-in user. */
export interface PageApiRequest {
  method: 'GET' | 'POST' | 'DELETE';
  path: string;
  body?: unknown;
}

// A server action's arguments are whatever the client sent, decoded by React (which can make a
// BigInt, a Map, a symbol or a value that contains itself): checked like any request, and a body
// that is not JSON text is refused here, never thrown as a 500 by JSON.stringify or new Request.
const pageApiRequestSchema = z.object({
  method: z.enum(['GET', 'POST', 'DELETE']),
  path: z.string().max(2048).regex(/^\/api\//, 'an /api path'),
  body: z.unknown().optional(),
}).transform((request, context) => {
  if (request.body === undefined) return { ...request, text: undefined };
  if (request.method !== 'POST') {
    context.addIssue({ code: 'custom', path: ['body'], message: `a ${request.method} request has no body` });
    return z.NEVER;
  }
  const text = jsonTextOf(request.body);
  if (text === undefined) {
    context.addIssue({ code: 'custom', path: ['body'], message: 'must be a JSON value' });
    return z.NEVER;
  }
  return { ...request, text };
});

/** The value as JSON text, or undefined when it has none (a BigInt, a symbol, a value that contains itself). */
function jsonTextOf(value: unknown): string | undefined {
  try {
    const text: unknown = JSON.stringify(value);
    return typeof text === 'string' ? text : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The account page's API calls, made here on the server with the httpOnly cookie's token, so the
 * token never reaches page JavaScript (an injected script could otherwise read it and use the API
 * as the user). Each call goes through the same route handler as an API client's request:
 * authentication, validation, problem+json. Only the calls the page makes are routed; a server
 * action is same-origin POST only (Next checks Origin), so another site cannot make them.
 */
export async function callApiAsSignedInUser(sent: PageApiRequest): Promise<{ status: number; body: unknown }> {
  const parsed = pageApiRequestSchema.safeParse(sent);
  if (!parsed.success) return answerOf(problemResponse(new ApiError('invalid_request', { detail: 'The page sent a request this service does not route.', errors: fieldErrors(parsed.error.issues) }), randomUUID()));
  const request = parsed.data;
  const token = (await cookies()).get(SESSION_COOKIE)?.value;
  const headers: Record<string, string> = request.text === undefined ? {} : { 'content-type': 'application/json' };
  if (token) headers.authorization = `Bearer ${token}`;
  const apiRequest = new Request(new URL(request.path, 'http://account-page.invalid'), { method: request.method, headers, body: request.text });
  // A malformed escape names nothing: the same 404 the proxy answers for it, never a URIError's 500.
  const malformed = malformedPathResponse(apiRequest);
  if (malformed) return answerOf(malformed);
  const { handler, params } = pageRoute(request.method, request.path);
  return answerOf(await handler(apiRequest, { params: Promise.resolve(params) }));
}

async function answerOf(response: Response): Promise<{ status: number; body: unknown }> {
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : undefined };
}

type RouteHandler = (request: Request, context: { params: Promise<Record<string, string>> }) => Promise<Response>;

function pageRoute(method: PageApiRequest['method'], path: string): { handler: RouteHandler; params: Record<string, string> } {
  if (method === 'GET' && path === '/api/me') return { handler: meRoute.GET, params: {} };
  if (method === 'POST' && path === '/api/wallet-link/challenge') return { handler: challengeRoute.POST, params: {} };
  if (method === 'POST' && path === '/api/wallet-link') return { handler: walletLinkRoute.POST, params: {} };
  if (method === 'POST' && path === '/api/me/billing/sync') return { handler: billingSyncRoute.POST, params: {} };
  const unlink = /^\/api\/wallet-link\/([^/]+)$/.exec(path);
  // The whole path decoded (malformedPathResponse), so its segment does too.
  if (method === 'DELETE' && unlink) return { handler: walletLinkIdRoute.DELETE, params: { linkId: decodePath(unlink[1]!)! } };
  return { handler: catchAllRoute.POST, params: {} }; // a problem+json 404, like any unknown /api path
}

/**
 * Drop the session cookie. With Supabase Auth the browser has signed supabase-js out just before
 * (app/components/sign-out-button.tsx), which ends the Auth session and its stored copy.
 */
export async function signOut(): Promise<void> {
  (await cookies()).delete(SESSION_COOKIE);
  redirect('/');
}
