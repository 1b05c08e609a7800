import { randomBytes } from 'node:crypto';
import { lookup } from 'node:dns/promises';
import { mkdtempSync, rmSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { envSchema } from '../../lib/config.ts';
import { openPostgres } from '../../lib/db/postgres.ts';
import { nonPublicRange } from '../../lib/events/addresses.ts';
import { startNextServer, type NextServer } from '../../scripts/support/next-server.ts';
import { createDatabase, startPostgresServer, type PostgresServer } from '../../scripts/support/postgres-server.ts';
import { requireProductionBuild } from '../support/production-build.ts';

/**
 * A deployment (`next build` + `next start`, outside local mode) whose event receiver is a name that
 * resolves to this machine: the lookup the server makes as it starts refuses the settings, and the
 * events cron, a route bundled apart from the startup code that looked the name up, answers 503,
 * and the operator's view names the setting and the host, never the URL's query.
 */

const CRON_SECRET = `cron-${randomBytes(16).toString('hex')}`;
const ADMIN_SECRET = `admin-${randomBytes(16).toString('hex')}`;
const NOTHING_CONFIGURED = Object.fromEntries(Object.keys(envSchema.shape).map((name) => [name, undefined]));

describe('a deployment whose event receiver resolves to a private address', () => {
  let pgServer: PostgresServer;
  let server: NextServer | undefined;
  let dataDir: string;
  const host = hostname();

  beforeAll(async () => {
    requireProductionBuild();
    dataDir = mkdtempSync(path.join(tmpdir(), 'account-link-receiver-address-'));
    pgServer = await startPostgresServer();
    const database = `receiver_address_${randomBytes(4).toString('hex')}`;
    await createDatabase(pgServer.url(), database);
    await (await openPostgres({ connectionString: pgServer.url(database), max: 1 })).close(); // migrates
    server = await startNextServer({
      readyPath: '/api/health/live',
      env: {
        ...NOTHING_CONFIGURED, NODE_ENV: 'production', LOG_LEVEL: 'warn', EMBEDDED_DB_DIR: path.join(dataDir, 'pglite'),
        DATABASE_URL: pgServer.url(database), SUPABASE_JWT_SECRET: 'j'.repeat(40), SUBSCRIPTION_WEBHOOK_SECRET: 's'.repeat(32),
        APP_ORIGIN: 'https://app.example.test', CRON_SECRET, ADMIN_API_SECRET: ADMIN_SECRET,
        EVENTS_WEBHOOK_URL: `https://${host}/hooks?token=query-token-not-to-show`, EVENTS_WEBHOOK_SECRET: `whsec_${randomBytes(32).toString('base64')}`,
      },
    });
  }, 240_000);
  afterAll(async () => {
    await server?.stop();
    await pgServer?.stop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it('refuses the settings once the name is looked up: the events cron answers 503 service_misconfigured, naming the setting and host', async () => {
    // This machine's own name resolves to one of its own addresses (loopback or private).
    expect((await lookup(host, { all: true })).map(({ address }) => nonPublicRange(address))).not.toContain(null);
    const cron = () => fetch(`${server!.url}/api/cron/events`, { headers: { authorization: `Bearer ${CRON_SECRET}` } });
    // The lookup runs beside the server's start: wait for its answer.
    let response = await cron();
    for (let tries = 0; response.status !== 503 && tries < 100; tries++) {
      await new Promise((resolve) => setTimeout(resolve, 200));
      response = await cron();
    }
    expect({ status: response.status, type: response.headers.get('content-type') }).toEqual({ status: 503, type: 'application/problem+json' });
    expect(await response.json()).toMatchObject({ code: 'service_misconfigured' });
    // The operator's view (another route) says why.
    const endpoints = await fetch(`${server!.url}/api/admin/events/endpoints`, { headers: { authorization: `Bearer ${ADMIN_SECRET}` } });
    const text = await endpoints.text();
    expect(endpoints.status, text).toBe(200);
    expect((JSON.parse(text) as { settingsRefused: string | null }).settingsRefused).toContain(`EVENTS_WEBHOOK_URL, entry 1: ${host} resolves to`);
    expect(text).not.toContain('query-token-not-to-show');
  });
});
