import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as healthRoute from '../../app/api/health/route.ts';
import * as meRoute from '../../app/api/me/route.ts';
import * as leaguesRoute from '../../app/api/webhooks/leagues-sync/route.ts';
import * as billingRoute from '../../app/api/webhooks/subscription-billing/route.ts';
import { envSchema, getConfig, loadConfig } from '../../lib/config.ts';
import { closeDatabase } from '../../lib/db/index.ts';
import { withLibpqSslModes } from '../../lib/db/postgres.ts';
import { startFakeSupabaseAuth, type FakeSupabaseAuth } from '../support/fake-supabase-auth.ts';
import { setEnv } from '../support/env.ts';
import { callRoute } from '../support/http.ts';
import { createDatabase, startPostgresServer, type PostgresServer } from '../../scripts/support/postgres-server.ts';

/** Every variable the service reads, unset, so nothing from the test's own environment leaks in. */
const NOTHING = Object.fromEntries(Object.keys(envSchema.shape).map((name) => [name, undefined]));

/**
 * A Vercel project with Supabase added from the Marketplace: the integration installs these names
 * (https://vercel.com/marketplace/supabase), Vercel sets its own, and the developer adds only the
 * service's secrets. That alone must run the service: no renaming, no leagues secret.
 */
describe('the Vercel-Supabase integration\'s settings alone', () => {
  let postgres: PostgresServer;
  let auth: FakeSupabaseAuth;
  let restore: () => void;
  const billingSecret = randomBytes(24).toString('hex');

  beforeAll(async () => {
    // Supabase's connection strings ask for TLS (sslmode=require) from a server whose certificate no
    // public authority signed.
    [postgres, auth] = await Promise.all([startPostgresServer({ ssl: true }), startFakeSupabaseAuth()]);
    await createDatabase(postgres.url(), 'project');
    const url = `${postgres.url('project')}?sslmode=require`;
    restore = setEnv({
      ...NOTHING,
      VERCEL: '1', VERCEL_ENV: 'production', VERCEL_PROJECT_PRODUCTION_URL: 'app.example.com', VERCEL_URL: 'app-git-main-team.vercel.app',
      POSTGRES_URL: `${url}&supa=base-pooler.x`, POSTGRES_PRISMA_URL: `${url}&pgbouncer=true`, POSTGRES_URL_NON_POOLING: url,
      POSTGRES_USER: 'postgres', POSTGRES_HOST: '127.0.0.1', POSTGRES_PASSWORD: 'x', POSTGRES_DATABASE: 'project',
      SUPABASE_URL: auth.url, NEXT_PUBLIC_SUPABASE_URL: auth.url, SUPABASE_ANON_KEY: auth.apiKey, NEXT_PUBLIC_SUPABASE_ANON_KEY: auth.apiKey,
      SUPABASE_SERVICE_ROLE_KEY: 'eyJ.service-role.key', SUPABASE_JWT_SECRET: randomBytes(32).toString('hex'),
      SUBSCRIPTION_WEBHOOK_SECRET: billingSecret,
    });
    await closeDatabase();
  }, 120_000);

  afterAll(async () => {
    restore?.();
    await closeDatabase();
    await Promise.all([postgres?.stop(), auth?.close()]);
  });

  it('load: Postgres through the pooled URL, the project\'s JWKS, the production domain as APP_ORIGIN, warnings for what is off', () => {
    const config = getConfig();
    expect({ local: config.local, database: config.databaseMode, auth: config.auth.mode, origin: config.appOrigin, apiKey: config.auth.apiKey })
      .toEqual({ local: false, database: 'postgres', auth: 'supabase-jwks', origin: 'https://app.example.com', apiKey: auth.apiKey });
    expect(config.databaseUrl).toContain('supa=base-pooler.x');
    expect(config.warnings.join('\n')).toMatch(/LEAGUES_WEBHOOK_SECRET is not set/);
    expect(config.warnings.join('\n')).toMatch(/CRON_SECRET is not set/);
  });

  it('npm run migrate uses the direct connection (TLS as libpq means sslmode=require), then the service serves', async () => {
    const migrate = spawnSync('node_modules/.bin/node', ['scripts/migrate.ts'], { encoding: 'utf8', timeout: 120_000, env: process.env });
    expect({ status: migrate.status, stderr: migrate.stderr }).toMatchObject({ status: 0, stderr: expect.stringContaining('POSTGRES_URL_NON_POOLING') });
    expect((await callRoute(healthRoute)).body).toEqual({ status: 'ok', database: 'ok', mode: 'postgres' });
    const event = { event: { id: `evt-${randomBytes(4).toString('hex')}`, type: 'TEST', app_user_id: 'x' } };
    expect((await callRoute(billingRoute, { method: 'POST', headers: { authorization: `Bearer ${billingSecret}` }, body: event })).status).toBe(200);
  });

  it('serves a signed-in user (token checked against the project\'s keys, session confirmed with the anon key)', async () => {
    const token = await auth.mint({ email: 'ana@example.com' });
    const response = await callRoute(meRoute, { headers: { authorization: `Bearer ${token}` } });
    expect({ status: response.status, email: response.body?.email }).toEqual({ status: 200, email: 'ana@example.com' });
  });

  it('without a leagues secret: the leagues route answers 503, the rest keeps working', async () => {
    const response = await callRoute(leaguesRoute, { method: 'POST', headers: { 'x-webhook-secret': 'anything' }, body: { source: 's', sentAt: new Date().toISOString() } });
    expect({ status: response.status, code: response.body?.code, retryAfter: response.headers.get('retry-after') !== null })
      .toEqual({ status: 503, code: 'webhook_not_configured', retryAfter: true });
    expect(response.text).not.toContain('LEAGUES_WEBHOOK_SECRET');
    expect((await callRoute(healthRoute)).status).toBe(200);
  });
});

