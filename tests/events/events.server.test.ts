import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEV_WEBHOOK_SECRETS } from '../../lib/config.ts';
import { startNextServer, type NextServer } from '../../scripts/support/next-server.ts';
import { startWebhookReceiver, type WebhookReceiver } from '../../scripts/support/webhook-receiver.ts';
import { fixture } from '../billing/fixtures.ts';
import { migratedEmbeddedDbDir } from '../support/databases.ts';
import { QUEUES_DUE_NOW } from '../support/outbox.ts';
import { requireProductionBuild } from '../support/production-build.ts';

/**
 * Outbound events from the production server (`next build` + `next start`), as users run it, bound
 * to 127.0.0.1 and without -H: a RevenueCat webhook's 200 comes first, and its event reaches a real
 * receiver (which verifies it with the `standardwebhooks` library) after the response, by after();
 * an event the receiver refused waits in the outbox across a restart of the service and arrives,
 * once and under the same webhook-id, when the receiver answers again.
 */

const CRON_SECRET = 'cron-secret-for-events-tests-0123456789';
const DAY_MS = 86_400_000;

describe.each([
  { binding: 'bound to 127.0.0.1 (-H)', everyInterface: false },
  { binding: 'started without -H', everyInterface: true },
])('outbound events from `next start` $binding', ({ everyInterface }) => {
  let dataDir: string;
  let receiver: WebhookReceiver;
  let env: Record<string, string | undefined>;
  beforeAll(async () => {
    requireProductionBuild();
    dataDir = mkdtempSync(path.join(tmpdir(), 'account-link-events-'));
    const secret = `whsec_${randomBytes(32).toString('base64')}`;
    receiver = await startWebhookReceiver({ secrets: secret });
    env = {
      EMBEDDED_DB_DIR: migratedEmbeddedDbDir(dataDir), LOCAL_DEV: '1', CRON_SECRET, LOG_LEVEL: 'warn',
      EVENTS_WEBHOOK_URL: receiver.url, EVENTS_WEBHOOK_SECRET: secret,
      DATABASE_URL: undefined, SUPABASE_URL: undefined, APP_ORIGIN: undefined, VERCEL: undefined,
    };
  });
  afterAll(async () => {
    await receiver?.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const purchase = (userId: string) => {
    const now = Date.now();
    return fixture('initial-purchase', {
      id: `evt-${randomUUID()}`, app_user_id: userId, aliases: [userId], original_app_user_id: userId,
      event_timestamp_ms: now, purchased_at_ms: now - DAY_MS, expiration_at_ms: now + 29 * DAY_MS,
    });
  };
  const webhook = (server: NextServer, body: unknown) => fetch(`${server.url}/api/webhooks/subscription-billing`, {
    method: 'POST', headers: { authorization: `Bearer ${DEV_WEBHOOK_SECRETS.subscription}`, 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  const ofUser = (userId: string) => receiver.received.filter((r) => (r.data as { userId?: string }).userId === userId);

  // The first request of a fresh deployment: the server registers the receiver as it opens the
  // database, so the very first event is the receiver's, with no outbox run before it.
  it('sends a purchase\'s entitlement.granted after the webhook\'s 200, signed, the first event of a fresh deployment', async () => {
    const server = await startNextServer({ env, everyInterface });
    try {
      const userId = randomUUID();
      const response = await webhook(server, purchase(userId));
      expect(response.status).toBe(200);
      const [event] = await receiver.waitFor((received) => received.some((r) => (r.data as { userId?: string }).userId === userId), 20_000)
        .then(() => ofUser(userId));
      expect(event).toMatchObject({ type: 'entitlement.granted', verified: true, data: { userId, sequence: 1, entitlement: { id: 'pro', active: true } } });
    } finally {
      await server.stop();
    }
  });

  // Once, the way users run it (it restarts the server twice).
  it.runIf(everyInterface)('keeps an event the receiver refused across a restart of the service, and sends it once when the receiver is back', async () => {
    let server = await startNextServer({ env, everyInterface });
    const userId = randomUUID();
    try {
      receiver.setBehaviour('fail500');
      expect((await webhook(server, purchase(userId))).status).toBe(200);
      await receiver.waitFor(() => ofUser(userId).length === 1, 20_000);
    } finally {
      await server.stop();
    }
    // While the service is down, the retry's time comes (as the clock would bring it).
    const db = await PGlite.create(path.join(dataDir, 'pglite'));
    const [pending] = (await db.query<{ n: number }>("update public.outbound_deliveries set next_attempt_at = now() - interval '1 second' where user_id = $1 and state = 'pending' returning 1 as n", [userId])).rows;
    await db.query(QUEUES_DUE_NOW);
    await db.close();
    expect(pending).toBeDefined();

    receiver.setBehaviour('ok');
    server = await startNextServer({ env, everyInterface });
    try {
      const cron = await fetch(`${server.url}/api/cron/events`, { method: 'POST', headers: { authorization: `Bearer ${CRON_SECRET}` } });
      expect(cron.status).toBe(200);
      expect(await cron.json()).toMatchObject({ endpoints: [{ delivered: 1 }] });
      const [refused, delivered] = ofUser(userId);
      expect([refused!.behaviour, delivered!.behaviour]).toEqual(['fail500', 'ok']);
      expect(delivered!.id).toBe(refused!.id);
      expect(delivered!.verified).toBe(true);
    } finally {
      await server.stop();
    }
    expect(ofUser(userId)).toHaveLength(2);
  });
});
