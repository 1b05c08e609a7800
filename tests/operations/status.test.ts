import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { promisify } from 'node:util';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import * as statusRoute from '../../app/api/admin/status/route.ts';
import { resetOperatorSecretThrottle } from '../../lib/auth/operator-secret.ts';
import * as sweepRoute from '../../app/api/cron/billing-sync/route.ts';
import * as maintenanceRoute from '../../app/api/cron/maintenance/route.ts';
import * as leaguesRoute from '../../app/api/webhooks/leagues-sync/route.ts';
import { DEV_ADMIN_SECRET, DEV_WEBHOOK_SECRETS } from '../../lib/config.ts';
import { closeDatabase } from '../../lib/db/index.ts';
import { readMigrationFiles } from '../../lib/db/migrate.ts';
import { describeStatus } from '../../lib/operations/status.ts';
import { serviceStatusSchema } from '../../lib/openapi/responses.ts';
import { fixture } from '../billing/fixtures.ts';
import { customersWaitingInAnOldMonth, deliver, flowSettings, purchase } from '../billing/support.ts';
import { at, delivery, freshSource, league } from '../leagues/fixtures.ts';
import { DATABASE_KINDS, describeOn, openTestDatabase, suiteDatabase } from '../support/databases.ts';
import { DEPLOYMENT_SETTINGS, setEnv } from '../support/env.ts';
import { startFakeRevenueCat, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { callRoute } from '../support/http.ts';

/**
 * GET /api/admin/status and `npm run status`: what landed on each webhook, the sync queue and the
 * last sweep, the last maintenance run and what retention is behind, the schema against the code,
 * the optional parts by name. Read in one database call (the operator status, which reads the outbox's too); real webhooks, sweeps and maintenance runs
 * make what it shows.
 */
const ADMIN_SECRET = 'admin-secret-for-status-tests-0123456789';
const CRON_SECRET = 'cron-secret-for-status-tests-0123456789';
const files = readMigrationFiles();

describe.each(DATABASE_KINDS)('GET /api/admin/status on %s', (kind) => {
  const db = suiteDatabase(kind);
  let revenuecat: FakeRevenueCat;
  let restoreEnv: () => void;
  beforeAll(async () => {
    revenuecat = await startFakeRevenueCat();
    restoreEnv = setEnv({ ...flowSettings(revenuecat), ADMIN_API_SECRET: ADMIN_SECRET, CRON_SECRET, LOCAL_DEV: '1', LEAGUES_WEBHOOK_SECRET: undefined });
  });
  afterAll(async () => {
    restoreEnv();
    await revenuecat.close();
  });

  const status = async () => {
    const response = await callRoute(statusRoute, { headers: { authorization: `Bearer ${ADMIN_SECRET}` } });
    expect(response.status, response.text).toBe(200);
    expect(serviceStatusSchema.safeParse(response.body).error).toBeUndefined();
    expect(response.headers.get('server-timing')).toMatch(/^db;desc="1 calls"/);
    // Names of parts only: no secret, no URL of RevenueCat.
    for (const secret of [ADMIN_SECRET, CRON_SECRET, revenuecat.apiKey, new URL(revenuecat.url).host, DEV_WEBHOOK_SECRETS.subscription]) expect(response.text).not.toContain(secret);
    return response.body;
  };

  it('on a database as the migrations leave it: the schema is the code\'s, nothing received or run yet, the optional parts by name', async () => {
    const body = await status();
    expect(body.schema).toEqual({ code: files.at(-1)!.version, database: files.at(-1)!.version, pending: [], unknown: [], upToDate: true });
    expect(body.webhooks).toEqual({ billing: { last: null, last24h: {} }, leagues: { last: null, last24h: {} } });
    expect(body.syncQueue).toMatchObject({ depth: 0, due: 0, lastFailure: null, lastSweep: null });
    expect(body.maintenance).toMatchObject({ lastRun: null, behind: { monthsToDrop: [], customersWaiting: 0, heldEvents: 0 } });
    expect(body.parts).toEqual({
      billingWebhook: 'local dev secret', leaguesWebhook: 'local dev secret', revenuecatSync: 'v1', syncAfterWebhooks: 'none', cron: 'on', adminApi: 'on',
      contractWalletChains: [], sandboxPurchases: 'grant',
    });
    // (The suite's databases stand in for the embedded one: nothing names a database.)
    expect(body.mode).toEqual({ local: true, deployed: false, database: 'embedded' });
  });

  it('shows that RevenueCat\'s "Send test event" landed: the last delivery is the TEST, recorded and ignored', async () => {
    const before = (await status()).webhooks.billing.last24h.ignored ?? 0;
    const test = fixture('test', { id: `TEST-${randomUUID()}`, event_timestamp_ms: Date.now() });
    expect((await deliver(test)).status).toBe(200);
    const body = await status();
    expect(body.webhooks.billing.last).toMatchObject({ type: 'TEST', eventId: test.event.id, outcome: 'ignored', reason: 'record_only_type', environment: 'SANDBOX' });
    expect(Date.now() - Date.parse(body.webhooks.billing.last.receivedAt)).toBeLessThan(60_000);
    expect(body.webhooks.billing.last24h.ignored).toBe(before + 1);
    expect(describeStatus(body)[1]).toMatch(new RegExp(`^Billing webhook: last TEST ${test.event.id} at .* UTC: ignored \\(record_only_type\\); last 24 h: \\d+ ignored$`));
  });

  it('an event that came without a type reads as one: "(no type)", not an empty word', async () => {
    expect((await deliver({ event: { id: `untyped-${randomUUID()}` } })).status).toBe(200);
    const body = await status();
    expect(body.webhooks.billing.last).toMatchObject({ type: '', outcome: 'ignored', reason: 'unknown_type' });
    expect(describeStatus(body)[1]).toMatch(/^Billing webhook: last \(no type\) untyped-[\w-]+ at .* UTC: ignored \(unknown_type\);/);
  });

  it('after a webhook, a sweep and a maintenance run: the counts by outcome, the queue emptied by the sweep and its result, what maintenance did', async () => {
    const user = `status-${randomUUID()}`;
    const now = Date.now();
    expect((await deliver(purchase(user, 0, 0, 30, { event_timestamp_ms: now, purchased_at_ms: now, expiration_at_ms: now + 30 * 86_400_000 }))).status).toBe(200);
    await db.sql(`select public.billing_mark_sync(array[$1], 'refund')`, [user]);
    let body = await status();
    expect(body.webhooks.billing.last).toMatchObject({ type: 'INITIAL_PURCHASE', outcome: 'applied', appUserId: user });
    expect(body.webhooks.billing.last24h).toMatchObject({ applied: 1 });
    expect(body.syncQueue).toMatchObject({ depth: 1, due: 1 });

    revenuecat.setCustomer(user, {});
    const sweep = await callRoute(sweepRoute, { headers: { authorization: `Bearer ${CRON_SECRET}` } });
    expect(sweep.status).toBe(200);
    body = await status();
    expect(body.syncQueue).toMatchObject({ depth: 0, due: 0, lastSweep: { result: { claimed: sweep.body.claimed, synced: sweep.body.synced, failed: 0, due: sweep.body.due } } });
    expect(sweep.body.synced).toBeGreaterThanOrEqual(1);

    await db.sql(`insert into public.wallet_challenges (id, user_id, chain, address, address_key, chain_id, nonce, message, issued_at, expires_at)
      select gen_random_uuid(), gen_random_uuid(), 'evm', '0xabc', '0xabc', 1, 'nonce', 'message', now() - interval '3 days', now() - interval '2 days' from generate_series(1, 3)`);
    const run = await callRoute(maintenanceRoute, { headers: { authorization: `Bearer ${CRON_SECRET}` } });
    expect(run.status).toBe(200);
    body = await status();
    expect(body.maintenance.lastRun).toMatchObject({ result: { done: true, wallets: { challengesDeleted: 3 }, billing: { partitionsDropped: [] } } });
    expect(Date.parse(body.maintenance.lastRun.finishedAt)).toBeGreaterThanOrEqual(Date.parse(body.maintenance.lastRun.startedAt));
    expect(body.attention).toEqual([]);
    const lines = describeStatus(body);
    expect(lines.find((line) => line.startsWith('Sync queue:'))).toMatch(/^Sync queue: 0 waiting, 0 due; last sweep: .* UTC: \d+ claimed, \d+ synced, 0 failed, \d+ still due$/);
    expect(lines.find((line) => line.startsWith('Maintenance:'))).toMatch(/^Maintenance: last run: .* UTC: dropped no billing month, \d+ checkpoint\(s\), deleted 3 wallet challenge\(s\), .*; behind: nothing$/);
  });

  it('shows the last leagues delivery and the day\'s counts', async () => {
    const source = freshSource();
    const response = await callRoute(leaguesRoute, {
      method: 'POST', headers: { 'x-webhook-secret': DEV_WEBHOOK_SECRETS.leagues }, body: delivery(source, { id: `d-${randomUUID()}`, leagues: [league('L-1', at(1))] }),
    });
    expect(response.status).toBe(200);
    const body = await status();
    expect(body.webhooks.leagues.last).toMatchObject({ source, upserted: 1, deleted: 0 });
    expect(body.webhooks.leagues.last24h.applied).toBeGreaterThanOrEqual(1);
  });

  it('says what billing retention is behind, and what the next run dropped', async () => {
    const { month: name } = await customersWaitingInAnOldMonth(db, 'old', 1);
    let body = await status();
    expect(body.maintenance.behind).toMatchObject({ monthsToDrop: [name], customersWaiting: 1, heldEvents: 0 });
    expect(body.attention).toEqual([`Billing events of ${name} are past the retention and not dropped yet (1 customer(s) wait for a checkpoint): run \`npm run db:maintain\`.`]);

    expect((await callRoute(maintenanceRoute, { headers: { authorization: `Bearer ${CRON_SECRET}` } })).status).toBe(200);
    body = await status();
    expect(body.maintenance.behind).toMatchObject({ monthsToDrop: [], customersWaiting: 0, heldEvents: 0 });
    expect(body.maintenance.lastRun.result.billing).toMatchObject({ checkpoints: 1, partitionsDropped: [`billing_events_${name}`] });
    expect(describeStatus(body).find((line) => line.startsWith('Maintenance:'))).toContain(`dropped billing months billing_events_${name}, 1 checkpoint(s)`);
  });

  it('outside local mode without CRON_SECRET, says so under attention while it lasts (the startup log says it once)', async () => {
    const restore = setEnv({ ...DEPLOYMENT_SETTINGS, ADMIN_API_SECRET: ADMIN_SECRET, CRON_SECRET: undefined });
    try {
      const body = await status();
      expect(body.parts.cron).toBe('off');
      expect(body.attention).toEqual(expect.arrayContaining([expect.stringMatching(/^CRON_SECRET is unset: the daily jobs .* never run/)]));
      expect(describeStatus(body)).not.toContain('Nothing needs attention.');
    } finally {
      restore();
    }
    expect((await status()).attention).not.toEqual(expect.arrayContaining([expect.stringMatching(/^CRON_SECRET/)]));
  });

  it('answers only the admin secret: none or the cron secret is a 401; without ADMIN_API_SECRET, local mode\'s dev admin secret, and 503 outside local mode', async () => {
    for (const authorization of [undefined, `Bearer ${CRON_SECRET}`, ADMIN_SECRET, `Bearer ${DEV_ADMIN_SECRET}`]) {
      const response = await callRoute(statusRoute, { headers: authorization ? { authorization } : {} });
      expect({ status: response.status, code: response.body.code }).toEqual({ status: 401, code: 'invalid_admin_secret' });
    }
    let restore = setEnv({ ADMIN_API_SECRET: undefined });
    try {
      expect((await callRoute(statusRoute, { headers: { authorization: `Bearer ${ADMIN_SECRET}` } })).status).toBe(401);
      const response = await callRoute(statusRoute, { headers: { authorization: `Bearer ${DEV_ADMIN_SECRET}` } });
      expect(response.status).toBe(200);
      expect(response.body.parts.adminApi).toBe('local dev secret');
    } finally {
      restore();
    }
    restore = setEnv({ ...DEPLOYMENT_SETTINGS, ADMIN_API_SECRET: undefined });
    try {
      const response = await callRoute(statusRoute, { headers: { authorization: `Bearer ${DEV_ADMIN_SECRET}` } });
      expect({ status: response.status, code: response.body.code }).toEqual({ status: 503, code: 'admin_not_configured' });
    } finally {
      restore();
      // The wrong secrets above count against this address (OPERATOR_SECRET_FAILURES); the next tests start afresh.
      resetOperatorSecretThrottle();
    }
  });
});

describeOn('postgres')('the status of a deployment whose database lacks a migration of its code', () => {
  let restore: (() => void) | undefined;
  afterEach(async () => {
    restore?.();
    await closeDatabase();
  });

  it('answers 200 with the pending migration while every other route answers 503', async () => {
    const db = await openTestDatabase('postgres');
    try {
      await db.sql('delete from supabase_migrations.schema_migrations where version = $1', [files.at(-1)!.version]);
      restore = setEnv({
        VERCEL: '1', DATABASE_URL: db.url, SUPABASE_JWT_SECRET: 'x'.repeat(40), SUBSCRIPTION_WEBHOOK_SECRET: 'deployed-secret-0123456789abcdef',
        LEAGUES_WEBHOOK_SECRET: 'leagues-secret-0123456789abcdef01234', APP_ORIGIN: 'https://app.example.com', LOCAL_DEV: undefined, ADMIN_API_SECRET: ADMIN_SECRET,
      });
      await closeDatabase();
      const response = await callRoute(statusRoute, { headers: { authorization: `Bearer ${ADMIN_SECRET}` } });
      expect(response.status).toBe(200);
      expect(response.body.schema).toEqual({ code: files.at(-1)!.version, database: null, pending: [files.at(-1)!.fileName], unknown: [], upToDate: false });
      expect(response.body.mode).toEqual({ local: false, deployed: true, database: 'postgres' });
      expect(response.body.attention[0]).toContain('npm run migrate');
      expect(response.text).not.toContain(db.url!);
    } finally {
      await closeDatabase();
      await db.close();
    }
  });
});

describeOn('postgres')('npm run status', () => {
  const db = suiteDatabase('postgres');
  const run = (args: string[]) => promisify(execFile)(process.execPath, ['scripts/status.ts', ...args], {
    env: { ...process.env, DATABASE_URL: db.url!, LOCAL_DEV: '1', LOG_LEVEL: 'silent', SUPABASE_URL: '', VERCEL: '', ADMIN_API_SECRET: '' },
    timeout: 60_000,
  });

  it('prints the status of the configured database in words, or as JSON (the route\'s answer), without the admin secret', async () => {
    const test = fixture('test', { id: `TEST-${randomUUID()}`, event_timestamp_ms: Date.now() });
    expect((await deliver(test)).status).toBe(200);
    const { stdout } = await run([]);
    const lines = stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^Status at .* UTC \(local mode, postgres database\)$/);
    expect(lines[1]).toMatch(new RegExp(`^Billing webhook: last TEST ${test.event.id} at .* UTC: ignored \\(record_only_type\\); last 24 h: 1 ignored$`));
    expect(stdout).toContain(`Schema: database at ${files.at(-1)!.version}, code at ${files.at(-1)!.version}: up to date`);
    expect(stdout).toContain('admin API local dev secret');
    const json = JSON.parse((await run(['--json'])).stdout);
    expect(serviceStatusSchema.safeParse(json).error).toBeUndefined();
    expect(json.webhooks.billing.last).toMatchObject({ eventId: test.event.id, type: 'TEST' });
    await expect(run(['--verbose'])).rejects.toMatchObject({ code: 2, stderr: expect.stringContaining('Usage:') });
  });
});
