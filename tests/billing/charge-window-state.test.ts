import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeRevenueCat, v1Entitlement as ent, v1Subscription as sub, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { DATABASE_KINDS, describeOn, suiteDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import {
  cancellation, day, DOC, deliveryOrdersOn, describeFlows, event, isoDay, MONTHLY, purchase, readerSettings, renewal, runFlowInOrders, snapshot, transfer, type Flow,
} from './support.ts';

/**
 * What the App Store's charge window keeps on the row, and a TRANSFER into an anonymous id that
 * other anonymous ids of the same customer were merged into: a refresh of RevenueCat's record
 * between a cancellation in the window and the RENEWAL Apple charges anyway, the log's retention
 * and a fold from a checkpoint, and the join. Reproduced from an outside review.
 */
type Role = 'alice';
const newUsers = (): Record<Role, string> => ({ alice: randomUUID() });

// ---- 1. A refresh of RevenueCat's record between the late cancellation and Apple's charge
const flows: Flow<Role>[] = [
  {
    name: 'App Store cancelled 12 h before the end, the user refreshes (RevenueCat shows it cancelled), then the RENEWAL Apple charges anyway: not renewing',
    doc: '"Your account will be charged for renewal within 24 hours prior to the end of the current period" (the App Store\'s terms): a refresh that shows the cancellation changes nothing of it',
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      cancellation(u.alice, 'UNSUBSCRIBE', 29.5, 0, 30),
      snapshot('alice', 29.6, {
        subscriptions: { [MONTHLY]: sub({ purchased: day(0), expires: day(30), unsubscribed: day(29.5), transactionId: '1000' }) },
        entitlements: { pro: ent(MONTHLY, { purchased: day(0), expires: day(30) }) },
      }),
      renewal(u.alice, 30, 30, 60),
    ],
    expected: [{ now: 31, state: { alice: { pro: { active: true, expiresAt: isoDay(60), willRenew: false } } } }],
  },
  {
    name: 'App Store cancelled 12 h before the end, the charge seen only through a refresh (the next period), then a later RENEWAL: renewing again',
    doc: 'a later charge than the one Apple made anyway: renewal was turned back on (its UNCANCELLATION lost)',
    items: (u) => [
      purchase(u.alice, 0, 0, 30),
      cancellation(u.alice, 'UNSUBSCRIBE', 29.5, 0, 30),
      snapshot('alice', 31, {
        subscriptions: { [MONTHLY]: sub({ purchased: day(30), expires: day(60), unsubscribed: day(29.5), transactionId: '2000' }) },
        entitlements: { pro: ent(MONTHLY, { purchased: day(30), expires: day(60) }) },
      }),
      renewal(u.alice, 60, 60, 90),
    ],
    expected: [{ now: 61, state: { alice: { pro: { active: true, expiresAt: isoDay(90), willRenew: true } } } }],
  },
  {
    name: 'the same without the refresh: not renewing',
    doc: 'the same terms',
    items: (u) => [purchase(u.alice, 0, 0, 30), cancellation(u.alice, 'UNSUBSCRIBE', 29.5, 0, 30), renewal(u.alice, 30, 30, 60)],
    expected: [{ now: 31, state: { alice: { pro: { active: true, expiresAt: isoDay(60), willRenew: false } } } }],
  },
];

let revenuecat: FakeRevenueCat;
beforeAll(async () => {
  revenuecat = await startFakeRevenueCat();
});
afterAll(async () => {
  await revenuecat.close();
});

describe.each(DATABASE_KINDS)('a cancellation in the App Store\'s charge window, with a refresh of RevenueCat\'s record between, on %s', (kind) => {
  const db = suiteDatabase(kind);
  let restoreEnv: () => void;
  beforeAll(() => {
    restoreEnv = setEnv(readerSettings(revenuecat, 'v1'));
  });
  afterAll(() => {
    restoreEnv();
    revenuecat.setClock(undefined);
  });
  for (const flow of flows) {
    it(flow.name, () => runFlowInOrders(db, flow, newUsers, (n) => [Array.from({ length: n }, (_, i) => i)], revenuecat), 240_000);
  }
});

