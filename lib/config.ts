import path from 'node:path';
import ipaddr from 'ipaddr.js';
import { z } from 'zod';

/**
 * The service's configuration: one zod schema over process.env, read lazily (first use, or after
 * `resetConfig()` in tests). Empty strings count as unset, so `FOO=` in a .env file means "not set".
 *
 * Which database:  DATABASE_URL -> postgres; else SUPABASE_URL + SUPABASE_SECRET_KEY -> supabase;
 *                  else embedded (PGlite in a local folder, local mode only).
 * Which auth:      SUPABASE_URL -> the project's JWKS (plus HS256 when SUPABASE_JWT_SECRET is set);
 *                  SUPABASE_JWT_SECRET alone -> HS256; nothing -> a local dev key (local mode only).
 *
 * Local mode is the one place development conveniences exist (the embedded database, the dev
 * signing key and `npm run token`, the dev webhook secrets, local sign-in on the account page):
 * either nothing production-like is configured (no DATABASE_URL, no SUPABASE_*, no real secret, no
 * URL of another machine, not on Vercel: a newcomer's `npm run dev`; see productionLikeSettings), or LOCAL_DEV=1
 * asks for it (tests and benches on a real Postgres with dev tokens; refused on Vercel). Anywhere else a configuration that lacks something a
 * deployment needs is refused as a whole (ConfigError: logged at startup with what to set, and
 * 503 service_misconfigured to callers), rather than quietly filling the gap with a dev default.
 */

/**
 * token68 (RFC 9110 section 11.6.2): the characters a Bearer credential may hold. The secrets below
 * are sent as Bearer credentials, so they must be token68; lib/auth/authorization-header.ts reads
 * every Authorization header by the same grammar (it is defined here, once, because this module
 * imports nothing of the project).
 */
export const TOKEN68 = '[A-Za-z0-9\\-._~+/]+=*';

/** Whether a value could be sent as Bearer credentials at all (configured secrets must be). */
export function isToken68(value: string): boolean {
  return new RegExp(`^${TOKEN68}$`).test(value);
}

const emptyAsUnset = (value: unknown) => (typeof value === 'string' && value.trim() === '' ? undefined : value);
const optionalString = z.preprocess(emptyAsUnset, z.string().optional());
const optionalUrl = z.preprocess(emptyAsUnset, z.url({ protocol: /^https?$/ }).optional());
const booleanFlag = (fallback: boolean | undefined) =>
  z.preprocess(
    emptyAsUnset,
    z
      .enum(['true', 'false', '1', '0'])
      .transform((value) => value === 'true' || value === '1')
      .optional()
      .transform((value) => value ?? fallback),
  );

/** A number setting that is not one says so in words (zod's own: "expected number, received NaN"). */
const notANumber = (issue: { code: string }) => (issue.code === 'invalid_type' ? 'must be a number' : undefined);

const commaList = z.preprocess(
  emptyAsUnset,
  z
    .string()
    .optional()
    .transform((value) => (value === undefined ? undefined : value.split(',').map((item) => item.trim()).filter(Boolean))),
);

