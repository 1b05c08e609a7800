import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import { Webhook } from 'standardwebhooks';
import { EVENTS_USER_AGENT } from '../../lib/events/attempt.ts';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import * as eventsRoute from '../../app/api/admin/events/route.ts';
import { resetOperatorSecretThrottle } from '../../lib/auth/operator-secret.ts';
import { linkWallet } from '../support/account-actions.ts';
import { DATABASE_KINDS, suiteDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { startRouteServer, type RouteServer } from '../support/route-server.ts';
import { testUser } from '../support/tokens.ts';
import { evmWallet } from '../wallets/wallets.ts';

/**
 * `npm run events:listen` against a running service (the real GET /api/admin/events route module,
 * served over HTTP as the local server serves it): each event written is printed, or forwarded to a
 * real local receiver that verifies its signature with the `standardwebhooks` reference package.
 */
const ADMIN_SECRET = 'admin-secret-for-events-listen-tests-0123456789';

/** The command in a shell of its own: PATH, HOME and the admin secret; none of this run's settings. */
function listen(args: string[]) {
  const child: ChildProcess = spawn(process.execPath, ['scripts/events-listen.ts', ...args], {
    env: { PATH: process.env.PATH!, HOME: process.env.HOME!, ADMIN_API_SECRET: ADMIN_SECRET, NO_COLOR: '1' } as unknown as NodeJS.ProcessEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  const waiters: Array<{ pattern: RegExp; resolve: (match: RegExpMatchArray) => void }> = [];
  const check = () => {
    for (const waiter of [...waiters]) {
      const match = stdout.match(waiter.pattern);
      if (match) {
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter.resolve(match);
      }
    }
  };
  child.stdout!.on('data', (chunk: Buffer) => { stdout += chunk.toString(); check(); });
  child.stderr!.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    /** Resolves when stdout matches (the test's timeout bounds the wait). */
    printed: (pattern: RegExp) => new Promise<RegExpMatchArray>((resolve) => { waiters.push({ pattern, resolve }); check(); }),
    output: () => ({ stdout, stderr }),
    exited,
    stop: async () => {
      child.kill('SIGINT');
      return exited;
    },
  };
}

/** A receiver that verifies each request as Standard Webhooks' reference library does: 204 if genuine, 400 if not. */
async function startVerifyingReceiver() {
  let secret = '';
  const verified: Array<{ id: string; payload: unknown; body: string; userAgent?: string }> = [];
  let onVerified: (() => void) | undefined;
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      try {
        const payload = new Webhook(secret).verify(body, req.headers as Record<string, string>);
        verified.push({ id: String(req.headers['webhook-id']), payload, body, userAgent: req.headers['user-agent'] });
        res.writeHead(204).end();
        onVerified?.();
      } catch {
        res.writeHead(400).end();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}/hook`,
    verified,
    useSecret: (value: string) => { secret = value; },
    received: (count: number) => new Promise<void>((resolve) => {
      onVerified = () => { if (verified.length >= count) resolve(); };
      onVerified();
    }),
    close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }),
  };
}

describe.each(DATABASE_KINDS)('npm run events:listen on %s', (kind) => {
  const db = suiteDatabase(kind);
  let service: RouteServer;
  let restoreEnv: () => void;
  let running: ReturnType<typeof listen> | undefined;
  beforeAll(async () => {
    restoreEnv = setEnv({ ADMIN_API_SECRET: ADMIN_SECRET, LOCAL_DEV: '1' });
    service = await startRouteServer([[/^\/api\/admin\/events$/, eventsRoute]]);
  });
  afterEach(async () => {
    await running?.stop();
    running = undefined;
  });
  afterAll(async () => {
    await service.close();
    restoreEnv();
    resetOperatorSecretThrottle();
  });

  const eventOf = async (userId: string) => (await db.sql<{ id: string }>("select id from public.outbound_events where user_id = $1 and type = 'wallet.linked'", [userId]))[0]!.id;

  it('forwards each event written, signed with the secret it prints, and prints the receiver\'s status; Ctrl-C stops it', async () => {
    const receiver = await startVerifyingReceiver();
    try {
      running = listen(['--base-url', service.url, '--forward-to', receiver.url, '--interval-ms', '100']);
      const [, secret] = await running.printed(/Your webhook signing secret is (whsec_[A-Za-z0-9+/=]+)/);
      receiver.useSecret(secret!);
      expect(running.output().stdout).toContain(`Ready! Following the events of ${service.url}, forwarding them to ${receiver.url}`);

      const user = await testUser();
      await linkWallet(user, evmWallet());
      const eventId = await eventOf(user.userId);
      await receiver.received(1);
      // (Sent as the service sends it: its user agent too, which a receiver may filter on.)
      expect(receiver.verified).toEqual([{ id: `evt_${eventId}`, payload: expect.objectContaining({ type: 'wallet.linked', data: expect.objectContaining({ userId: user.userId, sequence: 1 }) }), body: expect.any(String), userAgent: EVENTS_USER_AGENT }]);
      // The exact body the service would send (the route's), not a re-serialization.
      const listed = await fetch(`${service.url}/api/admin/events?since=${encodeURIComponent(new Date(Date.now() - 60_000).toISOString())}`, { headers: { authorization: `Bearer ${ADMIN_SECRET}` } });
      const { events } = await listed.json() as { events: Array<{ id: string; body: string }> };
      expect(receiver.verified[0]!.body).toBe(events.find((event) => event.id === eventId)!.body);
      await running.printed(new RegExp(`wallet\\.linked {2}user ${user.userId} {2}#1 {2}evt_${eventId} {2}--> \\[204\\] POST ${receiver.url.replace(/[.]/g, '\\.')}`));

      // A second event of the same user, once; nothing printed twice for the overlap it re-reads.
      await linkWallet(user, evmWallet());
      await receiver.received(2);
      await running.printed(/#2 {2}evt_/);
      const code = await running.stop();
      running = undefined;
      expect(code).toBe(0);
      expect(receiver.verified.map((request) => request.id)).toHaveLength(2);
      expect(new Set(receiver.verified.map((request) => request.id)).size).toBe(2);
    } finally {
      await receiver.close();
    }
  });

  it('prints each event with its body when not forwarding', async () => {
    running = listen(['--base-url', service.url, '--interval-ms', '100']);
    await running.printed(/^Ready!/m);
    expect(running.output().stdout).not.toContain('whsec_');
    const user = await testUser();
    await linkWallet(user, evmWallet());
    const eventId = await eventOf(user.userId);
    await running.printed(new RegExp(`wallet\\.linked {2}user ${user.userId} {2}#1 {2}evt_${eventId}\\n\\{\\n {2}"type": "wallet\\.linked"`));
  });

  it('follows a burst of more events than a page, written at one time (one transaction), and what comes after it', async () => {
    running = listen(['--base-url', service.url, '--interval-ms', '100']);
    await running.printed(/^Ready!/m);
    // 1,100 users' events with one created_at, more than the listener's page of 1,000.
    const burst = await db.sql<{ user_id: string }>(`select u as user_id, public.outbound_lock_user(u), public.outbound_emit(u, 'wallet.linked', '{"wallet": {}}')
      from (select gen_random_uuid()::text as u from generate_series(1, 1100)) s`);
    const user = await testUser();
    await linkWallet(user, evmWallet());
    await running.printed(new RegExp(`wallet\\.linked {2}user ${user.userId} {2}#1 `));
    const printed = new Set([...running.output().stdout.matchAll(/ {2}user (\S+) {2}#1 {2}evt_/g)].map((match) => match[1]));
    expect(burst.filter((row) => !printed.has(row.user_id))).toEqual([]);
    expect(printed.size).toBe(burst.length + 1);
  }, 120_000);

  it('says why and exits 1 when the service refuses its admin secret', async () => {
    const restore = setEnv({ ADMIN_API_SECRET: 'another-admin-secret-0123456789-abcdefgh' });
    try {
      const refused = listen(['--base-url', service.url]);
      expect(await refused.exited).toBe(1);
      expect(refused.output().stderr).toMatch(/^Listening failed: Missing or wrong secret .*same ADMIN_API_SECRET/m);
    } finally {
      restore();
      resetOperatorSecretThrottle();
    }
  });
});
