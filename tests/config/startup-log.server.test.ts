import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { envSchema } from '../../lib/config.ts';
import { freePort } from '../../scripts/support/postgres-server.ts';
import { startNextServer } from '../../scripts/support/next-server.ts';
import { requireProductionBuild } from '../support/production-build.ts';

/**
 * What an operator and a caller see when a deployment is started with an incomplete configuration,
 * on the production server (`next build` + `next start`): the startup log names the variables to
 * set (lib/startup.ts, from instrumentation.ts), every request gets a 503 service_misconfigured
 * whose body says only that the service is misconfigured, and no secret of the configuration, nor
 * the credential a caller sent, appears in anything the server printed.
 */

const secret = (name: string) => `${name}-${randomBytes(16).toString('hex')}`;

/** Every variable the service reads, unset, so nothing from the test's own environment leaks in. */
const NOTHING_CONFIGURED = Object.fromEntries(Object.keys(envSchema.shape).map((name) => [name, undefined]));

interface Case {
  name: string;
  env: (port: number) => Record<string, string>;
  /** What the log must ask for. */
  toSet: string[];
  /** Set, so not asked for. */
  notAskedFor: string[];
  secrets: string[];
}

const dbPassword = secret('db-pass');
const supabaseKey = secret('sb_secret');
const subscriptionSecret = secret('sub');
const leaguesSecret = secret('lg');
const sentCredential = secret('sent');

const cases: Case[] = [
  {
    name: 'only DATABASE_URL, pointing nowhere',
    env: (port) => ({ DATABASE_URL: `postgres://svc_user:${dbPassword}@127.0.0.1:${port}/app` }),
    toSet: ['SUPABASE_URL or SUPABASE_JWT_SECRET', 'SUBSCRIPTION_WEBHOOK_SECRET', 'APP_ORIGIN as your site'],
    notAskedFor: ['DATABASE_URL, or SUPABASE_URL'],
    secrets: [dbPassword],
  },
  {
    name: 'only SUPABASE_URL',
    env: () => ({ SUPABASE_URL: 'https://startup-log-test.supabase.co' }),
    toSet: ['DATABASE_URL, or SUPABASE_URL + SUPABASE_SECRET_KEY', 'SUBSCRIPTION_WEBHOOK_SECRET', 'APP_ORIGIN as your site'],
    notAskedFor: ['SUPABASE_URL or SUPABASE_JWT_SECRET'],
    secrets: [],
  },
  {
    name: 'every secret but no APP_ORIGIN',
    env: () => ({
      SUPABASE_URL: 'https://startup-log-test.supabase.co', SUPABASE_SECRET_KEY: supabaseKey,
      SUBSCRIPTION_WEBHOOK_SECRET: subscriptionSecret, LEAGUES_WEBHOOK_SECRET: leaguesSecret,
    }),
    toSet: ['APP_ORIGIN as your site'],
    notAskedFor: ['DATABASE_URL, or', 'SUPABASE_URL or SUPABASE_JWT_SECRET', 'SUBSCRIPTION_WEBHOOK_SECRET;', 'LEAGUES_WEBHOOK_SECRET;'],
    secrets: [supabaseKey, subscriptionSecret, leaguesSecret],
  },
  // Found by a later outside review: LOCAL_DEV=1 here kept the dev doors open onto this data.
  {
    name: 'LOCAL_DEV=1 beside a database on another machine, a Supabase project and a real secret',
    env: () => ({
      LOCAL_DEV: '1', DATABASE_URL: `postgres://svc_user:${dbPassword}@db.startup-log-test.example:5432/app`,
      SUPABASE_URL: 'https://startup-log-test.supabase.co', SUBSCRIPTION_WEBHOOK_SECRET: subscriptionSecret,
    }),
    toSet: ['LOCAL_DEV=1 is refused beside a real deployment\'s settings', 'DATABASE_URL names a database on another machine', 'SUPABASE_URL names a Supabase project', 'Remove LOCAL_DEV'],
    notAskedFor: ['startup-log-test', 'svc_user'],
    secrets: [dbPassword, subscriptionSecret],
  },
];

describe.each(cases)('the production server started with $name', ({ env, toSet, notAskedFor, secrets }) => {
  let server: Awaited<ReturnType<typeof startNextServer>>;
  let dataDir: string;

  beforeAll(async () => {
    requireProductionBuild();
    dataDir = mkdtempSync(path.join(tmpdir(), 'account-link-startup-'));
    server = await startNextServer({
      // /api/health needs the configuration, so it answers 503 here by design.
      readyPath: '/api/health/live',
      env: { ...NOTHING_CONFIGURED, NODE_ENV: 'production', LOG_LEVEL: 'info', EMBEDDED_DB_DIR: path.join(dataDir, 'pglite'), ...env(await freePort()) },
    });
  }, 240_000);
  afterAll(async () => {
    await server?.stop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  const requests = [
    { method: 'GET', path: '/api/health' },
    { method: 'GET', path: '/api/me', authorization: `Bearer ${sentCredential}` },
    { method: 'POST', path: '/api/webhooks/subscription-billing', authorization: `Bearer ${sentCredential}`, body: '{"event":{"id":"evt-startup","type":"TEST"}}' },
    { method: 'POST', path: '/api/wallet-link', authorization: `Bearer ${sentCredential}`, body: '{"payload":{}}' },
  ];

  it('answers every request 503 service_misconfigured, saying only that it is misconfigured', async () => {
    for (const { method, path: pathname, authorization, body } of requests) {
      const headers: Record<string, string> = { ...(authorization ? { authorization } : {}), ...(body ? { 'content-type': 'application/json' } : {}) };
      const response = await fetch(`${server.url}${pathname}`, { method, headers, body });
      const text = await response.text();
      expect({ pathname, status: response.status, type: response.headers.get('content-type'), retryAfter: response.headers.get('retry-after') })
        .toEqual({ pathname, status: 503, type: 'application/problem+json', retryAfter: '60' });
      const problem = JSON.parse(text) as Record<string, unknown>;
      expect({ pathname, code: problem.code, detail: problem.detail }).toEqual({ pathname, code: 'service_misconfigured', detail: 'The service is misconfigured.' });
      // Nothing about the configuration: no variable, no value.
      expect(Object.keys(problem).sort()).toEqual(['code', 'detail', 'requestId', 'status', 'title', 'type']);
      for (const word of ['SUPABASE', 'DATABASE', 'SECRET', 'APP_ORIGIN', 'postgres', 'startup-log-test', ...secrets]) expect(text).not.toContain(word);
    }
  });

  it('names in its startup log what to set, and prints no secret', async () => {
    // The startup line is written by instrumentation.ts as the server starts; the requests above
    // add one "configuration error" line each. Give the log a moment to be flushed.
    for (let i = 0; i < 50 && !server.output().includes('cannot start with this configuration'); i++) await new Promise((resolve) => setTimeout(resolve, 100));
    const output = server.output();
    const startup = output.split('\n').find((line) => line.includes('cannot start with this configuration'));
    expect(startup, output.slice(0, 2000)).toBeDefined();
    const logged = JSON.parse(startup!) as { level: number; err: { message: string } };
    expect(logged.level).toBe('error');
    for (const name of toSet) expect(logged.err.message).toContain(name);
    for (const name of notAskedFor) expect(logged.err.message).not.toContain(name);
    for (const value of [...secrets, sentCredential]) {
      expect(output).not.toContain(value);
      // Nor a recognisable piece of one.
      expect(output).not.toContain(value.slice(-12));
    }
  });
});
