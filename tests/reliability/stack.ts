import { randomBytes, randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { devKeyPath, mintDevToken, type DevTokenOptions } from '../../lib/auth/dev-key.ts';
import { openPostgres } from '../../lib/db/postgres.ts';
import { startFakeRevenueCat, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { startNextServer, type NextServer } from '../../scripts/support/next-server.ts';
import { createDatabase, startPostgresServer, type PostgresServer } from '../../scripts/support/postgres-server.ts';
import { requireProductionBuild } from '../support/production-build.ts';

/**
 * What every reliability file runs against: its own real Postgres server (so stopping it disturbs
 * nobody), one database migrated by the service's own runner, and the production server
 * (`next build` + `next start`) in Postgres mode over real HTTP on loopback. Webhook secrets are
 * random per run (Postgres mode has no dev secrets); session tokens are real ES256 dev-key tokens
 * (EMBEDDED_DB_DIR points at a temporary folder that only holds the key). Every secret and every
 * token handed out is remembered, so the file can search all server output for them at the end.
 */
export interface ReliabilityStack {
  pg: PostgresServer;
  /** Connection string of the service's database. */
  databaseUrl: string;
  /** SQL for assertions, on a small pool of its own (never used by the code under test). */
  sql<T = Record<string, unknown>>(text: string, values?: unknown[]): Promise<T[]>;
  secrets: {
    subscription: string;
    subscriptionPrevious: string;
    leagues: string;
    leaguesPrevious: string;
    cron: string;
    admin: string;
  };
  /** The stand-in for RevenueCat's REST API the server syncs from (when started with `revenuecat`). */
  revenuecat?: FakeRevenueCat;
  /** `Authorization` value the billing webhook accepts. */
  billingAuthorization: string;
  /** The server started last. */
  server: NextServer;
  /** Every server started, in order (their output is what the log search reads). */
  servers: NextServer[];
  /** Start another production server on the same database (extra env on top of the stack's). */
  startServer(extraEnv?: Record<string, string | undefined>): Promise<NextServer>;
  /** A real session token for a (new, unless given) user; remembered for the log search. */
  mintUser(options?: Partial<DevTokenOptions>): Promise<{ userId: string; email: string; token: string; authorization: string }>;
  /** Everything every server of this stack printed, in start order. */
  logs(): string;
  /** Strings that must never appear in a log: the configured secrets, key material, issued tokens. */
  forbiddenStrings(): { what: string; value: string }[];
  close(): Promise<void>;
}

/**
 * Test-only instrumentation, added after the migrations: every INSERT/UPDATE of an entitlement, a
 * league or a wallet link is counted in reliability.writes, so "exactly one effect" is observable
 * (a duplicate applied twice would show as a second write even when the end state looks the same).
 */
const INSTRUMENTATION_SQL = /* sql */ `
create schema reliability;
create table reliability.writes (tbl text not null, key text, op text not null);
create function reliability.count_write() returns trigger language plpgsql as $$
begin
  insert into reliability.writes (tbl, key, op) values (tg_table_name, to_jsonb(new) ->> tg_argv[0], tg_op);
  return null;
end $$;
create trigger reliability_count_write after insert or update on public.entitlements
  for each row execute function reliability.count_write('app_user_id');
create trigger reliability_count_write after insert or update on public.leagues
  for each row execute function reliability.count_write('external_id');
create trigger reliability_count_write after insert or update on public.wallet_links
  for each row execute function reliability.count_write('address_key');
`;

export const APP_ORIGIN = 'https://reliability.example.test';

const secret = (name: string) => `${name}-${randomBytes(24).toString('hex')}`;

export interface StackOptions {
  /**
   * Configure billing sync against a local RevenueCat stand-in (REVENUECAT_*, CRON_SECRET,
   * ADMIN_API_SECRET), so the sync, sweep and admin routes work. `env` adds to the server's env.
   */
  revenuecat?: boolean;
  env?: Record<string, string | undefined>;
}

export async function startStack(options: StackOptions = {}): Promise<ReliabilityStack> {
  requireProductionBuild();
  const root = mkdtempSync(path.join(tmpdir(), 'account-link-reliability-'));
  const embeddedDbDir = path.join(root, 'pglite');
  mkdirSync(embeddedDbDir, { recursive: true });
  const pgServer = await startPostgresServer();
  const database = `reliability_${randomBytes(4).toString('hex')}`;
  await createDatabase(pgServer.url(), database);
  const databaseUrl = pgServer.url(database);

  // Migrate with the service's own runner, then instrument, before any server sees the database.
  const migrated = await openPostgres({ connectionString: databaseUrl, max: 1 });
  await migrated.pool.query(INSTRUMENTATION_SQL);
  await migrated.close();

  const assertions = new pg.Pool({ connectionString: databaseUrl, max: 3 });
  assertions.on('error', () => undefined); // the fault file stops the server under it

  const secrets = {
    subscription: secret('sub'),
    subscriptionPrevious: secret('sub-prev'),
    leagues: secret('lg'),
    leaguesPrevious: secret('lg-prev'),
    cron: secret('cron'),
    admin: secret('admin'),
  };
  const revenuecat = options.revenuecat ? await startFakeRevenueCat() : undefined;
  const baseEnv: Record<string, string | undefined> = {
    NODE_ENV: 'production',
    LOG_LEVEL: 'info',
    DATABASE_URL: databaseUrl,
    DATABASE_POOL_MAX: '10',
    EMBEDDED_DB_DIR: embeddedDbDir,
    SUBSCRIPTION_WEBHOOK_SECRET: secrets.subscription,
    SUBSCRIPTION_WEBHOOK_SECRET_PREVIOUS: secrets.subscriptionPrevious,
    LEAGUES_WEBHOOK_SECRET: secrets.leagues,
    LEAGUES_WEBHOOK_SECRET_PREVIOUS: secrets.leaguesPrevious,
    APP_ORIGIN,
    // Postgres with dev-key session tokens: local mode, asked for explicitly.
    LOCAL_DEV: '1',
    // Nothing from the caller's shell may change the mode under test.
    SUPABASE_URL: undefined,
    SUPABASE_SECRET_KEY: undefined,
    SUPABASE_SERVICE_ROLE_KEY: undefined,
    SUPABASE_PUBLISHABLE_KEY: undefined,
    SUPABASE_JWT_SECRET: undefined,
    SUPABASE_JWT_ISSUER: undefined,
    AUTH_VERIFY_SESSION: undefined,
    BILLING_IGNORE_SANDBOX: undefined,
    BILLING_SANDBOX_GRANTS: undefined,
    BILLING_EVENTS_RETENTION_MONTHS: undefined,
    WALLET_EVM_CHAIN_IDS: undefined,
    WALLET_SOLANA_CLUSTERS: undefined,
    VERCEL: undefined,
    FAULT_CRASH_AFTER_COMMIT: undefined,
    REVENUECAT_SECRET_API_KEY: revenuecat?.apiKey,
    REVENUECAT_API_URL: revenuecat?.url,
    REVENUECAT_REQUESTS_PER_SECOND: revenuecat ? '100' : undefined,
    REVENUECAT_TIMEOUT_MS: revenuecat ? '2000' : undefined,
    BILLING_SYNC_AFTER: revenuecat ? 'none' : undefined,
    CRON_SECRET: revenuecat ? secrets.cron : undefined,
    ADMIN_API_SECRET: revenuecat ? secrets.admin : undefined,
    ...options.env,
  };

  const tokens: string[] = [];
  const keyConfig = { embeddedDbDir };
  const mintUser = async (options: Partial<DevTokenOptions> = {}) => {
    const userId = options.userId ?? randomUUID();
    const email = options.email ?? `rel-${userId.slice(0, 8)}@example.test`;
    const token = await mintDevToken(keyConfig, { ...options, userId, email });
    tokens.push(token);
    return { userId, email, token, authorization: `Bearer ${token}` };
  };
  await mintUser(); // makes the dev key file before any server reads it

  const servers: NextServer[] = [];
  const stack: ReliabilityStack = {
    pg: pgServer,
    databaseUrl,
    sql: async (text, values) => (await assertions.query(text, values)).rows,
    secrets,
    revenuecat,
    billingAuthorization: `Bearer ${secrets.subscription}`,
    server: undefined as unknown as NextServer,
    servers,
    async startServer(extraEnv = {}) {
      // Started the way users start it (`next start` without -H, bound to every interface), not bound
      // to 127.0.0.1: Next handled a malformed percent-path differently on the two, and only the
      // loopback binding, where the bug did not show, was under this suite (requests still go to
      // 127.0.0.1, which every-interface includes).
      const server = await startNextServer({ env: { ...baseEnv, ...extraEnv }, timeoutMs: 90_000, everyInterface: true });
      servers.push(server);
      stack.server = server;
      return server;
    },
    mintUser,
    logs: () => servers.map((server) => server.output()).join('\n'),
    forbiddenStrings() {
      const key = JSON.parse(readFileSync(devKeyPath(keyConfig), 'utf8')) as { d: string };
      const password = decodeURIComponent(new URL(databaseUrl).password);
      return [
        ...Object.entries(secrets).map(([name, value]) => ({ what: `secret ${name}`, value })),
        ...(revenuecat ? [{ what: 'RevenueCat secret API key', value: revenuecat.apiKey }] : []),
        { what: 'dev signing key (private part)', value: key.d },
        { what: 'database password', value: password },
        ...tokens.flatMap((token, i) => [
          { what: `session token #${i + 1}`, value: token },
          { what: `session token #${i + 1} signature`, value: token.split('.')[2]! },
        ]),
      ];
    },
    async close() {
      for (const server of servers) await server.stop().catch(() => undefined);
      await assertions.end().catch(() => undefined);
      await revenuecat?.close();
      await pgServer.stop();
      rmSync(root, { recursive: true, force: true });
    },
  };
  await stack.startServer();
  return stack;
}

/**
 * Where any forbidden string (or, for secrets, any 12-character piece of one: a truncated or
 * partly masked secret is still a leak) occurs in the logs. Empty when nothing leaked.
 */
export function findLeaks(logs: string, forbidden: { what: string; value: string }[]): string[] {
  const leaks: string[] = [];
  for (const { what, value } of forbidden) {
    const pieces = what.startsWith('session token') ? [value] : windows(value, 12);
    const hit = pieces.find((piece) => logs.includes(piece));
    if (hit !== undefined) leaks.push(`${what}: "${hit}" at offset ${logs.indexOf(hit)}`);
  }
  return leaks;
}

function windows(value: string, size: number): string[] {
  if (value.length <= size) return [value];
  return Array.from({ length: value.length - size + 1 }, (_, i) => value.slice(i, i + size));
}

/** Search every server log of a stack; returns the leaks (none expected) and what was covered. */
export function scanLogs(stack: ReliabilityStack) {
  const logs = stack.logs();
  const forbidden = stack.forbiddenStrings();
  const leaks = findLeaks(logs, forbidden);
  const tokens = forbidden.filter(({ what }) => what.startsWith('session token') && !what.endsWith('signature')).length;
  return {
    leaks,
    /** JSON log lines of handled requests: proof that the search had real logs to look at. */
    requestLines: logs.split('\n').filter((line) => line.includes('"msg":"request"')).length,
    scan: { servers: stack.servers.length, bytes: Buffer.byteLength(logs), secrets: forbidden.length - 2 * tokens, tokens, leaks: leaks.length },
  };
}