// ---- 3. A TRANSFER's receiving anonymous id that RevenueCat aliased with another anonymous id of the same customer
type Role3 = 'alice' | 'bob' | 'anonA' | 'anonB';
const anonId = () => `$RCAnonymousID:${randomBytes(16).toString('hex')}`;
const newUsers3 = (): Record<Role3, string> => ({ alice: randomUUID(), bob: randomUUID(), anonA: anonId(), anonB: anonId() });
const customer = (original: string, ...aliases: string[]) => ({ original_app_user_id: original, aliases: [original, ...aliases] });
const BASIC = 'com.example.basic.monthly';
const transferFlows: Flow<Role3>[] = [
  {
    name: 'anonA bought basic; an UNCANCELLATION names anonB with alias anonA (one customer, no other user); TRANSFER alice -> [anonB, bob]: bob has basic',
    doc: `transferred_to: "App User ID(s) that are receiving the transactions and entitlements" (${DOC.types}); the ids one event names as aliases are one customer`,
    items: (u) => [
      purchase(u.anonA, 0, 0, 30, { store: 'APP_STORE', product_id: BASIC, transaction_id: 'N1', original_transaction_id: 'N1', entitlement_ids: ['basic'], ...customer(u.anonA) }),
      event('uncancellation', u.anonB, 0.5, 0, 30, { store: 'APP_STORE', product_id: BASIC, transaction_id: 'N1', original_transaction_id: 'N1', entitlement_ids: ['basic'], app_user_id: u.anonB, ...customer(u.anonB, u.anonA) }),
      purchase(u.alice, 1, 1, 366, { store: 'APP_STORE', product_id: 'com.example.pro.yearly', transaction_id: 'Y1', original_transaction_id: 'Y1', entitlement_ids: ['pro'], ...customer(u.alice) }),
      transfer([u.alice], [u.anonB, u.bob], 5),
    ],
    expected: [{ now: 6, state: {
      alice: { pro: { active: false } },
      bob: { pro: { active: true, expiresAt: isoDay(366) }, basic: { active: true, expiresAt: isoDay(30) } },
    } }],
  },
];
describeFlows('a TRANSFER joins a receiving anonymous id with the anonymous ids merged into it', transferFlows, newUsers3, (n, kind) => deliveryOrdersOn(kind, n, { everyOrderOn: 'postgres', sample: 6, seed: 1414 }));

// ---- 4. The charge window read from the log, across a checkpoint whose cancellation's month retention dropped
describeOn('postgres')('a cancellation in the charge window, after retention dropped its month, on postgres', () => {
  const db = suiteDatabase('postgres');
  let restoreEnv: () => void;
  beforeAll(() => {
    restoreEnv = setEnv({ LOCAL_DEV: '1', BILLING_SYNC_AFTER: 'none', REVENUECAT_SECRET_API_KEY: undefined });
  });
  afterAll(() => restoreEnv());

  it('a checkpoint taken before the column was (its rows without it), the cancellation still in the log: a fold from it keeps the RENEWAL not renewing', async () => {
    const { deliver } = await import('./support.ts');
    const alice = randomUUID();
    for (const body of [purchase(alice, 0, 0, 30), cancellation(alice, 'UNSUBSCRIBE', 29.5, 0, 30)]) expect((await deliver(body)).status).toBe(200);
    const [{ group_id: group }] = await db.sql<{ group_id: string }>('select group_id from public.billing_subscribers where app_user_id = $1', [alice]);
    await db.sql('select public.billing_checkpoint_before($1, $2::timestamptz)', [group, new Date(day(29.9)).toISOString()]);
    // As before the column: none in the checkpoint's copy of the rows.
    await db.sql(`update public.billing_subscribers set base_rows = (select jsonb_agg(r - 'cancelled_in_charge_window_at') from jsonb_array_elements(base_rows) r)
                  where group_id = $1 and base_rows is not null and jsonb_array_length(base_rows) > 0`, [group]);
    expect((await deliver(renewal(alice, 30, 30, 60))).status).toBe(200);
    const willRenew = async () => (await db.sql<{ will_renew: boolean }>('select will_renew from public.entitlements where app_user_id = $1', [alice]))[0]!.will_renew;
    expect(await willRenew()).toBe(false);
    // A later fold of the group from its checkpoint (a late event, billing:rebuild).
    await db.sql(`select public.billing_refold_group($1, '')`, [group]);
    expect(await willRenew()).toBe(false);
  });

  it('a checkpoint between a late cancellation and its RENEWAL, the cancellation\'s event dropped (as retention does), a refold of the group: still not renewing', async () => {
    const { deliver } = await import('./support.ts');
    const alice = randomUUID();
    const cancel = cancellation(alice, 'UNSUBSCRIBE', 29.5, 0, 30);
    for (const body of [purchase(alice, 0, 0, 30), cancel, renewal(alice, 30, 30, 60)]) expect((await deliver(body)).status).toBe(200);
    const willRenew = async () => (await db.sql<{ will_renew: boolean }>('select will_renew from public.entitlements where app_user_id = $1', [alice]))[0]!.will_renew;
    expect(await willRenew()).toBe(false);
    const [{ group_id: group }] = await db.sql<{ group_id: string }>('select group_id from public.billing_subscribers where app_user_id = $1', [alice]);
    // Retention checkpoints the group at its last event received before the cutoff (the cancellation), then drops that month.
    await db.sql('select public.billing_checkpoint_before($1, $2::timestamptz)', [group, new Date(day(29.9)).toISOString()]);
    expect(await willRenew()).toBe(false);
    await db.sql('delete from public.billing_events where event_id = $1', [cancel.event.id]);
    // A later fold of the group from its checkpoint (a late event, billing:rebuild).
    await db.sql(`select public.billing_refold_group($1, '')`, [group]);
    expect(await willRenew()).toBe(false);
  });
});
