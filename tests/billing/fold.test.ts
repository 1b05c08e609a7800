import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { describeEventEffects } from '../../lib/billing/event-effects.ts';
import { dbCallCount } from '../../lib/db/index.ts';
import { DATABASE_KINDS, suiteDatabase } from '../support/databases.ts';
import { billingEvent, day, deliver, entitlementsOf, eventRow, isoDay } from './support.ts';

/**
 * The machinery under the fold: one database call per delivery whatever the order, subscriber
 * groups joined by aliases and transfers, and events recorded before plans were stored (an
 * upgraded database) folded after their plans are computed.
 */
describe.each(DATABASE_KINDS)('the event fold on %s', (kind) => {
  const db = suiteDatabase(kind);

  it('makes one database call per delivery, in order and out of order', async () => {
    const user = `calls-${randomUUID()}`;
    for (const body of [
      billingEvent('initial-purchase', user, { at: 0, purchased: 0, expires: 30 }),
      billingEvent('renewal', user, { at: 30.001, purchased: 30, expires: 60 }),
      billingEvent('cancellation-unsubscribe', user, { at: 20, purchased: 0, expires: 30 }),
    ]) {
      const before = dbCallCount();
      expect((await deliver(body)).status).toBe(200);
      expect(dbCallCount() - before).toBe(1);
    }
  });

  it('keeps one group per customer, joined by the ids an event names and by a TRANSFER', async () => {
    const [anon, alice, bob, carol] = [`$RCAnonymousID:${randomUUID()}`, `alice-${randomUUID()}`, `bob-${randomUUID()}`, `carol-${randomUUID()}`];
    await deliver(billingEvent('initial-purchase', anon, { at: 0, purchased: 0, expires: 30 }, { aliases: [anon], original_app_user_id: anon }));
    await deliver(billingEvent('initial-purchase', carol, { at: 0, purchased: 0, expires: 30 }));
    await deliver(billingEvent('renewal', alice, { at: 30.001, purchased: 30, expires: 60 }, { aliases: [anon, alice], original_app_user_id: anon }));
    await deliver(billingEvent('transfer', bob, { at: 40 }, { app_user_id: undefined, aliases: undefined, original_app_user_id: undefined, transferred_from: [alice], transferred_to: [bob] }));
    const groups = await db.sql<{ app_user_id: string; group_id: string }>(
      'select app_user_id, group_id from public.billing_subscribers where app_user_id = any($1)', [[anon, alice, bob, carol]]);
    const groupOf = Object.fromEntries(groups.map((row) => [row.app_user_id, row.group_id]));
    expect(new Set([groupOf[anon], groupOf[alice], groupOf[bob]]).size).toBe(1);
    expect(groupOf[carol]).not.toBe(groupOf[alice]);
    // The group's watermark is its newest event.
    const [watermark] = await db.sql<{ folded_key: string }>('select folded_key from public.billing_subscribers where app_user_id = $1', [groupOf[alice]]);
    expect(watermark!.folded_key.startsWith(isoDay(40).slice(0, 19))).toBe(true);
    expect((await entitlementsOf(db, bob, new Date(day(41))))[0]).toMatchObject({ active: true, expiresAt: isoDay(60) });
  });

  it('folds events recorded before plans were stored, after computing their plans (an upgraded database)', async () => {
    const user = `upgraded-${randomUUID()}`;
    const purchase = billingEvent('initial-purchase', user, { at: 0, purchased: 0, expires: 30 });
    const renewal = billingEvent('renewal', user, { at: 30.001, purchased: 30, expires: 60 });
    for (const body of [purchase, renewal]) expect((await deliver(body)).status).toBe(200);
    // As the previous version left them: no plan, no rank, the row as it computed it.
    await db.sql(`update public.billing_events set plan = null, sort_rank = null where event_id = any($1)`, [[purchase.event.id, renewal.event.id]]);
    await db.sql(`delete from public.billing_subscribers where app_user_id = $1`, [user]);
    // And what 20261126000500_flat_cost_at_scale.sql records of such a database: until when events
    // were recorded that way (a new id's history is looked for up to then).
    await db.sql(`update public.billing_legacy_horizon set received_before = now()`);

    // A late cancellation of the first period: the history is folded again, with plans computed (the
    // renewal into the next period turns renewal on again, so the group ends as it was: stale).
    const late = billingEvent('cancellation-unsubscribe', user, { at: 20, purchased: 0, expires: 30 });
    const lateResponse = await deliver(late);
    expect(lateResponse.body).toEqual({ received: true });
    expect(await eventRow(db, late.event.id)).toMatchObject({ outcome: 'stale' });
    const plans = await db.sql<{ event_id: string; plan: unknown; sort_rank: number }>(
      'select event_id, plan, sort_rank from public.billing_events where event_id = any($1) order by event_at', [[purchase.event.id, renewal.event.id]]);
    expect(plans).toEqual([
      { event_id: purchase.event.id, plan: JSON.parse(JSON.stringify(describeEventEffects(purchase.event, new Date(day(0))))), sort_rank: 0 },
      { event_id: renewal.event.id, plan: JSON.parse(JSON.stringify(describeEventEffects(renewal.event, new Date(day(30.001))))), sort_rank: 0 },
    ]);
    expect((await entitlementsOf(db, user, new Date(day(31))))[0]).toMatchObject({ status: 'active', willRenew: true, expiresAt: isoDay(60) });
  });
});
