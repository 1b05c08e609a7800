import { createServer, type Server } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import * as meRoute from '../../app/api/me/route.ts';
import * as webhookRoute from '../../app/api/webhooks/subscription-billing/route.ts';
import { ConfigError, loadConfig, parseCorsOrigins } from '../../lib/config.ts';
import { hasChromium, launchChromium } from '../support/browser.ts';
import { migratedEmbeddedDbDir } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { callRoute } from '../support/http.ts';
import { startNextServer, type NextServer } from '../../scripts/support/next-server.ts';
import { freePort } from '../../scripts/support/postgres-server.ts';
import { requireProductionBuild } from '../support/production-build.ts';

const FRONTEND = 'https://app.example.com';

describe('CORS_ORIGINS', () => {
  it('takes exact origins; never a wildcard, a path, or plain http to another machine outside local mode', () => {
    expect(parseCorsOrigins(['https://app.example.com', 'http://localhost:5173'], false)).toEqual(['https://app.example.com', 'http://localhost:5173']);
    expect(parseCorsOrigins(['https://app.example.com/'], false)).toEqual(['https://app.example.com']);
    for (const bad of ['*', 'https://*.example.com', 'https://app.example.com/path', 'app.example.com', 'ftp://app.example.com']) {
      expect(() => parseCorsOrigins([bad], true), bad).toThrow(ConfigError);
    }
    expect(() => parseCorsOrigins(['http://app.example.com'], false)).toThrow(/https/);
    expect(parseCorsOrigins(['http://app.example.com'], true)).toEqual(['http://app.example.com']);
    expect(loadConfig({ CORS_ORIGINS: ' https://a.example.com , https://b.example.com ' }).corsOrigins).toEqual(['https://a.example.com', 'https://b.example.com']);
    expect(loadConfig({}).corsOrigins).toEqual([]);
  });
});

describe('CORS on the API (over HTTP)', () => {
  let restore: () => void;
  beforeAll(() => {
    restore = setEnv({ CORS_ORIGINS: FRONTEND });
  });
  afterAll(() => restore());

  const preflight = (origin: string, method = 'GET', headers = 'authorization') => callRoute(meRoute, {
    method: 'OPTIONS', headers: { origin, 'access-control-request-method': method, 'access-control-request-headers': headers },
  });

  it('answers an allowed origin\'s preflight: its origin echoed (never *), the path\'s methods, Authorization allowed', async () => {
    const response = await preflight(FRONTEND);
    expect(response.status).toBe(204);
    expect(Object.fromEntries([...response.headers].filter(([name]) => name.startsWith('access-control-') || name === 'vary'))).toEqual({
      'access-control-allow-origin': FRONTEND,
      'access-control-allow-methods': 'GET, HEAD',
      'access-control-allow-headers': 'authorization, content-type, x-request-id',
      'access-control-max-age': '600',
      vary: 'Origin, Access-Control-Request-Method, Access-Control-Request-Headers',
    });
    expect(response.headers.get('access-control-allow-credentials')).toBeNull();
  });

  it('gives another origin, a method the path lacks, or an unexpected header nothing to go on but Vary', async () => {
    for (const response of [await preflight('https://evil.example'), await preflight(FRONTEND, 'DELETE'), await preflight(FRONTEND, 'GET', 'authorization, x-custom')]) {
      expect(response.status).toBe(204);
      expect(response.headers.get('access-control-allow-origin')).toBeNull();
      // The answer would have differed for another origin or request: a cache must know it.
      expect(response.headers.get('vary')).toBe('Origin, Access-Control-Request-Method, Access-Control-Request-Headers');
    }
  });

  // Found by an outside review: only answers to an allowed origin said Vary: Origin, so a cache could
  // keep an answer without CORS headers (to another origin, or to no Origin) and serve it to the frontend.
  it('says Vary: Origin on every answer while CORS_ORIGINS is set: any origin, none, errors, every status', async () => {
    const answers = [
      await callRoute(meRoute, { headers: { origin: 'https://evil.example' } }),
      await callRoute(meRoute, {}),
      await callRoute(meRoute, { method: 'POST', headers: { origin: FRONTEND } }),
      await callRoute(webhookRoute, { method: 'POST', body: {} }),
      await callRoute(webhookRoute, { method: 'POST', headers: { origin: 'https://evil.example' }, body: 'not json' }),
      await callRoute(meRoute, { method: 'OPTIONS', headers: { origin: 'https://evil.example' } }),
    ];
    expect(answers.map((answer) => `${answer.status} ${answer.headers.get('vary')}`)).toEqual(['401 Origin', '401 Origin', '405 Origin', '401 Origin', '401 Origin',
      // An OPTIONS without Access-Control-Request-Method would have been a preflight with one.
      '204 Origin, Access-Control-Request-Method, Access-Control-Request-Headers']);
  });

  it('says nothing of Origin without CORS_ORIGINS: no answer depends on it', async () => {
    const restoreNone = setEnv({ CORS_ORIGINS: undefined });
    try {
      for (const answer of [await callRoute(meRoute, { headers: { origin: FRONTEND } }), await preflight(FRONTEND)]) {
        expect(answer.headers.get('vary')).toBeNull();
        expect(answer.headers.get('access-control-allow-origin')).toBeNull();
      }
    } finally {
      restoreNone();
    }
  });

  it('lets an allowed origin read answers, errors included, and exposes the request id; another origin gets no CORS header', async () => {
    const allowed = await callRoute(meRoute, { headers: { origin: FRONTEND } });
    expect(allowed.status).toBe(401);
    expect({ origin: allowed.headers.get('access-control-allow-origin'), expose: allowed.headers.get('access-control-expose-headers'), vary: allowed.headers.get('vary') })
      .toEqual({ origin: FRONTEND, expose: 'x-request-id, retry-after, www-authenticate', vary: 'Origin' });
    const other = await callRoute(meRoute, { headers: { origin: 'https://evil.example' } });
    expect({ origin: other.headers.get('access-control-allow-origin'), expose: other.headers.get('access-control-expose-headers') }).toEqual({ origin: null, expose: null });
    const sameOrigin = await callRoute(webhookRoute, { method: 'POST', body: {} });
    expect(sameOrigin.headers.get('access-control-allow-origin')).toBeNull();
  });
});

