import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { inject } from 'vitest';
import { mintDevToken, type DevTokenOptions } from '../../lib/auth/dev-key.ts';
import { startFakeRevenueCat, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { startNextServer, type NextServer } from '../../scripts/support/next-server.ts';
import { createDatabase } from '../../scripts/support/postgres-server.ts';
import { requireProductionBuild } from '../support/production-build.ts';

/**
 * What the conformance suite talks to: the production server (`next build` + `next start`) over
 * real HTTP on loopback, on its own database in the test run's real Postgres server, with every
 * route switched on: random webhook, cron and admin secrets, and RevenueCat's REST API played by
 * the local stand-in (scripts/support/fake-revenuecat.ts). Session tokens are real ES256 dev-key
 * tokens (LOCAL_DEV=1 with Postgres, as the reliability suite runs).
 */
export interface ConformanceStack {
  server: NextServer;
  revenuecat: FakeRevenueCat;
  secrets: { subscription: string; leagues: string; cron: string; admin: string };
  /** A real session token for a new user (or the one given). */
  mintToken(options?: Partial<DevTokenOptions>): Promise<{ userId: string; authorization: string }>;
  close(): Promise<void>;
}

const secret = (name: string) => `${name}-${randomBytes(16).toString('hex')}`;

export async function startConformanceStack(): Promise<ConformanceStack> {
  requireProductionBuild();
  const root = mkdtempSync(path.join(tmpdir(), 'account-link-conformance-'));
  const embeddedDbDir = path.join(root, 'pglite'); // holds only the dev signing key
  const serverUrl = inject('postgresServerUrl');
  const database = `conformance_${randomBytes(4).toString('hex')}`;
  await createDatabase(serverUrl, database, 'app_template');
  const revenuecat = await startFakeRevenueCat();
  const secrets = { subscription: secret('sub'), leagues: secret('lg'), cron: secret('cron'), admin: secret('admin') };
  const mintToken = async (options: Partial<DevTokenOptions> = {}) => {
    const userId = options.userId ?? randomUUID();
    const token = await mintDevToken({ embeddedDbDir }, { email: `c-${userId.slice(0, 8)}@example.test`, ...options, userId });
    return { userId, authorization: `Bearer ${token}` };
  };
  await mintToken(); // makes the dev key before the server reads it

  const server = await startNextServer({
    timeoutMs: 90_000,
    env: {
      NODE_ENV: 'production',
      LOG_LEVEL: 'warn',
      LOCAL_DEV: '1',
      // The suite stands for a proxy in front of the server: each request names a client address of
      // its own in X-Forwarded-For (the wrong-secret throttle counts per address).
      TRUSTED_PROXY_HOPS: '1',
      DATABASE_URL: serverUrl.replace(/\/postgres$/, `/${database}`),
      DATABASE_POOL_MAX: '5',
      EMBEDDED_DB_DIR: embeddedDbDir,
      SUBSCRIPTION_WEBHOOK_SECRET: secrets.subscription,
      LEAGUES_WEBHOOK_SECRET: secrets.leagues,
      CRON_SECRET: secrets.cron,
      ADMIN_API_SECRET: secrets.admin,
      REVENUECAT_SECRET_API_KEY: revenuecat.apiKey,
      REVENUECAT_API_URL: revenuecat.url,
      REVENUECAT_REQUESTS_PER_SECOND: '100',
      APP_ORIGIN: 'https://conformance.example.test',
      // Nothing from the caller's shell may change what is under test.
      SUBSCRIPTION_WEBHOOK_SECRET_PREVIOUS: undefined,
      LEAGUES_WEBHOOK_SECRET_PREVIOUS: undefined,
      SUPABASE_URL: undefined,
      SUPABASE_SECRET_KEY: undefined,
      SUPABASE_SERVICE_ROLE_KEY: undefined,
      SUPABASE_PUBLISHABLE_KEY: undefined,
      SUPABASE_JWT_SECRET: undefined,
      SUPABASE_JWT_ISSUER: undefined,
      AUTH_VERIFY_SESSION: undefined,
      BILLING_IGNORE_SANDBOX: undefined,
      // No sync after a webhook's answer: it would race the tests' scripted RevenueCat answers.
      BILLING_SYNC_AFTER: 'none',
      WALLET_EVM_CHAIN_IDS: undefined,
      WALLET_SOLANA_CLUSTERS: undefined,
      VERCEL: undefined,
      FAULT_CRASH_AFTER_COMMIT: undefined,
    },
  });

  return {
    server,
    revenuecat,
    secrets,
    mintToken,
    async close() {
      await server.stop();
      await revenuecat.close();
      rmSync(root, { recursive: true, force: true });
    },
  };
}
