/**
 * application/problem+json (RFC 9457) errors. Every error the API answers has a stable snake_case
 * `code`; its HTTP status and title live in this one table, so a code means the same everywhere.
 */

export const PROBLEM_CATALOG = {
  // Request shape
  invalid_request: [400, 'Invalid request'],
  invalid_json: [400, 'Malformed JSON'],
  unsupported_media_type: [415, 'Unsupported media type'],
  payload_too_large: [413, 'Payload too large'],
  method_not_allowed: [405, 'Method not allowed'],
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
  wallet_already_linked: [409, 'Wallet already linked to another account'],
  too_many_wallets: [409, 'Too many wallets'],
  rate_limited: [429, 'Too many requests'],
  link_not_found: [404, 'Link not found'],
  // Server side
  conflict: [409, 'Conflict'],
  database_unavailable: [503, 'Database unavailable'],
  service_misconfigured: [503, 'Service misconfigured'],
  internal_error: [500, 'Internal error'],
} as const satisfies Record<string, readonly [number, string]>;

export type ProblemCode = keyof typeof PROBLEM_CATALOG;

export interface FieldError {
  path: string;
  message: string;
}

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

export function problemResponse(error: ApiError, requestId: string): Response {
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
  return new Response(JSON.stringify(body), {
    status,
    headers: {
      'content-type': 'application/problem+json',
      'cache-control': 'no-store',
      ...error.options.headers,
    },
  });
}

/** Turn zod issues into `errors: [{ path, message }]` with JSON-pointer-ish dotted paths. */
export function fieldErrors(issues: readonly { path: readonly PropertyKey[]; message: string }[]): FieldError[] {
  return issues.map((issue) => ({
    path: issue.path.length === 0 ? '(body)' : issue.path.map(String).join('.'),
    message: issue.message,
  }));
}
