import { execFile, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import openapiTS, { astToString, type OpenAPI3 } from 'openapi-typescript';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as meRoute from '../../app/api/me/route.ts';
import { loadConfig } from '../../lib/config.ts';
import { buildOpenApiDocument } from '../../lib/openapi/document.ts';
import { clientPackageProblems, currentClientPackageProblems } from '../../scripts/client-generate.ts';
import { suiteDatabase } from '../support/databases.ts';
import { startRouteServer, type RouteServer } from '../support/route-server.ts';
import { testUser } from '../support/tokens.ts';

/**
 * The client as a package (packages/client): its version is the API document's, the types stock
 * openapi-typescript makes of the served document compile, and its core runs with nothing but the
 * globals every JavaScript runtime with `fetch` has. The packed tarball, installed into apps and run
 * against `next start`, is tests/client/package.server.test.ts.
 */
const ROOT = process.cwd();

describe('the client package version', () => {
  it('is the API document\'s info.version, with a CHANGELOG section for it', () => {
    expect(currentClientPackageProblems()).toEqual([]);
  });

  it('fails when the document is bumped and the package is not, or the CHANGELOG says nothing', () => {
    const changelog = '# Changelog\n\n## 1.1.0\n\n- what changed\n\n## 1.0.0\n';
    expect(clientPackageProblems('1.1.0', '1.1.0', changelog)).toEqual([]);
    expect(clientPackageProblems('1.2.0', '1.1.0', changelog)).toEqual([
      expect.stringContaining('The API document is version 1.2.0 and the client package 1.1.0'),
      expect.stringContaining('no "## 1.2.0" section'),
    ]);
    expect(clientPackageProblems('1.1.0', '1.1.0', '## 1.1.01\n')).toEqual([expect.stringContaining('no "## 1.1.0" section')]);
  });
});

describe('stock openapi-typescript on the served document', () => {
  /** Type errors of one file under `strict`, with the standard library only (no DOM, no Node). */
  function typeErrors(file: string): string[] {
    const program = ts.createProgram([file], { strict: true, noEmit: true, target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext, moduleResolution: ts.ModuleResolutionKind.Bundler, lib: ['lib.es2022.d.ts'], types: [], skipLibCheck: false });
    return ts.getPreEmitDiagnostics(program).map((diagnostic) => ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n'));
  }

  it('gives types that compile under strict, JsonValue included', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'client-codegen-'));
    try {
      // No options: what `npx openapi-typescript https://…/api/openapi.json` does.
      const types = astToString(await openapiTS(buildOpenApiDocument(loadConfig({})) as unknown as OpenAPI3));
      expect(types).toMatch(/JsonValue: string \| \(number \| boolean \| null\) \| unknown\[\] \| \{\s+\[key: string\]: components\["schemas"\]\["JsonValue"\];/);
      writeFileSync(path.join(dir, 'api.ts'), types);
      expect(typeErrors(path.join(dir, 'api.ts'))).toEqual([]);

      // The check can fail: JsonValue's array as `items: JsonValue` is what TypeScript refuses.
      writeFileSync(path.join(dir, 'self.ts'), types.replace('unknown[]', 'components["schemas"]["JsonValue"][]'));
      expect(typeErrors(path.join(dir, 'self.ts'))).toEqual(expect.arrayContaining([expect.stringContaining("'JsonValue' is referenced directly or indirectly in its own type annotation")]));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 180_000); // two whole TypeScript programs
});

/**
 * The built core (dist/index.js and what it imports) evaluated as ES modules in a fresh V8 context
 * whose only globals are the language's and the Fetch API's, as in an edge function or React
 * Native: no window, document, navigator, process, Buffer or require. It calls GET /api/me of the
 * real route over HTTP, signed in and not.
 */
const EDGE_RUNNER = `
import vm from 'node:vm';
import { readFileSync } from 'node:fs';
import path from 'node:path';
const { DIST, OPENAPI_FETCH, BASE_URL, TOKEN } = process.env;
const context = vm.createContext({ fetch, Request, Response, Headers, URL, URLSearchParams, AbortController, AbortSignal, TextEncoder, TextDecoder, FormData, Blob, ReadableStream, console, setTimeout, clearTimeout, queueMicrotask, structuredClone, atob, btoa });
const modules = new Map();
const load = (file) => {
  if (!modules.has(file)) modules.set(file, new vm.SourceTextModule(readFileSync(file, 'utf8'), { identifier: file, context }));
  return modules.get(file);
};
const imported = [];
const entry = load(path.join(DIST, 'index.js'));
await entry.link((specifier, from) => {
  imported.push(specifier);
  if (specifier === 'openapi-fetch') return load(OPENAPI_FETCH);
  if (specifier.startsWith('.')) return load(path.resolve(path.dirname(from.identifier), specifier));
  throw new Error('the core imports ' + specifier);
});
await entry.evaluate();
const { createAccountLinkClient, expectData, API_VERSION } = entry.namespace;
const account = await expectData(createAccountLinkClient({ baseUrl: BASE_URL, accessToken: async () => TOKEN }).GET('/api/me'));
const refused = await expectData(createAccountLinkClient({ baseUrl: BASE_URL }).GET('/api/me')).catch((error) => ({ name: error.name, status: error.status, code: error.code }));
const present = vm.runInContext("['window', 'document', 'navigator', 'process', 'Buffer', 'require', 'global', 'setImmediate'].filter((name) => name in globalThis)", context);
console.log(JSON.stringify({ imported, account, refused, present, API_VERSION }));
`;

describe('the core client with no DOM and no Node API', () => {
  suiteDatabase('pglite');
  let dist: string;
  let server: RouteServer;
  beforeAll(async () => {
    dist = mkdtempSync(path.join(tmpdir(), 'client-dist-'));
    const build = spawnSync(process.execPath, [path.join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', path.join(ROOT, 'packages/client/tsconfig.json'), '--outDir', dist], { encoding: 'utf8' });
    expect(build.stdout + build.stderr).toBe('');
    server = await startRouteServer([[/^\/api\/me$/, meRoute]]);
  }, 120_000);
  afterAll(async () => {
    await server?.close();
    if (dist) rmSync(dist, { recursive: true, force: true });
  });

  it('reads the account through the real route, in a context that has only fetch and the language', async () => {
    const user = await testUser({ email: 'edge@example.test' });
    // Not spawnSync: the route server answering the child runs in this process.
    const run = await promisify(execFile)(process.execPath, ['--experimental-vm-modules', '--no-warnings', '--input-type=module', '-e', EDGE_RUNNER], {
      encoding: 'utf8',
      env: { ...process.env, DIST: dist, OPENAPI_FETCH: path.join(ROOT, 'node_modules/openapi-fetch/dist/index.mjs'), BASE_URL: server.url, TOKEN: user.token },
    });
    expect(run.stderr).toBe('');
    const result = JSON.parse(run.stdout) as Record<string, unknown>;
    expect(result).toEqual({
      imported: ['openapi-fetch', './api-types.js'],
      account: { userId: user.userId, email: 'edge@example.test', wallets: [], entitlements: [], leagues: [] },
      refused: { name: 'ApiProblemError', status: 401, code: 'missing_token' },
      present: [],
      API_VERSION: JSON.parse(readFileSync(path.join(ROOT, 'packages/client/package.json'), 'utf8')).version,
    });
  }, 120_000);
});
