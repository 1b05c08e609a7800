import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { rebuildBilling } from '../../lib/billing/rebuild.ts';
import { DATABASE_KINDS, suiteDatabase } from '../support/databases.ts';
import { billingEvent, day, deliver, entitlementsOf } from './support.ts';

/**
 * Deleting a user (auth.users) erases what billing holds about them: entitlements and sync marks
 * go; their events stay only as dedupe keys (id and type) that take part in no fold, so neither a
 * RevenueCat retry, a late event of their group nor a rebuild brings anything back.
 */
describe.each(DATABASE_KINDS)('deleting a user, billing, on %s', (kind) => {
  const db = suiteDatabase(kind);

  it('deletes their entitlements, erases their events down to id and type, and nothing comes back', async () => {
    const [gone, stays] = [randomUUID(), randomUUID()];
    const purchase = billingEvent('initial-purchase', gone, { at: 0, purchased: 0, expires: 30 });
    for (const body of [purchase, billingEvent('initial-purchase', stays, { at: 0, purchased: 0, expires: 30 })]) expect((await deliver(body)).status).toBe(200);
    await db.sql(`insert into public.billing_sync_queue (app_user_id, reason) values ($1, 'test')`, [gone]);
    await db.sql('insert into auth.users (id, email) values ($1, $2)', [gone, 'gone@example.test']);

    await db.sql('delete from auth.users where id = $1', [gone]);

    expect(await entitlementsOf(db, gone, new Date(day(1)))).toEqual([]);
    expect(await db.sql('select app_user_id from public.billing_sync_queue where app_user_id = $1', [gone])).toEqual([]);
    const [event] = await db.sql<{ body: unknown; plan: unknown; app_user_id: string | null; subject_id: string | null }>(
      'select body, plan, app_user_id, subject_id from public.billing_events where event_id = $1', [purchase.event.id]);
    expect(event).toEqual({ body: { event: { id: purchase.event.id, type: 'INITIAL_PURCHASE' } }, plan: null, app_user_id: null, subject_id: null });
    expect(JSON.stringify(await db.sql('select body from public.billing_events where event_id = $1', [purchase.event.id]))).not.toContain('@example');

    // A retry of the erased event is still a duplicate; a rebuild finds nothing of theirs.
    expect((await deliver(purchase)).status).toBe(200);
    await rebuildBilling({ apply: true, ignoreSandbox: false });
    expect(await entitlementsOf(db, gone, new Date(day(1)))).toEqual([]);
    expect((await entitlementsOf(db, stays, new Date(day(1))))[0]).toMatchObject({ active: true });
  });

  it('also deletes the rows held for them under another id of their RevenueCat customer (legacy aliasing)', async () => {
    const [legacy, user] = [`legacy-${randomUUID()}`, randomUUID()];
    expect((await deliver(billingEvent('initial-purchase', legacy, { at: 0, purchased: 0, expires: 30 }))).status).toBe(200);
    // The app now signs in as the Supabase user; RevenueCat names the legacy id as the same customer.
    expect((await deliver(billingEvent('renewal', user, { at: 30.001, purchased: 30, expires: 60 }, { original_app_user_id: legacy, aliases: [legacy, user] }))).status).toBe(200);
    expect((await entitlementsOf(db, user, new Date(day(31))))[0]).toMatchObject({ active: true, expiresAt: new Date(day(60)).toISOString() });
    await db.sql('insert into auth.users (id, email) values ($1, $2)', [user, 'aliased@example.test']);

    await db.sql('delete from auth.users where id = $1', [user]);

    expect(await db.sql('select app_user_id from public.entitlements where app_user_id in ($1, $2)', [legacy, user])).toEqual([]);
    expect(await entitlementsOf(db, user, new Date(day(31)))).toEqual([]);
  });
});
