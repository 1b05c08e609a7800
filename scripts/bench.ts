// npm run bench - measure the production server (next start) with autocannon, on loopback only:
// once with a real Postgres server (started here, like the tests do) and once with the embedded
// database. Prints a table and writes bench-results/latest.json (+ .md). BENCH_DURATION=<seconds>
// sets each timed scenario's length (default 10).
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import autocannon from 'autocannon';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { mintDevToken } from '../lib/auth/dev-key.ts';
import { startFakeRevenueCat, v1Entitlement, v1Subscription } from '../tests/support/fake-revenuecat.ts';
import { ensureProductionBuild, startNextServer, type NextServer } from '../tests/support/next-server.ts';
import { createDatabase, startPostgresServer, type PostgresServer } from '../tests/support/postgres-server.ts';

const DURATION_SECONDS = Number(process.env.BENCH_DURATION ?? 10);
const CONNECTIONS = 50;
const SUBSCRIBERS = 1_000;
const WALLET_USERS = Number(process.env.BENCH_WALLET_USERS ?? 1_500);
const BILLING_SECRET = 'bench-subscription-secret';
const LEAGUES_SECRET = 'bench-leagues-secret';
const DAY_MS = 86_400_000;

type Mode = 'postgres' | 'embedded';

interface ScenarioResult {
  name: string;
  requests: number;
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  non2xx: number;
  dbCallsPerRequest: number;
  /** CPU time the Next server process spent per request (user + system), in ms. */
  serverCpuMsPerRequest: number;
  /** CPU time all Postgres processes on the machine spent per request (0 in embedded mode). */
  postgresCpuMsPerRequest: number;
  ratioToBaseline?: number;
}

// CPU time from /proc (Linux): it says where a request's cost goes, whatever else runs on the cores.
const TICKS_PER_SECOND = 100;
function cpuMsOf(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / TICKS_PER_SECOND;
  } catch {
    return 0;
  }
}
function postgresCpuMs(): number {
  let total = 0;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() === 'postgres') total += cpuMsOf(Number(entry));
    } catch {
      // the process ended meanwhile
    }
  }
  return total;
}

interface ModeResult {
  mode: Mode;
  coldStartMs: number;
  peakRssMiB: number;
  scenarios: ScenarioResult[];
}

interface RequestSpec {
  method: 'GET' | 'POST';
  path: string;
  headers?: Record<string, string>;
  /** Called once per request (index counts from 0): a body and/or per-request headers. */
  next?: (index: number) => { body?: string; headers?: Record<string, string> };
  onResponse?: (index: number, status: number, body: string) => void;
  /** A fixed number of requests instead of a duration. */
  amount?: number;
  /** Concurrent connections (default CONNECTIONS). */
  connections?: number;
}

async function runScenario(server: NextServer, name: string, spec: RequestSpec): Promise<ScenarioResult> {
  let issued = 0;
  let dbCalls = 0;
  let measured = 0;
  const serverCpuBefore = cpuMsOf(server.serverPid);
  const postgresCpuBefore = postgresCpuMs();
  const result = await autocannon({
    url: server.url,
    connections: spec.connections ?? CONNECTIONS,
    ...(spec.amount ? { amount: spec.amount } : { duration: DURATION_SECONDS }),
    requests: [
      {
        method: spec.method,
        path: spec.path,
        headers: spec.headers,
        setupRequest: (request: Record<string, unknown>, context: Record<string, unknown>) => {
          const index = issued++;
          context.index = index;
          const extra = spec.next?.(index) ?? {};
          return {
            ...request,
            ...(extra.body === undefined ? {} : { body: extra.body }),
            headers: { ...(request.headers as Record<string, string>), ...(extra.headers ?? {}), ...(extra.body === undefined ? {} : { 'content-type': 'application/json' }) },
          };
        },
        onResponse: (status: number, body: string, context: Record<string, unknown>, headers: Record<string, string>) => {
          const timing = /db;desc="(\d+) calls"/.exec(headers['server-timing'] ?? '');
          if (timing) {
            dbCalls += Number(timing[1]);
            measured++;
          }
          spec.onResponse?.(context.index as number, status, body);
        },
      },
    ],
  } as autocannon.Options);
  const perRequest = (ms: number) => Math.round((ms / Math.max(1, result.requests.total)) * 100) / 100;
  return {
    name,
    serverCpuMsPerRequest: perRequest(cpuMsOf(server.serverPid) - serverCpuBefore),
    postgresCpuMsPerRequest: perRequest(postgresCpuMs() - postgresCpuBefore),
    requests: result.requests.total,
    rps: Math.round(result.requests.average),
    p50: result.latency.p50,
    p99: result.latency.p99,
    errors: result.errors + result.timeouts,
    non2xx: result.non2xx,
    dbCallsPerRequest: measured ? Math.round((dbCalls / measured) * 100) / 100 : 0,
  };
}

