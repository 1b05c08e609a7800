import { randomBytes } from 'node:crypto';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { toEntitlementViews, type EntitlementRow } from '../../lib/billing/entitlement-view.ts';
import { describeEventEffects } from '../../lib/billing/event-effects.ts';
import { describeChange, rebuildBilling } from '../../lib/billing/rebuild.ts';
import type { BillingWebhookBody } from '../../lib/billing/webhook-body.ts';
import { closeDatabase, replaceDatabase, type DatabaseAdapter } from '../../lib/db/index.ts';
import { runMigrations, type SqlSession } from '../../lib/db/migrate.ts';
import { openPglite } from '../../lib/db/pglite.ts';
import { openPostgres } from '../../lib/db/postgres.ts';
import { createDatabase } from '../../scripts/support/postgres-server.ts';
import { DATABASE_KINDS, type DatabaseKind } from '../support/databases.ts';
import { billingEvent, day, isoDay, LIFETIME, MONTHLY } from '../billing/support.ts';

/**
 * The upgrade to sources keyed by purchase: a database with every migration before it, real
 * histories recorded by the SQL of then (two purchases of one product, a subscription with
 * renewals and a checkpoint, a refund, an event that named no transaction), then the migration:
 * every customer keeps the same entitlements, rows and checkpoints move to their purchase's key,
 * later events (in order, and late ones that fold again from the checkpoint) land on the moved
 * rows, and `npm run billing:rebuild` reports what folding the stored history again splits.
 */
const MARKER = '-- Data, written by hand (a diff never carries it): the rows kept from before sources were';
const migrations = readdirSync('supabase/migrations').filter((file) => file.endsWith('.sql')).sort();
const MIGRATION = migrations.find((file) => readFileSync(path.join('supabase/migrations', file), 'utf8').includes(MARKER))!;
const NOW = new Date(day(1000));

interface Upgraded {
  adapter: DatabaseAdapter;
  session: SqlSession;
  sql<T = Record<string, unknown>>(text: string, values?: unknown[]): Promise<T[]>;
  migrate(): Promise<string[]>;
  close(): Promise<void>;
}

/** A database of `kind` with every migration before MIGRATION applied (`migrate` applies the rest). */
async function beforeUpgrade(kind: DatabaseKind): Promise<Upgraded> {
  const before = mkdtempSync(path.join(tmpdir(), 'migrations-before-'));
  for (const file of migrations.filter((file) => file < MIGRATION)) cpSync(path.join('supabase/migrations', file), path.join(before, file));
  if (kind === 'pglite') {
    const dir = path.join(mkdtempSync(path.join(tmpdir(), 'purchase-sources-')), 'db');
    const db = await openPglite(dir, { migrate: false });
    await runMigrations(db.session, { dir: before });
    return {
      adapter: db, session: db.session,
      sql: async (text, values) => (await db.session.query(text, values)).rows as never,
      migrate: () => runMigrations(db.session),
      close: async () => {
        await db.close();
        rmSync(path.dirname(dir), { recursive: true, force: true });
        rmSync(before, { recursive: true, force: true });
      },
    };
  }
  const name = `purchase_sources_${randomBytes(4).toString('hex')}`;
  await createDatabase(inject('postgresServerUrl'), name);
  const db = await openPostgres({ connectionString: inject('postgresServerUrl').replace(/\/postgres$/, `/${name}`), max: 4, migrate: false });
  const client = await db.pool.connect();
  const session: SqlSession = { query: async (text, values) => ({ rows: (await client.query(text, values)).rows }), exec: async (text) => void (await client.query(text)) };
  await runMigrations(session, { dir: before });
  return {
    adapter: db, session,
    sql: async (text, values) => (await client.query(text, values)).rows,
    migrate: () => runMigrations(session),
    close: async () => {
      client.release();
      await db.close();
      rmSync(before, { recursive: true, force: true });
    },
  };
}

