import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNextServer, type NextServer } from '../../scripts/support/next-server.ts';
import { requireProductionBuild } from '../support/production-build.ts';

/** What the logs look like where they are read: Vercel (JSON lines) and a developer's terminal. */
describe('logs', () => {
  let server: NextServer;
  beforeAll(async () => {
    requireProductionBuild();
    server = await startNextServer({ env: { LOG_LEVEL: 'info', NODE_ENV: 'production' } });
  }, 300_000);
  afterAll(() => server?.stop());

  it('on the production server: JSON request lines with the level name, an ISO time, our request id and Vercel\'s', async () => {
    const vercelId = 'fra1::iad1::8xk2p-1764158400000-0b1c2d3e4f5a';
    const response = await fetch(`${server.url}/api/health/live`, { headers: { 'x-request-id': 'req-logs-1', 'x-vercel-id': vercelId } });
    expect(response.status).toBe(200);
    await expect.poll(() => server.output().includes('req-logs-1')).toBe(true);
    const line = server.output().split('\n').find((text) => text.includes('req-logs-1'))!;
    const entry = JSON.parse(line) as Record<string, unknown>;
    expect(entry).toMatchObject({ level: 'info', requestId: 'req-logs-1', vercelId, method: 'GET', path: '/api/health/live', status: 200, msg: 'request' });
    expect(entry.time).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
  });

  // Answered before the target is rewritten to its path (an Expect it cannot meet, a URL that does
  // not parse): the line names no part of a URL, which may carry a user name and password.
  it('names no part of a whole-URL target in the lines of answers made before Next', async () => {
    const credentials = `user-${randomUUID()}:password-${randomUUID()}`;
    const raw = (requestLine: string, headers: string) => new Promise<string>((resolve, reject) => {
      const socket = connect(Number(new URL(server.url).port), '127.0.0.1');
      let answer = '';
      socket.on('data', (chunk) => (answer += chunk.toString('latin1')));
      socket.on('end', () => resolve(answer.split('\r\n')[0]!));
      socket.on('error', reject);
      socket.write(`${requestLine}\r\nHost: 127.0.0.1\r\n${headers}Connection: close\r\n\r\n{}`);
    });
    expect(await raw(`POST http://${credentials}@evil.example/api/health HTTP/1.1`, 'x-request-id: req-logs-expect\r\nexpect: 200-ok\r\ncontent-length: 2\r\n')).toMatch(/^HTTP\/1\.1 417/);
    expect(await raw(`GET http://${credentials}@example:99999/api/health HTTP/1.1`, 'x-request-id: req-logs-unparsed\r\n')).toMatch(/^HTTP\/1\.1 400/);
    for (const id of ['req-logs-expect', 'req-logs-unparsed']) {
      await expect.poll(() => server.output().includes(id)).toBe(true);
      expect(JSON.parse(server.output().split('\n').find((text) => text.includes(id))!)).toMatchObject({ requestId: id, path: '(a URL)' });
    }
    expect(server.output()).not.toContain(credentials);
  });

  it('drops an x-vercel-id that is not one (it comes from the client off Vercel)', async () => {
    await fetch(`${server.url}/api/health/live`, { headers: { 'x-request-id': 'req-logs-2', 'x-vercel-id': 'not / an id; x=1' } });
    await expect.poll(() => server.output().includes('req-logs-2')).toBe(true);
    const entry = JSON.parse(server.output().split('\n').find((text) => text.includes('req-logs-2'))!) as Record<string, unknown>;
    expect(entry.vercelId).toBeUndefined();
  });

  it('off Vercel, a line does not wait for its write, and a clean exit loses none (on Vercel: written at once)', () => {
    // 2,000 lines in one go, then how much of them stdout (a file) holds, then process.exit.
    const script = "import { fstatSync } from 'node:fs'; import { log } from './lib/log.ts';" +
      " for (let i = 0; i < 2000; i++) log.info({ line: i }, 'line');" +
      ' process.stderr.write(String(fstatSync(1).size)); process.exit(0);';
    const folder = mkdtempSync(path.join(tmpdir(), 'account-link-log-'));
    try {
      const run = (env: Record<string, string | undefined>) => {
        const file = path.join(folder, `out-${env.VERCEL ? 'vercel' : 'local'}.log`);
        const out = openSync(file, 'w');
        try {
          const result = spawnSync('node_modules/.bin/node', ['--input-type=module', '-e', script], {
            encoding: 'utf8', stdio: ['ignore', out, 'pipe'], env: { ...process.env, LOG_LEVEL: 'info', NODE_ENV: 'production', VERCEL: undefined, ...env },
          });
          expect(result.status).toBe(0);
          const text = readFileSync(file, 'utf8');
          return { writtenBeforeExit: Number(result.stderr), size: Buffer.byteLength(text), lines: text.trim().split('\n').map((line) => JSON.parse(line).line as number) };
        } finally {
          closeSync(out);
        }
      };
      const local = run({});
      expect(local.lines).toEqual(Array.from({ length: 2000 }, (_, i) => i));
      // The lines were still in memory when the script asked: written asynchronously, then at exit.
      expect(local.writtenBeforeExit).toBeLessThan(local.size / 2);
      const vercel = run({ VERCEL: '1' });
      expect(vercel.lines).toEqual(local.lines);
      expect(vercel.writtenBeforeExit).toBe(vercel.size);
    } finally {
      rmSync(folder, { recursive: true, force: true });
    }
  });

  it('the production server has written every request\'s line when it exits on SIGTERM', async () => {
    // (Beside the suite's server, whose embedded database folder it cannot open: /api/health/live needs none.)
    const own = await startNextServer({ env: { LOG_LEVEL: 'info', NODE_ENV: 'production' }, readyPath: '/api/health/live' });
    const ids = Array.from({ length: 300 }, (_, i) => `req-exit-${i}`);
    try {
      const statuses = await Promise.all(ids.map(async (id) => (await fetch(`${own.url}/api/health/live`, { headers: { 'x-request-id': id } })).status));
      expect(new Set(statuses)).toEqual(new Set([200]));
    } finally {
      await own.stop();
    }
    await expect.poll(() => ids.filter((id) => !own.output().includes(`"requestId":"${id}"`)), { timeout: 10_000 }).toEqual([]);
  }, 120_000);

  it('in development (`npm run dev`): readable lines, not JSON; LOG_FORMAT=json keeps JSON', () => {
    const script = "import { log } from './lib/log.ts'; log.info({ requestId: 'r1', status: 200 }, 'request');";
    const run = (env: Record<string, string>) => spawnSync('node_modules/.bin/node', ['--input-type=module', '-e', script], {
      encoding: 'utf8', env: { ...process.env, LOG_LEVEL: 'info', ...env },
    }).stdout.trim();
    const readable = run({ NODE_ENV: 'development' });
    expect(readable).toMatch(/^\[\d{2}:\d{2}:\d{2}\.\d{3}\] INFO: request/);
    expect(readable).toContain('requestId: "r1"');
    expect(() => JSON.parse(readable)).toThrow();
    expect(JSON.parse(run({ NODE_ENV: 'development', LOG_FORMAT: 'json' }))).toMatchObject({ level: 'info', requestId: 'r1' });
  });
});
