import { callApiAsSignedInUser, type PageApiRequest } from '../actions.ts';

/**
 * The page's client for the API: `fetch` with the session token, problem+json errors turned into
 * an Error whose message is the API's `detail` (what to show a person), never a code or a stack.
 */
export class ApiRequestError extends Error {
  readonly code: string | undefined;
  readonly status: number;
  constructor(message: string, status: number, code?: string) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/**
 * Call the API as the signed-in user. The request runs on the server (a server action holding the
 * httpOnly session cookie), so the session token never reaches this page's JavaScript.
 */
export async function callApi<T>(path: string, init: { method?: PageApiRequest['method']; body?: unknown } = {}): Promise<T> {
  let response: { status: number; body: unknown };
  try {
    response = await callApiAsSignedInUser({ method: init.method ?? 'POST', path, body: init.body });
  } catch {
    throw new ApiRequestError('Could not reach the service. Check your connection and try again.', 0);
  }
  if (response.status === 204) return undefined as T;
  if (response.status < 200 || response.status >= 300) {
    const problem = (response.body ?? {}) as { detail?: string; title?: string; code?: string };
    if (problem.code === 'missing_token') throw new ApiRequestError('Your session has ended; sign in again.', 401, 'missing_token');
    throw new ApiRequestError(problem.detail ?? problem.title ?? `The service answered ${response.status}.`, response.status, problem.code);
  }
  return response.body as T;
}

/** A problem the page itself found (no wallet installed, a wrong chain): shown as it is. */
export class PageError extends Error {}

/** Words for an error: the API's detail, the page's own message, or a wallet's (EIP-1193 4001 = the person said no). */
export function walletErrorMessage(error: unknown): string {
  if (error instanceof ApiRequestError || error instanceof PageError) return error.message;
  const e = error as { code?: number; message?: string };
  if (e?.code === 4001) return 'You rejected the request in your wallet.';
  if (e?.code === 4100) return 'The wallet has not authorised this site; connect it first.';
  return e?.message ? `The wallet reported: ${e.message}` : 'The wallet did not complete the request.';
}
