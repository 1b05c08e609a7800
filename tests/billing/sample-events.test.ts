import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as meRoute from '../../app/api/me/route.ts';
import * as billingRoute from '../../app/api/webhooks/subscription-billing/route.ts';
import { DEV_USER } from '../../lib/auth/dev-user.ts';
import { describeEventEffects } from '../../lib/billing/event-effects.ts';
import { buildSampleEvent, SAMPLE_EVENT_TYPES, type SamplePeriod } from '../../lib/billing/sample-events.ts';
import { billingWebhookBodySchema } from '../../lib/billing/webhook-body.ts';
import { describeOn, migratedEmbeddedDbDir, suiteDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { freePort } from '../../scripts/support/postgres-server.ts';
import { startRouteServer, type RouteServer } from '../support/route-server.ts';
import { testUser } from '../support/tokens.ts';

/**
 * Fresh sample events (`npm run sample-event`): RevenueCat-shaped, dated now, one user's events
 * consistent with each other, posted with the right secret; each makes GET /api/me show what it
 * means now.
 */
describe('sample events, as built', () => {
  const now = new Date('2026-11-27T10:00:00Z');
  const build = (type: (typeof SAMPLE_EVENT_TYPES)[number], period: SamplePeriod | null = null, reason?: string) =>
    buildSampleEvent({ type, user: DEV_USER.id, now, environment: 'SANDBOX', period, reason, to: 'someone-else' });

  it.each(SAMPLE_EVENT_TYPES)('%s: a body the webhook accepts, dated now, that means what its type says', (type) => {
    const { body } = build(type, build('INITIAL_PURCHASE').period);
    expect(billingWebhookBodySchema.safeParse(body).success).toBe(true);
    expect(body.event).toMatchObject({ type, event_timestamp_ms: now.getTime(), environment: 'SANDBOX', store: 'APP_STORE' });
    const plan = describeEventEffects(body.event, now);
    const expected: Record<string, unknown> = {
      INITIAL_PURCHASE: 'grant', RENEWAL: 'grant', UNCANCELLATION: 'grant', SUBSCRIPTION_EXTENDED: 'grant', REFUND_REVERSED: 'grant', NON_RENEWING_PURCHASE: 'grant',
      TEMPORARY_ENTITLEMENT_GRANT: 'temporary_grant', CANCELLATION: 'flag', BILLING_ISSUE: 'flag', SUBSCRIPTION_PAUSED: 'flag', PRODUCT_CHANGE: 'flag', EXPIRATION: 'revoke',
    };
    if (type === 'TEST') expect(plan.ignoredReason).toBe('record_only_type');
    else if (type === 'TRANSFER') expect(plan).toMatchObject({ move: 'transfer', movedIds: [DEV_USER.id], subjectId: 'someone-else' });
    else expect(plan.effects.map((effect) => [effect.entitlementId, effect.action])).toEqual([['pro', expected[type]]]);
  });

  it('continues the user\'s subscription: a renewal starts the next period of the same lineage, a cancellation names its end, a refund and an expiration end it now', () => {
    const first = build('INITIAL_PURCHASE');
    const period = first.period!;
    expect(first.body.event).toMatchObject({ purchased_at_ms: now.getTime(), expiration_at_ms: Date.parse('2026-12-27T10:00:00Z'), original_transaction_id: period.originalTransactionId });
    const cancelled = build('CANCELLATION', period);
    expect(cancelled.body.event).toMatchObject({ cancel_reason: 'UNSUBSCRIBE', expiration_at_ms: period.expiresAtMs, transaction_id: period.transactionId });
    const renewed = build('RENEWAL', period);
    expect(renewed.body.event).toMatchObject({ original_transaction_id: period.originalTransactionId, purchased_at_ms: now.getTime() });
    expect(renewed.body.event.transaction_id).not.toBe(period.transactionId);
    expect(build('CANCELLATION', period, 'CUSTOMER_SUPPORT').body.event).toMatchObject({ cancel_reason: 'CUSTOMER_SUPPORT', expiration_at_ms: now.getTime(), price: -9.99 });
    expect(build('EXPIRATION', period).body.event).toMatchObject({ expiration_at_ms: now.getTime(), expiration_reason: 'UNSUBSCRIBE' });
    expect(build('BILLING_ISSUE', period).body.event).toMatchObject({ expiration_at_ms: period.expiresAtMs, grace_period_expiration_at_ms: period.expiresAtMs! + 16 * 86_400_000 });
  });
});

describeOn('pglite')('npm run sample-event against the running service', () => {
  suiteDatabase('pglite');
  let server: RouteServer;
  let dataDir: string;
  let restoreEnv: () => void;
  beforeAll(async () => {
    server = await startRouteServer([[/^\/api\/webhooks\/subscription-billing$/, billingRoute], [/^\/api\/me$/, meRoute]]);
    dataDir = mkdtempSync(path.join(tmpdir(), 'account-link-samples-'));
    restoreEnv = setEnv({ EMBEDDED_DB_DIR: migratedEmbeddedDbDir(dataDir), SUBSCRIPTION_WEBHOOK_SECRET: undefined, LOCAL_DEV: undefined, DATABASE_URL: undefined, BILLING_SYNC_AFTER: 'none' });
  });
  afterAll(async () => {
    restoreEnv();
    await server.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const sample = (args: string[], env: Record<string, string> = {}) => promisify(execFile)(process.execPath, ['scripts/sample-event.ts', '--base-url', server.url, ...args], {
    env: { ...process.env, EMBEDDED_DB_DIR: path.join(dataDir, 'pglite'), LOG_LEVEL: 'silent', DATABASE_URL: '', SUPABASE_URL: '', VERCEL: '', LOCAL_DEV: '', SUBSCRIPTION_WEBHOOK_SECRET: '', ...env },
    timeout: 60_000,
  });
  const pro = async (userId: string) => {
    const me = await fetch(`${server.url}/api/me`, { headers: { authorization: (await testUser({ userId })).authorization } });
    return ((await me.json()) as { entitlements: Record<string, unknown>[] }).entitlements.find((entitlement) => entitlement.id === 'pro');
  };

  it('for the dev user: active now after INITIAL_PURCHASE, cancelled after CANCELLATION, expired after EXPIRATION', async () => {
    const started = Date.now();
    const bought = await sample(['--type', 'INITIAL_PURCHASE']);
    expect(bought.stdout).toMatch(new RegExp(`^INITIAL_PURCHASE [0-9A-F-]{36} for ${DEV_USER.id}: com\\.example\\.pro\\.monthly until \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d(:\\d\\d)? UTC -> 200 \\{"received":true\\}\\n$`));
    expect(await pro(DEV_USER.id)).toMatchObject({ active: true, status: 'active', willRenew: true, environment: 'SANDBOX' });
    const expiresAt = Date.parse(String((await pro(DEV_USER.id))!.expiresAt));
    expect(expiresAt - started).toBeGreaterThan(27 * 86_400_000);

    expect((await sample(['--type', 'CANCELLATION'])).stdout).toMatch(/^CANCELLATION [0-9A-F-]{36} for .* -> 200 \{"received":true\}\n$/);
    // The same period: its end as the purchase said.
    expect(await pro(DEV_USER.id)).toMatchObject({ active: true, status: 'cancelled_active', willRenew: false, expiresAt: new Date(expiresAt).toISOString() });

    expect((await sample(['--type', 'EXPIRATION'])).stdout).toContain(' -> 200 {"received":true}');
    expect(await pro(DEV_USER.id)).toMatchObject({ active: false, status: 'expired' });

    // A RENEWAL continues the same subscription: access again, renewing.
    await sample(['--type', 'RENEWAL']);
    expect(await pro(DEV_USER.id)).toMatchObject({ active: true, status: 'active', willRenew: true });
    const state = JSON.parse(readFileSync(path.join(dataDir, 'sample-events.json'), 'utf8'));
    expect(Object.keys(state)).toEqual([`${server.url} ${DEV_USER.id}`]);
  });

  it('keeps each user\'s subscription when runs for different users overlap', async () => {
    const users = [randomUUID(), randomUUID(), randomUUID()];
    await Promise.all(users.map((user) => sample(['--type', 'INITIAL_PURCHASE', '--user', user])));
    const state = JSON.parse(readFileSync(path.join(dataDir, 'sample-events.json'), 'utf8')) as Record<string, unknown>;
    for (const user of users) expect(Object.keys(state), user).toContain(`${server.url} ${user}`);
  });

  // (Twenty runs of the script, three at a time: each is mostly a process starting.)
  it('a refund (CANCELLATION CUSTOMER_SUPPORT) for another user; every type is answered 200', { timeout: 120_000 }, async () => {
    const user = randomUUID();
    await sample(['--type', 'INITIAL_PURCHASE', '--user', user]);
    expect((await sample(['--type', 'CANCELLATION', '--reason', 'CUSTOMER_SUPPORT', '--user', user])).stdout).toMatch(/^CANCELLATION CUSTOMER_SUPPORT .* -> 200/);
    expect(await pro(user)).toMatchObject({ active: false, status: 'refunded' });
    const types = [...SAMPLE_EVENT_TYPES];
    const answered: Record<string, string> = {};
    await Promise.all(Array.from({ length: 3 }, async () => {
      for (let type = types.shift(); type; type = types.shift()) answered[type] = (await sample(['--type', type, '--user', user])).stdout;
    }));
    for (const type of SAMPLE_EVENT_TYPES) expect(answered[type], type).toContain(' -> 200 {"received":true}');
  });

  it('signs with the configured secret when one is set, and says when the service is not there or the type is unknown', async () => {
    const secret = 'sample-secret-0123456789abcdefghijkl';
    const restore = setEnv({ SUBSCRIPTION_WEBHOOK_SECRET: secret, LOCAL_DEV: '1' });
    try {
      expect((await sample(['--type', 'TEST'], { SUBSCRIPTION_WEBHOOK_SECRET: secret, LOCAL_DEV: '1' })).stdout).toContain(' -> 200 {"received":true}');
      await expect(sample(['--type', 'TEST'], { SUBSCRIPTION_WEBHOOK_SECRET: 'another-secret-0123456789abcdefgh', LOCAL_DEV: '1' }))
        .rejects.toMatchObject({ code: 1, stdout: expect.stringContaining(' -> 401 ') });
    } finally {
      restore();
    }
    await expect(promisify(execFile)(process.execPath, ['scripts/sample-event.ts', '--type', 'TEST', '--base-url', `http://127.0.0.1:${await freePort()}`], { env: { ...process.env, EMBEDDED_DB_DIR: path.join(dataDir, 'pglite') } }))
      .rejects.toMatchObject({ code: 1, stderr: expect.stringContaining('npm run dev') });
    await expect(sample(['--type', 'PURCHASE'])).rejects.toMatchObject({ code: 2, stderr: expect.stringContaining('Usage:') });
    await expect(sample(['--type', 'FOO'])).rejects.toMatchObject({
      code: 2, stderr: expect.stringContaining(`Unknown event type FOO: the known ones are ${SAMPLE_EVENT_TYPES.join(', ')}.`),
    });
    await expect(sample(['--type', 'EXPIRATION', '--reason', 'NOPE'])).rejects.toMatchObject({ code: 2, stderr: expect.stringContaining('--reason for EXPIRATION is one of') });
  });
});
