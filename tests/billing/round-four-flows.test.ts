import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeRevenueCat, v1Entitlement as ent, v1Subscription as sub, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { DATABASE_KINDS, suiteDatabase, type DatabaseKind, type TestDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import {
  apple, cancellation, deliverFlowItem, deliveryOrdersOn, DOC, expectEntitlementState, isoDay, isSnapshotItem, MONTHLY, purchase, READER_NAMES, READERS,
  readerSettings, refund, renewal, snapshot, transfer, day, type ExpectedState, type FlowItem,
} from './support.ts';

/**
 * Billing flows of the third outside audit that are about where an event's effect lands: a purchase
 * whose product the dashboard moved to another entitlement, and a TRANSFER that names an anonymous
 * id RevenueCat had already merged into a signed-in customer. Each runs through the real route and
 * SQL, on both engines, in every delivery order on Postgres (in order and reversed on PGlite); a flow with syncs (the user's refresh) runs once per
 * record a sync may read (REST v1, v2 alone, v1 + v2), as the model flows do, to the same end state.
 */
type Role = 'alice' | 'bob' | 'anon';
type Users = Record<Role, string>;
interface Flow {
  name: string;
  doc: string;
  items: (u: Users) => FlowItem[];
  expected: ExpectedState[];
}
const newUsers = (): Users => ({ alice: randomUUID(), bob: randomUUID(), anon: `$RCAnonymousID:${randomBytes(16).toString('hex')}` });
const customer = (original: string, ...aliases: string[]) => ({ original_app_user_id: original, aliases: [original, ...aliases] });

const flows: Flow[] = [
  {
    name: 'R4-moved: a refund naming the product\'s new entitlement also ends what the purchase granted under the old one',
    doc: `"If you change the products attached to an entitlement, existing purchases are affected" and entitlement_ids: "Entitlement identifiers of the product" at the time of the event (${DOC.types}); "Granting a refund will immediately expire the subscription and remove any entitlement access." (${DOC.refunds})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { entitlement_ids: ['pro'] }),
      refund(u.alice, 10, 0, 10, { entitlement_ids: ['premium'] }),
    ],
    expected: [{ now: 11, state: { alice: { pro: { active: false, status: 'refunded' } } } }],
  },
  {
    name: 'R4-moved: a cancellation naming the new entitlement flags the old one\'s row of the same purchase',
    doc: `CANCELLATION: "A subscription or non-renewing purchase has been cancelled." (${DOC.types}); "When a customer cancels their subscription, a CANCELLATION webhook is sent." (${DOC.flows})`,
    items: (u) => [
      purchase(u.alice, 0, 0, 30, { entitlement_ids: ['pro'] }),
      cancellation(u.alice, 'UNSUBSCRIBE', 10, 0, 30, { entitlement_ids: ['premium'] }),
    ],
    expected: [{ now: 11, state: { alice: { pro: { active: true, willRenew: false, expiresAt: isoDay(30) } } } }],
  },
  {
    name: 'R4-transfer: a TRANSFER from an anonymous id RevenueCat merged into a signed-in customer moves that customer\'s purchase',
    doc: `"you'll receive a TRANSFER event and the entitlements will be removed from user 1 and added to user 2." (${DOC.flows}); aliases: "All app user ids ever used by the subscriber." (${DOC.types}); transferred_from may name an anonymous id (https://www.revenuecat.com/docs/customers/identifying-customers)`,
    items: (u) => [
      purchase(u.anon, 0, 0, 30, customer(u.anon)),
      renewal(u.alice, 1, 0, 30, { ...apple('1000'), ...customer(u.anon, u.alice) }),
      transfer([u.anon], [u.bob], 5),
    ],
    expected: [{ now: 6, state: { alice: { pro: { active: false } }, bob: { pro: { active: true, expiresAt: isoDay(30) } } } }],
  },
  {
    name: 'R4-transfer: after the syncs the transfer asks for, the source still keeps nothing',
    doc: `"the entitlements will be removed from user 1 and added to user 2" (${DOC.flows}); the v1 record of the source shows no subscription afterwards (${DOC.v1})`,
    items: (u) => [
      purchase(u.anon, 0, 0, 30, customer(u.anon)),
      renewal(u.alice, 1, 0, 30, { ...apple('1000'), ...customer(u.anon, u.alice) }),
      transfer([u.anon], [u.bob], 5),
      snapshot('alice', 6, { subscriptions: {}, entitlements: {} }),
      snapshot('bob', 6, {
        subscriptions: { [MONTHLY]: sub({ purchased: day(0), expires: day(30) }) },
        entitlements: { pro: ent(MONTHLY, { purchased: day(0), expires: day(30) }) },
      }),
    ],
    expected: [{ now: 7, state: { alice: { pro: { active: false } }, bob: { pro: { active: true, expiresAt: isoDay(30) } } } }],
  },
];

/** Every order (or a sample) on Postgres; in order and reversed on PGlite (deliveryOrdersOn). */
const orders = (n: number, kind: DatabaseKind) => deliveryOrdersOn(kind, n, { everyOrderOn: 'postgres', sample: 6, seed: 4004 });

async function runFlow(db: TestDatabase, flow: Flow, revenuecat: FakeRevenueCat): Promise<void> {
  const count = flow.items(newUsers()).length;
  for (const order of orders(count, db.kind)) {
    const users = newUsers();
    const items = flow.items(users);
    for (const index of order) await deliverFlowItem(items[index]!, users, revenuecat);
    for (const state of flow.expected) await expectEntitlementState(db, users, state, `${flow.name.slice(0, 12)} order ${order.join(',')}, day ${state.now}`);
  }
}

let revenuecat: FakeRevenueCat;
beforeAll(async () => {
  revenuecat = await startFakeRevenueCat();
});
afterAll(async () => {
  await revenuecat.close();
});

describe.each(DATABASE_KINDS)('billing round four: where an effect lands, in every delivery order, on %s', (kind) => {
  const db = suiteDatabase(kind);
  afterAll(() => revenuecat.setClock(undefined));

  for (const reader of READERS) {
    describe(reader === 'v1' ? 'webhooks, and syncs reading REST v1' : `syncs reading ${READER_NAMES[reader]}`, () => {
      let restoreEnv: () => void;
      beforeAll(() => {
        restoreEnv = setEnv(readerSettings(revenuecat, reader));
      });
      afterAll(() => restoreEnv());

      for (const flow of flows) {
        // A flow without a sync reads no record: it runs once.
        const syncs = flow.items(newUsers()).some(isSnapshotItem);
        if (reader !== 'v1' && !syncs) continue;
        it(flow.name, async () => {
          const [v1Before, v2Before] = [revenuecat.requests.length, revenuecat.v2Requests.length];
          await runFlow(db, flow, revenuecat);
          // The syncs read the configured record(s), and only those.
          if (syncs) expect({ v1: revenuecat.requests.length > v1Before, v2: revenuecat.v2Requests.length > v2Before }).toEqual({ v1: reader !== 'v2', v2: reader !== 'v1' });
        }, 240_000);
      }
    });
  }
});
