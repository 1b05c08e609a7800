import type { z } from 'zod';

/**
 * The domain's error type: what went wrong (a stable snake_case code) and what to do about it (a
 * detail for a person). Domain modules (wallets, auth, billing, leagues) raise it and know nothing
 * of HTTP; `lib/http` alone maps each code to a status, a title and problem+json headers, so the
 * arrows point one way: routes -> http -> domain.
 */

/** Every outcome a domain module reports, by code. lib/http/problem.ts gives each a status. */
export type DomainErrorCode =
  // Input
  | 'invalid_request'
  // Session tokens
  | 'missing_token'
  | 'invalid_token'
  | 'token_expired'
  | 'session_revoked'
  | 'anonymous_user_not_allowed'
  | 'forbidden_role'
  | 'auth_unavailable'
  // Webhook secrets
  | 'invalid_webhook_secret'
  | 'webhook_not_configured'
  // Wallet links (some are raised by the SQL functions, see lib/db/errors.ts)
  | 'invalid_address'
  | 'unsupported_chain'
  | 'challenge_not_found'
  | 'challenge_expired'
  | 'challenge_already_used'
  | 'invalid_message'
  | 'address_mismatch'
  | 'invalid_signature'
  | 'unsupported_signature_type'
  | 'chain_unavailable'
  | 'wallet_already_linked'
  | 'too_many_wallets'
  | 'rate_limited'
  | 'link_not_found'
  // Billing sync with RevenueCat's REST API, and the routes that run it
  | 'sync_not_configured'
  | 'upstream_unavailable'
  | 'upstream_rejected'
  | 'upstream_invalid'
  | 'subscriber_unknown'
  | 'invalid_cron_secret'
  | 'cron_not_configured'
  | 'invalid_admin_secret'
  | 'admin_not_configured'
  // The account's live updates (GET /api/me/events)
  | 'live_updates_not_served'
  // Outbound events, as an operator sees and replays them
  | 'event_not_found'
  | 'endpoint_not_found';

export interface FieldError {
  path: string;
  message: string;
}

/**
 * The credential a caller failed to present, by scheme and realm (RFC 9110 section 11), so the
 * HTTP layer can say so in `WWW-Authenticate` without the domain writing headers.
 */
export interface CredentialChallenge {
  scheme: string;
  realm: string;
}

export interface DomainErrorOptions {
  /** Every failing field, for validation errors. */
  errors?: FieldError[];
  /** When waiting may help (a rate limit, a dependency that is down): how long, in seconds. */
  retryAfterSeconds?: number;
  challenge?: CredentialChallenge;
  /**
   * What only the operator should read (which setting to check, what an outside service answered,
   * what the database said): written to the log with the request, never part of an answer, which
   * names no setting and carries no upstream or database text.
   */
  operatorDetail?: string;
}

export class DomainError extends Error {
  override name = 'DomainError';
  readonly code: DomainErrorCode;
  readonly detail: string;
  readonly errors?: FieldError[];
  readonly retryAfterSeconds?: number;
  readonly challenge?: CredentialChallenge;
  readonly operatorDetail?: string;

  constructor(code: DomainErrorCode, detail: string, options: DomainErrorOptions = {}) {
    super(detail);
    this.code = code;
    this.detail = detail;
    this.errors = options.errors;
    this.retryAfterSeconds = options.retryAfterSeconds;
    this.challenge = options.challenge;
    this.operatorDetail = options.operatorDetail;
  }
}

/** Turn zod issues into `[{ path, message }]` with dotted paths (`payload.address`). */
/** At most this many errors are listed (a body of a million unknown keys is not answered with a million). */
export const MAX_FIELD_ERRORS = 100;
/** The path of the last entry when more were found than are listed (its message says how many). */
export const MORE_FIELD_ERRORS_PATH = '(more)';

export function fieldErrors(issues: readonly { path: readonly PropertyKey[]; message: string; code?: string; keys?: readonly string[] }[]): FieldError[] {
  const pathOf = (path: readonly PropertyKey[]) => (path.length === 0 ? '(body)' : path.map(String).join('.'));
  // Unknown members are named each at its own path (zod reports them together, at their parent's).
  const errors = issues.flatMap((issue) => issue.code === 'unrecognized_keys' && issue.keys?.length
    ? issue.keys.map((key) => ({ path: pathOf([...issue.path, key]), message: 'is not a known member' }))
    : [{ path: pathOf(issue.path), message: issue.message }]);
  if (errors.length <= MAX_FIELD_ERRORS) return errors;
  return [...errors.slice(0, MAX_FIELD_ERRORS), { path: MORE_FIELD_ERRORS_PATH, message: `and ${errors.length - MAX_FIELD_ERRORS} more errors` }];
}

/** Validate with a zod schema; failures are `invalid_request` listing every failing path. */
export function parseWithSchema<S extends z.ZodType>(schema: S, value: unknown, detail = 'The request body is invalid.'): z.output<S> {
  const result = schema.safeParse(value);
  if (!result.success) throw new DomainError('invalid_request', detail, { errors: fieldErrors(result.error.issues) });
  return result.data;
}