describe.each(DATABASE_KINDS)('upgrading to sources keyed by purchase, on %s', (kind) => {
  let db: Upgraded;
  const suffix = randomBytes(4).toString('hex');
  const users = { twice: `twice-${suffix}`, renewing: `renewing-${suffix}`, refunded: `refunded-${suffix}`, unnamed: `unnamed-${suffix}` };
  const apple = (tx: string | null, otx: string | null, product = MONTHLY) => ({ store: 'APP_STORE', product_id: product, transaction_id: tx, original_transaction_id: otx });
  const record = async (body: BillingWebhookBody) => {
    const [{ result }] = await db.sql<{ result: { outcome: string } }>('select public.record_billing_event(p_body => $1, p_plan => $2, p_sync_after => $3) as result',
      [JSON.stringify(body), JSON.stringify(describeEventEffects(body.event, NOW)), 'none']);
    return result;
  };
  const views = async (user: string, now: number) =>
    toEntitlementViews((await db.adapter.call('account_entitlements', { p_user_id: user, p_now: new Date(day(now)) })) as EntitlementRow[]);
  const everyone = async (now: number) => Object.fromEntries(await Promise.all(Object.entries(users).map(async ([role, user]) => [role, await views(user, now)])));
  const rowsOf = (user: string) => db.sql<{ source_key: string; new_key: string; status: string; expires_at: Date | null }>(
    `select source_key, public.billing_source_key(environment, store, product_id, original_transaction_id, case when expires_at is null then transaction_id end) as new_key,
            status, expires_at from public.entitlements where app_user_id = $1 order by source_key`, [user]);

  beforeAll(async () => {
    db = await beforeUpgrade(kind);
    // The histories, recorded by the SQL before the upgrade.
    await record(billingEvent('non-renewing-purchase', users.twice, { at: 0, purchased: 0, expires: null }, apple('L-1', 'L-1', LIFETIME)));
    await record(billingEvent('non-renewing-purchase', users.twice, { at: 1, purchased: 1, expires: null }, apple('L-2', 'L-2', LIFETIME)));
    await record(billingEvent('initial-purchase', users.renewing, { at: 0, purchased: 0, expires: 30 }, apple('t0', '1000')));
    await record(billingEvent('renewal', users.renewing, { at: 30, purchased: 30, expires: 60 }, apple('t1', '1000')));
    // A checkpoint where the group stands (its rows copied as JSON, with their keys).
    await db.sql('select public.billing_checkpoint_here($1)', [users.renewing]);
    await record(billingEvent('renewal', users.renewing, { at: 60, purchased: 60, expires: 90 }, apple('t2', '1000')));
    await record(billingEvent('initial-purchase', users.refunded, { at: 0, purchased: 0, expires: 30 }, apple('r0', '2000')));
    await record(billingEvent('cancellation-customer-support', users.refunded, { at: 5, purchased: 0, expires: 5 }, { ...apple('r0', '2000'), price: -9.99 }));
    await record(billingEvent('initial-purchase', users.unnamed, { at: 0, purchased: 0, expires: 30 }, apple(null, null)));
  }, 120_000);
  afterAll(async () => {
    // (Its own connection released first: the pool then ends; the service's handle to it is let go after.)
    await db?.close();
    await closeDatabase();
  });

  it('keeps every grant, moves rows and checkpoints to their purchase\'s key, and later events land on them', async () => {
    const before = { at10: await everyone(10), at70: await everyone(70) };
    const oldKeys = await db.sql<{ app_user_id: string; source_key: string }>('select app_user_id, source_key from public.entitlements order by 1, 2');

    expect(await db.migrate()).toEqual(migrations.filter((file) => file >= MIGRATION));

    // The same entitlements, as every reader shows them.
    expect({ at10: await everyone(10), at70: await everyone(70) }).toEqual(before);
    // Each row is keyed by its purchase (the one that names none keeps its product's key).
    for (const user of [users.twice, users.renewing, users.refunded]) {
      for (const row of await rowsOf(user)) expect({ user, key: row.source_key }).toEqual({ user, key: row.new_key });
    }
    const unnamed = await rowsOf(users.unnamed);
    expect(unnamed.map((row) => row.source_key)).toEqual(oldKeys.filter((row) => row.app_user_id === users.unnamed).map((row) => row.source_key));
    expect(new Set((await db.sql<{ source_key: string }>('select source_key from public.entitlements')).map((row) => row.source_key)))
      .not.toEqual(new Set(oldKeys.map((row) => row.source_key)));
    // The checkpoint moved with them: it holds the purchase's key.
    const [checkpoint] = await db.sql<{ keys: string[] }>(
      `select array(select value->>'source_key' from jsonb_array_elements(base_rows)) as keys from public.billing_subscribers where app_user_id = $1`, [users.renewing]);
    expect(checkpoint!.keys).toEqual((await rowsOf(users.renewing)).map((row) => row.source_key));

    // billing:rebuild folds the stored history again: the row that stood for both one-time
    // purchases becomes two; the histories the upgrade keyed as a fold keys them change nothing.
    replaceDatabase(db.adapter);
    const report = await rebuildBilling({ apply: false, ignoreSandbox: false });
    const twice = report.changed.find((change) => change.ids.includes(users.twice));
    expect(twice?.before.map((row) => row.purchase)).toEqual(['L-2']);
    expect(twice?.after.map((row) => row.purchase).sort()).toEqual(['L-1', 'L-2']);
    expect(describeChange(twice!)).toEqual([`${users.twice} pro (${LIFETIME}, PRODUCTION, purchase L-1): no row -> active forever`]);
    expect(report.changed.filter((change) => !change.ids.includes(users.twice))).toEqual([]);

    // Later events: a renewal in order, a late cancellation (folded again from the checkpoint), a
    // refund of the first of two one-time purchases, and the purchase the unnamed row stood for.
    expect((await record(billingEvent('renewal', users.renewing, { at: 90, purchased: 90, expires: 120 }, apple('t3', '1000')))).outcome).toBe('applied');
    // (Older than the renewal: the group is folded again from its moved checkpoint.)
    await record(billingEvent('cancellation-unsubscribe', users.renewing, { at: 70, purchased: 60, expires: 90 }, apple('t2', '1000')));
    await record(billingEvent('cancellation-customer-support', users.twice, { at: 2, purchased: 0, expires: 2 }, { ...apple('L-1', 'L-1', LIFETIME), price: -79.99 }));
    await record(billingEvent('renewal', users.unnamed, { at: 30, purchased: 30, expires: 60 }, apple('u1', '3000')));

    const renewing = await rowsOf(users.renewing);
    expect(renewing).toHaveLength(1);
    expect((await views(users.renewing, 100))[0]).toMatchObject({ id: 'pro', active: true, expiresAt: isoDay(120) });
    // The lifetime purchase it kept (the latest it knew) still grants.
    expect((await views(users.twice, 3))[0]).toMatchObject({ id: 'pro', active: true, expiresAt: null });
    const claimed = await rowsOf(users.unnamed);
    expect(claimed).toHaveLength(1);
    expect(claimed[0]!.source_key).toBe(claimed[0]!.new_key);
    expect((await views(users.unnamed, 40))[0]).toMatchObject({ id: 'pro', active: true, expiresAt: isoDay(60) });
  });
});
