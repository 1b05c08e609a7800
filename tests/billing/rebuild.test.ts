import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { describeChange, rebuildBilling } from '../../lib/billing/rebuild.ts';
import { DATABASE_KINDS, describeOn, suiteDatabase, type TestDatabase } from '../support/databases.ts';
import { billingEvent, day, deliver, entitlementsOf, isoDay } from './support.ts';

/**
 * npm run billing:rebuild: every customer's entitlements folded again from the stored log with the
 * current decision code. A clean state shows no difference; a damaged one is shown by a dry run
 * (which writes nothing) and repaired by --apply.
 */
async function history(db: TestDatabase) {
  const [alice, bob, anon] = [`alice-${randomUUID()}`, `bob-${randomUUID()}`, `$RCAnonymousID:${randomUUID().replace(/-/g, '')}`];
  for (const body of [
    billingEvent('initial-purchase', anon, { at: 0, purchased: 0, expires: 30 }, { aliases: [anon], original_app_user_id: anon }),
    billingEvent('renewal', alice, { at: 30.001, purchased: 30, expires: 60 }, { aliases: [anon, alice], original_app_user_id: anon }),
    billingEvent('cancellation-unsubscribe', alice, { at: 40, purchased: 30, expires: 60 }),
    billingEvent('initial-purchase', bob, { at: 1, purchased: 1, expires: 31 }),
  ]) expect((await deliver(body)).status).toBe(200);
  expect((await entitlementsOf(db, alice, new Date(day(41))))[0]).toMatchObject({ status: 'cancelled_active', expiresAt: isoDay(60) });
  return { alice, bob, anon };
}

describe.each(DATABASE_KINDS)('billing rebuild on %s', (kind) => {
  const db = suiteDatabase(kind);

  it('finds nothing to change in a clean state, repairs a damaged one, and a dry run writes nothing', async () => {
    const { alice, bob } = await history(db);
    expect((await rebuildBilling({ apply: false, ignoreSandbox: false })).changed.filter((c) => c.ids.includes(alice) || c.ids.includes(bob))).toEqual([]);

    // Damage alice's row as a bug would have left it.
    await db.sql(`update public.entitlements set status = 'expired', expires_at = $2 where app_user_id = $1`, [alice, isoDay(35)]);
    const stored = await db.sql('select * from public.entitlements where app_user_id = $1', [alice]);
    const dryRun = await rebuildBilling({ apply: false, ignoreSandbox: false });
    const change = dryRun.changed.find((c) => c.ids.includes(alice))!;
    expect(describeChange(change)).toEqual([`${alice} pro (com.example.pro.monthly, PRODUCTION): expired until ${isoDay(35).replace('.000Z', '+00:00')} -> cancelled_active until ${isoDay(60).replace('.000Z', '+00:00')}`]);
    expect(dryRun.changed.some((c) => c.ids.includes(bob))).toBe(false);
    expect(await db.sql('select * from public.entitlements where app_user_id = $1', [alice])).toEqual(stored);

    const applied = await rebuildBilling({ apply: true, ignoreSandbox: false });
    expect(applied.changed.some((c) => c.ids.includes(alice))).toBe(true);
    expect((await entitlementsOf(db, alice, new Date(day(41))))[0]).toMatchObject({ status: 'cancelled_active', active: true, expiresAt: isoDay(60) });
    expect((await rebuildBilling({ apply: false, ignoreSandbox: false })).changed.filter((c) => c.ids.includes(alice))).toEqual([]);
  });

  it('computes the plans of events recorded before plans were stored (an upgraded database)', async () => {
    const { alice } = await history(db);
    await db.sql(`update public.billing_events set plan = null, sort_rank = null where subject_id = $1 or app_user_id = $1`, [alice]);
    await db.sql(`update public.entitlements set status = 'active', will_renew = true where app_user_id = $1`, [alice]);
    await rebuildBilling({ apply: true, ignoreSandbox: false });
    expect(await db.sql<{ n: number }>(`select count(*)::int as n from public.billing_events where (subject_id = $1 or app_user_id = $1) and plan is null`, [alice])).toEqual([{ n: 0 }]);
    expect((await entitlementsOf(db, alice, new Date(day(41))))[0]).toMatchObject({ status: 'cancelled_active', willRenew: false });
  });
});

describeOn('postgres')('npm run billing:rebuild, as an operator runs it', () => {
  const db = suiteDatabase('postgres');

  it('prints what would change, writes it with --apply, and refuses an unknown argument', async () => {
    const { alice } = await history(db);
    await db.sql(`update public.entitlements set status = 'refunded' where app_user_id = $1`, [alice]);
    const env = { ...process.env, DATABASE_URL: db.url!, LOCAL_DEV: '1', LOG_LEVEL: 'silent', SUPABASE_URL: '', VERCEL: '' };
    const run = (args: string[]) => promisify(execFile)(process.execPath, ['scripts/billing-rebuild.ts', ...args], { env, timeout: 60_000 });

    const dry = await run([]);
    expect(dry.stdout).toMatch(/customers; [1-9]\d* would change/);
    expect(dry.stdout).toContain(`${alice} pro (com.example.pro.monthly, PRODUCTION): refunded until`);
    expect(dry.stdout).toContain('Nothing was written.');
    expect((await entitlementsOf(db, alice, new Date(day(41))))[0]).toMatchObject({ status: 'refunded' });

    expect((await run(['--apply'])).stdout).toMatch(/[1-9]\d* changed/);
    expect((await entitlementsOf(db, alice, new Date(day(41))))[0]).toMatchObject({ status: 'cancelled_active' });
    await expect(run(['--aply'])).rejects.toMatchObject({ code: 2, stderr: expect.stringContaining("Unknown option '--aply'") });
  });
});
