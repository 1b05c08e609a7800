import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import * as adminSyncRoute from '../../app/api/admin/billing/sync/route.ts';
import * as maintenanceRoute from '../../app/api/cron/maintenance/route.ts';
import { clientAddress, FailureThrottle, trustedClientAddress } from '../../lib/auth/failure-throttle.ts';
import { authenticateOperator, OPERATOR_SECRET_FAILURES, resetOperatorSecretThrottle } from '../../lib/auth/operator-secret.ts';
import { describeOn, suiteDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { callRoute } from '../support/http.ts';

/**
 * The operator's secrets (CRON_SECRET, ADMIN_API_SECRET) are at least 32 characters (tests/config)
 * and guessing at them is throttled: after OPERATOR_SECRET_FAILURES.maxFailures wrong ones from
 * one address in the window, that address gets 429 with Retry-After until the window ends, the
 * right secret included, on either route; other addresses are not affected.
 */
const CRON_SECRET = 'cron-secret-for-throttle-tests-0123456789';
const ADMIN_SECRET = 'admin-secret-for-throttle-tests-0123456789';
const { maxFailures, windowMs } = OPERATOR_SECRET_FAILURES;

describe('a failure throttle (pure, on an injected clock)', () => {
  const options = { maxFailures: 3, windowMs: 60_000, maxClients: 4 };

  it('refuses a client after maxFailures in the window until the window ends, and no one else', () => {
    const throttle = new FailureThrottle(options);
    for (let i = 0; i < 3; i++) {
      expect(throttle.blockedForMs('a', 1000 + i)).toBe(0);
      throttle.recordFailure('a', 1000 + i);
    }
    expect(throttle.blockedForMs('a', 1003)).toBe(60_000 - 3);
    expect(throttle.blockedForMs('a', 60_999)).toBe(1);
    expect(throttle.blockedForMs('b', 1003)).toBe(0);
    // The window ends: a new one starts with the next failure.
    expect(throttle.blockedForMs('a', 61_000)).toBe(0);
    throttle.recordFailure('a', 61_000);
    expect(throttle.blockedForMs('a', 61_001)).toBe(0);
  });

  it('remembers at most maxClients addresses, forgetting ended windows first, then the oldest', () => {
    const throttle = new FailureThrottle(options);
    for (const client of ['a', 'b', 'c', 'd']) for (let i = 0; i < 3; i++) throttle.recordFailure(client, 0);
    throttle.recordFailure('e', 10); // full: 'a', the oldest, is forgotten
    expect(['a', 'b', 'c', 'd'].map((client) => throttle.blockedForMs(client, 10) > 0)).toEqual([false, true, true, true]);
    for (let i = 0; i < 3; i++) throttle.recordFailure('f', 70_000); // b, c, d and e ended: forgotten, f fits
    expect(throttle.blockedForMs('f', 70_000)).toBe(60_000);
  });

  it('reads the address the nearest proxy wrote: the last X-Forwarded-For entry', () => {
    const at = (headers: Record<string, string>) => clientAddress(new Request('http://x.test/', { headers }));
    expect(at({ 'x-forwarded-for': '198.51.100.1' })).toBe('198.51.100.1');
    expect(at({ 'x-forwarded-for': '10.9.9.9, 198.51.100.1' })).toBe('198.51.100.1');
    expect(at({ 'x-real-ip': '198.51.100.2' })).toBe('198.51.100.2');
    expect(at({})).toBe('unknown');
  });

  // What the Node server writes into X-Forwarded-For before Next (lib/http/before-next.ts), off Vercel.
  it.each([
    { name: 'no proxy: the connection, whatever the client wrote', socket: '203.0.113.5', forwarded: '127.0.0.1', hops: 0, client: '203.0.113.5' },
    { name: 'an IPv4 client of a server on ::', socket: '::ffff:127.0.0.2', forwarded: undefined, hops: 0, client: '127.0.0.2' },
    { name: 'an IPv6 client', socket: '2001:db8::7', forwarded: undefined, hops: 0, client: '2001:db8::7' },
    { name: 'one proxy: the entry it appended', socket: '10.0.0.2', forwarded: '1.2.3.4, 198.51.100.7', hops: 1, client: '198.51.100.7' },
    { name: 'two proxies: the entry the outer one appended', socket: '10.0.0.2', forwarded: '1.2.3.4, 198.51.100.7, 10.0.0.1', hops: 2, client: '198.51.100.7' },
    { name: 'one proxy, skipped by the client: the connection', socket: '203.0.113.9', forwarded: undefined, hops: 1, client: '203.0.113.9' },
    { name: 'more hops than entries: the first of the chain', socket: '10.0.0.2', forwarded: '198.51.100.7', hops: 3, client: '198.51.100.7' },
    { name: 'no socket address', socket: undefined, forwarded: 'x', hops: 0, client: 'unknown' },
  ])('trusts, of where a request came from: $name', ({ socket, forwarded, hops, client }) => {
    expect(trustedClientAddress(socket, forwarded, hops)).toBe(client);
  });
});

describeOn('pglite')('guessing at the operator secrets over HTTP', () => {
  suiteDatabase('pglite');
  let restoreEnv: () => void;
  beforeAll(() => {
    restoreEnv = setEnv({ CRON_SECRET, ADMIN_API_SECRET: ADMIN_SECRET, LOCAL_DEV: '1' });
  });
  afterAll(() => restoreEnv());
  beforeEach(() => resetOperatorSecretThrottle());

  const cron = (authorization: string, address: string) => callRoute(maintenanceRoute, { headers: { authorization, 'x-forwarded-for': address } });
  const admin = (authorization: string, address: string) =>
    callRoute(adminSyncRoute, { method: 'POST', headers: { authorization, 'x-forwarded-for': address }, body: { app_user_id: 'x' } });

  it(`answers 429 with Retry-After after ${maxFailures} wrong secrets from one address, even to the right secret; other addresses go on`, async () => {
    const attacker = '203.0.113.7';
    for (let i = 0; i < maxFailures; i++) {
      const guess = i % 2 === 0 ? await cron(`Bearer guess-${i}-${'x'.repeat(32)}`, attacker) : await admin(`Bearer guess-${i}`, attacker);
      expect(guess.status).toBe(401);
    }
    for (const answer of [await cron('Bearer another-guess', attacker), await cron(`Bearer ${CRON_SECRET}`, attacker), await admin(`Bearer ${ADMIN_SECRET}`, attacker)]) {
      expect({ status: answer.status, code: answer.body?.code }).toEqual({ status: 429, code: 'rate_limited' });
      const retryAfter = Number(answer.headers.get('retry-after'));
      expect(retryAfter).toBeGreaterThan(windowMs / 1000 - 60);
      expect(retryAfter).toBeLessThanOrEqual(windowMs / 1000);
      expect(answer.body.retryAfter).toBe(retryAfter);
      // It says nothing of the secret or the setting.
      expect(answer.text).not.toMatch(/CRON_SECRET|ADMIN_API_SECRET|203\.0\.113\.7/);
    }
    expect((await cron(`Bearer ${CRON_SECRET}`, '198.51.100.20')).status).toBe(200);
  });

  it('forgets the failures when the window ends', () => {
    const request = (authorization: string) => new Request('http://x.test/api/cron/maintenance', { headers: { authorization, 'x-forwarded-for': '203.0.113.8' } });
    const start = Date.now();
    for (let i = 0; i < maxFailures; i++) expect(() => authenticateOperator(request('Bearer wrong'), 'cron', start)).toThrow(expect.objectContaining({ code: 'invalid_cron_secret' }));
    expect(() => authenticateOperator(request(`Bearer ${CRON_SECRET}`), 'cron', start + windowMs - 1)).toThrow(expect.objectContaining({ code: 'rate_limited' }));
    expect(() => authenticateOperator(request(`Bearer ${CRON_SECRET}`), 'cron', start + windowMs)).not.toThrow();
  });
});
