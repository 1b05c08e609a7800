import { createHash, timingSafeEqual } from 'node:crypto';
import { getConfig } from '../config.ts';
import { DomainError } from '../errors.ts';
import { bearerCredentials } from './authorization-header.ts';

export type WebhookName = 'subscription' | 'leagues';

/**
 * Check a webhook's shared secret. Both sides are digested first, so the comparison is constant-time
 * whatever the lengths, and every configured secret (current, then previous during a rotation) is
 * compared, so the time does not tell which one matched. Unset secrets fail closed.
 *   subscription: `Authorization: Bearer <SUBSCRIPTION_WEBHOOK_SECRET>` (what RevenueCat sends)
 *   leagues:      `x-webhook-secret: <LEAGUES_WEBHOOK_SECRET>`
 */
export function authenticateWebhook(request: Request, webhook: WebhookName): void {
  const secrets = getConfig().webhookSecrets[webhook];
  if (secrets.length === 0) {
    const variable = webhook === 'subscription' ? 'SUBSCRIPTION_WEBHOOK_SECRET' : 'LEAGUES_WEBHOOK_SECRET';
    throw new DomainError('webhook_not_configured', 'This webhook is not enabled on this server.', { retryAfterSeconds: 60, operatorDetail: `Set ${variable} to enable it.` });
  }
  const presented = webhook === 'subscription' ? bearerCredentials(request.headers.get('authorization')) : request.headers.get('x-webhook-secret');
  if (presented === null || !matchesAny(presented, secrets)) {
    const where = webhook === 'subscription' ? 'the "Authorization: Bearer <secret>" header' : 'the "x-webhook-secret" header';
    throw new DomainError('invalid_webhook_secret', `Missing or wrong webhook secret in ${where}.`, {
      challenge: webhook === 'subscription' ? { scheme: 'Bearer', realm: 'subscription-billing' } : { scheme: 'WebhookSecret', realm: 'leagues-sync' },
    });
  }
}

const digest = (value: string) => createHash('sha256').update(value, 'utf8').digest();

export function matchesAny(presented: string, secrets: readonly string[]): boolean {
  const presentedDigest = digest(presented);
  let matched = false;
  for (const secret of secrets) matched = timingSafeEqual(presentedDigest, digest(secret)) || matched;
  return matched;
}
