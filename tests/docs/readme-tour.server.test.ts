import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEV_USER } from '../../lib/auth/dev-user.ts';
import { startNextServer, type NextServer } from '../../scripts/support/next-server.ts';
import { requireProductionBuild } from '../support/production-build.ts';

/**
 * The README's quick tour, run as a newcomer runs it: every command of its blocks exactly as
 * written, one after another in one shell (so `TOKEN=$(...)` carries over), against the production
 * server in local mode with the embedded database and nothing configured; each answer the README
 * prints under a command (a `# ...` line, where `…` stands for what changes from run to run) must
 * be what the command printed. On port 3000, as written; when another process holds that port, on
 * a free one with `localhost:3000` in the commands pointed there (the test says so).
 */
const README = readFileSync('README.md', 'utf8');
const TOUR_PORT = 3000;

interface Step {
  command: string;
  expected: string[];
}

/** The commands of the "Quick tour" section and the answers printed under each. */
function tourSteps(): Step[] {
  const section = README.slice(README.indexOf('## Quick tour'), README.indexOf('\n## ', README.indexOf('## Quick tour') + 1));
  const steps: Step[] = [];
  for (const [, block] of section.matchAll(/```sh\n([\s\S]*?)```/g)) {
    for (const line of block!.split('\n').filter((text) => text.trim() !== '')) {
      if (line.startsWith('# ')) steps.at(-1)!.expected.push(line.slice(2));
      else steps.push({ command: line, expected: [] });
    }
  }
  return steps;
}

/** An answer as the README prints it, `…` standing for anything. */
function matches(actual: string, expected: string): boolean {
  const pattern = expected.split('…').map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('.*');
  return new RegExp(`^${pattern}$`).test(actual);
}

async function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = createServer();
    probe.once('error', () => resolve(false));
    probe.listen(port, () => probe.close(() => resolve(true)));
  });
}

describe('the README\'s quick tour, as a newcomer runs it', () => {
  let server: NextServer;
  let dataDir: string;
  let port: number;

  beforeAll(async () => {
    requireProductionBuild();
    dataDir = mkdtempSync(path.join(tmpdir(), 'account-link-tour-'));
    port = (await portFree(TOUR_PORT)) ? TOUR_PORT : 0;
    server = await startNextServer({
      port: port || undefined,
      everyInterface: true,
      timeoutMs: 120_000,
      env: {
        // A newcomer's `npm run dev`: nothing configured (the embedded database in a folder of its own here).
        EMBEDDED_DB_DIR: path.join(dataDir, 'pglite'), DATABASE_URL: undefined, POSTGRES_URL: undefined, SUPABASE_URL: undefined, SUPABASE_SECRET_KEY: undefined,
        SUPABASE_JWT_SECRET: undefined, NEXT_PUBLIC_SUPABASE_URL: undefined, APP_ORIGIN: undefined, LOCAL_DEV: undefined, VERCEL: undefined,
        SUBSCRIPTION_WEBHOOK_SECRET: undefined, LEAGUES_WEBHOOK_SECRET: undefined, REVENUECAT_SECRET_API_KEY: undefined, CRON_SECRET: undefined, ADMIN_API_SECRET: undefined,
        LOG_LEVEL: 'warn',
      },
    });
    port = server.port;
  }, 300_000);

  afterAll(async () => {
    await server?.stop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it('has a tour: the token, /api/me, and a subscription becoming active, then cancelled, then expired', () => {
    const commands = tourSteps().map((step) => step.command);
    expect(commands).toEqual(expect.arrayContaining([
      'TOKEN=$(npm run -s token)',
      'npm run -s sample-event -- --type INITIAL_PURCHASE',
      'npm run -s sample-event -- --type CANCELLATION',
      'npm run -s sample-event -- --type EXPIRATION',
    ]));
    expect(README.split('\n').length).toBeLessThan(220);
  });

  it('prints what the README says, command by command', () => {
    const steps = tourSteps();
    const pointed = port !== TOUR_PORT;
    const commandOf = (step: Step) => (pointed ? step.command.replaceAll('localhost:3000', `localhost:${port}`) : step.command);
    // One shell, each command's output followed by a marker with its exit status.
    const script = steps.map((step, index) => `${commandOf(step)}\nprintf '\\n@@step ${index} %s@@\\n' "$?"`).join('\n');
    // A newcomer's shell: nothing configured (vitest's own BASE_URL left out).
    const { BASE_URL: _vitestBaseUrl, ...shell } = process.env;
    void _vitestBaseUrl;
    const run = spawnSync('bash', ['-c', script], {
      encoding: 'utf8',
      timeout: 240_000,
      env: {
        ...shell, EMBEDDED_DB_DIR: path.join(dataDir, 'pglite'), ...(pointed ? { BASE_URL: `http://localhost:${port}` } : {}),
        DATABASE_URL: '', SUPABASE_URL: '', LOCAL_DEV: '', VERCEL: '', APP_ORIGIN: '', SUBSCRIPTION_WEBHOOK_SECRET: '', LOG_LEVEL: 'silent',
      },
    });
    expect(run.error).toBeUndefined();
    const outputs = run.stdout.split(/\n?@@step (\d+) (\d+)@@\n/);
    const results = steps.map((step, index) => {
      const at = outputs.findIndex((part, i) => i % 3 === 1 && part === String(index));
      return { command: step.command, status: outputs[at + 1], printed: (outputs[at - 1] ?? '').trim() };
    });
    for (const [index, step] of steps.entries()) {
      const result = results[index]!;
      expect({ command: step.command, status: result.status }, run.stderr).toEqual({ command: step.command, status: '0' });
      if (step.expected.length === 0) continue;
      const lines = result.printed.split('\n');
      expect({ command: step.command, printed: lines }).toEqual({
        command: step.command,
        printed: step.expected.map((expected, line) => (matches(lines[line] ?? '', expected) ? lines[line] : `${expected}   (the README's answer)`)),
      });
    }
  }, 300_000);

  it('offers the dev user on the page\'s local sign-in', async () => {
    // Once more if the pooled connection was closed under the request: the tour above idles longer
    // than the server's keep-alive, and a request sent as it closes the socket sees "other side closed".
    const get = () => fetch(`${server.url}/`);
    const page = await (await get().catch(get)).text();
    expect(page).toMatch(new RegExp(`<input[^>]*id="local-email"[^>]*value="${DEV_USER.email.replace('.', '\\.')}"`));
  });
});
