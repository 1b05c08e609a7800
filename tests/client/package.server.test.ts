import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mintDevToken } from '../../lib/auth/dev-key.ts';
import { buildSampleEvent } from '../../lib/billing/sample-events.ts';
import { DEV_WEBHOOK_SECRETS, loadConfig } from '../../lib/config.ts';
import { startNextServer, type NextServer } from '../../scripts/support/next-server.ts';
import { migratedEmbeddedDbDir } from '../support/databases.ts';
import { requireProductionBuild } from '../support/production-build.ts';
import { freePort } from '../../scripts/support/postgres-server.ts';

/**
 * The client as apps get it: `npm pack` of packages/client, installed (the tarball, not a link)
 * into two new projects, each typechecked under `strict` and run against the service's production
 * server (`next start`):
 *   - a plain TypeScript script for Node, with no React and no supabase-js installed;
 *   - a Next.js app (next, react and typescript linked from this repository to save an install;
 *     the client from the tarball), whose page reads the account on the server and shows it through
 *     the package's React provider and hook.
 * Both gate a feature on the `pro` entitlement, granted by a RevenueCat webhook. Last, stock
 * openapi-typescript on the server's /api/openapi.json gives types that compile under `strict`.
 * Needs `next build` (cached) and the npm registry (or its cache) for openapi-fetch and @types/node.
 */
const ROOT = process.cwd();
const TSC = path.join(ROOT, 'node_modules/typescript/bin/tsc');
const NEXT = path.join(ROOT, 'node_modules/next/dist/bin/next');
const PACKAGE = JSON.parse(readFileSync(path.join(ROOT, 'packages/client/package.json'), 'utf8')) as { name: string; version: string };

let work: string;
let server: NextServer;
let tarball: string;
let pro: { userId: string; token: string };
let free: { userId: string; token: string };

function run(command: string, args: string[], cwd: string, env: Record<string, string> = {}) {
  const result = spawnSync(command, args, { cwd, encoding: 'utf8', env: { ...process.env, NEXT_TELEMETRY_DISABLED: '1', npm_config_audit: 'false', npm_config_fund: 'false', npm_config_update_notifier: 'false', ...env } });
  return { status: result.status, stdout: result.stdout ?? '', output: `${result.stdout ?? ''}${result.stderr ?? ''}${result.error ? String(result.error) : ''}` };
}

/** What the command printed on stdout; its whole output as the error when it failed. */
function expectSuccess(result: { status: number | null; stdout: string; output: string }) {
  if (result.status !== 0) throw new Error(result.output);
  return result.stdout;
}

function writeFiles(dir: string, files: Record<string, string>) {
  for (const [name, text] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
    writeFileSync(path.join(dir, name), text);
  }
}

/** A new project with the packed client installed from its tarball (npm, the registry or its cache for the rest). */
function scratchProject(name: string, files: Record<string, string>, dependencies: Record<string, string> = {}): string {
  const dir = path.join(work, name);
  writeFiles(dir, { 'package.json': JSON.stringify({ name, private: true, type: 'module', dependencies: { [PACKAGE.name]: `file:${tarball}`, ...dependencies } }, null, 2), ...files });
  expectSuccess(run('npm', ['install', '--prefer-offline', '--no-package-lock', '--ignore-scripts'], dir));
  return dir;
}