/**
 * In a real browser: a frontend served from one origin calls the service on another. With its
 * origin in CORS_ORIGINS the call (a preflighted GET with Authorization) succeeds; from an origin
 * not listed, the browser refuses it.
 */
describe.skipIf(!hasChromium)('a frontend on another origin, in Chromium', () => {
  let service: NextServer;
  let browser: Browser;
  let frontends: Server[] = [];
  let allowedOrigin: string;
  let otherOrigin: string;
  let dataDir: string;

  const serveFrontend = async (): Promise<string> => {
    const port = await freePort();
    const server = createServer((_request, response) => {
      response.writeHead(200, { 'content-type': 'text/html' });
      response.end('<!doctype html><title>frontend</title>');
    });
    await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    frontends.push(server);
    return `http://127.0.0.1:${port}`;
  };

  beforeAll(async () => {
    [allowedOrigin, otherOrigin] = [await serveFrontend(), await serveFrontend()];
    requireProductionBuild();
    dataDir = mkdtempSync(path.join(tmpdir(), 'account-link-cors-'));
    service = await startNextServer({
      env: { CORS_ORIGINS: allowedOrigin, EMBEDDED_DB_DIR: migratedEmbeddedDbDir(dataDir), DATABASE_URL: undefined, SUPABASE_URL: undefined, APP_ORIGIN: undefined, LOCAL_DEV: undefined, LOG_LEVEL: 'warn' },
    });
    browser = await launchChromium();
  }, 300_000);

  afterAll(async () => {
    await browser?.close();
    await service?.stop();
    for (const server of frontends) server.close();
    frontends = [];
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  const callFrom = async (origin: string) => {
    const page = await browser.newPage();
    try {
      await page.goto(origin);
      return await page.evaluate(async (url) => {
        try {
          const response = await fetch(`${url}/api/me`, { headers: { authorization: 'Bearer not-a-token' } });
          return { status: response.status, requestId: response.headers.get('x-request-id') !== null };
        } catch (error) {
          return { refused: (error as Error).name };
        }
      }, service.url);
    } finally {
      await page.close();
    }
  };

  it('an allowed origin reads the answer (here the 401 for a bad token) and its request id', async () => {
    expect(await callFrom(allowedOrigin)).toEqual({ status: 401, requestId: true });
  });

  it('another origin is refused by the browser', async () => {
    expect(await callFrom(otherOrigin)).toEqual({ refused: 'TypeError' });
  });
});
