import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, beforeEach, expect, it } from 'vitest';
import { closeDatabase, getDatabase, registerEventEndpointsAsTheDatabaseOpens } from '../../lib/db/index.ts';
import { getEventEndpoints } from '../../lib/events/endpoints.ts';
import { deliver } from '../billing/support.ts';
import { fixture } from '../billing/fixtures.ts';
import { describeOn, openTestDatabase, type TestDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';

/**
 * An event gets a delivery for each endpoint registered when it is written. The server registers
 * its settings' receivers as it opens the database, before its first call, so a fresh deployment's
 * very first change reaches them with no outbox run before it. It retires nothing (the outbox runs
 * do); an operator's command, opening the same database with its shell's settings, registers
 * nothing. Configured as a
 * deployment is (DATABASE_URL, EVENTS_WEBHOOK_URL), on the real Postgres server.
 */

const DAY_MS = 86_400_000;

describeOn('postgres')('the event receivers registered as the database opens', () => {
  let db: TestDatabase;
  let restoreEnv: (() => void) | undefined;

  beforeAll(async () => {
    db = await openTestDatabase('postgres');
    restoreEnv = setEnv({
      LOCAL_DEV: '1', DATABASE_URL: db.url, SUPABASE_URL: undefined, EVENTS_WEBHOOK_ENDPOINTS: undefined,
      EVENTS_WEBHOOK_URL: 'http://127.0.0.1:9/hooks', EVENTS_WEBHOOK_SECRET: `whsec_${randomBytes(32).toString('base64')}`,
    });
  });
  afterAll(async () => {
    restoreEnv?.();
    await db?.close();
  });
  // Each test opens the database afresh, as a process starting; none leaves the server's mark behind.
  beforeEach(async () => {
    await closeDatabase();
    await db.sql('delete from public.outbound_endpoints');
  });
  afterEach(async () => {
    registerEventEndpointsAsTheDatabaseOpens(false);
    await closeDatabase();
  });

  const endpoints = () => db.sql<{ id: string; active: boolean }>('select id, retired_at is null as active from public.outbound_endpoints order by id');
  /** A new Supabase user's first purchase, through the billing webhook; the user's id. */
  async function firstPurchase(): Promise<string> {
    const userId = randomUUID();
    const now = Date.now();
    const response = await deliver(fixture('initial-purchase', {
      id: `evt-${randomUUID()}`, app_user_id: userId, aliases: [userId], original_app_user_id: userId,
      event_timestamp_ms: now, purchased_at_ms: now - DAY_MS, expiration_at_ms: now + 29 * DAY_MS,
    }));
    expect(response.status).toBe(200);
    return userId;
  }
  const deliveriesOf = (userId: string) => db.sql('select d.endpoint_id, e.type from public.outbound_deliveries d join public.outbound_events e on e.id = d.event_id where d.user_id = $1', [userId]);

  it('an operator command that opens the database registers nothing', async () => {
    await getDatabase();
    expect(await endpoints()).toEqual([]);
  });

  it('the server adds its receivers and retires none: another deployment\'s stay for the outbox runs to settle', async () => {
    await db.sql("insert into public.outbound_endpoints (id) values ('0000000000000000')");
    registerEventEndpointsAsTheDatabaseOpens();
    await getDatabase();
    const [receiver] = getEventEndpoints();
    expect(await endpoints()).toEqual([{ id: '0000000000000000', active: true }, { id: receiver!.id, active: true }]);
  });

  it('adding or setting endpoints from anything but a JSON array is refused (PT400) and changes nothing', async () => {
    await db.sql("insert into public.outbound_endpoints (id) values ('0000000000000000')");
    for (const fn of ['outbound_add_endpoints', 'outbound_set_endpoints']) {
      await expect(db.sql(`select public.${fn}($1::jsonb)`, [JSON.stringify({ id: 'x' })])).rejects.toMatchObject({ code: 'PT400' });
    }
    expect(await endpoints()).toEqual([{ id: '0000000000000000', active: true }]);
  });

  it('the server registers its receivers before its first call: its first purchase has a delivery for them', async () => {
    registerEventEndpointsAsTheDatabaseOpens();
    const [receiver] = getEventEndpoints();
    const userId = await firstPurchase();
    expect(await endpoints()).toEqual([{ id: receiver!.id, active: true }]);
    expect(await deliveriesOf(userId)).toEqual([{ endpoint_id: receiver!.id, type: 'entitlement.granted' }]);
  });

  it('the server puts back, as it opens the database, a queue\'s row missing beside a pending delivery (one written while the migration that made them ran)', async () => {
    registerEventEndpointsAsTheDatabaseOpens();
    const userId = await firstPurchase();
    const queues = () => db.sql('select user_id, head_attempted from public.outbound_queues where user_id = $1', [userId]);
    expect(await queues()).toEqual([{ user_id: userId, head_attempted: false }]);
    await db.sql('delete from public.outbound_queues');
    await closeDatabase();
    registerEventEndpointsAsTheDatabaseOpens();
    await getDatabase();
    expect(await queues()).toEqual([{ user_id: userId, head_attempted: false }]);
  });

  it('under next dev, a receiver added to the settings while the server runs gets the next event: it is registered before the next call', async () => {
    const restore = setEnv({ NODE_ENV: 'development', EVENTS_WEBHOOK_URL: undefined, EVENTS_WEBHOOK_SECRET: undefined });
    try {
      registerEventEndpointsAsTheDatabaseOpens();
      await getDatabase();
      expect(await endpoints()).toEqual([]);
      // .env.local edited: Next puts the new values in process.env; nothing else is told.
      process.env.EVENTS_WEBHOOK_URL = 'http://127.0.0.1:9/added-later';
      process.env.EVENTS_WEBHOOK_SECRET = `whsec_${randomBytes(32).toString('base64')}`;
      const [receiver] = getEventEndpoints();
      expect(receiver!.url.pathname).toBe('/added-later');
      const userId = await firstPurchase();
      expect(await deliveriesOf(userId)).toEqual([{ endpoint_id: receiver!.id, type: 'entitlement.granted' }]);
    } finally {
      restore();
    }
  });
});