export const envSchema = z.object({
  DATABASE_URL: z.preprocess(emptyAsUnset, z.string().regex(/^postgres(ql)?:\/\//, 'must be a postgres:// URL').optional()),
  /** The Vercel-Supabase integration's pooled connection string (used when DATABASE_URL is unset). */
  POSTGRES_URL: z.preprocess(emptyAsUnset, z.string().regex(/^postgres(ql)?:\/\//, 'must be a postgres:// URL').optional()),
  /** The integration's direct connection string: only `npm run migrate` uses it (lib/db/migrate.ts). */
  POSTGRES_URL_NON_POOLING: z.preprocess(emptyAsUnset, z.string().regex(/^postgres(ql)?:\/\//, 'must be a postgres:// URL').optional()),
  DATABASE_POOL_MAX: z.preprocess(emptyAsUnset, z.coerce.number({ error: notANumber }).int({ error: 'must be a whole number' }).min(1).max(100).optional()),
  SUPABASE_URL: optionalUrl,
  SUPABASE_SECRET_KEY: optionalString,
  SUPABASE_SERVICE_ROLE_KEY: optionalString,
  SUPABASE_PUBLISHABLE_KEY: optionalString,
  /** The integration's (legacy) names for the publishable key. */
  SUPABASE_ANON_KEY: optionalString,
  NEXT_PUBLIC_SUPABASE_ANON_KEY: optionalString,
  SUPABASE_JWT_SECRET: optionalString,
  SUPABASE_JWT_ISSUER: optionalString,
  AUTH_VERIFY_SESSION: booleanFlag(undefined),
  EMBEDDED_DB_DIR: optionalString,
  SUBSCRIPTION_WEBHOOK_SECRET: optionalString,
  SUBSCRIPTION_WEBHOOK_SECRET_PREVIOUS: optionalString,
  LEAGUES_WEBHOOK_SECRET: optionalString,
  LEAGUES_WEBHOOK_SECRET_PREVIOUS: optionalString,
  BILLING_SANDBOX_GRANTS: booleanFlag(undefined),
  /** Deprecated: the opposite of BILLING_SANDBOX_GRANTS (see sandboxGrants). */
  BILLING_IGNORE_SANDBOX: booleanFlag(undefined),
  REVENUECAT_SECRET_API_KEY: optionalString,
  REVENUECAT_API_URL: z.preprocess(emptyAsUnset, z.url({ protocol: /^https?$/ }).default('https://api.revenuecat.com')),
  REVENUECAT_TIMEOUT_MS: z.preprocess(emptyAsUnset, z.coerce.number({ error: notANumber }).int({ error: 'must be a whole number' }).min(100).max(30_000).default(4000)),
  REVENUECAT_REQUESTS_PER_SECOND: z.preprocess(emptyAsUnset, z.coerce.number({ error: notANumber }).positive().max(100).default(1)),
  BILLING_USER_REFRESHES_PER_DAY: z.preprocess(emptyAsUnset, z.coerce.number({ error: notANumber }).int({ error: 'must be a whole number' }).min(1).max(1000).default(20)),
  /** RevenueCat REST API v2 (lib/revenuecat/v2.ts): a v2 secret key and the project it reads, both or neither. */
  REVENUECAT_V2_SECRET_API_KEY: optionalString,
  REVENUECAT_PROJECT_ID: z.preprocess(emptyAsUnset, z.string().regex(/^[A-Za-z0-9_-]{1,255}$/, 'must be a RevenueCat project id (proj...)').optional()),
  /** Opt-in: when a user is deleted, delete their RevenueCat customer too (REST v2 DELETE; needs the v2 settings). docs/configuration.md. */
  REVENUECAT_DELETE_ON_ERASE: booleanFlag(false),
  /** Local mode only: sync from this service's own stand-in of RevenueCat's REST API (lib/revenuecat/stand-in.ts) instead of RevenueCat. */
  REVENUECAT_STAND_IN: booleanFlag(false),
  BILLING_SYNC_AFTER: z.preprocess(emptyAsUnset, z.enum(['gaps', 'all', 'none']).default('gaps')),
  BILLING_EVENTS_RETENTION_MONTHS: z.preprocess(emptyAsUnset, z.coerce.number({ error: notANumber }).int({ error: 'must be a whole number' }).min(1).max(120).default(13)),
  CRON_SECRET: optionalString,
  ADMIN_API_SECRET: optionalString,
  /** Outbound events (lib/events/endpoints.ts reads and checks these three): receiver URLs, comma-separated. */
  EVENTS_WEBHOOK_URL: optionalString,
  /** Their `whsec_` secrets, comma-separated (several while rotating: each signs). */
  EVENTS_WEBHOOK_SECRET: optionalString,
  /** Instead of the two above: a JSON array of receivers, each with its secret(s) and the event types it wants. */
  EVENTS_WEBHOOK_ENDPOINTS: optionalString,
  APP_ORIGIN: optionalUrl,
  WALLET_EVM_CHAIN_IDS: commaList,
  WALLET_SOLANA_CLUSTERS: commaList,
  WALLET_EVM_RPC_URLS: optionalString,
  WALLET_EVM_RPC_TIMEOUT_MS: z.preprocess(emptyAsUnset, z.coerce.number({ error: notANumber }).int({ error: 'must be a whole number' }).min(100).max(30_000).default(4000)),
  NEXT_PUBLIC_SUPABASE_URL: optionalUrl,
  NEXT_PUBLIC_SUPABASE_PUBLISHABLE_KEY: optionalString,
  LOG_LEVEL: z.preprocess(emptyAsUnset, z.enum(['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']).default('info')),
  /** Read by lib/log.ts before the configuration loads; here so it is validated and documented. */
  LOG_FORMAT: z.preprocess(emptyAsUnset, z.enum(['json', 'pretty']).optional()),
  LOCAL_DEV: booleanFlag(false),
  VERCEL: optionalString,
  /** Set by Vercel: production, preview or development; with the two below, APP_ORIGIN's default. */
  VERCEL_ENV: optionalString,
  VERCEL_PROJECT_PRODUCTION_URL: optionalString,
  VERCEL_URL: optionalString,
  CORS_ORIGINS: commaList,
  /**
   * How many proxies of the operator's stand in front of `next start`, each appending the address it
   * saw to X-Forwarded-For (lib/http/before-next.ts reads the client's address by it; Vercel's own
   * header is trusted there without it).
   */
  TRUSTED_PROXY_HOPS: z.preprocess(emptyAsUnset, z.coerce.number({ error: notANumber }).int({ error: 'must be a whole number' }).min(0).max(10).default(0)),
  /** Set by `next dev` / `next start` to the port they listen on (-p, PORT, or the next free one): local mode's APP_ORIGIN default. */
  // Not the operator's setting: anything but a port number is left aside rather than refusing the configuration.
  PORT: z.preprocess((value) => (typeof value === 'string' && /^\d{1,5}$/.test(value.trim()) && Number(value) >= 1 && Number(value) <= 65_535 ? Number(value) : undefined), z.number().optional()),
});

/** Where a local run is served when APP_ORIGIN is not set (`npm run dev` / `npm start` on Next's default port). */
export const LOCAL_APP_ORIGIN = 'http://localhost:3000';

/** The embedded database's folder the settings name (EMBEDDED_DB_DIR, else .data/pglite), absolute. */
export function embeddedDbDirOf(env: { EMBEDDED_DB_DIR?: string }): string {
  return path.resolve(/*turbopackIgnore: true*/ env.EMBEDDED_DB_DIR?.trim() || path.join(/*turbopackIgnore: true*/ '.data', 'pglite'));
}

/**
 * Local mode's APP_ORIGIN default: localhost on the port the server listens on. Next (16,
 * server/lib/start-server.js) sets PORT in the server's process to the port it bound, before the
 * app loads: `-p`, PORT, or the next free port `next dev` took when 3000 was busy. Without PORT
 * (a script, a test), LOCAL_APP_ORIGIN.
 */
function localOrigin(port: number | undefined): string {
  return port === undefined ? LOCAL_APP_ORIGIN : `http://localhost:${port}`;
}

export type DatabaseMode = 'embedded' | 'postgres' | 'supabase';
export type AuthMode = 'supabase-jwks' | 'hs256' | 'dev-key';

/** Secrets documented in the README for local development; only ever used in local mode. */
export const DEV_WEBHOOK_SECRETS = {
  subscription: 'dev-subscription-webhook-secret',
  leagues: 'dev-leagues-webhook-secret',
} as const;

/**
 * The operator's Bearer secret for /api/admin/* in local mode when ADMIN_API_SECRET is unset, so
 * `npm run status`, `billing:explain` and `billing:sync` can ask the running local service (which
 * holds the embedded database folder). Documented and public like the dev webhook secrets: only
 * ever used in local mode, never on a deployment. As long as a real one must be (MIN_SECRET_LENGTH).
 */
export const DEV_ADMIN_SECRET = 'dev-admin-api-secret-for-local-mode-only';

/**
 * The operator's database settings, in the order the operator commands (`npm run migrate`,
 * `status`, `billing:explain`, `billing:rebuild`, `billing:sync`, `db:maintain`) take them: the
 * Vercel-Supabase integration's direct connection first (DDL, long index builds and long
 * maintenance belong on a session of their own, not on the transaction pooler), then the
 * service's own DATABASE_URL, then the pooled POSTGRES_URL. So the one setting that lets an
 * operator migrate lets every other operator command run too.
 */
export const OPERATOR_DATABASE_SETTINGS = ['POSTGRES_URL_NON_POOLING', 'DATABASE_URL', 'POSTGRES_URL'] as const;

/** The first of OPERATOR_DATABASE_SETTINGS that is set (empty counts as unset), and its name. */
export function operatorDatabaseUrl(env: Record<string, string | undefined>): { url: string; from: typeof OPERATOR_DATABASE_SETTINGS[number] } | undefined {
  for (const name of OPERATOR_DATABASE_SETTINGS) {
    const url = env[name]?.trim();
    if (url) return { url, from: name };
  }
  return undefined;
}

/**
 * The local RevenueCat stand-in (REVENUECAT_STAND_IN=1, local mode only): where it answers, under
 * the service's own origin, and the key the service sends it, as it would send RevenueCat its
 * secret key. Public on purpose: the stand-in exists only in local mode.
 */
export const REVENUECAT_STAND_IN_PATH = '/api/dev/revenuecat';
export const REVENUECAT_STAND_IN_KEY = 'dev-revenuecat-stand-in-key';

export interface Config {
  /**
   * On Vercel: VERCEL set to anything (Vercel sets 1; an empty value counts as unset, as everywhere).
   * The one rule for "deployed": LOCAL_DEV is refused, local mode is off, the pool is Vercel's.
   */
  deployed: boolean;
  /**
   * Development conveniences are on (see the top of this file). Never true on Vercel; false
   * whenever anything production-like is configured, unless LOCAL_DEV=1.
   */
  local: boolean;
  databaseMode: DatabaseMode;
  databaseUrl?: string;
  /** Postgres mode's pool in this process (see databasePoolFor). */
  databasePool: DatabasePoolSettings;
  embeddedDbDir: string;
  supabase?: { url: string; secretKey: string };
  auth: {
    mode: AuthMode;
    supabaseUrl?: string;
    /** Key sent as `apikey` to the Auth server for the session-liveness check. */
    apiKey?: string;
    jwtSecret?: string;
    issuer?: string;
    verifySession: boolean;
  };
  webhookSecrets: {
    subscription: string[];
    leagues: string[];
  };
  /**
   * Sandbox purchases are recorded but grant nothing (sandboxGrants below: BILLING_SANDBOX_GRANTS,
   * default on only in local mode). The one value every billing path reads: webhook events, REST
   * snapshots and the rebuild, so a rebuild gives what live delivery gives.
   */
  billingIgnoreSandbox: boolean;
  /**
   * RevenueCat's REST API (lib/revenuecat): absent without a v1 key (REVENUECAT_SECRET_API_KEY) or
   * a v2 one (REVENUECAT_V2_SECRET_API_KEY + REVENUECAT_PROJECT_ID), and every sync path answers 503.
   */
  revenuecat?: {
    /** REST v1's secret key; null: v2 alone reads the customer (docs/sync.md, "Which record a sync reads"). */
    apiKey: string | null; apiUrl: string; timeoutMs: number; requestsPerSecond: number;
    /** REST v2 (REVENUECAT_V2_SECRET_API_KEY + REVENUECAT_PROJECT_ID): each purchase with the entitlements it grants; alone, the whole record. */
    v2?: { apiKey: string; projectId: string; deleteOnErase: boolean };
    /** The local stand-in answers instead of RevenueCat (REVENUECAT_STAND_IN=1, local mode only). */
    standIn?: boolean;
  };
  /** How many of a user's own refreshes reach RevenueCat in a day (BILLING_USER_REFRESHES_PER_DAY, default 20). */
  billingUserRefreshesPerDay: number;
  /** Which webhook events mark their subscriber for a sync from RevenueCat (BILLING_SYNC_AFTER; none: only the sweep and explicit syncs). */
  billingSyncAfter: 'gaps' | 'all' | 'none';
  /** How many months of the billing event log maintenance keeps (BILLING_EVENTS_RETENTION_MONTHS, default 13). */
  billingEventsRetentionMonths: number;
  /** Vercel Cron's Bearer secret for /api/cron/* (absent: those routes answer 503). */
  cronSecret?: string;
  /** The operator's Bearer secret for /api/admin/* (absent: those routes answer 503). */
  adminSecret?: string;
  appOrigin: string;
  wallet: {
    evmChainIds: number[];
    solanaClusters: string[];
    /**
     * The JSON-RPC endpoint of each EVM chain where smart-contract wallets (ERC-1271, ERC-6492) can
     * be verified (WALLET_EVM_RPC_URLS); a chain without one links ordinary wallets only.
     */
    evmRpcUrls: ReadonlyMap<number, string>;
    /** The most one link request waits for a chain's RPC (WALLET_EVM_RPC_TIMEOUT_MS) before answering 503. */
    evmRpcTimeoutMs: number;
  };
  /** What the account page's browser code needs to sign in with Supabase Auth (public values). */
  frontend: { supabaseUrl?: string; publishableKey?: string };
  /** Browser origins allowed to call the API cross-origin (CORS_ORIGINS; lib/http/cors.ts). */
  corsOrigins: string[];
  /** TRUSTED_PROXY_HOPS: off Vercel, how many X-Forwarded-For entries (from the right) proxies of the operator wrote. */
  trustedProxyHops: number;
  logLevel: string;
  /**
   * The outbound event receivers as set (EVENTS_WEBHOOK_*), unparsed: lib/events/endpoints.ts
   * parses and checks them (this module imports nothing of the project), and refuses them there.
   */
  eventEndpointSettings: { EVENTS_WEBHOOK_URL?: string; EVENTS_WEBHOOK_SECRET?: string; EVENTS_WEBHOOK_ENDPOINTS?: string };
  /** Settings that work but should change (a deprecated name), for the startup log. */
  warnings: string[];
}

export interface DatabasePoolSettings {
  /** Connections this process may hold open. */
  max: number;
  /** An idle connection is closed after this long. */
  idleTimeoutMillis: number;
}

/**
 * The pool by environment (DATABASE_POOL_MAX overrides the size). On Vercel every function instance
 * has its own pool, and all of them share the pooler's client limit (200 on Supabase's smallest
 * computes): 3 connections per instance let ~65 instances run at once, and an instance's CPU runs
 * out before 3 connections do (a call holds one for a millisecond or two). Idle connections close
 * after 5 s, because attachDatabasePool keeps an instance alive until they have (so a suspended
 * instance holds none). A long-running server keeps 4, closed after 30 s idle: one Node process
 * cannot keep more busy when the database is near, and more transactions at once only make
 * Postgres's backends wait on each other (measured in docs/benchmarks.md, "The connection pool": 10 connections cost a
 * third more Postgres CPU per webhook than 4, for fewer requests a second). A database far away
 * (each call holding its connection for a long round trip) may want more: DATABASE_POOL_MAX.
 */
export function databasePoolFor(deployed: boolean, maxOverride: number | undefined): DatabasePoolSettings {
  return deployed ? { max: maxOverride ?? 3, idleTimeoutMillis: 5_000 } : { max: maxOverride ?? LONG_RUNNING_POOL_MAX, idleTimeoutMillis: 30_000 };
}

/** The pool of a long-running server (`next start`, `npm run dev` on Postgres). */
export const LONG_RUNNING_POOL_MAX = 4;

export class ConfigError extends Error {
  override name = 'ConfigError';
}

let cached: { config: Config; options: LoadOptions; settings: string | undefined } | undefined;

/**
 * The process's configuration, read from process.env once. Under `next dev`, again whenever a
 * setting changed: Next reloads .env.local into process.env while it runs, and the routes it loads
 * again read the new settings, but a module that lives on (the outbox's schedule, started by
 * instrumentation.ts) would keep sending to the receivers of the first.
 */
export function getConfig(): Config {
  const settings = settingsWatched();
  if (!cached || cached.settings !== settings) cached = { config: loadConfig(process.env, cached?.options), options: cached?.options ?? {}, settings };
  return cached.config;
}

/** Under `next dev`, the values of every setting loadConfig reads in process.env, as one string to compare; elsewhere nothing is watched. */
function settingsWatched(): string | undefined {
  if (process.env.NODE_ENV !== 'development') return undefined;
  return JSON.stringify(Object.keys(envSchema.shape).map((name) => process.env[name] ?? null));
}

/**
 * For the operator commands (scripts): from now on this process reads the operator's
 * configuration (loadConfig's `operator`), which needs only the database settings. Returns it;
 * throws ConfigError as getConfig would.
 */
export function configureForOperator(env: Record<string, string | undefined> = process.env): Config {
  const options = { operator: true };
  // (Compared with process.env, as getConfig compares: whatever `env` was, it stays until process.env changes.)
  cached = { config: loadConfig(env, options), options, settings: settingsWatched() };
  return cached.config;
}

/** Forget the cached configuration, so the next getConfig() reads process.env again (tests). */
export function resetConfig(): void {
  cached = undefined;
}

/**
 * REST v2 settings: both or neither. Beside a v1 key v2's per-item record wins where the two differ;
 * alone it reads the whole record. Refused otherwise, naming the variables, never values.
 */
function revenueCatV2(e: z.output<typeof envSchema>): { apiKey: string; projectId: string; deleteOnErase: boolean } | undefined {
  const { REVENUECAT_V2_SECRET_API_KEY: apiKey, REVENUECAT_PROJECT_ID: projectId } = e;
  if (e.REVENUECAT_DELETE_ON_ERASE && (!apiKey || !projectId)) {
    throw new ConfigError('REVENUECAT_DELETE_ON_ERASE needs REVENUECAT_V2_SECRET_API_KEY and REVENUECAT_PROJECT_ID (RevenueCat REST v2 deletes the customer).');
  }
  if (!apiKey && !projectId) return undefined;
  if (!apiKey || !projectId) throw new ConfigError('REVENUECAT_V2_SECRET_API_KEY and REVENUECAT_PROJECT_ID go together: set both (RevenueCat REST v2) or neither.');
  return { apiKey, projectId, deleteOnErase: e.REVENUECAT_DELETE_ON_ERASE === true };
}

export interface LoadOptions {
  /**
   * The configuration of an operator command run from a shell (scripts/status.ts, ...), not of the
   * service: the database is the one OPERATOR_DATABASE_SETTINGS names first (as `npm run migrate`
   * takes it), and what only the service needs (session verification, webhook secrets, APP_ORIGIN:
   * assertDeployable) is not asked for. Every setting that is present is still validated.
   */
  operator?: boolean;
}

export function loadConfig(env: Record<string, string | undefined>, options: LoadOptions = {}): Config {
  const parsed = envSchema.safeParse(env);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`);
    throw new ConfigError(`Invalid configuration: ${problems.join('; ')}`);
  }
  const e = parsed.data;
  // Every refusal is collected and all are named at once: on a deployment each round of fixing one
  // is a redeploy. A check whose result a later one needs gives it a stand-in meanwhile.
  const refused: string[] = [];
  const checked = <T>(check: () => T, otherwise: T): T => {
    try {
      return check();
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      refused.push(error.message);
      return otherwise;
    }
  };
  const deployed = isDeployed(env);
  // (These two decide the mode every other check depends on: refused alone.)
  if (deployed && e.LOCAL_DEV) {
    throw new ConfigError('LOCAL_DEV=1 is refused on a deployment (VERCEL is set): it turns on dev keys and dev secrets. Remove it.');
  }
  if (e.LOCAL_DEV) assertLocalDevAllowed(env);
  // The settings that say "a real deployment" (named again if the configuration is refused for it).
  const productionLike = productionLikeSettings(env);
  const local = !deployed && (e.LOCAL_DEV || productionLike.length === 0);
  // Where two names say the same thing, the service's own name wins, then Supabase's newer one,
  // then what the Vercel-Supabase integration installs (docs/configuration.md, "Which name wins").
  const databaseUrl = options.operator ? operatorDatabaseUrl(env)?.url : e.DATABASE_URL ?? e.POSTGRES_URL;
  const supabaseSecretKey = e.SUPABASE_SECRET_KEY ?? e.SUPABASE_SERVICE_ROLE_KEY;
  const supabasePublishableKey = e.SUPABASE_PUBLISHABLE_KEY ?? e.NEXT_PUBLIC_SUPABASE_PUBLISHABLE_KEY ?? e.SUPABASE_ANON_KEY ?? e.NEXT_PUBLIC_SUPABASE_ANON_KEY;
  const supabaseProjectUrl = e.SUPABASE_URL ?? e.NEXT_PUBLIC_SUPABASE_URL;
  const appOrigin = e.APP_ORIGIN ?? vercelOrigin(e);

  const databaseMode: DatabaseMode = databaseUrl
    ? 'postgres'
    : supabaseProjectUrl && supabaseSecretKey
      ? 'supabase'
      : 'embedded';

  const authMode: AuthMode = supabaseProjectUrl ? 'supabase-jwks' : e.SUPABASE_JWT_SECRET ? 'hs256' : 'dev-key';
  const supabaseUrl = supabaseProjectUrl?.replace(/\/+$/, '');

  const evmChainIds = (e.WALLET_EVM_CHAIN_IDS ?? ['1', '8453']).flatMap((id) => {
    const n = Number(id);
    if (Number.isSafeInteger(n) && n > 0) return [n];
    refused.push(`WALLET_EVM_CHAIN_IDS: "${id}" is not a chain id`);
    return [];
  });

  // The documented dev secrets exist only in local mode.
  const secretsFor = (current: string | undefined, previous: string | undefined, devSecret: string) =>
    current ? [current, ...(previous ? [previous] : [])] : local ? [devSecret] : [];

  const revenuecatV2 = checked(() => revenueCatV2(e), undefined);
  const origin = new URL(appOrigin ?? (local ? localOrigin(e.PORT) : LOCAL_APP_ORIGIN)).origin;
  if (e.REVENUECAT_STAND_IN) checked(() => assertStandInAllowed(env, local), undefined);

  const config: Config = {
    deployed,
    local,
    databaseMode,
    databaseUrl,
    databasePool: databasePoolFor(deployed, e.DATABASE_POOL_MAX),
    embeddedDbDir: embeddedDbDirOf(e),
    supabase: databaseMode === 'supabase' ? { url: supabaseUrl!, secretKey: supabaseSecretKey! } : undefined,
    auth: {
      mode: authMode,
      supabaseUrl,
      apiKey: supabasePublishableKey ?? supabaseSecretKey,
      jwtSecret: e.SUPABASE_JWT_SECRET,
      issuer: e.SUPABASE_JWT_ISSUER ?? (supabaseUrl ? `${supabaseUrl}/auth/v1` : undefined),
      // The liveness check needs the Auth server, so it defaults to on only where there is one.
      verifySession: e.AUTH_VERIFY_SESSION ?? authMode === 'supabase-jwks',
    },
    webhookSecrets: {
      subscription: secretsFor(e.SUBSCRIPTION_WEBHOOK_SECRET, e.SUBSCRIPTION_WEBHOOK_SECRET_PREVIOUS, DEV_WEBHOOK_SECRETS.subscription),
      leagues: secretsFor(e.LEAGUES_WEBHOOK_SECRET, e.LEAGUES_WEBHOOK_SECRET_PREVIOUS, DEV_WEBHOOK_SECRETS.leagues),
    },
    billingIgnoreSandbox: !checked(() => sandboxGrants(e, local), local),
    revenuecat: e.REVENUECAT_SECRET_API_KEY || revenuecatV2
      ? {
          apiKey: e.REVENUECAT_SECRET_API_KEY ?? null,
          apiUrl: e.REVENUECAT_API_URL.replace(/\/+$/, ''),
          timeoutMs: e.REVENUECAT_TIMEOUT_MS,
          requestsPerSecond: e.REVENUECAT_REQUESTS_PER_SECOND,
          v2: revenuecatV2,
        }
      : e.REVENUECAT_STAND_IN
        ? {
            apiKey: REVENUECAT_STAND_IN_KEY,
            apiUrl: `${origin}${REVENUECAT_STAND_IN_PATH}`,
            timeoutMs: e.REVENUECAT_TIMEOUT_MS,
            requestsPerSecond: e.REVENUECAT_REQUESTS_PER_SECOND,
            standIn: true,
          }
        : undefined,
    billingUserRefreshesPerDay: e.BILLING_USER_REFRESHES_PER_DAY,
    billingSyncAfter: e.BILLING_SYNC_AFTER,
    billingEventsRetentionMonths: e.BILLING_EVENTS_RETENTION_MONTHS,
    cronSecret: e.CRON_SECRET,
    adminSecret: e.ADMIN_API_SECRET ?? (local ? DEV_ADMIN_SECRET : undefined),
    appOrigin: origin,
    wallet: {
      evmChainIds,
      solanaClusters: e.WALLET_SOLANA_CLUSTERS ?? ['mainnet'],
      evmRpcUrls: checked(() => parseRpcUrls(e.WALLET_EVM_RPC_URLS, evmChainIds, local), new Map()),
      evmRpcTimeoutMs: e.WALLET_EVM_RPC_TIMEOUT_MS,
    },
    // Read here, at run time, rather than as process.env.NEXT_PUBLIC_* in a page, which Next
    // would freeze at build time.
    frontend: {
      supabaseUrl: e.NEXT_PUBLIC_SUPABASE_URL?.replace(/\/+$/, '') ?? supabaseUrl,
      publishableKey: supabasePublishableKey,
    },
    corsOrigins: checked(() => parseCorsOrigins(e.CORS_ORIGINS ?? [], local), []),
    trustedProxyHops: e.TRUSTED_PROXY_HOPS,
    eventEndpointSettings: { EVENTS_WEBHOOK_URL: e.EVENTS_WEBHOOK_URL, EVENTS_WEBHOOK_SECRET: e.EVENTS_WEBHOOK_SECRET, EVENTS_WEBHOOK_ENDPOINTS: e.EVENTS_WEBHOOK_ENDPOINTS },
    logLevel: e.LOG_LEVEL,
    warnings: e.BILLING_IGNORE_SANDBOX === undefined ? [] : [
      `BILLING_IGNORE_SANDBOX is deprecated: set BILLING_SANDBOX_GRANTS=${!e.BILLING_IGNORE_SANDBOX} instead (it means the same), then remove it.`,
    ],
  };

  // Each is sent as "Authorization: Bearer <secret>" (RevenueCat, Vercel Cron, the operator) and read
  // by that grammar (lib/auth/authorization-header.ts), which allows only token68: any other value
  // would make its route answer 401 to every caller, so it is refused here, naming the variable.
  const bearerSecrets = [
    ['SUBSCRIPTION_WEBHOOK_SECRET', e.SUBSCRIPTION_WEBHOOK_SECRET],
    ['SUBSCRIPTION_WEBHOOK_SECRET_PREVIOUS', e.SUBSCRIPTION_WEBHOOK_SECRET_PREVIOUS],
    ['CRON_SECRET', e.CRON_SECRET],
    ['ADMIN_API_SECRET', e.ADMIN_API_SECRET],
  ] as const;
  for (const [name, value] of bearerSecrets) {
    if (value !== undefined && !isToken68(value)) {
      refused.push(`${name} can only hold letters, digits and - . _ ~ + / (then = padding), the characters of a Bearer credential; generate one with \`openssl rand -hex 32\`.`);
    }
  }
  // Any caller on the internet may guess at these: the webhook secrets grant entitlements and write
  // leagues, the operator's open routes that spend RevenueCat's budget and run maintenance. Too short
  // to guess is refused, naming the setting (never the value or its length).
  for (const [name, value] of [...bearerSecrets, ['LEAGUES_WEBHOOK_SECRET', e.LEAGUES_WEBHOOK_SECRET], ['LEAGUES_WEBHOOK_SECRET_PREVIOUS', e.LEAGUES_WEBHOOK_SECRET_PREVIOUS]] as const) {
    if (value !== undefined && value.length < MIN_SECRET_LENGTH) {
      refused.push(`${name} must be at least ${MIN_SECRET_LENGTH} characters, or it can be guessed; generate one with \`openssl rand -hex 32\`.`);
    }
  }
  if (config.revenuecat) checked(() => assertRevenueCatUrl(config.revenuecat!.apiUrl), undefined);
  if (options.operator) {
    // A shell with settings of a deployment but none of its database would otherwise read this machine's embedded folder.
    if (!local && config.databaseMode === 'embedded') {
      refused.push(`No database to read: set ${OPERATOR_DATABASE_SETTINGS.join(', or ')} (the one \`npm run migrate\` uses), or SUPABASE_URL + SUPABASE_SECRET_KEY.`);
    }
    return unlessRefused(config, refused);
  }
  if (!local) {
    checked(() => assertDeployable(config, appOrigin, productionLike), undefined);
    config.warnings.push(...optionalPartsOff(config));
  }
  if (config.auth.verifySession && !config.auth.supabaseUrl) {
    refused.push('AUTH_VERIFY_SESSION=true needs SUPABASE_URL (the Auth server that confirms sessions).');
  }
  if (config.auth.verifySession && !config.auth.apiKey) {
    refused.push('AUTH_VERIFY_SESSION needs SUPABASE_PUBLISHABLE_KEY or SUPABASE_SECRET_KEY to call the Auth server.');
  }
  return unlessRefused(config, refused);
}

/** The configuration, or one ConfigError naming every refusal (one alone in its own words). */
function unlessRefused(config: Config, refused: string[]): Config {
  if (refused.length === 1) throw new ConfigError(refused[0]);
  if (refused.length > 1) throw new ConfigError(`${refused.length} settings to fix: ${refused.map((problem, index) => `(${index + 1}) ${problem}`).join(' ')}`);
  return config;
}

/**
 * The RevenueCat stand-in answers from what this service's own webhooks said: a development
 * convenience, never beside real keys or on a deployment (there it would let anyone decide a
 * customer's entitlements by sending webhooks with a dev secret). Refused as a whole configuration
 * outside local mode, and beside a RevenueCat key or URL, naming the settings.
 */
function assertStandInAllowed(env: Record<string, string | undefined>, local: boolean): void {
  if (!local) {
    throw new ConfigError('REVENUECAT_STAND_IN=1 is for local mode only (it answers as RevenueCat from what local webhooks said): remove it here and set REVENUECAT_SECRET_API_KEY for syncs.');
  }
  const set = ['REVENUECAT_SECRET_API_KEY', 'REVENUECAT_API_URL', 'REVENUECAT_V2_SECRET_API_KEY', 'REVENUECAT_PROJECT_ID'].filter((name) => emptyAsUnset(env[name]) !== undefined);
  if (set.length > 0) throw new ConfigError(`REVENUECAT_STAND_IN=1 answers as RevenueCat itself, at this service's ${REVENUECAT_STAND_IN_PATH}: remove ${set.join(', ')}, or the stand-in.`);
}

/**
 * WALLET_EVM_RPC_URLS: `<chain id>=<URL>` pairs separated by commas, e.g.
 * `1=https://eth.example/v2/KEY,8453=https://base.example/v2/KEY`. Every message names the entry's
 * position and chain, never the URL: provider URLs usually carry an API key.
 *
 * The RPC is trusted with the answer "this contract accepts this signature", so whoever can change
 * its answers can link any contract wallet: outside local mode it must be https (plain http only
 * to this machine, for a node of your own on loopback).
 */
export function parseRpcUrls(value: string | undefined, evmChainIds: readonly number[], local: boolean): Map<number, string> {
  const urls = new Map<number, string>();
  const entries = (value ?? '').split(',').map((entry) => entry.trim()).filter(Boolean);
  entries.forEach((entry, index) => {
    const where = `WALLET_EVM_RPC_URLS, entry ${index + 1}`;
    const separator = entry.indexOf('=');
    const id = separator > 0 ? entry.slice(0, separator).trim() : '';
    const chainId = /^\d{1,15}$/.test(id) ? Number(id) : Number.NaN;
    if (!Number.isSafeInteger(chainId) || chainId <= 0) {
      throw new ConfigError(`${where}: expected "<chain id>=<URL>" (e.g. 8453=https://...), entries separated by commas.`);
    }
    let url: URL;
    try {
      url = new URL(entry.slice(separator + 1).trim());
    } catch {
      throw new ConfigError(`${where}: the URL for chain ${chainId} is not a valid URL.`);
    }
    if (url.protocol !== 'https:' && url.protocol !== 'http:') {
      throw new ConfigError(`${where}: the URL for chain ${chainId} must be https:// (or http:// on loopback).`);
    }
    if (url.protocol === 'http:' && !local && !isLoopbackHost(url.hostname)) {
      throw new ConfigError(`${where}: the URL for chain ${chainId} must be https:// outside local mode: the RPC vouches for contract-wallet signatures.`);
    }
    if (urls.has(chainId)) throw new ConfigError(`${where}: chain ${chainId} has a URL already; give one URL per chain.`);
    if (!evmChainIds.includes(chainId)) {
      throw new ConfigError(`${where}: chain ${chainId} is not in WALLET_EVM_CHAIN_IDS (${evmChainIds.join(', ')}); add it there or remove its URL.`);
    }
    urls.set(chainId, url.toString());
  });
  return urls;
}

/**
 * APP_ORIGIN's default on Vercel: the project's production domain for production deployments
 * (VERCEL_PROJECT_PRODUCTION_URL: its shortest custom domain, else its vercel.app one), and a preview
 * deployment's own URL (VERCEL_URL) for previews, so the messages wallets sign there name the site
 * they are signed on. Vercel gives host names without a scheme.
 */
function vercelOrigin(e: z.infer<typeof envSchema>): string | undefined {
  const host = e.VERCEL_ENV === 'production' ? e.VERCEL_PROJECT_PRODUCTION_URL : e.VERCEL_ENV === 'preview' ? e.VERCEL_URL : undefined;
  return host ? `https://${host.replace(/^https?:\/\//, '').replace(/\/+$/, '')}` : undefined;
}

/** What runs without its setting, said once at startup outside local mode (its routes answer 503). */
function optionalPartsOff(config: Config): string[] {
  const off: string[] = [];
  if (config.webhookSecrets.leagues.length === 0) off.push('LEAGUES_WEBHOOK_SECRET is not set: POST /api/webhooks/leagues-sync answers 503 webhook_not_configured until it is.');
  if (!config.cronSecret) off.push('CRON_SECRET is not set: the daily cron jobs (billing sweep, retention) answer 503 and never run; the event log grows without bound.');
  if (!config.revenuecat) off.push('Neither REVENUECAT_SECRET_API_KEY nor REVENUECAT_V2_SECRET_API_KEY is set: no sync with RevenueCat (webhooks only; refresh, sweep and operator syncs answer 503).');
  return off;
}

/**
 * CORS_ORIGINS: the origins of browser frontends on other sites than the service, comma-separated
 * (`https://app.example.com,http://localhost:5173`). Exact origins only (scheme, host, port; no
 * path, no wildcard): each is echoed back to that origin alone. https outside local mode, except a
 * frontend's dev server on this machine.
 */
export function parseCorsOrigins(values: string[], local: boolean): string[] {
  return values.map((value) => {
    if (value.includes('*')) throw new ConfigError('CORS_ORIGINS takes exact origins (https://app.example.com), never a wildcard: list each frontend.');
    let url: URL;
    try {
      url = new URL(value);
    } catch {
      throw new ConfigError(`CORS_ORIGINS: "${value}" is not an origin such as https://app.example.com.`);
    }
    if ((url.protocol !== 'https:' && url.protocol !== 'http:') || url.origin !== value.replace(/\/$/, '')) {
      throw new ConfigError(`CORS_ORIGINS: "${value}" is not an origin (scheme, host and port only, such as https://app.example.com).`);
    }
    if (url.protocol === 'http:' && !local && !isLoopbackHost(url.hostname)) {
      throw new ConfigError(`CORS_ORIGINS: "${value}" must be https:// outside local mode (http:// only for a dev server on this machine).`);
    }
    return url.origin;
  });
}

function isLoopbackHost(hostname: string): boolean {
  return hostname === 'localhost' || hostname === '[::1]' || /^127(\.\d{1,3}){3}$/.test(hostname);
}

/** The shortest webhook, cron or admin secret accepted (`openssl rand -hex 32` gives 64). */
export const MIN_SECRET_LENGTH = 32;

/**
 * REVENUECAT_API_URL receives the secret API key as a Bearer token with every call, and its answers
 * become entitlements: https, or plain http only to this machine (a stand-in of RevenueCat in tests
 * and benches, or a proxy of your own on loopback), in every mode. The message names the setting,
 * never the URL.
 */
function assertRevenueCatUrl(apiUrl: string): void {
  const url = new URL(apiUrl);
  if (url.protocol === 'http:' && !isLoopbackHost(url.hostname)) {
    throw new ConfigError('REVENUECAT_API_URL must be https:// (plain http:// only to this machine: localhost, 127.x, [::1]): the secret API key travels in its Authorization header.');
  }
}

/**
 * Whether sandbox purchases (RevenueCat's environment SANDBOX: TestFlight, StoreKit testing, Google
 * test cards) grant entitlements. Nobody pays for them, so a deployment records them and grants
 * nothing unless BILLING_SANDBOX_GRANTS=true (a staging deployment where testers need access); in
 * local mode they grant by default, since there a developer is testing purchases. The deprecated
 * BILLING_IGNORE_SANDBOX (the opposite question) is still honoured, both ways, as what its operator
 * explicitly asked for; set with a contradicting BILLING_SANDBOX_GRANTS it is refused.
 */
function sandboxGrants(e: z.infer<typeof envSchema>, local: boolean): boolean {
  const fromDeprecated = e.BILLING_IGNORE_SANDBOX === undefined ? undefined : !e.BILLING_IGNORE_SANDBOX;
  if (e.BILLING_SANDBOX_GRANTS !== undefined && fromDeprecated !== undefined && e.BILLING_SANDBOX_GRANTS !== fromDeprecated) {
    throw new ConfigError('BILLING_SANDBOX_GRANTS and the deprecated BILLING_IGNORE_SANDBOX say opposite things; keep BILLING_SANDBOX_GRANTS and remove BILLING_IGNORE_SANDBOX.');
  }
  return e.BILLING_SANDBOX_GRANTS ?? fromDeprecated ?? local;
}

/**
 * On Vercel: VERCEL set to any value, not only Vercel's own `1` (a `VERCEL=true` must not leave a
 * deployment in local mode); empty counts as unset, as everywhere. Raw env, so the fault hook
 * (lib/faults.ts) can ask without loading the configuration.
 */
export function isDeployed(env: Record<string, string | undefined> = process.env): boolean {
  return emptyAsUnset(env.VERCEL) !== undefined;
}

/**
 * LOCAL_DEV=1 opens the development doors (the dev signing key and local sign-in, the public dev
 * webhook and admin secrets, the RevenueCat stand-in) on purpose, for tests and benches on this
 * machine. Beside a setting that reaches real people's data or a real account those doors would
 * open onto it (the dev admin secret reads any subscriber's history, the dev leagues secret writes),
 * so that configuration is refused as a whole, naming the settings (never their values):
 *   - a database on another machine: DATABASE_URL, POSTGRES_URL, POSTGRES_URL_NON_POOLING whose
 *     host (the URL's, its `host=` parameter, else PGHOST) is not loopback or a local socket;
 *   - a Supabase project that is not a local stack: SUPABASE_URL, NEXT_PUBLIC_SUPABASE_URL not on
 *     loopback (`supabase start` serves on 127.0.0.1);
 *   - a RevenueCat account: REVENUECAT_SECRET_API_KEY or REVENUECAT_V2_SECRET_API_KEY sent to a
 *     REVENUECAT_API_URL that is not loopback (by default RevenueCat itself).
 * (Vercel is refused before this.) Webhook, cron and admin secrets beside a database on this machine
 * guard only that machine's data: allowed, as the test suites and the bench run.
 */
function assertLocalDevAllowed(env: Record<string, string | undefined>): void {
  const set = (name: string) => emptyAsUnset(env[name]) !== undefined;
  const reasons: string[] = [];
  const databases = OPERATOR_DATABASE_SETTINGS.filter((name) => set(name) && !isLocalDatabaseUrl(env[name]!, env.PGHOST));
  if (databases.length > 0) reasons.push(`${databases.join(', ')} name${databases.length === 1 ? 's' : ''} a database on another machine`);
  const projects = ['SUPABASE_URL', 'NEXT_PUBLIC_SUPABASE_URL'].filter((name) => set(name) && !isLoopbackUrl(env[name]!));
  if (projects.length > 0) reasons.push(`${projects.join(', ')} name${projects.length === 1 ? 's' : ''} a Supabase project that is not a local stack`);
  const keys = ['REVENUECAT_SECRET_API_KEY', 'REVENUECAT_V2_SECRET_API_KEY'].filter(set);
  if (keys.length > 0 && !isLoopbackUrl(emptyAsUnset(env.REVENUECAT_API_URL) === undefined ? 'https://api.revenuecat.com' : env.REVENUECAT_API_URL!)) {
    reasons.push(`${keys.join(', ')} ${keys.length === 1 ? 'is a key' : 'are keys'} of a real RevenueCat account (REVENUECAT_API_URL is not this machine)`);
  }
  // A self-hosted stack on one machine has its database and Supabase on loopback: its public
  // origin is what says it is served to the internet. (Not a name of this machine or its network:
  // an IP address a phone on the LAN uses, a .test name mapped here for https.)
  if (set('APP_ORIGIN') && !originNamesThisMachine(env.APP_ORIGIN!)) {
    reasons.push('APP_ORIGIN names a public host (the service is served beyond this machine there)');
  }
  if (reasons.length > 0) {
    throw new ConfigError(`LOCAL_DEV=1 is refused beside a real deployment's settings: ${reasons.join('; ')}. ` +
      'LOCAL_DEV=1 turns on the dev signing key, local sign-in, the public dev webhook and admin secrets and the RevenueCat stand-in, ' +
      'which would open that data to anyone. Remove LOCAL_DEV (and set what a deployment needs), or point these settings at this machine.');
  }
}

/**
 * Whether a postgres:// URL reaches a server on this machine, as node-postgres reads it: a `host`
 * query parameter wins over the URL's host, no host at all means PGHOST, else localhost; a socket
 * folder (`/var/run/postgresql`) is this machine. Anything unreadable counts as another machine.
 */
function isLocalDatabaseUrl(value: string, pgHost: string | undefined): boolean {
  let url: URL;
  try {
    url = new URL(value.trim());
  } catch {
    return false;
  }
  const host = url.searchParams.get('host') || url.hostname || emptyAsUnset(pgHost) as string | undefined || 'localhost';
  return host.startsWith('/') || isLoopbackHost(decodeURIComponent(host));
}

/**
 * Settings that hold a real secret: whoever sets one is protecting something, so it is never a
 * newcomer's local run (the dev key and the dev secrets would let anyone in beside it).
 */
const REAL_SECRETS: ReadonlySet<string> = new Set([
  'REVENUECAT_SECRET_API_KEY', 'REVENUECAT_V2_SECRET_API_KEY',
  'SUBSCRIPTION_WEBHOOK_SECRET', 'SUBSCRIPTION_WEBHOOK_SECRET_PREVIOUS',
  'LEAGUES_WEBHOOK_SECRET', 'LEAGUES_WEBHOOK_SECRET_PREVIOUS',
  'CRON_SECRET', 'ADMIN_API_SECRET',
]);

/**
 * Anything that says "this is a real deployment" off Vercel (on Vercel, `deployed` already rules
 * local mode out): a database URL (DATABASE_URL, the integration's POSTGRES_URL*), any Supabase
 * setting (server or browser side), any real secret (REAL_SECRETS), a URL of another machine for
 * RevenueCat or a chain's RPC (the service would spend real keys and trust real answers), or an
 * https:// APP_ORIGIN that is not this machine (the site is served to others). A deployment that
 * forgot its database must not fall back to local sign-in, the dev key and the dev secrets beside
 * its real keys: it is refused, naming what to set. LOCAL_DEV=1 keeps local mode on purpose. Raw
 * env, so an empty value still counts as unset.
 */
function productionLikeSettings(env: Record<string, string | undefined>): string[] {
  return Object.entries(env).filter(([name, value]) => {
    if (emptyAsUnset(value) === undefined) return false;
    if (name === 'DATABASE_URL' || /^POSTGRES_URL/.test(name) || /^(NEXT_PUBLIC_)?SUPABASE_/.test(name) || REAL_SECRETS.has(name)) return true;
    if (name === 'APP_ORIGIN') return isPublicHttpsOrigin(value!);
    if (name === 'REVENUECAT_API_URL') return !isLoopbackUrl(value!);
    if (name === 'WALLET_EVM_RPC_URLS') return value!.split(',').some((entry) => entry.trim() !== '' && !isLoopbackUrl(entry.slice(entry.indexOf('=') + 1)));
    return false;
  }).map(([name]) => name).sort();
}

/** Whether a URL points at this machine; anything unreadable counts as another machine. */
function isLoopbackUrl(value: string): boolean {
  try {
    return isLoopbackHost(new URL(value.trim()).hostname);
  } catch {
    return false;
  }
}

/**
 * Whether a host name (a URL's hostname, or a Host header without its port) names this machine or
 * its network, as no one on the internet can make it: an IP address, a name without a dot (the
 * machine's own), or a name under a suffix that is never delegated on the internet: RFC 6761's
 * test, example, invalid, localhost and example.com/.net/.org, RFC 6762's local, RFC 8375's
 * home.arpa, ICANN's internal, and the private suffixes networks use (lan, localdomain, home, corp).
 */
export function namesThisMachine(hostname: string): boolean {
  const name = hostname.toLowerCase().replace(/\.$/, '');
  if (ipAddressOf(name) !== null) return true;
  return !name.includes('.') || /(^|\.)(test|example|invalid|localhost|local|internal|home\.arpa|example\.(com|net|org)|lan|localdomain|home|corp)$/.test(name);
}

/** The IP address a host name is (IPv6 in brackets or not; an IPv4-mapped one as its IPv4 address), or null for a name. */
function ipAddressOf(hostname: string): ipaddr.IPv4 | ipaddr.IPv6 | null {
  const address = hostname.replace(/^\[|\]$/g, '');
  return ipaddr.isValid(address) ? ipaddr.process(address) : null;
}

/** The ranges (ipaddr.js's names) of addresses on this machine or its network, never a server on the internet. */
const THIS_NETWORK_RANGES: ReadonlySet<string> = new Set(['loopback', 'private', 'linkLocal', 'carrierGradeNat', 'uniqueLocal']);

/**
 * Whether an origin names this machine or its network as namesThisMachine says, its IP address a
 * private one (loopback, RFC 1918, link-local, CGNAT; IPv6 loopback, unique-local, link-local): a
 * public address is a server on the internet.
 */
function originNamesThisMachine(value: string): boolean {
  let hostname: string;
  try {
    hostname = new URL(value.trim()).hostname.toLowerCase();
  } catch {
    return false;
  }
  const address = ipAddressOf(hostname);
  return address === null ? namesThisMachine(hostname) : THIS_NETWORK_RANGES.has(address.range());
}

function isPublicHttpsOrigin(value: string): boolean {
  try {
    const url = new URL(value.trim());
    return url.protocol === 'https:' && !isLoopbackHost(url.hostname);
  } catch {
    return false;
  }
}

/**
 * Outside local mode nothing falls back to a dev default: every gap is named, and the whole
 * configuration is refused until it is filled.
 */
function assertDeployable(config: Config, appOrigin: string | undefined, productionLike: string[]): void {
  const missing: string[] = [];
  if (config.databaseMode === 'embedded') missing.push('DATABASE_URL, or SUPABASE_URL + SUPABASE_SECRET_KEY (the database)');
  if (config.auth.mode === 'dev-key') missing.push('SUPABASE_URL or SUPABASE_JWT_SECRET (to verify session tokens)');
  if (config.webhookSecrets.subscription.length === 0) missing.push('SUBSCRIPTION_WEBHOOK_SECRET');
  // Wallets sign messages naming this origin, and the session cookie is Secure only over https.
  if (!appOrigin?.startsWith('https://')) missing.push('APP_ORIGIN as your site\'s https:// origin');
  if (missing.length > 0) {
    // Off Vercel, the settings that ended local mode by name (an operator's secret put in .env.local
    // ends it for `npm run dev` too, and a list of kinds left the developer to guess which).
    const notLocal = `Not in local mode (${productionLike.join(', ')} ${productionLike.length === 1 ? 'is' : 'are'} set: `
      + 'a database URL, a Supabase setting, a real secret, a URL of another machine or a public https:// APP_ORIGIN each end it)';
    throw new ConfigError(`${config.deployed ? 'Deployed (on Vercel)' : notLocal} without the settings a deployment needs: ` +
      `${missing.join('; ')}. The embedded database, dev keys, dev webhook secrets and local sign-in exist only in local mode ` +
      '(nothing production-like set, or LOCAL_DEV=1 off Vercel). An operator\'s settings (ADMIN_API_SECRET, a database URL for `npm run status`) belong in the shell that runs the command, not in .env.local.');
  }
}

/** One line for the startup log: which database and which auth, never a secret. */
export function describeConfig(config: Config): Record<string, unknown> {
  return {
    local: config.local,
    databaseMode: config.databaseMode,
    database:
      config.databaseMode === 'embedded'
        ? config.embeddedDbDir
        : config.databaseMode === 'postgres'
          ? redactUrl(config.databaseUrl!)
          : config.supabase!.url,
    ...(config.databaseMode === 'postgres' ? { databasePool: `${config.databasePool.max} connections, idle ${config.databasePool.idleTimeoutMillis / 1000} s` } : {}),
    authMode: config.auth.mode,
    verifySession: config.auth.verifySession,
    appOrigin: config.appOrigin,
    webhookSecrets: {
      subscription: describeSecrets(config, 'subscription'),
      leagues: describeSecrets(config, 'leagues'),
    },
    sandboxPurchases: config.billingIgnoreSandbox ? 'recorded, grant nothing' : 'grant',
    revenuecat: config.revenuecat
      ? `${config.revenuecat.standIn ? `local stand-in (${config.revenuecat.apiUrl})` : new URL(config.revenuecat.apiUrl).host}${config.revenuecat.standIn ? '' : config.revenuecat.v2 ? (config.revenuecat.apiKey ? ' (v1 + v2)' : ' (v2)') : ' (v1)'} (sync after ${config.billingSyncAfter}; ${config.revenuecat.requestsPerSecond}/s, users at most half, ${config.billingUserRefreshesPerDay} refreshes a day each)`
      : 'not configured (no syncs)',
    // Hosts only: provider URLs carry their API key in the path or the query.
    walletRpc: config.wallet.evmRpcUrls.size > 0
      ? Object.fromEntries([...config.wallet.evmRpcUrls].map(([chainId, url]) => [chainId, new URL(url).host]))
      : 'none (contract wallets cannot be verified)',
    clientAddress: config.deployed ? 'X-Forwarded-For as Vercel sets it'
      : config.trustedProxyHops === 0 ? 'the connection\'s (X-Forwarded-For ignored)' : `X-Forwarded-For as ${config.trustedProxyHops} proxies of yours wrote it`,
    cron: config.cronSecret ? 'configured' : 'not configured',
    admin: config.adminSecret === DEV_ADMIN_SECRET ? `local dev secret "${DEV_ADMIN_SECRET}"` : config.adminSecret ? 'configured' : 'not configured',
  };
}

/** Whether this webhook takes local mode's documented dev secret (its setting left unset). */
export function usesDevWebhookSecret(config: Config, which: keyof typeof DEV_WEBHOOK_SECRETS): boolean {
  return config.webhookSecrets[which][0] === DEV_WEBHOOK_SECRETS[which];
}

function describeSecrets(config: Config, which: 'subscription' | 'leagues'): string {
  const secrets = config.webhookSecrets[which];
  if (secrets.length === 0) return 'not configured (503 webhook_not_configured)';
  if (usesDevWebhookSecret(config, which)) return `local dev secret "${DEV_WEBHOOK_SECRETS[which]}"`;
  return secrets.length > 1 ? 'current + previous' : 'current';
}

function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    // libpq also takes credentials as query parameters (?password=..., ?sslpassword=...).
    for (const key of [...parsed.searchParams.keys()]) {
      if (/pass|secret|token|key/i.test(key)) parsed.searchParams.set(key, '***');
    }
    return parsed.toString();
  } catch {
    return 'postgres://***';
  }
}
