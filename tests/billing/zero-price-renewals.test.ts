import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeRevenueCat, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { DATABASE_KINDS, suiteDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { cancellation, deliverFlowItem, event, expiration, flowSettings, purchase, renewal, type FlowItem } from './support.ts';

/**
 * A Stripe RENEWAL at price 0 grants on a row a product change ended (entitlements.replaced_at)
 * and on no other expired row (an unpaid invoice: "RevenueCat will revoke access but continues
 * generating RENEWAL events with a zero price while the invoice remains open", How grace periods
 * work). The flows in every delivery order are in round-four-events.test.ts (R08-R23); here, what
 * the mark is made of and what a row carried over from before the column does.
 */
type Users = Record<'alice' | 'bob' | 'anon', string>;
const newUsers = (): Users => ({ alice: randomUUID(), bob: randomUUID(), anon: `$RCAnonymousID:${randomBytes(16).toString('hex')}` });
const stripe = (tx: string, product = 'prod_PRO') => ({ store: 'STRIPE', product_id: product, transaction_id: tx, original_transaction_id: 'sub_1' });

describe.each(DATABASE_KINDS)('zero-price Stripe renewals on %s', (kind) => {
  const db = suiteDatabase(kind);
  let revenuecat: FakeRevenueCat;
  let restoreEnv: () => void;
  beforeAll(async () => {
    revenuecat = await startFakeRevenueCat();
    restoreEnv = setEnv(flowSettings(revenuecat));
  });
  afterAll(async () => {
    restoreEnv();
    await revenuecat.close();
  });
  const deliver = async (users: Users, items: FlowItem[]) => {
    for (const item of items) await deliverFlowItem(item, users, revenuecat);
  };
  const rowsOf = (user: string) => db.sql<{ product_id: string; status: string; replaced: boolean }>(
    'select product_id, status, replaced_at is not null as replaced from public.entitlements where app_user_id = $1 order by product_id', [user]);

  it('marks the row a product change ended, and no row an EXPIRATION ended', async () => {
    const changed = newUsers();
    await deliver(changed, [
      purchase(changed.alice, 0, 0, 30, stripe('in_1', 'prod_basic')),
      event('product-change', changed.alice, 10, 0, 30, { ...stripe('in_1', 'prod_basic'), new_product_id: 'prod_premium' }),
      renewal(changed.alice, 10.0001, 0, 30, { ...stripe('in_2', 'prod_premium'), price: 4.5 }),
    ]);
    expect(await rowsOf(changed.alice)).toEqual([
      { product_id: 'prod_basic', status: 'expired', replaced: true },
      { product_id: 'prod_premium', status: 'active', replaced: false },
    ]);
    // Changed back at once: the row grants again, and is no longer marked.
    await deliver(changed, [renewal(changed.alice, 15.0001, 0, 30, { ...stripe('in_3', 'prod_basic'), price: 0 })]);
    expect(await rowsOf(changed.alice)).toEqual([
      { product_id: 'prod_basic', status: 'active', replaced: false },
      { product_id: 'prod_premium', status: 'expired', replaced: true },
    ]);

    const unpaid = newUsers();
    await deliver(unpaid, [purchase(unpaid.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), expiration(unpaid.alice, 'BILLING_ERROR', 37.001, 0, 37, stripe('in_1'))]);
    expect(await rowsOf(unpaid.alice)).toEqual([{ product_id: 'prod_PRO', status: 'expired', replaced: false }]);
  }, 60_000);

  it('refuses the open invoice\'s zero-price RENEWAL on a row from a checkpoint taken before the mark existed, also when an older event folds the group again', async () => {
    const users = newUsers();
    await deliver(users, [purchase(users.alice, 0, 0, 30, { ...stripe('in_1'), price: 9.99 }), expiration(users.alice, 'BILLING_ERROR', 37.001, 0, 37, stripe('in_1'))]);
    const [{ group }] = await db.sql<{ group: string }>('select group_id as "group" from public.billing_subscribers where app_user_id = $1', [users.alice]);
    // A checkpoint as one written before the column: its rows without the key.
    await db.sql('select public.billing_take_checkpoint(array[$1], (select folded_key from public.billing_subscribers where app_user_id = $2))', [users.alice, group]);
    await db.sql(`update public.billing_subscribers set base_rows = (select jsonb_agg(r - 'replaced_at') from jsonb_array_elements(base_rows) r) where app_user_id = $1`, [users.alice]);
    const statuses = [(await rowsOf(users.alice))[0]!.status];
    await deliver(users, [renewal(users.alice, 40, 30, 60, { ...stripe('in_2'), price: 0 })]);
    statuses.push((await rowsOf(users.alice))[0]!.status);
    // A retried event older than the renewal: the group is folded again from that checkpoint.
    await deliver(users, [cancellation(users.alice, 'BILLING_ERROR', 38, 0, 37, stripe('in_1'))]);
    statuses.push((await rowsOf(users.alice))[0]!.status);
    expect(statuses).toEqual(['expired', 'expired', 'expired']);
  }, 60_000);
});
