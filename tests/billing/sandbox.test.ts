import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { rebuildBilling } from '../../lib/billing/rebuild.ts';
import { syncSubscriber } from '../../lib/billing/sync.ts';
import { getConfig } from '../../lib/config.ts';
import { DATABASE_KINDS, suiteDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { startFakeRevenueCat, v1Entitlement, v1Subscription, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { billingEvent, day, deliver, entitlementsOf, eventRow, WEBHOOK_AUTHORIZATION } from './support.ts';

/**
 * Sandbox purchases (TestFlight, StoreKit testing, Google test cards) cost nothing. A deployment
 * (anything but local mode) records them and grants nothing, unless BILLING_SANDBOX_GRANTS=true;
 * in local mode they grant (a developer testing purchases), unless BILLING_SANDBOX_GRANTS=false.
 * One rule, resolved once by the configuration, for the three ways a purchase reaches the
 * entitlements: a webhook event, a snapshot of RevenueCat's REST API, and the rebuild, which
 * therefore gives what live delivery gave. Through the real route, sync and rebuild, on both engines.
 */
const SECRET = randomBytes(24).toString('hex');
/** A complete deployment that is not local mode (its DATABASE_URL is never dialled: the test database stands in). */
const DEPLOYED = {
  DATABASE_URL: 'postgres://app:unused@127.0.0.1:9/app',
  SUPABASE_JWT_SECRET: 'x'.repeat(40),
  SUBSCRIPTION_WEBHOOK_SECRET: SECRET,
  LEAGUES_WEBHOOK_SECRET: randomBytes(24).toString('hex'),
  APP_ORIGIN: 'https://app.example.com',
  LOCAL_DEV: undefined,
};
// RevenueCat's key (set for every case) is a real secret: local mode is asked for.
const LOCAL = { ...Object.fromEntries(Object.keys(DEPLOYED).map((name) => [name, undefined])), LOCAL_DEV: '1' };

const SETTINGS: { name: string; env: Record<string, string | undefined>; grants: boolean }[] = [
  { name: 'deployed, by default', env: { ...DEPLOYED, BILLING_SANDBOX_GRANTS: undefined }, grants: false },
  { name: 'deployed, BILLING_SANDBOX_GRANTS=true', env: { ...DEPLOYED, BILLING_SANDBOX_GRANTS: 'true' }, grants: true },
  { name: 'local mode, by default', env: { ...LOCAL, BILLING_SANDBOX_GRANTS: undefined }, grants: true },
  { name: 'local mode, BILLING_SANDBOX_GRANTS=false', env: { ...LOCAL, BILLING_SANDBOX_GRANTS: 'false' }, grants: false },
];

const MONTHLY = 'com.example.pro.monthly';
const YEARLY = 'com.example.pro.yearly';

let revenuecat: FakeRevenueCat;
let restoreRevenueCat: () => void;
beforeAll(async () => {
  revenuecat = await startFakeRevenueCat();
  restoreRevenueCat = setEnv({
    REVENUECAT_SECRET_API_KEY: revenuecat.apiKey,
    REVENUECAT_API_URL: revenuecat.url,
    REVENUECAT_REQUESTS_PER_SECOND: '100',
    BILLING_SYNC_AFTER: 'none',
  });
});
afterAll(async () => {
  restoreRevenueCat();
  await revenuecat.close();
});

describe.each(DATABASE_KINDS)('sandbox purchases on %s', (kind) => {
  const db = suiteDatabase(kind);
  let restore: (() => void) | undefined;
  afterEach(() => {
    restore?.();
    restore = undefined;
  });

  /** A sandbox purchase and a production one of one user, as webhook events. */
  async function deliverPurchases(user: string) {
    const authorization = getConfig().local ? WEBHOOK_AUTHORIZATION : `Bearer ${SECRET}`;
    const sandbox = billingEvent('sandbox-initial-purchase', user, { at: 0, purchased: 0, expires: 30 });
    const production = billingEvent('initial-purchase', user, { at: 0.001, purchased: 0, expires: 30 }, { product_id: YEARLY, transaction_id: 'p-1', original_transaction_id: 'p-1' });
    for (const body of [sandbox, production]) expect(await deliver(body, { authorization })).toMatchObject({ status: 200, body: { received: true } });
    return { sandbox, production };
  }

  /** RevenueCat's record of the same two purchases, fetched by a sync (GET /v1/subscribers). */
  async function syncPurchases(user: string) {
    revenuecat.setCustomer(user, {
      entitlements: { pro: v1Entitlement(MONTHLY, { purchased: day(0), expires: day(30) }), support: v1Entitlement(YEARLY, { purchased: day(0), expires: day(30) }) },
      subscriptions: {
        [MONTHLY]: v1Subscription({ purchased: day(0), expires: day(30), sandbox: true, transactionId: 's-1' }),
        [YEARLY]: v1Subscription({ purchased: day(0), expires: day(30), transactionId: 'p-1' }),
      },
    });
    revenuecat.setClock(day(1));
    return syncSubscriber(user, { reason: 'admin', maxSlotWaitMs: 10_000 });
  }

  /** What grants each of a user's entitlements at day 2, as `entitlement environment` per granting source. */
  const grantedBy = async (user: string) =>
    (await entitlementsOf(db, user, new Date(day(2))))
      .flatMap((view) => view.sources.filter((source) => source.active).map((source) => `${view.id} ${source.environment}`))
      .sort();

  it.each(SETTINGS)('$name: webhook events are recorded, and the sandbox one grants only if allowed', async ({ env, grants }) => {
    restore = setEnv(env);
    expect(getConfig().billingIgnoreSandbox).toBe(!grants);
    const user = `sandbox-events-${randomUUID()}`;
    const { sandbox, production } = await deliverPurchases(user);

    expect(await eventRow(db, sandbox.event.id)).toMatchObject({ environment: 'SANDBOX', app_user_id: user, outcome: grants ? 'applied' : 'ignored', count: 1 });
    expect(await eventRow(db, production.event.id)).toMatchObject({ environment: 'PRODUCTION', outcome: 'applied' });
    expect(await grantedBy(user)).toEqual(grants ? ['pro PRODUCTION', 'pro SANDBOX'] : ['pro PRODUCTION']);
  });

  it.each(SETTINGS)('$name: an event naming no environment, or another one, grants only where sandbox does', async ({ env, grants }) => {
    restore = setEnv(env);
    const authorization = getConfig().local ? WEBHOOK_AUTHORIZATION : `Bearer ${SECRET}`;
    const user = `sandbox-unknown-${randomUUID()}`;
    const production = billingEvent('initial-purchase', user, { at: 0, purchased: 0, expires: 30 }, { product_id: YEARLY, transaction_id: 'p-1', original_transaction_id: 'p-1' });
    const staging = billingEvent('initial-purchase', user, { at: 0.001, purchased: 0, expires: 30 }, { environment: 'STAGING', transaction_id: 'x-1', original_transaction_id: 'x-1' });
    const unnamed = billingEvent('initial-purchase', user, { at: 0.002, purchased: 0, expires: 30 }, { environment: undefined, product_id: 'com.example.pro.weekly', transaction_id: 'y-1', original_transaction_id: 'y-1' });
    for (const body of [production, staging, unnamed]) expect(await deliver(body, { authorization })).toMatchObject({ status: 200, body: { received: true } });

    for (const body of [staging, unnamed]) expect(await eventRow(db, body.event.id)).toMatchObject({ outcome: grants ? 'applied' : 'ignored', count: 1 });
    // Where it grants, a source with no environment is keyed as production (billing_source_key), and the view names it as the event did.
    expect(await grantedBy(user)).toEqual(grants ? ['pro PRODUCTION', 'pro STAGING', 'pro null'].sort() : ['pro PRODUCTION']);
  });

  it.each(SETTINGS)('$name: a REST snapshot keeps sandbox purchases out unless allowed', async ({ env, grants }) => {
    restore = setEnv(env);
    const user = `sandbox-snapshot-${randomUUID()}`;
    const result = await syncPurchases(user);

    expect(result.outcome).toBe('applied');
    expect(await grantedBy(user)).toEqual(grants ? ['pro SANDBOX', 'support PRODUCTION'] : ['support PRODUCTION']);
  });

  it.each(SETTINGS)('$name: the rebuild gives what live delivery gave, and follows the setting when it changes', async ({ env, grants }) => {
    restore = setEnv(env);
    const [byEvents, bySnapshot] = [`sandbox-rebuild-events-${randomUUID()}`, `sandbox-rebuild-snapshot-${randomUUID()}`];
    await deliverPurchases(byEvents);
    await syncPurchases(bySnapshot);
    const ours = (report: Awaited<ReturnType<typeof rebuildBilling>>) =>
      report.changed.filter((change) => change.ids.includes(byEvents) || change.ids.includes(bySnapshot)).map((change) => change.ids.find((id) => id === byEvents || id === bySnapshot));

    // Under the same setting: nothing to change.
    expect(ours(await rebuildBilling({ apply: false }))).toEqual([]);

    // The setting flipped: the rebuild applies the new rule to what is stored, for both users.
    restore();
    restore = setEnv({ ...env, BILLING_SANDBOX_GRANTS: String(!grants) });
    expect(ours(await rebuildBilling({ apply: true })).sort()).toEqual([byEvents, bySnapshot].sort());
    expect(await grantedBy(byEvents)).toEqual(!grants ? ['pro PRODUCTION', 'pro SANDBOX'] : ['pro PRODUCTION']);
    expect(await grantedBy(bySnapshot)).toEqual(!grants ? ['pro SANDBOX', 'support PRODUCTION'] : ['support PRODUCTION']);
    // And what the rebuild wrote is what live delivery under the new setting gives.
    const live = `sandbox-rebuild-live-${randomUUID()}`;
    await deliverPurchases(live);
    expect(await grantedBy(live)).toEqual(await grantedBy(byEvents));
  });
});
