import { getConfig } from '../config.ts';
import { DomainError } from '../errors.ts';
import { bearerCredentials } from './authorization-header.ts';
import { clientAddress, FailureThrottle } from './failure-throttle.ts';
import { matchesAny } from './webhook-secret.ts';

export type OperatorRole = 'cron' | 'admin';

const ROLES = {
  cron: { variable: 'CRON_SECRET', secret: () => getConfig().cronSecret, invalid: 'invalid_cron_secret', missing: 'cron_not_configured' },
  admin: { variable: 'ADMIN_API_SECRET', secret: () => getConfig().adminSecret, invalid: 'invalid_admin_secret', missing: 'admin_not_configured' },
} as const;

/** Wrong operator secrets one address may send in a window before it is refused (429) until the window ends. */
export const OPERATOR_SECRET_FAILURES = { maxFailures: 10, windowMs: 15 * 60_000 } as const;

// One per instance (see lib/auth/failure-throttle.ts for why not in the database).
let throttle = newThrottle();

function newThrottle(): FailureThrottle {
  return new FailureThrottle({ ...OPERATOR_SECRET_FAILURES, maxClients: 10_000 });
}

/** Forget every address's failures (tests). */
export function resetOperatorSecretThrottle(): void {
  throttle = newThrottle();
}

/**
 * Check `Authorization: Bearer <secret>` for the routes only Vercel Cron (CRON_SECRET, its own
 * convention) or an operator (ADMIN_API_SECRET) may call. Each accepts its own secret only, compared
 * in constant time; an unset secret fails closed (503; the answer names no setting, the log does).
 * An address that sent OPERATOR_SECRET_FAILURES.maxFailures wrong ones (either route) in the window
 * gets 429 with Retry-After until it ends, before its secret is even compared.
 */
export function authenticateOperator(request: Request, role: OperatorRole, now = Date.now()): void {
  const { variable, secret, invalid, missing } = ROLES[role];
  const expected = secret();
  if (!expected) {
    throw new DomainError(missing, 'This route is not enabled on this server.', { retryAfterSeconds: 3600, operatorDetail: `Set ${variable} to enable it.` });
  }
  const client = clientAddress(request);
  const blockedMs = throttle.blockedForMs(client, now);
  if (blockedMs > 0) {
    throw new DomainError('rate_limited', 'Too many wrong secrets from this address; try again later.', {
      retryAfterSeconds: Math.ceil(blockedMs / 1000),
      operatorDetail: `${role} route: ${OPERATOR_SECRET_FAILURES.maxFailures} wrong secrets from ${client}; refused until the window ends.`,
    });
  }
  const presented = bearerCredentials(request.headers.get('authorization'));
  if (presented === null || !matchesAny(presented, [expected])) {
    throttle.recordFailure(client, now);
    throw new DomainError(invalid, 'Missing or wrong secret in the "Authorization: Bearer <secret>" header.', {
      challenge: { scheme: 'Bearer', realm: role },
    });
  }
}
