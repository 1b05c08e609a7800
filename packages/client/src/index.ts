import createClient, { type Client } from 'openapi-fetch';
import type { components, paths } from './api-types.ts';

/**
 * The typed client of this service: openapi-fetch over the types generated from the OpenAPI
 * document (./api-types.ts, `npm run client:generate`), so a path, a body or an answer that does
 * not match the document is a type error in the app, not a 400 at run time. It needs only `fetch`,
 * `Request`, `Response`, `Headers` and `URL`: no DOM, no Node API, no React, no supabase-js, so it
 * runs in a browser, React Native / Expo, Node and edge runtimes alike.
 *
 *   const api = createAccountLinkClient({ baseUrl: SERVICE_URL, accessToken: async () => (await supabase.auth.getSession()).data.session?.access_token });
 *   const account = await expectData(api.GET('/api/me'));
 *
 * `API_VERSION` is the `info.version` of the document these types came from, and the package's
 * version: a deployment whose /api/openapi.json says another version has changed since.
 */
export { API_VERSION } from './api-types.ts';

export type AccountLinkClient = Client<paths>;

export type Account = components['schemas']['Account'];
export type Entitlement = components['schemas']['Entitlement'];
export type WalletLink = components['schemas']['WalletLink'];
export type AccountLeague = components['schemas']['AccountLeague'];
export type BillingSync = components['schemas']['BillingSync'];
export type Problem = components['schemas']['Problem'];

export interface AccountLinkClientOptions {
  /** Where the service is (`https://accounts.example.com`); '' for a page the service itself serves. */
  baseUrl: string;
  /**
   * The signed-in user's Supabase access token, asked for before each request (supabase-js
   * refreshes sessions, so it is read each time, never kept). Nothing: no Authorization header.
   */
  accessToken?: () => string | null | undefined | Promise<string | null | undefined>;
  /** What sends the requests (default: the global fetch). */
  fetch?: (request: Request) => Promise<Response>;
}

export function createAccountLinkClient({ baseUrl, accessToken, fetch }: AccountLinkClientOptions): AccountLinkClient {
  const client = createClient<paths>({ baseUrl, ...(fetch ? { fetch } : {}) });
  if (accessToken) {
    client.use({
      async onRequest({ request }) {
        const token = await accessToken();
        if (token) request.headers.set('authorization', `Bearer ${token}`);
        return request;
      },
    });
  }
  return client;
}

/**
 * An answer of the service that is not a success: its status, and the problem+json it sent (RFC
 * 9457). `message` is the problem's `detail`, written to be shown to a person; switch on `code`.
 */
export class ApiProblemError extends Error {
  override name = 'ApiProblemError';
  readonly status: number;
  readonly code: string | undefined;
  readonly problem: Partial<Problem> | undefined;
  constructor(status: number, problem: Partial<Problem> | undefined) {
    super(problem?.detail ?? problem?.title ?? `The service answered ${status}.`);
    this.status = status;
    this.code = problem?.code;
    this.problem = problem;
  }
}

/** The data of a successful call; any other answer as an ApiProblemError. */
export async function expectData<T>(call: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<T> {
  const { data, error, response } = await call;
  if (!response.ok) throw new ApiProblemError(response.status, typeof error === 'object' && error !== null ? (error as Partial<Problem>) : undefined);
  return data as T;
}
