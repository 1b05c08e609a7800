import { ApiProblemError, createAccountLinkClient } from '#client';
import { callApiAsSignedInUser, type PageApiRequest } from '../actions.ts';

/**
 * The page's client for the API: the typed client (packages/client), whose requests run on the server
 * (a server action holding the httpOnly session cookie), so the session token never reaches this
 * page's JavaScript. Each request goes through the same route handler as an API client's request.
 */
export const pageApi = createAccountLinkClient({ baseUrl: '', fetch: throughServerAction });

async function throughServerAction(request: Request): Promise<Response> {
  const { pathname } = new URL(request.url, 'http://account-page.invalid');
  const text = request.method === 'GET' ? '' : await request.text();
  let answer: { status: number; body: unknown };
  try {
    answer = await callApiAsSignedInUser({ method: request.method as PageApiRequest['method'], path: pathname, body: text ? JSON.parse(text) : undefined });
  } catch {
    throw new PageError('Could not reach the service. Check your connection and try again.');
  }
  return new Response(answer.status === 204 ? null : JSON.stringify(answer.body ?? null), { status: answer.status, headers: { 'content-type': 'application/json' } });
}

/** A problem the page itself found (no wallet installed, a wrong chain, no connection): shown as it is. */
export class PageError extends Error {}

/**
 * Words for an error: the API's detail, the page's own message, or a wallet's (EIP-1193 4001 = the
 * person said no). Never a code or a stack.
 */
export function walletErrorMessage(error: unknown): string {
  if (error instanceof ApiProblemError) return error.code === 'missing_token' ? 'Your session has ended; sign in again.' : error.message;
  if (error instanceof PageError) return error.message;
  const e = error as { code?: number; message?: string };
  if (e?.code === 4001) return 'You rejected the request in your wallet.';
  if (e?.code === 4100) return 'The wallet has not authorised this site; connect it first.';
  return e?.message ? `The wallet reported: ${e.message}` : 'The wallet did not complete the request.';
}
