import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DatabaseAdapter } from '../../lib/db/adapter.ts';
import { closeDatabase, replaceDatabase } from '../../lib/db/index.ts';
import { openPostgres } from '../../lib/db/postgres.ts';
import { DATABASE_KINDS, suiteDatabase } from '../support/databases.ts';
import { startPostgresServer, type PostgresServer } from '../../scripts/support/postgres-server.ts';
import type { RouteResponse } from '../support/http.ts';
import { billingEvent, day, deliver, entitlementsOf, isoDay } from './support.ts';

describe('billing when the database fails', () => {
  // Our own server, so stopping it cannot disturb any other suite.
  let server: PostgresServer;
  let adapter: DatabaseAdapter & { pool: import('pg').Pool };
  beforeAll(async () => {
    server = await startPostgresServer();
    adapter = await openPostgres({ connectionString: server.url(), max: 4 });
    await closeDatabase();
    replaceDatabase(adapter);
  });
  afterAll(async () => {
    await closeDatabase();
    await server?.stop();
  });

  it('answers 503 with Retry-After while the database is down; the redelivery then applies exactly once', async () => {
    const user = `down-${randomUUID()}`;
    expect((await deliver(billingEvent('initial-purchase', user, { at: 0.001, purchased: 0, expires: 30 }))).status).toBe(200);
    const renewal = billingEvent('renewal', user, { at: 30.001, purchased: 30, expires: 60 });

    await server.pause();
    let down: RouteResponse;
    try {
      down = await deliver(renewal);
    } finally {
      await server.resume();
    }
    expect(down.status).toBe(503);
    expect(down.headers.get('retry-after')).toMatch(/^\d+$/);
    expect(down.body).toMatchObject({ code: 'database_unavailable', status: 503 });

    // RevenueCat redelivers the same body; a pooled connection the restart broke may fail once more.
    let redelivered = await deliver(renewal);
    for (let attempt = 0; redelivered.status === 503 && attempt < 3; attempt++) redelivered = await deliver(renewal);
    expect(redelivered).toMatchObject({ status: 200, body: { received: true } });
    expect((await deliver(renewal)).status).toBe(200);

    const rows = await adapter.pool.query('select outcome from public.billing_events where event_id = $1', [renewal.event.id]);
    expect(rows.rows).toEqual([{ outcome: 'applied' }]);
    const state = await adapter.call('account_entitlements', { p_user_id: user, p_now: new Date(day(31)) });
    expect(state).toMatchObject([{ entitlement_id: 'pro', status: 'active', last_event_at: expect.any(String) }]);
    expect(new Date((state as { expires_at: string }[])[0]!.expires_at).toISOString()).toBe(isoDay(60));
  });
});

describe.each(DATABASE_KINDS)('billing with a failure between recording and applying, on %s', (kind) => {
  const db = suiteDatabase(kind);

  it('leaves no event row and no effect; the redelivery then applies', async () => {
    const user = `fault-${randomUUID()}`;
    const body = billingEvent('initial-purchase', user, { at: 0.001, purchased: 0, expires: 30 });
    // Test-only: writing an entitlement fails, after the event row was inserted in the same call.
    await db.sql('create schema if not exists test_faults');
    await db.sql(`create or replace function test_faults.fail() returns trigger language plpgsql as $$
      begin
        raise exception 'injected failure' using errcode = 'XX000';
      end $$`);
    await db.sql(`create trigger test_fail_entitlement_write before insert or update on public.entitlements
      for each row execute function test_faults.fail()`);
    try {
      const failed = await deliver(body);
      expect(failed.status).toBe(503);
      expect(failed.headers.get('retry-after')).toBeTruthy();
      expect(await db.sql('select event_id from public.billing_events where event_id = $1', [body.event.id])).toEqual([]);
      expect(await entitlementsOf(db, user, new Date(day(1)))).toEqual([]);
    } finally {
      await db.sql('drop trigger test_fail_entitlement_write on public.entitlements');
    }

    expect((await deliver(body)).status).toBe(200);
    expect(await db.sql('select outcome from public.billing_events where event_id = $1', [body.event.id])).toEqual([{ outcome: 'applied' }]);
    expect(await entitlementsOf(db, user, new Date(day(1)))).toMatchObject([{ id: 'pro', status: 'active', active: true }]);
  });
});
