import { execFile } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import * as statusRoute from '../../app/api/admin/status/route.ts';
import * as healthRoute from '../../app/api/health/route.ts';
import * as webhookRoute from '../../app/api/webhooks/subscription-billing/route.ts';
import { resetOperatorSecretThrottle } from '../../lib/auth/operator-secret.ts';
import { closeDatabase } from '../../lib/db/index.ts';
import { migrationsDir, readMigrationFiles, runMigrations } from '../../lib/db/migrate.ts';
import { clientSession } from '../../lib/db/postgres.ts';
import { serviceStatusSchema } from '../../lib/openapi/responses.ts';
import { fixture } from '../billing/fixtures.ts';
import { deliver } from '../billing/support.ts';
import { describeOn, suiteDatabase } from '../support/databases.ts';
import { DEPLOYMENT_SETTINGS, setEnv } from '../support/env.ts';
import { callRoute } from '../support/http.ts';
import { captureLogs } from '../support/log-capture.ts';
import { startRouteServer, type RouteServer } from '../support/route-server.ts';
import { startFakeRevenueCat, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { createDatabase } from '../../scripts/support/postgres-server.ts';

/**
 * `npm run status` as an operator runs it beside a deployment (a shell with the database's settings
 * only, or with the deployment's URL), and what a deployment says everywhere when its database is
 * behind its code: the health check's log, a request's log, the admin route, the command.
 */
const ADMIN_API_SECRET = 'admin-secret-for-shell-status-tests-0123456789';
const files = readMigrationFiles();

/** The operator's shell: PATH and HOME and what is given, nothing of this test run's settings (LOG_LEVEL neither). */
const runStatus = (args: string[], env: Record<string, string>) => promisify(execFile)(process.execPath, ['scripts/status.ts', ...args], {
  env: { PATH: process.env.PATH!, HOME: process.env.HOME!, ...env } as unknown as NodeJS.ProcessEnv, timeout: 120_000,
});

describeOn('postgres')('a deployment whose database is one migration behind its code', () => {
  let url: string;
  let restore: () => void;
  beforeAll(async () => {
    // A database migrated by the previous version: every migration but the last.
    const serverUrl = inject('postgresServerUrl');
    const name = `behind_${randomBytes(4).toString('hex')}`;
    await createDatabase(serverUrl, name);
    url = serverUrl.replace(/\/postgres$/, `/${name}`);
    const previous = mkdtempSync(path.join(tmpdir(), 'previous-version-'));
    try {
      for (const file of files.slice(0, -1)) copyFileSync(path.join(migrationsDir(), file.fileName), path.join(previous, file.fileName));
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      try {
        expect(await runMigrations(clientSession(client), { dir: previous })).toHaveLength(files.length - 1);
      } finally {
        await client.end();
      }
    } finally {
      rmSync(previous, { recursive: true, force: true });
    }
    restore = setEnv({ ...DEPLOYMENT_SETTINGS, DATABASE_URL: url, ADMIN_API_SECRET });
    await closeDatabase();
  });
  afterAll(async () => {
    restore();
    await closeDatabase();
  });

  const behind = `the database schema is behind this code (1 migration(s) pending: ${files.at(-1)!.fileName}): run \`npm run migrate\``;

  it('the health check\'s log and a refused request\'s log say the schema is behind and what to run, not "unavailable"', async () => {
    const capture = captureLogs('info');
    let health, refused;
    try {
      health = await callRoute(healthRoute);
      refused = await callRoute(webhookRoute, { method: 'POST', headers: { authorization: `Bearer ${DEPLOYMENT_SETTINGS.SUBSCRIPTION_WEBHOOK_SECRET}` }, body: { event: { id: randomUUID(), type: 'TEST', app_user_id: 'x' } } });
    } finally {
      capture.stop();
    }
    // The public answers stay generic (503, retry), and no longer claim the database did not answer.
    expect(health.status).toBe(503);
    expect(health.body).toMatchObject({ status: 'degraded', database: 'schema_behind' });
    expect({ status: refused.status, code: refused.body.code }).toEqual({ status: 503, code: 'database_unavailable' });
    expect(refused.body.detail).not.toMatch(/did not answer/);
    const messages = capture.lines.filter((line) => line.msg !== 'request').map((line) => String(line.msg));
    expect(messages).toEqual([`health check: ${behind} (or \`supabase db push\` on Supabase) from a shell or CI; until then every request that needs the database answers 503`,
      `${behind} (or \`supabase db push\` on Supabase) from a shell or CI; until then every request that needs the database answers 503`]);
    expect(JSON.stringify(capture.lines)).not.toMatch(/unavailable|did not answer/);
  });

  it('the admin route answers 200: the schema is behind, run `npm run migrate`', async () => {
    const response = await callRoute(statusRoute, { headers: { authorization: `Bearer ${ADMIN_API_SECRET}` } });
    expect(response.status).toBe(200);
    expect(serviceStatusSchema.safeParse(response.body).error).toBeUndefined();
    expect(response.body.schema).toEqual({ code: files.at(-1)!.version, database: null, pending: [files.at(-1)!.fileName], unknown: [], upToDate: false });
    expect(response.body.attention).toEqual([expect.stringMatching(/^The database schema is behind this code: 1 migration\(s\) pending \(.*\)\. Run `npm run migrate`/)]);
    expect(response.text).not.toMatch(/unavailable|did not answer/);
  });

  it('`npm run status` from a shell with the database\'s setting: words only (no log line), the schema behind and what to run', async () => {
    const { stdout, stderr } = await runStatus([], { DATABASE_URL: url });
    const lines = stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^Status at .* UTC \(not local, postgres database\)$/);
    expect(lines[1]).toBe(`Schema: behind this code (the code is at ${files.at(-1)!.version}): 1 migration(s) pending; run \`npm run migrate\``);
    // Nothing else could be read: no counts that would read as "nothing happened".
    expect(stdout).not.toMatch(/^(Billing webhook|Sync queue|Maintenance):/m);
    expect(stdout).toContain('Needs attention:\n  - The database schema is behind this code');
    expect(`${stdout}${stderr}`).not.toMatch(/^\{/m);
    expect(`${stdout}${stderr}`).not.toMatch(/unavailable|did not answer/);
    const json = JSON.parse((await runStatus(['--json'], { DATABASE_URL: url })).stdout);
    expect(json.schema.pending).toEqual([files.at(-1)!.fileName]);
  }, 120_000);
});

describeOn('postgres')('`npm run status` beside a working deployment', () => {
  const db = suiteDatabase('postgres');
  let deployment: RouteServer;
  let revenuecat: FakeRevenueCat;
  let restore: () => void;
  beforeAll(async () => {
    revenuecat = await startFakeRevenueCat();
    // The deployment: its settings in its own process (this one), served over real HTTP.
    restore = setEnv({
      ...DEPLOYMENT_SETTINGS, ADMIN_API_SECRET, CRON_SECRET: 'cron-secret-for-shell-status-tests-0123456789', LEAGUES_WEBHOOK_SECRET: 'leagues-secret-for-shell-status-tests',
      REVENUECAT_SECRET_API_KEY: revenuecat.apiKey, REVENUECAT_API_URL: revenuecat.url, BILLING_SYNC_AFTER: 'gaps',
    });
    deployment = await startRouteServer([[/^\/api\/admin\/status$/, statusRoute]]);
  });
  afterAll(async () => {
    await deployment.close();
    restore();
    resetOperatorSecretThrottle();
    await revenuecat.close();
  });

  it('with the database\'s setting only: says which parts it cannot see, never "off"', async () => {
    const test = fixture('test', { id: `TEST-${randomUUID()}`, event_timestamp_ms: Date.now() });
    expect((await deliver(test, { authorization: `Bearer ${DEPLOYMENT_SETTINGS.SUBSCRIPTION_WEBHOOK_SECRET}` })).status).toBe(200);
    const { stdout } = await runStatus([], { DATABASE_URL: db.url!, LOG_LEVEL: 'silent' });
    expect(stdout).toContain(`Billing webhook: last TEST ${test.event.id}`);
    const parts = stdout.split('\n').find((line) => line.startsWith('Parts:'))!;
    expect(parts).toBe('Parts: not visible from this shell, which has the database\'s settings, not the deployment\'s: billing webhook, leagues webhook, RevenueCat sync, cron, admin API, contract wallets, sandbox purchases. '
      + 'Ask the deployment: `npm run status -- --url https://<your deployment>` (with its ADMIN_API_SECRET).');
    expect(stdout).not.toMatch(/\boff\b/);
    expect(JSON.parse((await runStatus(['--json'], { DATABASE_URL: db.url!, LOG_LEVEL: 'silent' })).stdout).parts).toBeNull();
  }, 120_000);

  it('with --url and the admin secret: the deployment\'s own answer, its parts on as they are there', async () => {
    const { stdout } = await runStatus(['--url', deployment.url], { ADMIN_API_SECRET });
    // (The deployment's own mode: its DATABASE_URL, here standing for the suite's database.)
    expect(stdout).toMatch(/^Status at .* UTC \(not local, postgres database\)$/m);
    expect(stdout).toMatch(/^Billing webhook: last TEST /m);
    expect(stdout).toContain('Parts: billing webhook on; leagues webhook on; RevenueCat sync v1 (after webhooks: gaps); cron on; admin API on; contract wallets off; sandbox purchases recorded only');
    const json = JSON.parse((await runStatus(['--url', deployment.url, '--json'], { ADMIN_API_SECRET })).stdout);
    expect(serviceStatusSchema.safeParse(json).error).toBeUndefined();
    expect(json.parts).toMatchObject({ cron: 'on', revenuecatSync: 'v1', adminApi: 'on' });
  }, 120_000);

  it('with --url but a wrong or no admin secret, or nothing at the URL: says what to fix', async () => {
    await expect(runStatus(['--url', deployment.url], { ADMIN_API_SECRET: 'not-the-deployments-secret-0123456789' }))
      .rejects.toMatchObject({ code: 1, stderr: expect.stringContaining('this shell and the service must have the same ADMIN_API_SECRET') });
    await expect(runStatus(['--url', 'localhost:3000'], { ADMIN_API_SECRET }))
      .rejects.toMatchObject({ code: 1, stderr: expect.stringContaining('--url localhost:3000 does not start with https:// or http://') });
    await expect(runStatus(['--url', 'https://app.example.com'], {}))
      .rejects.toMatchObject({ code: 1, stderr: expect.stringContaining('Set ADMIN_API_SECRET in this shell to the deployment\'s value (ADMIN_API_SECRET=… npm run …; not in .env.local') });
    await deployment.close();
    await expect(runStatus(['--url', deployment.url], { ADMIN_API_SECRET }))
      .rejects.toMatchObject({ code: 1, stderr: expect.stringContaining(`Could not reach the deployment at ${deployment.url}: ECONNREFUSED`) });
  }, 120_000);
});