describe('which name wins', () => {
  const base = { SUBSCRIPTION_WEBHOOK_SECRET: 's'.repeat(32), SUPABASE_JWT_SECRET: 'j'.repeat(40), APP_ORIGIN: 'https://app.example.com' };
  it('the service\'s own names, then Supabase\'s newer ones, then the integration\'s', () => {
    expect(loadConfig({ ...base, DATABASE_URL: 'postgres://own/db', POSTGRES_URL: 'postgres://integration/db' }).databaseUrl).toBe('postgres://own/db');
    expect(loadConfig({ ...base, POSTGRES_URL: 'postgres://integration/db' }).databaseUrl).toBe('postgres://integration/db');
    const keys = { SUPABASE_URL: 'https://p.supabase.co', SUPABASE_SECRET_KEY: 'sb_secret_new', SUPABASE_SERVICE_ROLE_KEY: 'eyJ.legacy', AUTH_VERIFY_SESSION: 'false' };
    expect(loadConfig({ ...base, ...keys }).supabase?.secretKey).toBe('sb_secret_new');
    expect(loadConfig({ ...base, ...keys, SUPABASE_SECRET_KEY: undefined }).supabase?.secretKey).toBe('eyJ.legacy');
    const publishable = { SUPABASE_PUBLISHABLE_KEY: 'sb_publishable_new', SUPABASE_ANON_KEY: 'eyJ.anon', NEXT_PUBLIC_SUPABASE_ANON_KEY: 'eyJ.public-anon' };
    expect(loadConfig({ ...base, ...keys, ...publishable }).frontend.publishableKey).toBe('sb_publishable_new');
    expect(loadConfig({ ...base, ...keys, ...publishable, SUPABASE_PUBLISHABLE_KEY: undefined }).frontend.publishableKey).toBe('eyJ.anon');
    expect(loadConfig({ ...base, NEXT_PUBLIC_SUPABASE_URL: 'https://p.supabase.co', SUPABASE_SECRET_KEY: 'k', AUTH_VERIFY_SESSION: 'false' }).databaseMode).toBe('supabase');
  });

  it('APP_ORIGIN wins; else production gets the production domain and a preview its own URL', () => {
    const vercel = { ...base, APP_ORIGIN: undefined, VERCEL: '1', DATABASE_URL: 'postgres://db/x', VERCEL_PROJECT_PRODUCTION_URL: 'app.example.com', VERCEL_URL: 'app-abc123-team.vercel.app' };
    expect(loadConfig({ ...vercel, VERCEL_ENV: 'production' }).appOrigin).toBe('https://app.example.com');
    expect(loadConfig({ ...vercel, VERCEL_ENV: 'preview' }).appOrigin).toBe('https://app-abc123-team.vercel.app');
    expect(loadConfig({ ...vercel, VERCEL_ENV: 'preview', APP_ORIGIN: 'https://staging.example.com' }).appOrigin).toBe('https://staging.example.com');
    expect(() => loadConfig({ ...vercel, VERCEL_ENV: undefined })).toThrow(/APP_ORIGIN/);
  });
});

describe('sslmode as libpq means it', () => {
  it('keeps require/prefer from turning into certificate verification, and leaves other strings alone', () => {
    expect(withLibpqSslModes('postgres://u:p@h:6543/db?sslmode=require')).toBe('postgres://u:p@h:6543/db?sslmode=require&uselibpqcompat=true');
    expect(withLibpqSslModes('postgres://u:p@h/db')).toBe('postgres://u:p@h/db');
    expect(withLibpqSslModes('postgres://u:p@h/db?sslmode=verify-full&uselibpqcompat=false')).toBe('postgres://u:p@h/db?sslmode=verify-full&uselibpqcompat=false');
  });
});