beforeAll(async () => {
  requireProductionBuild();
  work = mkdtempSync(path.join(tmpdir(), 'client-package-'));
  const dataDir = path.join(work, 'service');
  const embeddedDbDir = migratedEmbeddedDbDir(dataDir);
  server = await startNextServer({ env: { EMBEDDED_DB_DIR: embeddedDbDir, APP_ORIGIN: undefined, DATABASE_URL: undefined, SUPABASE_URL: undefined, LOG_LEVEL: 'warn' } });

  // Two users signed in with the server's dev key; one bought the `pro` entitlement (a webhook).
  const config = loadConfig({ EMBEDDED_DB_DIR: embeddedDbDir });
  const mint = async (label: string) => {
    const userId = crypto.randomUUID();
    return { userId, token: await mintDevToken(config, { userId, email: `${label}@example.test` }) };
  };
  pro = await mint('pro');
  free = await mint('free');
  const { body } = buildSampleEvent({ type: 'INITIAL_PURCHASE', user: pro.userId, now: new Date(), environment: 'SANDBOX', period: null });
  const delivered = await fetch(`${server.url}/api/webhooks/subscription-billing`, {
    method: 'POST', headers: { authorization: `Bearer ${DEV_WEBHOOK_SECRETS.subscription}`, 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  expect(delivered.status).toBe(200);

  // npm pack builds (prepack: tsc) and packs what `files` lists.
  const packed = expectSuccess(run('npm', ['pack', '--json', '--pack-destination', work], path.join(ROOT, 'packages/client'), { PATH: `${path.join(ROOT, 'node_modules/.bin')}:${process.env.PATH}` }));
  const [{ filename, files }] = JSON.parse(packed.slice(packed.indexOf('['))) as [{ filename: string; files: { path: string }[] }];
  tarball = path.join(work, filename);
  expect(files.map((file) => file.path).sort()).toEqual(expect.arrayContaining(['package.json', 'README.md', 'CHANGELOG.md', 'dist/index.js', 'dist/index.d.ts', 'dist/react.js', 'dist/live.js']));
  expect(files.some((file) => file.path.startsWith('src/'))).toBe(false);
}, 600_000);

afterAll(async () => {
  await server?.stop();
  if (work) rmSync(work, { recursive: true, force: true });
});

describe('the packed client in a plain TypeScript project (no React, no supabase-js)', () => {
  const STRICT = { strict: true, noEmit: true, target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', types: ['node'], allowImportingTsExtensions: true, noUncheckedIndexedAccess: true };
  const MAIN = `import { API_VERSION, ApiProblemError, createAccountLinkClient, expectData, type Entitlement } from '${PACKAGE.name}';

const [baseUrl, token] = process.argv.slice(2);
const api = createAccountLinkClient({ baseUrl: baseUrl!, accessToken: () => token });
const account = await expectData(api.GET('/api/me'));
const isPro = account.entitlements.some((entitlement: Entitlement) => entitlement.id === 'pro' && entitlement.active);
const served = (await (await fetch(\`\${baseUrl}/api/openapi.json\`)).json()) as { info: { version: string } };
let anonymous = 'accepted';
try {
  await expectData(createAccountLinkClient({ baseUrl: baseUrl! }).GET('/api/me'));
} catch (error) {
  if (error instanceof ApiProblemError) anonymous = \`\${error.status} \${error.code}\`;
}
console.log(JSON.stringify({ userId: account.userId, feature: isPro ? 'pro feature on' : 'pro feature off', clientVersion: API_VERSION, servedVersion: served.info.version, anonymous }));
`;
  // A backend receiving the service's events: verified with the package's /webhooks, typed by type.
  const RECEIVER = `import { signWebhook, verifyWebhook, WebhookVerificationError, type AccountLinkEvent } from '${PACKAGE.name}/webhooks';

const secret = 'whsec_' + Buffer.from('a secret of at least twenty-four bytes').toString('base64');
const body = JSON.stringify({ type: 'customer.deleted', timestamp: new Date().toISOString(), data: { userId: 'f3b0c6a2-5d1e-4c59-9a51-3f1f0a6c2b7e', sequence: 3 } });
const id = 'evt_0b7e6a4c-1f2d-4e3a-9b8c-7d6e5f4a3b2c';
const timestamp = Math.floor(Date.now() / 1000);
const headers = { 'webhook-id': id, 'webhook-timestamp': String(timestamp), 'webhook-signature': await signWebhook({ id, timestamp, body, secrets: secret }) };
const event: AccountLinkEvent = await verifyWebhook(body, headers, secret);
let tampered = 'accepted';
try {
  await verifyWebhook(body.replace('3}', '4}'), headers, secret);
} catch (error) {
  if (error instanceof WebhookVerificationError) tampered = error.reason;
}
console.log(JSON.stringify({ type: event.type, userId: event.data.userId, tampered }));
`;
  // The local stream's channel, from /live, in an app without supabase-js (an optional peer): its
  // declarations name no supabase-js type, so this type-checks with the library checks on.
  const LIVE = `import { serviceEventsChannel, type AccountChange } from '${PACKAGE.name}/live';

const changes: AccountChange[] = [];
const stop = serviceEventsChannel({ url: 'http://localhost:3000/api/me/events' }).subscribe({ onConnected() {}, onChange: (change) => changes.push(change), onDisconnected() {} });
stop();
`;
  // TypeScript's older module resolution (node10: "moduleResolution": "node", TypeScript 5 and
  // before), which reads no "exports": the package's "types" and "typesVersions" serve it.
  const NODE10 = { strict: true, noEmit: true, target: 'ES2022', module: 'CommonJS', moduleResolution: 'node10', ignoreDeprecations: '6.0', types: ['node'] };
  const OLD_RESOLUTION = `import { createAccountLinkClient, type Entitlement } from '${PACKAGE.name}';
import type { AccountChange } from '${PACKAGE.name}/live';
import { verifyWebhook } from '${PACKAGE.name}/webhooks';

export const api = createAccountLinkClient({ baseUrl: 'http://localhost:3000' });
export type Seen = { entitlement?: Entitlement; change?: AccountChange; verify: typeof verifyWebhook };
`;
  let dir: string;
  beforeAll(() => {
    dir = scratchProject('plain-script', {
      'tsconfig.json': JSON.stringify({ compilerOptions: STRICT, include: ['main.ts', 'receiver.ts', 'live.ts'] }),
      'main.ts': MAIN,
      'receiver.ts': RECEIVER,
      'live.ts': LIVE,
      'tsconfig.node10.json': JSON.stringify({ compilerOptions: NODE10, include: ['old-resolution.ts'] }),
      'old-resolution.ts': OLD_RESOLUTION,
      // A call the API document does not have: must not compile.
      'tsconfig.wrong.json': JSON.stringify({ compilerOptions: STRICT, include: ['wrong.ts'] }),
      'wrong.ts': `import { createAccountLinkClient } from '${PACKAGE.name}';\nawait createAccountLinkClient({ baseUrl: '' }).POST('/api/wallet-link/challenge', { body: { chain: 'evm', adress: '0x0' } });\n`,
    }, { '@types/node': '24.19.2' });
  }, 300_000);

  it('installs without React or supabase-js (optional peers)', () => {
    expect(existsSync(path.join(dir, 'node_modules', ...PACKAGE.name.split('/'), 'dist/index.js'))).toBe(true);
    expect(existsSync(path.join(dir, 'node_modules/react'))).toBe(false);
    expect(existsSync(path.join(dir, 'node_modules/@supabase/supabase-js'))).toBe(false);
  });

  it('typechecks under strict (the /live channel included, without supabase-js), and refuses a body the document does not allow', () => {
    expectSuccess(run(process.execPath, [TSC, '-p', 'tsconfig.json'], dir));
    const wrong = run(process.execPath, [TSC, '-p', 'tsconfig.wrong.json'], dir);
    expect(wrong.status).not.toBe(0);
    expect(wrong.output).toMatch(/wrong\.ts\(2,\d+\): error TS2\d+:[\s\S]*adress/);
  }, 180_000); // two TypeScript programs

  it('typechecks under TypeScript\'s older module resolution (node10), which reads no "exports"', () => {
    expectSuccess(run(process.execPath, [TSC, '-p', 'tsconfig.node10.json'], dir));
  }, 120_000);

  it('runs in Node against next start: the pro user gets the feature, another user does not', () => {
    const read = (token: string) => JSON.parse(expectSuccess(run(process.execPath, ['main.ts', server.url, token], dir)).trim()) as Record<string, string>;
    const expected = { clientVersion: PACKAGE.version, servedVersion: PACKAGE.version, anonymous: '401 missing_token' };
    expect(read(pro.token)).toEqual({ userId: pro.userId, feature: 'pro feature on', ...expected });
    expect(read(free.token)).toEqual({ userId: free.userId, feature: 'pro feature off', ...expected });
  });

  it('verifies an event with @account-link/client/webhooks, and refuses a tampered one', () => {
    expect(JSON.parse(expectSuccess(run(process.execPath, ['receiver.ts'], dir)).trim())).toEqual({ type: 'customer.deleted', userId: 'f3b0c6a2-5d1e-4c59-9a51-3f1f0a6c2b7e', tampered: 'no_matching_signature' });
  });
});

describe('the packed client in a Next.js app', () => {
  let dir: string;
  let app: ChildProcess | undefined;
  let appUrl: string;

  beforeAll(async () => {
    // Turbopack compiles only under its root, which must hold the app and the linked packages.
    const modules = realpathSync(path.join(ROOT, 'node_modules'));
    let turbopackRoot = path.join(work, 'next-app');
    while (path.relative(turbopackRoot, modules).startsWith('..')) turbopackRoot = path.dirname(turbopackRoot);
    dir = scratchProject('next-app', {
      'next.config.mjs': `export default { turbopack: { root: ${JSON.stringify(turbopackRoot)} }, outputFileTracingRoot: ${JSON.stringify(turbopackRoot)} };\n`,
      'tsconfig.json': JSON.stringify({
        compilerOptions: { target: 'ES2022', lib: ['dom', 'dom.iterable', 'esnext'], strict: true, noEmit: true, module: 'esnext', moduleResolution: 'bundler', jsx: 'react-jsx', isolatedModules: true, esModuleInterop: true, skipLibCheck: true, resolveJsonModule: true, plugins: [{ name: 'next' }] },
        include: ['next-env.d.ts', '**/*.ts', '**/*.tsx'],
        exclude: ['node_modules'],
      }),
      'app/layout.tsx': `export default function RootLayout({ children }: { children: React.ReactNode }) {\n  return <html lang="en"><body>{children}</body></html>;\n}\n`,
      // The server reads the account with the core client; the page shows it through the React provider.
      'app/page.tsx': `import { createAccountLinkClient, expectData } from '${PACKAGE.name}';
import { ProFeature } from './pro-feature';

export const dynamic = 'force-dynamic';

export default async function Page({ searchParams }: { searchParams: Promise<{ user?: string }> }) {
  const { user } = await searchParams;
  const token = user === 'pro' ? process.env.PRO_TOKEN : process.env.FREE_TOKEN;
  const api = createAccountLinkClient({ baseUrl: process.env.SERVICE_URL!, accessToken: () => token });
  const account = await expectData(api.GET('/api/me'));
  return <ProFeature serviceUrl={process.env.SERVICE_URL!} token={token!} account={account} />;
}
`,
      'app/pro-feature.tsx': `'use client';
import { useMemo } from 'react';
import { createAccountLinkClient, type Account } from '${PACKAGE.name}';
import { AccountProvider, useAccount } from '${PACKAGE.name}/react';

function Feature() {
  const { data } = useAccount();
  const isPro = data?.entitlements.some((entitlement) => entitlement.id === 'pro' && entitlement.active) ?? false;
  return <p id="feature" data-user={data?.userId}>{isPro ? 'pro feature on' : 'pro feature off'}</p>;
}

export function ProFeature({ serviceUrl, token, account }: { serviceUrl: string; token: string; account: Account }) {
  const client = useMemo(() => createAccountLinkClient({ baseUrl: serviceUrl, accessToken: () => token }), [serviceUrl, token]);
  return <AccountProvider client={client} initialAccount={account}><Feature /></AccountProvider>;
}
`,
    });
    // next, react and the types from this repository (an install of next takes minutes); linked after
    // npm install, which would remove what its package.json does not list.
    for (const linked of ['next', 'react', 'react-dom', 'typescript', '@types/react', '@types/react-dom', '@types/node', '@next/env', '@swc/helpers', 'styled-jsx', 'caniuse-lite', 'postcss', 'baseline-browser-mapping', 'sharp']) {
      const from = path.join(modules, linked);
      const to = path.join(dir, 'node_modules', linked);
      if (!existsSync(from) || existsSync(to)) continue;
      mkdirSync(path.dirname(to), { recursive: true });
      symlinkSync(from, to);
    }
    expectSuccess(run(process.execPath, [NEXT, 'build'], dir));
    const port = await freePort();
    appUrl = `http://127.0.0.1:${port}`;
    app = spawn(process.execPath, [NEXT, 'start', '-p', String(port), '-H', '127.0.0.1'], {
      cwd: dir, detached: true, stdio: 'ignore',
      env: { ...process.env, NEXT_TELEMETRY_DISABLED: '1', SERVICE_URL: server.url, PRO_TOKEN: pro.token, FREE_TOKEN: free.token },
    });
    for (;;) {
      if (app.exitCode !== null) throw new Error(`the app's next start exited (${app.exitCode})`);
      const up = await fetch(`${appUrl}/?user=free`).then((response) => response.status, () => 0);
      if (up === 200) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }, 600_000);

  afterAll(() => {
    if (app?.pid) {
      try {
        process.kill(-app.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  });

  it('typechecks under strict (next build checked it too)', () => {
    expectSuccess(run(process.execPath, [TSC, '-p', 'tsconfig.json'], dir));
  });

  it('renders the pro feature for the pro user only, read from next start through the package', async () => {
    const feature = async (user: string) => {
      const html = await (await fetch(`${appUrl}/?user=${user}`)).text();
      return /<p id="feature" data-user="([^"]+)">([^<]+)<\/p>/.exec(html)?.slice(1);
    };
    expect(await feature('pro')).toEqual([pro.userId, 'pro feature on']);
    expect(await feature('free')).toEqual([free.userId, 'pro feature off']);
  });
});

describe('stock openapi-typescript on the served /api/openapi.json', () => {
  it('writes types that compile under strict', () => {
    const dir = path.join(work, 'codegen');
    mkdirSync(dir, { recursive: true });
    expectSuccess(run(process.execPath, [path.join(ROOT, 'node_modules/openapi-typescript/bin/cli.js'), `${server.url}/api/openapi.json`, '-o', 'api.ts'], dir));
    expect(readFileSync(path.join(dir, 'api.ts'), 'utf8')).toContain('JsonValue: string | (number | boolean | null) | unknown[]');
    expectSuccess(run(process.execPath, [TSC, '--strict', '--noEmit', '--target', 'ES2022', '--module', 'ESNext', '--moduleResolution', 'Bundler', 'api.ts'], dir));
  }, 120_000);
});
