import { describe, expect, it } from 'vitest';
import { authenticateWebhook, matchesAny } from '../../lib/auth/webhook-secret.ts';
import { DomainError } from '../../lib/errors.ts';
import { setEnv } from '../support/env.ts';

const SECRET = 'whsec_current_3f9a8b7c6d5e4f3a2b1c';
const PREVIOUS = 'whsec_previous_0a1b2c3d4e5f6a7b8c9d';

function codeFor(headers: [string, string][], webhook: 'subscription' | 'leagues'): string {
  const request = new Request('http://localhost/hook', { method: 'POST', headers: new Headers(headers) });
  try {
    authenticateWebhook(request, webhook);
    return 'ok';
  } catch (error) {
    return error instanceof DomainError ? error.code : String(error);
  }
}

// The same matrix for both webhooks; only where the secret travels differs.
const matrix: { name: string; value: (secret: string) => string[]; expected: string }[] = [
  { name: 'right secret', value: (s) => [s], expected: 'ok' },
  { name: 'previous secret', value: () => [PREVIOUS], expected: 'ok' },
  { name: 'wrong secret', value: () => ['whsec_wrong'], expected: 'invalid_webhook_secret' },
  { name: 'truncated', value: (s) => [s.slice(0, -1)], expected: 'invalid_webhook_secret' },
  { name: 'wrong case', value: (s) => [s.toUpperCase()], expected: 'invalid_webhook_secret' },
  { name: 'trailing space inside', value: (s) => [`${s}x`], expected: 'invalid_webhook_secret' },
  { name: 'duplicate header', value: (s) => [s, s], expected: 'invalid_webhook_secret' },
  { name: '8 KiB value', value: () => ['a'.repeat(8192)], expected: 'invalid_webhook_secret' },
  { name: 'missing', value: () => [], expected: 'invalid_webhook_secret' },
];

describe.each([
  { webhook: 'subscription' as const, header: 'authorization', wrap: (v: string) => `Bearer ${v}`, env: 'SUBSCRIPTION_WEBHOOK_SECRET' },
  { webhook: 'leagues' as const, header: 'x-webhook-secret', wrap: (v: string) => v, env: 'LEAGUES_WEBHOOK_SECRET' },
])('the $webhook webhook secret ($header)', ({ webhook, header, wrap, env }) => {
  it.each(matrix)('$name -> $expected', ({ value, expected }) => {
    const restore = setEnv({ [env]: SECRET, [`${env}_PREVIOUS`]: PREVIOUS, LOCAL_DEV: '1' });
    try {
      expect(codeFor(value(SECRET).map((v) => [header, wrap(v)]), webhook)).toBe(expected);
    } finally {
      restore();
    }
  });

  it('fails closed when unset outside local mode: nothing is accepted', () => {
    const deployable = { DATABASE_URL: 'postgres://db/app', SUPABASE_JWT_SECRET: 'j'.repeat(40), APP_ORIGIN: 'https://app.example.com', SUBSCRIPTION_WEBHOOK_SECRET: 'billing-secret-0123456789abcdef01234' };
    const restore = setEnv({ ...deployable, [env]: undefined, [`${env}_PREVIOUS`]: undefined });
    try {
      // The billing secret is required: the whole configuration is refused (503 service_misconfigured).
      // The leagues webhook is optional: its route alone answers 503 webhook_not_configured.
      const expected = webhook === 'subscription' ? new RegExp(`^ConfigError: .*${env}`) : /^webhook_not_configured$/;
      expect(codeFor([[header, wrap('')], [header, wrap('anything')]], webhook)).toMatch(expected);
    } finally {
      restore();
    }
  });
});

describe('the billing webhook reads only the Bearer scheme', () => {
  it('refuses the secret under Basic or bare', () => {
    const restore = setEnv({ SUBSCRIPTION_WEBHOOK_SECRET: SECRET, LOCAL_DEV: '1' });
    try {
      expect(codeFor([['authorization', `Basic ${SECRET}`]], 'subscription')).toBe('invalid_webhook_secret');
      expect(codeFor([['authorization', SECRET]], 'subscription')).toBe('invalid_webhook_secret');
    } finally {
      restore();
    }
  });
});

describe('matchesAny', () => {
  it('compares digests, so any length is fine', () => {
    expect(matchesAny('a', ['a'])).toBe(true);
    expect(matchesAny('', ['a'])).toBe(false);
    expect(matchesAny('a'.repeat(100_000), ['a'])).toBe(false);
    expect(matchesAny('b', ['a', 'b'])).toBe(true);
  });
});
