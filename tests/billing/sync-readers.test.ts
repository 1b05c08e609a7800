import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as cronSyncRoute from '../../app/api/cron/billing-sync/route.ts';
import * as userSyncRoute from '../../app/api/me/billing/sync/route.ts';
import { rebuildBilling } from '../../lib/billing/rebuild.ts';
import { DATABASE_KINDS, suiteDatabase, type TestDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { startFakeRevenueCat, v1Entitlement, v1Subscription, type FakeCustomer, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { callRoute } from '../support/http.ts';
import { testUser } from '../support/tokens.ts';
import { billingEvent, day, deliver, entitlementsOf, isoDay } from './support.ts';

/**
 * Which record a sync reads (docs/sync.md): v1 alone, v2 alone, or both (v2's per-item record wins
 * where they differ). Each configuration syncs through the real paths (the user's refresh, the
 * sweep, npm run billing:sync) against the RevenueCat stand-in, and a rebuild folds the stored
 * snapshot again to the same rows.
 */
const CRON_SECRET = 'cron-secret-for-reader-tests-0123456789';
const MONTHLY = 'com.example.pro.monthly';
const LIFETIME = 'com.example.extras.lifetime';

type Reader = 'v1' | 'v2' | 'both';
const READERS: Reader[] = ['v1', 'v2', 'both'];

let revenuecat: FakeRevenueCat;
beforeAll(async () => {
  revenuecat = await startFakeRevenueCat();
});
afterAll(() => revenuecat.close());

function settings(reader: Reader): Record<string, string | undefined> {
  return {
    LOCAL_DEV: '1',
    REVENUECAT_SECRET_API_KEY: reader === 'v2' ? undefined : revenuecat.apiKey,
    REVENUECAT_V2_SECRET_API_KEY: reader === 'v1' ? undefined : revenuecat.v2ApiKey,
    REVENUECAT_PROJECT_ID: reader === 'v1' ? undefined : revenuecat.projectId,
    REVENUECAT_API_URL: revenuecat.url,
    REVENUECAT_TIMEOUT_MS: '2000',
    REVENUECAT_REQUESTS_PER_SECOND: '100',
    BILLING_SYNC_AFTER: 'none',
    CRON_SECRET,
  };
}

/**
 * RevenueCat's record: the monthly subscription renewed for days 30 to 60 (its RENEWAL webhook was
 * lost), a lifetime purchase of extras whose webhook never came, and an anonymous first id.
 */
function record(user: string, extra: Partial<FakeCustomer> = {}): FakeCustomer {
  return {
    original_app_user_id: `$RCAnonymousID:${user.replace(/-/g, '').slice(0, 32)}`,
    entitlements: {
      pro: v1Entitlement(MONTHLY, { purchased: day(30), expires: day(60) }),
      extras: v1Entitlement(LIFETIME, { purchased: day(5), expires: null }),
    },
    subscriptions: { [MONTHLY]: v1Subscription({ purchased: day(30), expires: day(60), transactionId: '2000000999000030' }) },
    non_subscriptions: { [LIFETIME]: [{ id: 'rc_life_1', is_sandbox: false, purchase_date: new Date(day(5)).toISOString(), store: 'app_store', store_transaction_id: '2000000999000005' }] },
    ...extra,
  };
}

async function purchasedThenLost(user: string, extra: Partial<FakeCustomer> = {}) {
  expect((await deliver(billingEvent('initial-purchase', user, { at: 0, purchased: 0, expires: 30 }))).status).toBe(200);
  revenuecat.setCustomer(user, record(user, extra));
  revenuecat.setClock(day(40));
}

const pick = (views: Awaited<ReturnType<typeof entitlementsOf>>) => views.map((view) => ({ id: view.id, active: view.active, status: view.status, willRenew: view.willRenew, expiresAt: view.expiresAt }));

const converged = [
  { id: 'extras', active: true, status: 'active', willRenew: false, expiresAt: null },
  { id: 'pro', active: true, status: 'active', willRenew: true, expiresAt: isoDay(60) },
];

/** The stored rows, compared after damage and a rebuild (times of the write aside). */
const rowsOf = (db: TestDatabase, user: string) => db.sql(
  `select entitlement_id, product_id, status, will_renew, expires_at, grace_expires_at, store, environment from public.entitlements where app_user_id = $1 order by entitlement_id, product_id`, [user]);

describe.each(DATABASE_KINDS)('which record a sync reads, on %s', (kind) => {
  const db = suiteDatabase(kind);

  describe.each(READERS)('REST %s', (reader) => {
    let restoreEnv: () => void;
    beforeAll(() => {
      restoreEnv = setEnv(settings(reader));
    });
    afterAll(() => {
      revenuecat.setClock(undefined);
      restoreEnv();
    });

    it('the user\'s refresh brings the entitlements to RevenueCat\'s record; a rebuild folds the stored snapshot to the same rows', async () => {
      const user = await testUser();
      await purchasedThenLost(user.userId);
      const v1Before = revenuecat.requests.length;
      const v2Before = revenuecat.v2Requests.length;
      const response = await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } });
      expect(response.status).toBe(200);
      // (The answer is as of the real clock; the rows below are read as of the record's day 41.)
      expect(response.body.entitlements.map((view: { id: string; expiresAt: string | null }) => [view.id, view.expiresAt])).toEqual([['extras', null], ['pro', isoDay(60)]]);
      expect(pick(await entitlementsOf(db, user.userId, new Date(day(41))))).toEqual(converged);
      // Only the configured reader was asked.
      expect(revenuecat.requests.length > v1Before).toBe(reader !== 'v2');
      expect(revenuecat.v2Requests.length > v2Before).toBe(reader !== 'v1');
      const [stored] = await db.sql<{ subscriber: boolean; v2: boolean }>(
        `select body ? 'subscriber' as subscriber, body ? 'v2' as v2 from public.billing_events where type = 'SYNC' and app_user_id = $1`, [user.userId]);
      expect(stored).toEqual({ subscriber: reader !== 'v2', v2: reader !== 'v1' });

      const synced = await rowsOf(db, user.userId);
      await db.sql(`update public.entitlements set status = 'expired', expires_at = $2 where app_user_id = $1`, [user.userId, isoDay(35)]);
      const applied = await rebuildBilling({ apply: true, ignoreSandbox: false });
      expect(applied.changed.some((change) => change.ids.includes(user.userId))).toBe(true);
      expect(await rowsOf(db, user.userId)).toEqual(synced);
    });

    it('the sweep syncs a marked subscriber', async () => {
      const user = `sweep-${reader}-${randomUUID()}`;
      await purchasedThenLost(user);
      await db.sql(`insert into public.billing_sync_queue (app_user_id, reason) values ($1, 'test')`, [user]);
      const response = await callRoute(cronSyncRoute, { headers: { authorization: `Bearer ${CRON_SECRET}` } });
      expect(response.status).toBe(200);
      expect(response.body).toMatchObject({ failed: 0 });
      expect(pick(await entitlementsOf(db, user, new Date(day(41))))).toEqual(converged);
      expect(await db.sql('select app_user_id from public.billing_sync_queue where app_user_id = $1', [user])).toEqual([]);
    });
  });

  describe('REST v1 and v2 disagreeing', () => {
    let restoreEnv: () => void;
    beforeAll(() => {
      restoreEnv = setEnv(settings('both'));
    });
    afterAll(() => {
      revenuecat.setClock(undefined);
      restoreEnv();
    });

    it('v2\'s item wins where the two differ: it ended the subscription v1 still shows active', async () => {
      const user = await testUser();
      await purchasedThenLost(user.userId, { v2Subscriptions: { [MONTHLY]: { gives_access: false, status: 'expired', ends_at: day(35), auto_renewal_status: 'will_not_renew' } } });
      const response = await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } });
      expect(response.status).toBe(200);
      const views = pick(await entitlementsOf(db, user.userId, new Date(day(41))));
      expect(views.find((view) => view.id === 'pro')).toEqual({ id: 'pro', active: false, status: 'expired', willRenew: false, expiresAt: isoDay(35) });
      expect(views.find((view) => view.id === 'extras')).toMatchObject({ active: true });
    });

    it('v2\'s item wins on the end and the renewal while both say it grants; where they agree v1\'s finer words stay', async () => {
      const user = await testUser();
      // v2: renewal turned off, the period ends on day 55. v1 (late) still shows it renewing to day 60.
      await purchasedThenLost(user.userId, { v2Subscriptions: { [MONTHLY]: { ends_at: day(55), current_period_ends_at: day(55), auto_renewal_status: 'will_not_renew' } } });
      expect((await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } })).status).toBe(200);
      expect(pick(await entitlementsOf(db, user.userId, new Date(day(41)))).find((view) => view.id === 'pro'))
        .toEqual({ id: 'pro', active: true, status: 'cancelled_active', willRenew: false, expiresAt: isoDay(55) });

      // Agreeing on access, end and renewal: v1's grace date stays (v2 has none of its own).
      const other = await testUser();
      expect((await deliver(billingEvent('initial-purchase', other.userId, { at: 0, purchased: 0, expires: 30 }))).status).toBe(200);
      revenuecat.setCustomer(other.userId, {
        entitlements: { pro: v1Entitlement(MONTHLY, { purchased: day(0), expires: day(30), grace: day(46) }) },
        subscriptions: { [MONTHLY]: v1Subscription({ purchased: day(0), expires: day(30), billingIssue: day(30), grace: day(46) }) },
      });
      expect((await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: other.authorization } })).status).toBe(200);
      expect((await entitlementsOf(db, other.userId, new Date(day(41))))[0]).toMatchObject({ active: true, status: 'grace', graceExpiresAt: isoDay(46) });
    });
  });
});

