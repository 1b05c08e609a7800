import { getConfig } from '../config.ts';
import { DomainError } from '../errors.ts';
import { bearerCredentials } from './authorization-header.ts';
import { matchesAny } from './webhook-secret.ts';

export type OperatorRole = 'cron' | 'admin';

const ROLES = {
  cron: { variable: 'CRON_SECRET', secret: () => getConfig().cronSecret, invalid: 'invalid_cron_secret', missing: 'cron_not_configured' },
  admin: { variable: 'ADMIN_API_SECRET', secret: () => getConfig().adminSecret, invalid: 'invalid_admin_secret', missing: 'admin_not_configured' },
} as const;

/**
 * Check `Authorization: Bearer <secret>` for the routes only Vercel Cron (CRON_SECRET, its own
 * convention) or an operator (ADMIN_API_SECRET) may call. Each accepts its own secret only, compared
 * in constant time; an unset secret fails closed (503 naming the variable).
 */
export function authenticateOperator(request: Request, role: OperatorRole): void {
  const { variable, secret, invalid, missing } = ROLES[role];
  const expected = secret();
  if (!expected) throw new DomainError(missing, `This route is off: set ${variable} on the server.`, { retryAfterSeconds: 3600 });
  const presented = bearerCredentials(request.headers.get('authorization'));
  if (presented === null || !matchesAny(presented, [expected])) {
    throw new DomainError(invalid, `Missing or wrong secret in the "Authorization: Bearer <${variable}>" header.`, {
      challenge: { scheme: 'Bearer', realm: role },
    });
  }
}
