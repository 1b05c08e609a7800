import { spawnSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureProductionBuild, startNextServer, type NextServer } from '../support/next-server.ts';

/** What the logs look like where they are read: Vercel (JSON lines) and a developer's terminal. */
describe('logs', () => {
  let server: NextServer;
  beforeAll(async () => {
    ensureProductionBuild();
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

  it('drops an x-vercel-id that is not one (it comes from the client off Vercel)', async () => {
    await fetch(`${server.url}/api/health/live`, { headers: { 'x-request-id': 'req-logs-2', 'x-vercel-id': 'not / an id; x=1' } });
    await expect.poll(() => server.output().includes('req-logs-2')).toBe(true);
    const entry = JSON.parse(server.output().split('\n').find((text) => text.includes('req-logs-2'))!) as Record<string, unknown>;
    expect(entry.vercelId).toBeUndefined();
  });

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
