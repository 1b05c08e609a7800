import { randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
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

  it('an id merged into the erased user holds its own rows again: its later events grant it, never the erased user', async () => {
    const [erased, other] = [randomUUID(), randomUUID()];
    await db.sql('select public.outbound_set_endpoints($1::jsonb)', [JSON.stringify([{ id: 'erasure-receiver', types: null }])]);
    // Days of the flows' clock: the purchase grants now, so the outbox tells it.
    const today = Math.floor((Date.now() - day(0)) / 86_400_000);
    // One RevenueCat customer with two real ids (legacy aliasing); the event's app_user_id holds the rows.
    const both = { original_app_user_id: other, aliases: [erased, other] };
    expect((await deliver(billingEvent('initial-purchase', erased, { at: today - 5, purchased: today - 5, expires: today + 25 }, both))).status).toBe(200);
    expect(await db.sql('select customer_id from public.billing_subscribers where app_user_id = $1', [other])).toEqual([{ customer_id: erased }]);
    const toldOther = async () => (await db.sql<{ type: string; data: { reason?: string; entitlement: Record<string, unknown> } }>(
      'select type, data from public.outbound_events where user_id = $1 order by sequence', [other]));
    expect((await toldOther()).map((event) => event.type)).toEqual(['entitlement.granted']);
    await db.sql('select public.forget_user($1::uuid)', [erased]);

    // The other id saw the erased user's rows (one customer): they are gone from its list, told as such.
    expect((await toldOther()).at(-1)).toMatchObject({
      type: 'entitlement.revoked', data: { reason: 'removed', entitlement: { active: false, status: 'expired', will_renew: false } } });

    // RevenueCat renews the other id's subscription, naming only it: 200, and the other id's.
    const renewals = [1, 2].map((n) => billingEvent('renewal', other, { at: today + 25 * n - 24.9, purchased: today + 25 * n - 25, expires: today + 25 * n + 5 }, { transaction_id: `100${n}` }));
    for (const body of renewals) expect((await deliver(body)).status).toBe(200);
    expect(await db.sql('select app_user_id from public.entitlements where app_user_id in ($1, $2)', [erased, other])).toEqual([{ app_user_id: other }]);
    expect((await entitlementsOf(db, other, new Date(day(today + 30))))[0]).toMatchObject({ active: true, expiresAt: new Date(day(today + 55)).toISOString() });
    expect(await entitlementsOf(db, erased, new Date(day(today + 30)))).toEqual([]);
    // A rebuild (a fold from the group's checkpoints) does not point the other id back at the erased one.
    await rebuildBilling({ apply: true, ignoreSandbox: false });
    expect(await db.sql('select app_user_id from public.entitlements where app_user_id in ($1, $2)', [erased, other])).toEqual([{ app_user_id: other }]);
    // The erased user's outbound events end with customer.deleted (the grant before it still waits
    // for its delivery): nothing after it, in time or in number.
    expect(await db.sql('select type, sequence::int as sequence from public.outbound_events where user_id = $1 order by created_at, sequence', [erased]))
      .toEqual([{ type: 'entitlement.granted', sequence: 1 }, { type: 'customer.deleted', sequence: 2 }]);
    await db.sql(`select public.outbound_set_endpoints('[]'::jsonb)`);
  });

  it('the migration that brought this detaches the ids merged into users erased before it', async () => {
    const [erased, other] = [randomUUID(), randomUUID()];
    expect((await deliver(billingEvent('initial-purchase', erased, { at: 0, purchased: 0, expires: 30 }, { original_app_user_id: other, aliases: [erased, other] }))).status).toBe(200);
    await db.sql('select public.forget_user($1::uuid)', [erased]);
    // What the erasure of before left: the other id still pointing at the erased one, now and in its checkpoint.
    await db.sql('update public.billing_subscribers set customer_id = $1, base_customer = $1 where app_user_id = $2', [erased, other]);

    await db.sql(DETACH_ERASED_CUSTOMERS);

    expect(await db.sql('select customer_id, base_customer from public.billing_subscribers where app_user_id = $1', [other])).toEqual([{ customer_id: null, base_customer: null }]);
    expect((await deliver(billingEvent('renewal', other, { at: 30.001, purchased: 30, expires: 60 }, { transaction_id: '1001' }))).status).toBe(200);
    expect((await entitlementsOf(db, other, new Date(day(31))))[0]).toMatchObject({ active: true });
    expect(await entitlementsOf(db, erased, new Date(day(31)))).toEqual([]);
  });
});

/** The data part of the migration that made billing_forget_user detach merged ids, as written there. */
const DETACH_MARKER = '-- Data: ids merged into a user erased before this migration';
const DETACH_ERASED_CUSTOMERS = (() => {
  const dir = 'supabase/migrations';
  const text = readdirSync(dir).map((file) => readFileSync(path.join(dir, file), 'utf8')).find((sql) => sql.includes(DETACH_MARKER))!;
  const from = text.indexOf(DETACH_MARKER);
  const next = text.indexOf('\n\n--', from); // the statement ends where the next comment block begins
  return text.slice(from, next === -1 ? undefined : next);
})();