/** RevenueCat-shaped events: INITIAL_PURCHASE for a subscriber's first event, RENEWAL after. */
function billingEvent(runId: string, index: number, start: number) {
  const subscriber = `bench-subscriber-${index % SUBSCRIBERS}`;
  const at = start + index;
  return {
    api_version: '1.0',
    event: {
      id: `${runId}-${index}`,
      type: index < SUBSCRIBERS ? 'INITIAL_PURCHASE' : 'RENEWAL',
      app_user_id: subscriber,
      original_app_user_id: subscriber,
      aliases: [subscriber],
      product_id: 'pro_monthly',
      entitlement_ids: ['pro'],
      period_type: 'NORMAL',
      purchased_at_ms: at,
      expiration_at_ms: at + 30 * DAY_MS,
      event_timestamp_ms: at,
      environment: 'PRODUCTION',
      store: 'APP_STORE',
      transaction_id: `tx-${runId}-${index}`,
      original_transaction_id: `otx-${subscriber}`,
      price: 9.99,
      currency: 'USD',
    },
  };
}

function leaguesDelivery(runId: string, index: number, appUserId?: string) {
  const updatedAt = new Date(Date.UTC(2026, 10, 21, 12) + index * 1000).toISOString();
  return {
    id: `${runId}-${index}`,
    source: 'bench',
    sentAt: updatedAt,
    leagues: Array.from({ length: 50 }, (_, league) => ({
      externalId: `${runId}-${index}-${league}`,
      name: `League ${league}`,
      sport: 'nfl',
      season: '2026',
      status: 'in_season',
      updatedAt,
      settings: { scoring: 'ppr', teams: 12 },
      members: Array.from({ length: 12 }, (_, member) => ({
        externalUserId: `m-${member}`,
        displayName: `Member ${member}`,
        role: member === 0 ? 'commissioner' : 'member',
        ...(appUserId && member === 0 ? { appUserId } : {}),
      })),
    })),
    deleted: [],
  };
}

