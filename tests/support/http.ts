import { testApiHandler } from 'next-test-api-route-handler';
import { operatorDetailIn } from './public-answers.ts';

export interface RouteResponse {
  status: number;
  headers: Headers;
  text: string;
  /** The body parsed as JSON (undefined when empty). */
  body: any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

export interface RouteRequest {
  method?: string;
  headers?: Record<string, string>;
  /** An object is sent as JSON (with Content-Type: application/json unless given); a string or bytes as they are. */
  body?: unknown;
  params?: Record<string, string>;
  url?: string;
}

/**
 * Call a route module over real HTTP through next-test-api-route-handler (a local server running
 * Next's own request handling), and return the status, headers and body.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function callRoute(routeModule: any, request: RouteRequest = {}): Promise<RouteResponse> {
  const headers: Record<string, string> = { ...request.headers };
  let body: BodyInit | undefined;
  if (typeof request.body === 'string' || request.body instanceof Uint8Array || request.body instanceof ReadableStream) {
    body = request.body as BodyInit;
  } else if (request.body !== undefined) {
    body = JSON.stringify(request.body);
    if (!Object.keys(headers).some((key) => key.toLowerCase() === 'content-type')) headers['content-type'] = 'application/json';
  }
  const fetch = await routeServer(routeModule, request.url, request.params);
  const response = await fetch({ method: request.method ?? 'GET', headers, body, ...(body instanceof ReadableStream ? { duplex: 'half' } : {}) } as RequestInit);
  const text = await response.text();
  let parsed: unknown;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = undefined;
  }
  const result: RouteResponse = { status: response.status, headers: response.headers, text, body: parsed };
  // Every problem answer a route test provokes is public: it names no setting and carries no
  // database text (the log has those).
  if (result.headers.get('content-type')?.startsWith('application/problem+json')) {
    const leaks = operatorDetailIn(result.text);
    if (leaks.length > 0) throw new Error(`A public answer (${result.status}) ${leaks.join('; ')}: ${result.text.slice(0, 400)}`);
  }
  return result;
}

type RouteFetch = (init: RequestInit) => Promise<Response>;
interface RouteServer {
  fetch: Promise<RouteFetch>;
  close: () => void;
  done: Promise<void>;
}
const routeServers = new Map<string, RouteServer>();
const moduleKeys = new WeakMap<object, number>();
let modulesSeen = 0;

/**
 * The fetch of one next-test-api-route-handler server per route module, URL and params, kept open
 * for the test file (closeRouteServers): starting one for every call cost about 3 ms of the ~5 ms a
 * call takes, thousands of times a file in the delivery-order suites. Every request is still its own
 * HTTP request through Next's request handling.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
function routeServer(routeModule: any, url: string | undefined, params: Record<string, string> | undefined): Promise<RouteFetch> {
  if (!moduleKeys.has(routeModule)) moduleKeys.set(routeModule, ++modulesSeen);
  const key = `${moduleKeys.get(routeModule)} ${url ?? ''} ${JSON.stringify(params ?? {})}`;
  let server = routeServers.get(key);
  if (!server) {
    let close!: () => void;
    const closed = new Promise<void>((resolve) => (close = resolve));
    let started!: (fetch: RouteFetch) => void;
    const fetch = new Promise<RouteFetch>((resolve) => (started = resolve));
    const done = testApiHandler({
      appHandler: routeModule,
      params,
      url,
      test: async ({ fetch }) => {
        started(fetch as RouteFetch);
        await closed;
      },
    });
    server = { fetch: Promise.race([fetch, done.then(() => Promise.reject(new Error('the route server ended before it started')))]), close, done };
    routeServers.set(key, server);
  }
  return server.fetch;
}

/** Close the route servers callRoute opened (after each test file: tests/setup/ntarh.ts). */
export async function closeRouteServers(): Promise<void> {
  const servers = [...routeServers.values()];
  routeServers.clear();
  for (const server of servers) server.close();
  await Promise.allSettled(servers.map((server) => server.done));
}
