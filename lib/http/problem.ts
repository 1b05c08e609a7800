import type { DomainError, DomainErrorCode, FieldError } from '../errors.ts';

export { fieldErrors, type FieldError } from '../errors.ts';

/**
 * application/problem+json (RFC 9457) errors. Every error the API answers has a stable snake_case
 * `code`; its HTTP status and title live in this one table, so a code means the same everywhere.
 * The domain raises DomainError with a code (lib/errors.ts); this layer alone knows statuses.
 */

export const PROBLEM_CATALOG = {
  // Request shape
  invalid_request: [400, 'Invalid request'],
  invalid_json: [400, 'Malformed JSON'],
  unsupported_media_type: [415, 'Unsupported media type'],
  payload_too_large: [413, 'Payload too large'],
  method_not_allowed: [405, 'Method not allowed'],
  request_timeout: [408, 'Request timeout'],
  expectation_failed: [417, 'Expectation failed'],
  misdirected_request: [421, 'Misdirected request'],
  request_header_fields_too_large: [431, 'Request header fields too large'],
  not_found: [404, 'Not found'],
  // Session tokens
  missing_token: [401, 'Missing session token'],
  invalid_token: [401, 'Invalid session token'],
  token_expired: [401, 'Session token expired'],
  session_revoked: [401, 'Session signed out'],
  anonymous_user_not_allowed: [403, 'Anonymous users may not do this'],
  forbidden_role: [403, 'Token role not allowed'],
  auth_unavailable: [503, 'Auth server unavailable'],
  // Webhook secrets
  invalid_webhook_secret: [401, 'Invalid webhook secret'],
  webhook_not_configured: [503, 'Webhook not configured'],
  // Wallet links
  invalid_address: [400, 'Invalid wallet address'],
  unsupported_chain: [400, 'Chain not allowed'],
  challenge_not_found: [400, 'Challenge not found'],
  challenge_expired: [400, 'Challenge expired'],
  challenge_already_used: [409, 'Challenge already used'],
  invalid_message: [422, 'Message is not the issued challenge'],
  address_mismatch: [422, 'Address does not match the challenge'],
  invalid_signature: [422, 'Signature does not verify'],
  unsupported_signature_type: [422, 'Unsupported signature type'],
  chain_unavailable: [503, 'Chain RPC unavailable'],
  wallet_already_linked: [409, 'Wallet already linked to another account'],
  too_many_wallets: [409, 'Too many wallets'],
  rate_limited: [429, 'Too many requests'],
  link_not_found: [404, 'Link not found'],
  // Billing sync (RevenueCat's REST API) and the operator routes
  sync_not_configured: [503, 'RevenueCat sync not configured'],
  upstream_unavailable: [503, 'RevenueCat unavailable'],
  upstream_rejected: [502, 'RevenueCat refused the request'],
  upstream_invalid: [502, 'RevenueCat answered with something else'],
  subscriber_unknown: [404, 'Unknown subscriber'],
  invalid_cron_secret: [401, 'Invalid cron secret'],
  cron_not_configured: [503, 'Cron not configured'],
  invalid_admin_secret: [401, 'Invalid admin secret'],
  admin_not_configured: [503, 'Admin API not configured'],
  // Live updates: a deployment sends them through Supabase Realtime, not this service's stream
  live_updates_not_served: [404, 'Live updates not served here'],
  // Outbound events (the operator routes)
  event_not_found: [404, 'Event not found'],
  endpoint_not_found: [404, 'Endpoint not found'],
  // Server side
  conflict: [409, 'Conflict'],
  database_unavailable: [503, 'Database unavailable'],
  service_misconfigured: [503, 'Service misconfigured'],
  internal_error: [500, 'Internal error'],
} as const satisfies Record<string, readonly [number, string]>;

export type ProblemCode = keyof typeof PROBLEM_CATALOG;

export interface ProblemOptions {
  detail?: string;
  errors?: FieldError[];
  headers?: Record<string, string>;
  /** Extra members for the problem body (e.g. `retryAfter`). */
  extra?: Record<string, unknown>;
}

/** A client-facing error: thrown anywhere in a request, turned into problem+json by the route wrapper. */
export class ApiError extends Error {
  override name = 'ApiError';
  readonly code: ProblemCode;
  readonly status: number;
  readonly options: ProblemOptions;

  constructor(code: ProblemCode, options: ProblemOptions = {}) {
    super(options.detail ?? PROBLEM_CATALOG[code][1]);
    this.code = code;
    this.status = PROBLEM_CATALOG[code][0];
    this.options = options;
  }
}

/** Seconds a sender should wait before retrying after a 429 or 503 (RevenueCat retries on its own schedule). */
export const RETRY_AFTER_SECONDS = 5;

export function isProblemCode(value: string): value is ProblemCode {
  return Object.hasOwn(PROBLEM_CATALOG, value);
}

/** A problem's status, headers and JSON body: what problemResponse answers, for a writer without a Response. */
export function problemParts(error: ApiError, requestId: string): { status: number; headers: Record<string, string>; body: string } {
  const [status, title] = PROBLEM_CATALOG[error.code];
  const body = {
    type: `/docs#problem-${error.code}`,
    title,
    status,
    detail: error.options.detail ?? title,
    code: error.code,
    requestId,
    ...(error.options.errors ? { errors: error.options.errors } : {}),
    ...error.options.extra,
  };
  return {
    status,
    headers: {
      'content-type': 'application/problem+json',
      'cache-control': 'no-store',
      ...error.options.headers,
    },
    body: JSON.stringify(body),
  };
}

export function problemResponse(error: ApiError, requestId: string): Response {
  const { status, headers, body } = problemParts(error, requestId);
  return new Response(body, { status, headers });
}

// RFC 6750 3.1: a bearer token that was sent and refused is `invalid_token`, with a description;
// when none was sent, the challenge carries no error attribute.
const REFUSED_BEARER_TOKEN: ReadonlySet<DomainErrorCode> = new Set(['invalid_token', 'token_expired', 'session_revoked']);

/**
 * A domain error as the API answers it: the catalog's status, `WWW-Authenticate` for a 401 that
 * names the credential it wanted, `Retry-After` (and `retryAfter` for 429) when waiting helps.
 */
export function problemFromDomainError(error: DomainError): ApiError {
  const status = PROBLEM_CATALOG[error.code][0];
  const headers: Record<string, string> = {};
  let extra: Record<string, unknown> | undefined;
  if (status === 401 && error.challenge) {
    const { scheme, realm } = error.challenge;
    headers['www-authenticate'] = REFUSED_BEARER_TOKEN.has(error.code)
      ? `${scheme} realm="${realm}", error="invalid_token", error_description="${error.detail.replace(/["\\]/g, "'")}"`
      : `${scheme} realm="${realm}"`;
  }
  if (status === 429 || status === 503) {
    const seconds = Math.max(1, Math.ceil(error.retryAfterSeconds ?? RETRY_AFTER_SECONDS));
    headers['retry-after'] = String(seconds);
    if (status === 429) extra = { retryAfter: seconds };
  }
  return new ApiError(error.code, { detail: error.detail, errors: error.errors, headers, extra });
}
