/**
 * CORS for a browser frontend on another origin than the service (a separate web app): the
 * origins in CORS_ORIGINS, and only they, may call the API from a browser. Not needed by mobile apps
 * (no browser, no same-origin rule) nor by a frontend in this same Next project (same origin).
 *
 * Credentials travel as `Authorization: Bearer`, never as cookies, so no Allow-Credentials, and an
 * allowed origin is echoed back, never `*`.
 *
 * Once CORS_ORIGINS lists an origin, every answer depends on the request's Origin (an allowed one
 * gets the headers, any other gets none), so every answer says so in `Vary`, refusals and answers
 * to other origins included: a cache in between must never hand one origin's answer to another.
 * Without CORS_ORIGINS no answer depends on it, and none says so.
 */

/** Headers a cross-origin caller may send besides the CORS-safelisted ones. */
const ALLOWED_REQUEST_HEADERS = ['authorization', 'content-type', 'x-request-id'];
/** Headers a cross-origin caller's script may read (problem+json bodies say the rest). */
const EXPOSED_RESPONSE_HEADERS = 'x-request-id, retry-after, www-authenticate';
/** How long a browser may reuse a preflight answer (seconds). */
const PREFLIGHT_MAX_AGE_SECONDS = 600;

/** What an answer's CORS headers depend on: the request's Origin (and for a preflight, what it asks for). */
const RESPONSE_VARY = 'Origin';
const PREFLIGHT_VARY = 'Origin, Access-Control-Request-Method, Access-Control-Request-Headers';

/**
 * The headers of an answer to a request from `origin`: the CORS headers when it is allowed, and
 * `Vary: Origin` whenever any origin is (see above).
 */
export function corsResponseHeaders(origin: string | null, allowedOrigins: readonly string[]): Record<string, string> {
  if (allowedOrigins.length === 0) return {};
  if (!origin || !allowedOrigins.includes(origin)) return { vary: RESPONSE_VARY };
  return { 'access-control-allow-origin': origin, 'access-control-expose-headers': EXPOSED_RESPONSE_HEADERS, vary: RESPONSE_VARY };
}

/**
 * The headers of the answer to a preflight (OPTIONS with Access-Control-Request-Method) from
 * `origin` for a path that allows `methods`. A refused preflight gets none but `Vary` (whenever
 * any origin is allowed): the browser then refuses the request itself.
 */
export function corsPreflightHeaders(
  origin: string | null,
  allowedOrigins: readonly string[],
  requestedMethod: string | null,
  requestedHeaders: string | null,
  methods: readonly string[],
): Record<string, string> {
  if (allowedOrigins.length === 0) return {};
  const refused = { vary: PREFLIGHT_VARY };
  if (!origin || !allowedOrigins.includes(origin) || !requestedMethod || !methods.includes(requestedMethod)) return refused;
  const asked = (requestedHeaders ?? '').split(',').map((name) => name.trim().toLowerCase()).filter(Boolean);
  if (asked.some((name) => !ALLOWED_REQUEST_HEADERS.includes(name))) return refused;
  return {
    'access-control-allow-origin': origin,
    'access-control-allow-methods': methods.join(', '),
    'access-control-allow-headers': ALLOWED_REQUEST_HEADERS.join(', '),
    'access-control-max-age': String(PREFLIGHT_MAX_AGE_SECONDS),
    vary: PREFLIGHT_VARY,
  };
}