describe('REST v2 alone, as an operator runs the commands', () => {
  const db = suiteDatabase('postgres');
  const env = (extra: Record<string, string> = {}) => {
    const vars: Record<string, string | undefined> = { ...process.env, DATABASE_URL: db.url!, LOG_LEVEL: 'silent', SUPABASE_URL: '', VERCEL: '', ...settings('v2'), ...extra };
    return Object.fromEntries(Object.entries(vars).filter((entry): entry is [string, string] => entry[1] !== undefined)) as NodeJS.ProcessEnv;
  };
  const run = (script: string, args: string[]) => promisify(execFile)(process.execPath, [script, ...args], { env: env(), timeout: 60_000 });

  it('npm run billing:sync -- --user syncs with a v2 key only; npm run billing:rebuild folds its snapshot again', async () => {
    const user = `cli-v2-${randomUUID()}`;
    await purchasedThenLost(user);
    const v1Before = revenuecat.requests.length;
    const { stdout } = await run('scripts/billing-sync.ts', ['--user', user]);
    expect(JSON.parse(stdout)).toMatchObject({ appUserId: user, outcome: 'applied', entitlements: [{ id: 'extras', active: true }, { id: 'pro', expiresAt: isoDay(60) }] });
    expect(revenuecat.requests.length).toBe(v1Before);
    expect(pick(await entitlementsOf(db, user, new Date(day(41))))).toEqual(converged);

    await db.sql(`update public.entitlements set status = 'refunded' where app_user_id = $1`, [user]);
    const dry = await run('scripts/billing-rebuild.ts', []);
    expect(dry.stdout).toContain(`${user} pro (${MONTHLY}, PRODUCTION): refunded until`);
    await run('scripts/billing-rebuild.ts', ['--apply']);
    expect(pick(await entitlementsOf(db, user, new Date(day(41))))).toEqual(converged);
    revenuecat.setClock(undefined);
  });

  it('v2 alone fails as v1 does: 503 upstream_unavailable after its retries, 502 upstream_rejected for a refused key; nothing written, the subscriber marked', async () => {
    const user = await testUser();
    await purchasedThenLost(user.userId);
    const restoreEnv = setEnv(settings('v2'));
    try {
      for (const [status, answer, code] of [[503, 503, 'upstream_unavailable'], [401, 502, 'upstream_rejected']] as const) {
        revenuecat.failV2(status);
        const seen = revenuecat.v2Requests.length;
        await db.sql(`update public.billing_sync_requests set requested_at = requested_at - interval '1 minute' where app_user_id = $1`, [user.userId]);
        const response = await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } });
        expect(response.status).toBe(answer);
        expect(response.body).toMatchObject({ code });
        // A 5xx is asked three times (two retries), a refusal once.
        expect(revenuecat.v2Requests.length - seen).toBe(status === 503 ? 3 : 1);
      }
      expect(await db.sql(`select 1 from public.billing_events where type = 'SYNC' and app_user_id = $1`, [user.userId])).toEqual([]);
      expect(await db.sql(`select attempts from public.billing_sync_queue where app_user_id = $1`, [user.userId])).toEqual([{ attempts: 2 }]);
    } finally {
      revenuecat.failV2(undefined);
      revenuecat.setClock(undefined);
      restoreEnv();
    }
  });

  it('a customer RevenueCat does not have (v2 answers 404): nothing is written, and v2 creates none', async () => {
    const user = await testUser();
    const restoreEnv = setEnv(settings('v2'));
    try {
      const response = await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } });
      expect(response.status).toBe(200);
      expect(response.body.entitlements).toEqual([]);
      expect(await db.sql(`select 1 from public.billing_events where app_user_id = $1`, [user.userId])).toEqual([]);
      expect(revenuecat.v2Requests.at(-1)).toMatchObject({ status: 404 });
    } finally {
      restoreEnv();
    }
  });
});
