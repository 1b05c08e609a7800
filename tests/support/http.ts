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
  let result: RouteResponse | undefined;
  const headers: Record<string, string> = { ...request.headers };
  let body: BodyInit | undefined;
  if (typeof request.body === 'string' || request.body instanceof Uint8Array || request.body instanceof ReadableStream) {
    body = request.body as BodyInit;
  } else if (request.body !== undefined) {
    body = JSON.stringify(request.body);
    if (!Object.keys(headers).some((key) => key.toLowerCase() === 'content-type')) headers['content-type'] = 'application/json';
  }
  await testApiHandler({
    appHandler: routeModule,
    params: request.params,
    url: request.url,
    test: async ({ fetch }) => {
      const response = await fetch({ method: request.method ?? 'GET', headers, body, ...(body instanceof ReadableStream ? { duplex: 'half' } : {}) } as RequestInit);
      const text = await response.text();
      let parsed: unknown;
      try {
        parsed = text ? JSON.parse(text) : undefined;
      } catch {
        parsed = undefined;
      }
      result = { status: response.status, headers: response.headers, text, body: parsed };
    },
  });
  // Every problem answer a route test provokes is public: it names no setting and carries no
  // database text (the log has those).
  if (result!.headers.get('content-type')?.startsWith('application/problem+json')) {
    const leaks = operatorDetailIn(result!.text);
    if (leaks.length > 0) throw new Error(`A public answer (${result!.status}) ${leaks.join('; ')}: ${result!.text.slice(0, 400)}`);
  }
  return result!;
}
