import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { closeDatabase } from '../../lib/db/index.ts';
import { describeOn, useTestDatabase, type TestDatabase } from '../support/databases.ts';
import { billingEvent, day, deliver, entitlementsOf, isoDay } from './support.ts';

// Real concurrency needs a real server: many connections, each its own transaction.
describeOn('postgres')('billing under concurrent deliveries on the real Postgres server', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await useTestDatabase('postgres');
    // Test-only: count every write to entitlements, so "one effect" is observable.
    await db.sql(`
      create table public.test_entitlement_writes (app_user_id text, op text);
      create function public.test_count_entitlement_write() returns trigger language plpgsql as $$
      begin
        insert into public.test_entitlement_writes values (new.app_user_id, tg_op);
        return new;
      end $$;
      create trigger test_count_entitlement_write after insert or update on public.entitlements
        for each row execute function public.test_count_entitlement_write();`);
  });
  afterAll(async () => {
    await closeDatabase();
    await db.close();
  });

  it('20 identical deliveries at once: all 200, one event row, one effect', async () => {
    const user = `burst-${randomUUID()}`;
    const body = billingEvent('initial-purchase', user, { at: 0.001, purchased: 0, expires: 30 });
    const responses = await Promise.all(Array.from({ length: 20 }, () => deliver(body)));
    expect(responses.map((response) => response.status)).toEqual(Array(20).fill(200));
    expect(await db.sql('select outcome from public.billing_events where event_id = $1', [body.event.id])).toEqual([{ outcome: 'applied' }]);
    expect(await db.sql('select op from public.test_entitlement_writes where app_user_id = $1', [user])).toEqual([{ op: 'INSERT' }]);
    expect(await entitlementsOf(db, user, new Date(day(1)))).toMatchObject([{ id: 'pro', status: 'active', active: true, expiresAt: isoDay(30) }]);
  });

  it('RENEWAL and a flag of one subscriber in parallel, 50 times: the state is that of event order', async () => {
    const runs = Array.from({ length: 50 }, (_, i) => ({ user: `race-${i}-${randomUUID()}`, cancelIsNewer: i % 2 === 0 }));
    await Promise.all(runs.map(({ user }) => deliver(billingEvent('initial-purchase', user, { at: 0.001, purchased: 0, expires: 30 }))));

    const renewalAt = 30.001;
    const oneMs = 1 / 86_400_000;
    const responses = await Promise.all(runs.flatMap(({ user, cancelIsNewer }) => [
      deliver(billingEvent('renewal', user, { at: renewalAt, purchased: 30, expires: 60 })),
      // Newer: the subscriber cancels the renewed period. Older: a billing issue of the first
      // period, which the renewal recovers (so it renews again).
      deliver(cancelIsNewer
        ? billingEvent('cancellation-unsubscribe', user, { at: renewalAt + oneMs, purchased: 30, expires: 60 })
        : billingEvent('billing-issue-no-grace', user, { at: renewalAt - oneMs, purchased: 0, expires: 30 })),
    ]));
    expect(responses.every((response) => response.status === 200)).toBe(true);

    const now = new Date(day(31));
    const states = await Promise.all(runs.map(async ({ user, cancelIsNewer }) => ({ cancelIsNewer, view: (await entitlementsOf(db, user, now))[0] })));
    for (const { cancelIsNewer, view } of states) {
      expect({ cancelIsNewer, view }).toMatchObject({
        cancelIsNewer,
        view: cancelIsNewer
          ? { status: 'cancelled_active', willRenew: false, active: true, expiresAt: isoDay(60) }
          : { status: 'active', willRenew: true, active: true, expiresAt: isoDay(60) },
      });
    }
  });

  it('a customer\'s events and a TRANSFER joining two groups, all at once, 20 times: the state of event order', async () => {
    const history = (alice: string, bob: string) => [
      billingEvent('initial-purchase', alice, { at: 0, purchased: 0, expires: 30 }),
      billingEvent('initial-purchase', bob, { at: 1, purchased: 1, expires: 31 }, { product_id: 'com.example.pro.yearly', transaction_id: 'b-1', original_transaction_id: 'b-1' }),
      billingEvent('cancellation-unsubscribe', alice, { at: 4, purchased: 0, expires: 30 }),
      billingEvent('transfer', bob, { at: 5 }, { app_user_id: undefined, aliases: undefined, original_app_user_id: undefined, transferred_from: [alice], transferred_to: [bob] }),
      billingEvent('uncancellation', bob, { at: 6, purchased: 0, expires: 30 }),
      billingEvent('renewal', bob, { at: 30.001, purchased: 30, expires: 60 }),
    ];
    // RevenueCat retries what was not answered 200 (a lock wait that ended in a deadlock is a 503).
    const deliverUntil200 = async (body: ReturnType<typeof billingEvent>) => {
      for (let attempt = 0; ; attempt++) {
        const response = await deliver(body);
        if (response.status === 200 || attempt === 5) return response.status;
      }
    };
    const view = async (user: string) => (await entitlementsOf(db, user, new Date(day(31)))).map(({ sources, ...rest }) => ({ ...rest, sources }));

    const [refAlice, refBob] = [`ref-a-${randomUUID()}`, `ref-b-${randomUUID()}`];
    for (const body of history(refAlice, refBob)) expect(await deliverUntil200(body)).toBe(200);
    const expected = { alice: await view(refAlice), bob: await view(refBob) };
    expect(expected.bob[0]).toMatchObject({ active: true, willRenew: true, expiresAt: isoDay(60) });

    for (let round = 0; round < 20; round++) {
      const [alice, bob] = [`par-a-${round}-${randomUUID()}`, `par-b-${round}-${randomUUID()}`];
      const statuses = await Promise.all(history(alice, bob).map(deliverUntil200));
      expect(statuses).toEqual(Array(6).fill(200));
      expect({ round, alice: await view(alice), bob: await view(bob) }).toEqual({ round, ...expected });
    }
  });
});
