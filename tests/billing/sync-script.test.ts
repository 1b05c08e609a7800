import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeOn, suiteDatabase } from '../support/databases.ts';
import { startFakeRevenueCat, v1Entitlement, v1Subscription, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { billingEvent, day, deliver, entitlementsOf, isoDay } from './support.ts';

/** npm run billing:sync as an operator runs it: a child process against the database and a RevenueCat stand-in. */
describeOn('postgres')('npm run billing:sync', () => {
  const db = suiteDatabase('postgres');
  let revenuecat: FakeRevenueCat;
  beforeAll(async () => {
    revenuecat = await startFakeRevenueCat();
  });
  afterAll(() => revenuecat.close());

  const run = (args: string[], extra: Record<string, string> = {}) => promisify(execFile)(process.execPath, ['scripts/billing-sync.ts', ...args], {
    env: { ...process.env, DATABASE_URL: db.url!, LOCAL_DEV: '1', LOG_LEVEL: 'silent', SUPABASE_URL: '', VERCEL: '', BILLING_SYNC_AFTER: 'none',
      REVENUECAT_SECRET_API_KEY: revenuecat.apiKey, REVENUECAT_API_URL: revenuecat.url, REVENUECAT_REQUESTS_PER_SECOND: '100', ...extra },
    timeout: 60_000,
  });

  const renewed = (user: string) => revenuecat.setCustomer(user, {
    entitlements: { pro: v1Entitlement('com.example.pro.monthly', { purchased: day(30), expires: day(60) }) },
    subscriptions: { 'com.example.pro.monthly': v1Subscription({ purchased: day(30), expires: day(60) }) },
  });

  it('--user syncs one subscriber and prints its entitlements; an unknown id is refused', async () => {
    const user = `cli-${randomUUID()}`;
    expect((await deliver(billingEvent('initial-purchase', user, { at: 0, purchased: 0, expires: 30 }))).status).toBe(200);
    renewed(user);
    revenuecat.setClock(day(40));
    const { stdout } = await run(['--user', user]);
    expect(JSON.parse(stdout)).toMatchObject({ appUserId: user, outcome: 'applied', entitlements: [{ id: 'pro', expiresAt: isoDay(60) }] });
    await expect(run(['--user', `nobody-${randomUUID()}`])).rejects.toMatchObject({ code: 1, stderr: expect.stringContaining('subscriber_unknown') });
    await expect(run([])).rejects.toMatchObject({ code: 2, stderr: expect.stringContaining('Usage:') });
  });

  it('--all resumes after the place a previous run saved, then starts over next time', async () => {
    const users = ['a', 'b', 'c'].map((prefix) => `all-${prefix}-${randomUUID()}`).sort();
    for (const user of users) {
      expect((await deliver(billingEvent('initial-purchase', user, { at: 0, purchased: 0, expires: 30 }))).status).toBe(200);
      renewed(user);
    }
    revenuecat.setClock(day(40));
    // An earlier run stopped after the first of them.
    await db.sql(`insert into public.billing_sync_runs (name, last_id) values ('billing-sync-all', $1)`, [users[0]]);
    const seen = revenuecat.requests.length;
    const { stdout, stderr } = await run(['--all']);
    expect(stderr).toContain(`Resuming after ${users[0]}`);
    expect(stdout).toMatch(/Done: \d+ synced, 0 failed/);
    const asked = revenuecat.requests.slice(seen).map((request) => request.appUserId);
    expect(asked).not.toContain(users[0]);
    expect(asked).toEqual(expect.arrayContaining(users.slice(1)));
    for (const user of users.slice(1)) expect((await entitlementsOf(db, user, new Date(day(41))))[0]).toMatchObject({ active: true, expiresAt: isoDay(60) });
    expect(await db.sql(`select last_id from public.billing_sync_runs where name = 'billing-sync-all'`)).toEqual([{ last_id: null }]);
  });
});
