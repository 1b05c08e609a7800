import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import * as deliverRoute from '../../app/api/admin/events/deliver/route.ts';
import { resetOperatorSecretThrottle } from '../../lib/auth/operator-secret.ts';
import { linkWallet } from '../support/account-actions.ts';
import { describeOn, suiteDatabase } from '../support/databases.ts';
import { QUEUES_DUE_NOW } from '../support/outbox.ts';
import { setEnv } from '../support/env.ts';
import { startRouteServer } from '../support/route-server.ts';
import { testUser } from '../support/tokens.ts';
import { evmWallet } from '../wallets/wallets.ts';

/**
 * The operator's event commands from a shell with the database's settings and the receivers'
 * (local mode on a Postgres server): events:deliver moves the outbox to a real receiver, events:status
 * shows the backlog and the failure, events:dead-letters lists what ran out of retries,
 * events:replay sends it again; a shell outside local mode without receivers is refused a run.
 */
describeOn('postgres')('npm run events:*', () => {
  const db = suiteDatabase('postgres');
  let server: Server;
  let receiverUrl: string;
  let answer = 500;
  const received: IncomingHttpHeaders[] = [];
  let restoreEnv: () => void;
  const secret = `whsec_${randomBytes(32).toString('base64')}`;
  beforeAll(async () => {
    server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        received.push(req.headers);
        res.writeHead(answer).end(answer === 500 ? 'down' : 'ok');
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    receiverUrl = `http://127.0.0.1:${(server.address() as { port: number }).port}/hook?key=in-the-query`;
    restoreEnv = setEnv({ LOCAL_DEV: '1' });
  });
  afterAll(async () => {
    restoreEnv();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  const shell = (local: boolean) => ({
    PATH: process.env.PATH!, HOME: process.env.HOME!, DATABASE_URL: db.url!, LOG_LEVEL: 'silent',
    ...(local ? { LOCAL_DEV: '1', EVENTS_WEBHOOK_URL: receiverUrl, EVENTS_WEBHOOK_SECRET: secret } : {}),
  });
  const run = (script: string, args: string[] = [], local = true) => promisify(execFile)(process.execPath, [`scripts/${script}.ts`, ...args], {
    env: shell(local) as unknown as NodeJS.ProcessEnv, timeout: 60_000,
  });

  it('deliver, status, dead-letters, replay: a failing receiver\'s backlog, its dead letter, sent again under the same webhook-id', async () => {
    await run('events-deliver'); // registers the receiver
    const user = await testUser();
    await linkWallet(user, evmWallet());
    const [{ id: eventId }] = await db.sql<{ id: string }>("select id from public.outbound_events where user_id = $1 and type = 'wallet.linked'", [user.userId]) as [{ id: string }];

    const failed = JSON.parse((await run('events-deliver')).stdout);
    expect(failed.endpoints).toEqual([expect.objectContaining({ delivered: 0, retried: 1, dead: 0 })]);
    const status = (await run('events-status')).stdout;
    expect(status).toMatch(/^Events: 1 stored, the last at .* UTC; 0 lapse\(s\) due$/m);
    expect(status).toMatch(/^ {2}[0-9a-f]{16} http:\/\/127\.0\.0\.1:\d+\/hook \[active\]: 1 pending \(the oldest since .*\), 0 dead; last delivered never; last failure .* \(attempt 1\): HTTP 500: down$/m);
    expect(status).not.toContain('in-the-query');

    await db.sql("update public.outbound_deliveries set first_attempt_at = now() - interval '4 days', next_attempt_at = now() where event_id = $1", [eventId]);
    await db.sql(QUEUES_DUE_NOW);
    expect(JSON.parse((await run('events-deliver')).stdout).endpoints).toEqual([expect.objectContaining({ dead: 1 })]);
    const dead = (await run('events-dead-letters')).stdout;
    expect(dead).toMatch(new RegExp(`^.* UTC {2}endpoint [0-9a-f]{16} {2}evt_${eventId} {2}wallet\\.linked {2}user ${user.userId} #1 {2}after 2 attempt\\(s\\): HTTP 500: down$`, 'm'));

    answer = 200;
    expect((await run('events-replay', ['--event', `evt_${eventId}`])).stdout).toBe('Replayed: 1 delivery(ies) pending again, under their events\' webhook-ids.\n');
    expect(JSON.parse((await run('events-deliver')).stdout).endpoints).toEqual([expect.objectContaining({ delivered: 1 })]);
    expect(received.map((headers) => headers['webhook-id'])).toEqual([`evt_${eventId}`, `evt_${eventId}`, `evt_${eventId}`]);
    expect((await run('events-dead-letters')).stdout).toBe('No dead letters.\n');

    await expect(run('events-replay', ['--from', '2026-01-02T00:00:00Z', '--to', '2026-01-01T00:00:00Z']))
      .rejects.toMatchObject({ code: 2, stderr: expect.stringContaining('--to: the end of the range must be after its start') });
    await expect(run('events-replay', ['--event', '00000000-0000-4000-8000-000000000000']))
      .rejects.toMatchObject({ code: 1, stderr: expect.stringContaining('event_not_found: ') });
  }, 120_000);

  it('deliver refuses a shell outside local mode whose settings name no receiver, and retires nothing', async () => {
    await run('events-deliver'); // the receiver registered, from a shell that has it
    expect(await db.sql('select id from public.outbound_endpoints where retired_at is null')).toHaveLength(1);
    await expect(run('events-deliver', [], false)).rejects.toMatchObject({ code: 1, stderr: expect.stringContaining('name no receiver') });
    expect(await db.sql('select id from public.outbound_endpoints where retired_at is not null')).toEqual([]);
  }, 60_000);

  it('deliver --url asks the deployment for a run, to its receivers, with its ADMIN_API_SECRET; a wrong secret says what to fix', async () => {
    const adminSecret = 'admin-secret-for-events-deliver-url-0123456789';
    const restore = setEnv({ ADMIN_API_SECRET: adminSecret, EVENTS_WEBHOOK_URL: receiverUrl, EVENTS_WEBHOOK_SECRET: secret });
    // The deployment: its settings in this process, its route over real HTTP.
    const deployment = await startRouteServer([[/^\/api\/admin\/events\/deliver$/, deliverRoute]]);
    try {
      await run('events-deliver'); // the receiver registered
      answer = 200;
      const user = await testUser();
      await linkWallet(user, evmWallet());
      const sent = received.length;
      // A shell with neither the database's settings nor the receivers': only the admin secret.
      const ask = (adminApiSecret: string) => promisify(execFile)(process.execPath, ['scripts/events-deliver.ts', '--url', deployment.url], {
        env: { PATH: process.env.PATH!, HOME: process.env.HOME!, LOG_LEVEL: 'silent', ADMIN_API_SECRET: adminApiSecret } as unknown as NodeJS.ProcessEnv, timeout: 60_000,
      });
      expect(JSON.parse((await ask(adminSecret)).stdout)).toEqual({ lapsesTold: expect.any(Number), endpoints: [expect.objectContaining({ delivered: 1, retried: 0, dead: 0 })], done: true });
      expect(received.slice(sent).map((headers) => headers['webhook-id'])).toHaveLength(1);
      await expect(ask('not-the-deployments-admin-secret-0123456789'))
        .rejects.toMatchObject({ code: 1, stderr: expect.stringContaining('this shell and the service must have the same ADMIN_API_SECRET') });
    } finally {
      await deployment.close();
      restore();
      resetOperatorSecretThrottle();
    }
  }, 60_000);
});
