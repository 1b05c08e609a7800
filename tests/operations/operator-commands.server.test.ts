import { execFile } from 'node:child_process';
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEV_USER } from '../../lib/auth/dev-user.ts';
import { ConfigError, DEV_ADMIN_SECRET, loadConfig, MIN_SECRET_LENGTH, OPERATOR_DATABASE_SETTINGS, REVENUECAT_STAND_IN_KEY } from '../../lib/config.ts';
import { migrationTarget } from '../../lib/db/migrate.ts';
import { fixture } from '../billing/fixtures.ts';
import { deliver } from '../billing/support.ts';
import { describeOn, migratedEmbeddedDbDir, suiteDatabase } from '../support/databases.ts';
import { startFakeRevenueCat, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { startNextServer, type NextServer } from '../../scripts/support/next-server.ts';
import { DEPLOYMENT_SETTINGS } from '../support/env.ts';
import { freePort } from '../../scripts/support/postgres-server.ts';
import { requireProductionBuild } from '../support/production-build.ts';

/**
 * The operator commands (`npm run status`, `billing:explain`, `billing:sync`, `billing:rebuild`,
 * `db:maintain`) as an operator runs them: child processes with what their shell has, against a
 * real Postgres, and against the real local service (`next start`, embedded database) that holds
 * the embedded folder while it runs.
 */
const run = (script: string, args: string[], env: Record<string, string | undefined>) => {
  const clean: Record<string, string> = {};
  for (const [key, value] of Object.entries(env)) if (value !== undefined) clean[key] = value;
  return promisify(execFile)(process.execPath, [path.join('scripts', script), ...args], { env: clean as NodeJS.ProcessEnv, timeout: 120_000 });
};

/** An operator's shell: PATH and HOME, nothing of this test run's own settings. */
const shell = () => ({ PATH: process.env.PATH, HOME: process.env.HOME, LOG_LEVEL: 'silent' });

describeOn('postgres')('the operator commands with only the deployment\'s database settings', () => {
  const db = suiteDatabase('postgres');
  let revenuecat: FakeRevenueCat;
  beforeAll(async () => {
    revenuecat = await startFakeRevenueCat();
  });
  afterAll(() => revenuecat.close());

  it('take the database as `npm run migrate` does, while the service itself still refuses such a configuration', () => {
    const all = { POSTGRES_URL_NON_POOLING: 'postgres://direct/db', DATABASE_URL: 'postgres://service/db', POSTGRES_URL: 'postgres://pooled/db' };
    expect(OPERATOR_DATABASE_SETTINGS).toEqual(['POSTGRES_URL_NON_POOLING', 'DATABASE_URL', 'POSTGRES_URL']);
    for (const [index, name] of OPERATOR_DATABASE_SETTINGS.entries()) {
      const env = Object.fromEntries(OPERATOR_DATABASE_SETTINGS.slice(index).map((setting) => [setting, all[setting]]));
      expect(loadConfig(env, { operator: true })).toMatchObject({ databaseMode: 'postgres', databaseUrl: all[name], local: false });
      expect(migrationTarget(env, '/e')).toMatchObject({ url: all[name], from: name });
      // The service's startup checks are as strict as ever.
      expect(() => loadConfig(env)).toThrow(/without the settings a deployment needs: .*SUBSCRIPTION_WEBHOOK_SECRET.*APP_ORIGIN/);
    }
    // Settings of a deployment and none of its database: refused, not this machine's embedded folder.
    expect(() => loadConfig({ SUBSCRIPTION_WEBHOOK_SECRET: 'x'.repeat(40) }, { operator: true })).toThrow(ConfigError);
    expect(() => loadConfig({ SUBSCRIPTION_WEBHOOK_SECRET: 'x'.repeat(40) }, { operator: true })).toThrow(/POSTGRES_URL_NON_POOLING, or DATABASE_URL, or POSTGRES_URL/);
  });

  it.each(OPERATOR_DATABASE_SETTINGS)('with only %s: status, billing:explain, billing:rebuild, db:maintain and (with the RevenueCat key) billing:sync run', async (name) => {
    const user = `operator-${randomUUID()}`;
    const purchase = fixture('initial-purchase', { id: `OP-${randomUUID()}`, app_user_id: user, original_app_user_id: user, event_timestamp_ms: Date.now(), environment: 'PRODUCTION' });
    expect((await deliver(purchase)).status).toBe(200);
    const env = { ...shell(), [name]: db.url! };

    const status = await run('status.ts', [], env);
    expect(status.stdout).toMatch(/^Status at .* UTC \(not local, postgres database\)$/m);
    expect(status.stdout).toContain('up to date');

    const explained = await run('billing-explain.ts', ['--user', user], env);
    expect(explained.stdout).toContain(`Subscriber ${user}`);
    expect(explained.stdout).toContain(purchase.event.id);

    const rebuild = await run('billing-rebuild.ts', [], env);
    expect(rebuild.stdout).toMatch(/stored entries, \d+ customers; \d+ would change\./);

    const maintain = await run('db-maintain.ts', ['--budget-ms', '20000'], env);
    expect(JSON.parse(maintain.stdout)).toHaveProperty('done');

    // billing:sync needs the RevenueCat key too, and nothing else: an id RevenueCat never named is refused by the sync itself.
    await expect(run('billing-sync.ts', ['--user', `nobody-${randomUUID()}`], { ...env, REVENUECAT_SECRET_API_KEY: revenuecat.apiKey, REVENUECAT_API_URL: revenuecat.url }))
      .rejects.toMatchObject({ code: 1, stderr: expect.stringContaining('subscriber_unknown') });
    await expect(run('billing-sync.ts', ['--user', user], env)).rejects.toMatchObject({ code: 1, stderr: expect.stringContaining('sync_not_configured') });
  }, 240_000);
});

describe('the dev admin secret', () => {
  it('opens the operator routes in local mode only, when ADMIN_API_SECRET is unset', () => {
    expect(DEV_ADMIN_SECRET.length).toBeGreaterThanOrEqual(MIN_SECRET_LENGTH);
    expect(loadConfig({}).adminSecret).toBe(DEV_ADMIN_SECRET);
    expect(loadConfig({ LOCAL_DEV: '1', DATABASE_URL: 'postgres://app:pw@127.0.0.1/app' }).adminSecret).toBe(DEV_ADMIN_SECRET);
    expect(loadConfig({ LOCAL_DEV: '1', ADMIN_API_SECRET: 'a'.repeat(40) }).adminSecret).toBe('a'.repeat(40));
    expect(loadConfig(DEPLOYMENT_SETTINGS).adminSecret).toBeUndefined();
    expect(loadConfig({ ...DEPLOYMENT_SETTINGS, VERCEL: '1' }).adminSecret).toBeUndefined();
  });
});

describe('the operator commands while the local service holds the embedded database', () => {
  let server: NextServer;
  let dataDir: string;
  let env: Record<string, string | undefined>;
  // The service's event receiver (local mode takes http): what it got, verified.
  const eventSecret = `whsec_${randomBytes(32).toString('base64')}`;
  const eventsReceived: string[] = [];
  let eventReceiverUrl: string;
  const receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const { type } = new Webhook(eventSecret).verify(Buffer.concat(chunks).toString('utf8'), req.headers as Record<string, string>) as { type: string };
      eventsReceived.push(type);
      res.writeHead(204).end();
    });
  });

  beforeAll(async () => {
    requireProductionBuild();
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    dataDir = mkdtempSync(path.join(tmpdir(), 'account-link-operator-'));
    // A newcomer's local mode with the RevenueCat stand-in: nothing else configured.
    const local = {
      EMBEDDED_DB_DIR: migratedEmbeddedDbDir(dataDir), REVENUECAT_STAND_IN: '1', BILLING_SYNC_AFTER: 'none',
      DATABASE_URL: undefined, POSTGRES_URL: undefined, POSTGRES_URL_NON_POOLING: undefined, SUPABASE_URL: undefined, SUPABASE_SECRET_KEY: undefined,
      SUPABASE_JWT_SECRET: undefined, NEXT_PUBLIC_SUPABASE_URL: undefined, APP_ORIGIN: undefined, LOCAL_DEV: undefined, VERCEL: undefined,
      SUBSCRIPTION_WEBHOOK_SECRET: undefined, LEAGUES_WEBHOOK_SECRET: undefined, REVENUECAT_SECRET_API_KEY: undefined, REVENUECAT_API_URL: undefined,
      CRON_SECRET: undefined, ADMIN_API_SECRET: undefined, PORT: undefined,
    };
    eventReceiverUrl = `http://127.0.0.1:${(receiver.address() as { port: number }).port}/hook`;
    const events = { EVENTS_WEBHOOK_URL: eventReceiverUrl, EVENTS_WEBHOOK_SECRET: eventSecret, EVENTS_WEBHOOK_ENDPOINTS: undefined };
    server = await startNextServer({ timeoutMs: 120_000, env: { ...local, ...events, LOG_LEVEL: 'info', LOG_FORMAT: 'json' } });
    env = { ...shell(), EMBEDDED_DB_DIR: local.EMBEDDED_DB_DIR, REVENUECAT_STAND_IN: '1', BASE_URL: server.url };
  }, 600_000);

  afterAll(async () => {
    await server?.stop();
    receiver.closeAllConnections();
    receiver.close();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it('the server takes its own port for APP_ORIGIN: the stand-in\'s absolute URL in the startup log, wallet challenges naming localhost:<port>', async () => {
    expect(server.output()).toContain(`local stand-in (http://localhost:${server.port}/api/dev/revenuecat)`);
    const linked = await run('link-wallet.ts', [], env);
    expect(linked.stdout).toContain(`localhost:${server.port} wants you to sign in with your Ethereum account:`);
  });

  it('events:deliver asks the running service for a run, to the service\'s receivers, finding its port without BASE_URL', async () => {
    await run('link-wallet.ts', [], env); // a wallet.linked event, sent by the service after the write
    // No BASE_URL: the service is found where it serves, which it wrote beside the folder as it
    // started: bound with -H 127.0.0.1 (as this test's server is), at that address, not localhost.
    const delivered = await run('events-deliver.ts', [], { ...env, BASE_URL: undefined });
    expect(delivered.stderr).toContain(`is in use by process ${server.serverPid} (the running service?): asking the service at http://127.0.0.1:${server.port}`);
    // The run was the service's, with its receiver (this shell's settings name none): its endpoint by id.
    const serviceEndpoint = createHash('sha256').update(new URL(eventReceiverUrl).href).digest('hex').slice(0, 16);
    expect(JSON.parse(delivered.stdout)).toEqual({ lapsesTold: expect.any(Number), endpoints: [expect.objectContaining({ id: serviceEndpoint, dead: 0 })], done: true });
    // (The receiver verifies what the service sent it, after the write or in that run.)
    await expect.poll(() => eventsReceived, { timeout: 30_000 }).toContain('wallet.linked');
  });

  it('with --base-url named, status and events:status ask that service though this shell\'s own database is another (never made)', async () => {
    // As with a service on Postgres and a shell without its settings: the shell's database would be
    // an empty embedded folder, which the commands must neither read nor make.
    const elsewhere = mkdtempSync(path.join(tmpdir(), 'account-link-elsewhere-'));
    try {
      const shellFolder = path.join(elsewhere, 'pglite');
      const shellEnv = { ...env, EMBEDDED_DB_DIR: shellFolder, BASE_URL: undefined };
      const status = await run('status.ts', ['--base-url', server.url], shellEnv);
      expect(status.stderr).toContain(`Asking the service at ${server.url} (--base-url).`);
      expect(status.stdout).toMatch(/^Status at .* UTC \(local mode, embedded database\)$/m);
      expect(status.stdout).toContain('admin API local dev secret');
      const endpoints = JSON.parse((await run('events-status.ts', ['--base-url', server.url, '--json'], shellEnv)).stdout);
      const serviceEndpoint = createHash('sha256').update(new URL(eventReceiverUrl).href).digest('hex').slice(0, 16);
      expect(JSON.stringify(endpoints)).toContain(serviceEndpoint);
      expect(existsSync(shellFolder)).toBe(false);
      // Nor does it need this shell's database settings: they may be wrong, or another service's.
      const unreadable = await run('status.ts', ['--base-url', server.url, '--json'], { ...shellEnv, DATABASE_URL: 'not-a-url' });
      expect(JSON.parse(unreadable.stdout)).toMatchObject({ mode: { local: true, database: 'embedded' } });
      // A sync of every subscriber runs on this shell's database only: --base-url is refused, not ignored.
      await expect(run('billing-sync.ts', ['--all', '--base-url', server.url], shellEnv)).rejects.toMatchObject({ stderr: expect.stringContaining('--all runs on this shell\'s database') });
      expect(existsSync(shellFolder)).toBe(false);
      // Without it, the same shell reads its own (empty) database, as before.
      const own = await run('events-status.ts', ['--json'], shellEnv);
      expect(own.stderr).not.toContain('Asking the service');
      expect(JSON.stringify(JSON.parse(own.stdout))).not.toContain(serviceEndpoint);
    } finally {
      rmSync(elsewhere, { recursive: true, force: true });
    }
  });

  it('status, billing:explain and billing:sync ask the running service, and print what the direct path prints', async () => {
    const sent = await run('sample-event.ts', ['--type', 'INITIAL_PURCHASE'], env);
    const eventId = /^INITIAL_PURCHASE (\S+) for /.exec(sent.stdout)![1]!;

    const status = await run('status.ts', [], env);
    expect(status.stderr).toMatch(new RegExp(`is in use by process ${server.serverPid} \\(the running service\\?\\): asking the service at ${server.url}`));
    expect(status.stdout).toMatch(/^Status at .* UTC \(local mode, embedded database\)$/m);
    expect(status.stdout).toMatch(new RegExp(`^Billing webhook: last INITIAL_PURCHASE ${eventId} at .* UTC: applied; last 24 h: 1 applied$`, 'm'));
    expect(status.stdout).toContain('RevenueCat sync local stand-in');
    expect(status.stdout).toContain('admin API local dev secret');

    const explained = await run('billing-explain.ts', ['--user', DEV_USER.id], env);
    expect(explained.stdout).toContain(`Subscriber ${DEV_USER.id}`);
    expect(explained.stdout).toContain(eventId);
    expect(explained.stdout).toMatch(/^ {2}pro: grants now/m);
    await expect(run('billing-explain.ts', ['--user', `nobody-${randomUUID()}`], env)).rejects.toMatchObject({ code: 1, stderr: expect.stringContaining('subscriber_unknown: ') });

    // The stand-in lives in the running service: the sync goes through it.
    const synced = JSON.parse((await run('billing-sync.ts', ['--user', DEV_USER.id], env)).stdout);
    expect(synced).toMatchObject({ appUserId: DEV_USER.id, outcome: expect.stringMatching(/^(applied|stale)$/), entitlements: [{ id: 'pro', active: true }] });

    const json = JSON.parse((await run('status.ts', ['--json'], env)).stdout);
    expect(json.syncQueue.lastFailure).toBeNull();

    // The same words as the direct path, once the service is stopped (the time asked aside).
    const viaService = (await run('billing-explain.ts', ['--user', DEV_USER.id], env)).stdout.split('\n').slice(1);
    await server.stop();
    const direct = await run('billing-explain.ts', ['--user', DEV_USER.id], env);
    expect(direct.stderr).not.toContain('in use by process');
    expect(direct.stdout.split('\n').slice(1)).toEqual(viaService);

    // With the service stopped, the stand-in (inside it) does not answer: the log line of the failed call names where it called, never the key.
    const port = await freePort();
    const failed = run('billing-sync.ts', ['--user', DEV_USER.id], { ...env, PORT: String(port), LOG_LEVEL: 'warn', LOG_FORMAT: 'json' });
    await expect(failed).rejects.toMatchObject({ code: 1, stderr: expect.stringContaining('Sync failed: upstream_unavailable') });
    const { stdout, stderr } = await failed.catch((error: { stdout: string; stderr: string }) => error);
    const line = `${stdout}\n${stderr}`.split('\n').find((text) => text.includes('billing sync: the call to RevenueCat failed'));
    expect(JSON.parse(line ?? '{}')).toMatchObject({ appUserId: DEV_USER.id, revenuecat: `local stand-in at localhost:${port}` });
    expect(`${stdout}${stderr}`).not.toContain(REVENUECAT_STAND_IN_KEY);
  }, 300_000);

  it('says both things when the folder is held and nothing answers at the URL', async () => {
    const held = mkdtempSync(path.join(tmpdir(), 'account-link-held-'));
    try {
      // This test process holds the folder, as a service would; nothing listens on the port.
      writeFileSync(path.join(held, 'pglite.lock'), String(process.pid));
      const url = `http://127.0.0.1:${await freePort()}`;
      const failed = run('status.ts', ['--base-url', url], { ...shell(), EMBEDDED_DB_DIR: path.join(held, 'pglite') });
      await expect(failed).rejects.toMatchObject({
        code: 1,
        stderr: expect.stringContaining(`is in use by process ${process.pid}, and no service answered at ${url}`),
      });
    } finally {
      rmSync(held, { recursive: true, force: true });
    }
  });
});