async function post(server: NextServer, urlPath: string, headers: Record<string, string>, body: unknown) {
  const response = await fetch(`${server.url}${urlPath}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const text = await response.text();
  if (!response.ok) throw new Error(`${urlPath} answered ${response.status}: ${text}`);
  return JSON.parse(text);
}

async function benchMode(mode: Mode, postgres: PostgresServer): Promise<ModeResult> {
  const folder = mkdtempSync(path.join(os.tmpdir(), `account-link-bench-${mode}-`));
  const embeddedDbDir = path.join(folder, 'pglite');
  const env: Record<string, string | undefined> = {
    EMBEDDED_DB_DIR: embeddedDbDir, // also where the dev signing key lives, in both modes
    SUBSCRIPTION_WEBHOOK_SECRET: BILLING_SECRET,
    LEAGUES_WEBHOOK_SECRET: LEAGUES_SECRET,
    SUPABASE_URL: undefined,
    DATABASE_URL: undefined,
    // Postgres mode with dev-key session tokens: local mode, asked for explicitly.
    LOCAL_DEV: '1',
    VERCEL: undefined,
    LOG_LEVEL: 'info',
  };
  if (mode === 'postgres') {
    const name = `bench_${Date.now()}`;
    await createDatabase(postgres.url(), name);
    env.DATABASE_URL = postgres.url(name);
  }

  const server = await startNextServer({ env });
  const runId = `bench-${mode}-${Date.now()}`;
  const scenarios: ScenarioResult[] = [];
  const log = (result: ScenarioResult) => {
    scenarios.push(result);
    console.log(`  ${mode.padEnd(8)} ${result.name.padEnd(28)} ${String(result.rps).padStart(6)} req/s  p50 ${result.p50} ms  p99 ${result.p99} ms  errors ${result.errors}  non-2xx ${result.non2xx}`);
  };
  try {
    // Warm up: Next compiles nothing at run time, but the first requests load each route's module.
    for (const urlPath of ['/api/health/live', '/api/health', '/api/openapi.json']) await fetch(`${server.url}${urlPath}`);

    log(await runScenario(server, 'baseline (GET /api/health/live)', { method: 'GET', path: '/api/health/live' }));

    const billingHeaders = { authorization: `Bearer ${BILLING_SECRET}` };
    const start = Date.now();
    await post(server, '/api/webhooks/subscription-billing', billingHeaders, billingEvent(`${runId}-warm`, 0, start));
    log(await runScenario(server, 'billing webhook, unique', {
      method: 'POST', path: '/api/webhooks/subscription-billing', headers: billingHeaders,
      next: (index) => ({ body: JSON.stringify(billingEvent(`${runId}-u`, index, start)) }),
    }));
    log(await runScenario(server, 'billing webhook, 10% dup', {
      method: 'POST', path: '/api/webhooks/subscription-billing', headers: billingHeaders,
      // Every 10th delivery repeats an event sent a few requests earlier (a RevenueCat retry).
      next: (index) => ({ body: JSON.stringify(billingEvent(`${runId}-d`, index % 10 === 9 ? index - 5 : index, start + DAY_MS)) }),
    }));

    const leaguesHeaders = { 'x-webhook-secret': LEAGUES_SECRET };
    log(await runScenario(server, 'leagues sync, 50 x 12', {
      method: 'POST', path: '/api/webhooks/leagues-sync', headers: leaguesHeaders,
      next: (index) => ({ body: JSON.stringify(leaguesDelivery(`${runId}-l`, index)) }),
    }));
    // A sync worker is one sender (or a few), not 50: the latency a worker actually sees.
    log(await runScenario(server, 'leagues sync, 50 x 12, 4 senders', {
      method: 'POST', path: '/api/webhooks/leagues-sync', headers: leaguesHeaders, connections: 4,
      next: (index) => ({ body: JSON.stringify(leaguesDelivery(`${runId}-l4`, index)) }),
    }));

    // Wallet link for fresh users: challenges (timed), signatures (not timed), links (timed).
    const users = await Promise.all(Array.from({ length: WALLET_USERS }, async (_, index) => {
      const userId = crypto.randomUUID();
      const token = await mintDevToken({ embeddedDbDir }, { userId, email: `bench-${index}@example.test`, expiresInSeconds: 3600 });
      return { token, account: privateKeyToAccount(generatePrivateKey()), message: '', signature: '' };
    }));
    log(await runScenario(server, 'wallet challenge', {
      method: 'POST', path: '/api/wallet-link/challenge', amount: WALLET_USERS,
      next: (index) => ({
        headers: { authorization: `Bearer ${users[index]!.token}` },
        body: JSON.stringify({ chain: 'evm', address: users[index]!.account.address, chainId: 1 }),
      }),
      onResponse: (index, status, body) => {
        if (status === 201) users[index]!.message = JSON.parse(body).message;
      },
    }));
    const signable = users.filter((user) => user.message);
    for (const user of signable) user.signature = await user.account.signMessage({ message: user.message });
    log(await runScenario(server, 'wallet link (signed)', {
      method: 'POST', path: '/api/wallet-link', amount: signable.length,
      next: (index) => {
        const user = signable[index]!;
        return {
          headers: { authorization: `Bearer ${user.token}` },
          body: JSON.stringify({ payload: { chain: 'evm', address: user.account.address, chainId: 1, message: user.message, signature: user.signature } }),
        };
      },
    }));

    // GET /api/me for a user with 3 wallets, 2 entitlements and 50 leagues.
    const meUserId = crypto.randomUUID();
    const meToken = await mintDevToken({ embeddedDbDir }, { userId: meUserId, email: 'me@example.test', expiresInSeconds: 3600 });
    for (let i = 0; i < 3; i++) {
      const account = privateKeyToAccount(generatePrivateKey());
      const challenge = await post(server, '/api/wallet-link/challenge', { authorization: `Bearer ${meToken}` }, { chain: 'evm', address: account.address, chainId: 1 });
      await post(server, '/api/wallet-link', { authorization: `Bearer ${meToken}` }, {
        payload: { chain: 'evm', address: account.address, chainId: 1, message: challenge.message, signature: await account.signMessage({ message: challenge.message }) },
      });
    }
    for (const [index, entitlement] of ['pro', 'plus'].entries()) {
      const event = billingEvent(`${runId}-me`, index, Date.now());
      event.event.app_user_id = meUserId;
      event.event.aliases = [meUserId];
      event.event.entitlement_ids = [entitlement];
      await post(server, '/api/webhooks/subscription-billing', billingHeaders, event);
    }
    await post(server, '/api/webhooks/leagues-sync', leaguesHeaders, leaguesDelivery(`${runId}-me`, 0, meUserId));
    log(await runScenario(server, 'GET /api/me (full account)', { method: 'GET', path: '/api/me', headers: { authorization: `Bearer ${meToken}` } }));

    if (mode === 'postgres') log(await billingWithSyncsAfterResponses(postgres, env));

    const baseline = scenarios[0]!.rps;
    for (const scenario of scenarios) scenario.ratioToBaseline = Math.round((scenario.rps / baseline) * 100) / 100;
    return { mode, coldStartMs: Math.round(server.coldStartMs), peakRssMiB: server.peakRssMiB(), scenarios };
  } finally {
    await server.stop();
    if (process.env.BENCH_SERVER_LOG) writeFileSync(process.env.BENCH_SERVER_LOG, server.output());
    rmSync(folder, { recursive: true, force: true });
  }
}

/**
 * The billing webhook on a server that syncs every event's subscriber from RevenueCat after the
 * response (BILLING_SYNC_AFTER=all; a RevenueCat stand-in 50 ms away that knows every subscriber,
 * at the highest budget the service allows): the webhook's own latency must not change, because
 * the syncs run after the 200 and the marks wait for the sweep when the budget is spent.
 */
async function billingWithSyncsAfterResponses(postgres: PostgresServer, baseEnv: Record<string, string | undefined>): Promise<ScenarioResult> {
  const revenuecat = await startFakeRevenueCat({ latencyMs: 50 });
  const now = Date.now();
  for (let i = 0; i < SUBSCRIBERS; i++) {
    revenuecat.setCustomer(`bench-subscriber-${i}`, {
      entitlements: { pro: v1Entitlement('pro_monthly', { purchased: now, expires: now + 30 * DAY_MS }) },
      subscriptions: { pro_monthly: v1Subscription({ purchased: now, expires: now + 30 * DAY_MS }) },
    });
  }
  const name = `bench_sync_${Date.now()}`;
  await createDatabase(postgres.url(), name);
  const server = await startNextServer({
    env: {
      ...baseEnv, DATABASE_URL: postgres.url(name),
      REVENUECAT_SECRET_API_KEY: revenuecat.apiKey, REVENUECAT_API_URL: revenuecat.url, REVENUECAT_REQUESTS_PER_SECOND: '100', BILLING_SYNC_AFTER: 'all',
    },
  });
  try {
    const headers = { authorization: `Bearer ${BILLING_SECRET}` };
    const start = Date.now();
    await post(server, '/api/webhooks/subscription-billing', headers, billingEvent(`sync-warm-${start}`, 0, start));
    const result = await runScenario(server, 'billing webhook, syncs after', {
      method: 'POST', path: '/api/webhooks/subscription-billing', headers,
      next: (index) => ({ body: JSON.stringify(billingEvent(`sync-${start}`, index, start)) }),
    });
    console.log(`  (RevenueCat was called ${revenuecat.requests.length} times during and after that run)`);
    return result;
  } finally {
    await server.stop();
    await revenuecat.close();
  }
}

function markdownTable(modes: ModeResult[]): string {
  const lines = [
    '| mode | scenario | req/s | x baseline | p50 ms | p99 ms | errors | non-2xx | db calls/req | server CPU ms/req | Postgres CPU ms/req |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const mode of modes) {
    for (const s of mode.scenarios) {
      lines.push(`| ${mode.mode} | ${s.name} | ${s.rps} | ${s.ratioToBaseline?.toFixed(2)} | ${s.p50} | ${s.p99} | ${s.errors} | ${s.non2xx} | ${s.dbCallsPerRequest} | ${s.serverCpuMsPerRequest} | ${mode.mode === 'postgres' ? s.postgresCpuMsPerRequest : 'in process'} |`);
    }
  }
  lines.push('', '| mode | cold start (spawn to first 200 from /api/health) | peak RSS of the server |', '|---|---:|---:|');
  for (const mode of modes) lines.push(`| ${mode.mode} | ${mode.coldStartMs} ms | ${mode.peakRssMiB} MiB |`);
  return lines.join('\n');
}

/** The targets, checked against this run's figures (for the modes that ran). */
function targets(modes: ModeResult[]): { target: string; value: string; met: boolean }[] {
  const find = (mode: Mode, prefix: string) => modes.find((m) => m.mode === mode)?.scenarios.find((s) => s.name.startsWith(prefix));
  const checks: { target: string; value: string; met: boolean }[] = [];
  const webhooks = ['billing webhook, unique', 'billing webhook, 10% dup', 'leagues sync, 50 x 12'];
  const percent = (ratio = 0) => `${Math.round(ratio * 100)}%`;
  if (modes.some((m) => m.mode === 'postgres')) {
    const pg = (prefix: string) => find('postgres', prefix)!;
    checks.push({ target: 'postgres: billing webhook >= 60% of baseline req/s', value: percent(pg('billing webhook, unique').ratioToBaseline), met: pg('billing webhook, unique').ratioToBaseline! >= 0.6 });
    for (const name of [...webhooks, 'GET /api/me']) checks.push({ target: `postgres: ${name} p99 < 50 ms at ${CONNECTIONS} connections`, value: `${pg(name).p99} ms`, met: pg(name).p99 < 50 });
    checks.push({ target: `postgres: leagues delivery p50 < 100 ms at ${CONNECTIONS} connections`, value: `${pg('leagues sync, 50 x 12').p50} ms`, met: pg('leagues sync, 50 x 12').p50 < 100 });
    checks.push({ target: 'postgres: leagues delivery p50 < 100 ms at 4 senders', value: `${pg('leagues sync, 50 x 12, 4').p50} ms`, met: pg('leagues sync, 50 x 12, 4').p50 < 100 });
    for (const name of webhooks) checks.push({ target: `postgres: ${name}: one database call per request`, value: String(pg(name).dbCallsPerRequest), met: pg(name).dbCallsPerRequest === 1 });
  }
  const embedded = find('embedded', 'billing webhook, unique');
  if (embedded) checks.push({ target: 'embedded: billing webhook >= 40% of baseline req/s', value: percent(embedded.ratioToBaseline), met: embedded.ratioToBaseline! >= 0.4 });
  return checks;
}

const machine = { cores: os.cpus().length, cpu: os.cpus()[0]?.model ?? 'unknown', memoryGiB: Math.round(os.totalmem() / 2 ** 30), node: process.version, platform: `${os.platform()} ${os.release()}` };
console.log(`bench: ${machine.cores} cores (${machine.cpu}), Node ${machine.node}, ${DURATION_SECONDS} s per timed scenario, ${CONNECTIONS} connections, loopback only`);
console.log(ensureProductionBuild() ? 'built the production server' : 'production build is up to date');

const postgres = await startPostgresServer();
const modes: ModeResult[] = [];
try {
  const selected = (process.env.BENCH_MODES ?? 'postgres,embedded').split(',') as Mode[];
  for (const mode of selected) modes.push(await benchMode(mode, postgres));
} finally {
  await postgres.stop();
}

const checks = targets(modes);
const report = { date: new Date().toISOString(), machine, durationSeconds: DURATION_SECONDS, connections: CONNECTIONS, modes, targets: checks };
const table = markdownTable(modes);
const targetLines = checks.map((check) => `- ${check.met ? 'met' : 'NOT MET'}: ${check.target} (${check.value})`).join('\n');
mkdirSync('bench-results', { recursive: true });
writeFileSync(path.join('bench-results', 'latest.json'), `${JSON.stringify(report, null, 2)}\n`);
writeFileSync(path.join('bench-results', 'latest.md'), `${table}\n\n${targetLines}\n`);
console.log(`\n${table}\n\n${targetLines}\n\nwritten: bench-results/latest.json, bench-results/latest.md`);
