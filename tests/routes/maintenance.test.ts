import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import * as maintenanceRoute from '../../app/api/cron/maintenance/route.ts';
import { addMaintenanceCounts, runMaintenance } from '../../lib/maintenance.ts';
import { maintenanceResponseSchema } from '../../lib/openapi/responses.ts';
import { customersWaitingInAnOldMonth } from '../billing/support.ts';
import { DATABASE_KINDS, describeOn, suiteDatabase, type TestDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { callRoute } from '../support/http.ts';

const CRON_SECRET = 'cron-secret-for-maintenance-0123456789';

/** Due and kept rows of each table with a retention rule (20261124000100_maintenance.sql). */
async function seed(db: TestDatabase, due: number, kept = 2) {
  await db.sql('delete from public.wallet_challenges');
  await db.sql('delete from public.league_sync_deliveries');
  await db.sql('delete from public.billing_sync_requests');
  for (const [count, offset] of [[due, '-2 days'], [kept, '1 hour']] as const) {
    await db.sql(`insert into public.wallet_challenges (id, user_id, chain, address, address_key, chain_id, nonce, message, issued_at, expires_at)
      select gen_random_uuid(), gen_random_uuid(), 'evm', '0xabc', '0xabc', 1, 'nonce', 'message', now() + $1::interval - interval '10 minutes', now() + $1::interval
      from generate_series(1, $2)`, [offset, count]);
  }
  for (const [count, age] of [[due, '8 days'], [kept, '1 day']] as const) {
    await db.sql(`insert into public.league_sync_deliveries (source, delivery_id, sent_at, received_at)
      select 'cron', md5(random()::text), now() - $1::interval, now() - $1::interval from generate_series(1, $2)`, [age, count]);
  }
  for (const [count, age] of [[due, '1 hour'], [kept, '1 minute']] as const) {
    await db.sql(`insert into public.billing_sync_requests (app_user_id, requested_at)
      select 'u-' || md5(random()::text), now() - $1::interval from generate_series(1, $2)`, [age, count]);
  }
}

const remaining = async (db: TestDatabase) => (await db.sql(`select
  (select count(*)::int from public.wallet_challenges) as challenges,
  (select count(*)::int from public.league_sync_deliveries) as deliveries,
  (select count(*)::int from public.billing_sync_requests) as refreshes`))[0];

describe.each(DATABASE_KINDS)('GET /api/cron/maintenance on %s', (kind) => {
  const db = suiteDatabase(kind);
  let restoreEnv: () => void;
  beforeAll(() => {
    restoreEnv = setEnv({ CRON_SECRET, LOCAL_DEV: '1' });
  });
  afterAll(() => restoreEnv());
  beforeEach(() => seed(db, 5));

  const get = (authorization?: string) => callRoute(maintenanceRoute, { headers: authorization ? { authorization } : {} });

  it('with the cron secret: 200 with the counts of what it did (the documented shape); a second run finds nothing', async () => {
    const first = await get(`Bearer ${CRON_SECRET}`);
    expect(first.status).toBe(200);
    expect(maintenanceResponseSchema.safeParse(first.body).success).toBe(true);
    expect(first.body).toMatchObject({
      wallets: { challengesDeleted: 5 }, leagues: { deliveriesDeleted: 5 }, billingSync: { refreshRequestsDeleted: 5 }, done: true, calls: 1,
    });
    expect(await remaining(db)).toEqual({ challenges: 2, deliveries: 2, refreshes: 2 });
    expect((await get(`Bearer ${CRON_SECRET}`)).body).toMatchObject({
      wallets: { challengesDeleted: 0 }, leagues: { deliveriesDeleted: 0 }, billingSync: { refreshRequestsDeleted: 0 }, done: true,
    });
  });

  it('two runs at once: both 200, every due row deleted once', async () => {
    await seed(db, 2_500);
    const [a, b] = await Promise.all([get(`Bearer ${CRON_SECRET}`), get(`Bearer ${CRON_SECRET}`)]);
    expect([a.status, b.status]).toEqual([200, 200]);
    expect(a.body.wallets.challengesDeleted + b.body.wallets.challengesDeleted).toBe(2_500);
    expect(a.body.leagues.deliveriesDeleted + b.body.leagues.deliveriesDeleted).toBe(2_500);
    expect(a.body.billingSync.refreshRequestsDeleted + b.body.billingSync.refreshRequestsDeleted).toBe(2_500);
    expect(await remaining(db)).toEqual({ challenges: 2, deliveries: 2, refreshes: 2 });
  });

  it.each([
    { name: 'no credentials', authorization: undefined },
    { name: 'a wrong secret', authorization: 'Bearer not-the-cron-secret' },
    { name: 'the secret without the Bearer scheme', authorization: CRON_SECRET },
  ])('refuses $name with 401 and changes nothing', async ({ authorization }) => {
    const response = await get(authorization);
    expect({ status: response.status, code: response.body.code }).toEqual({ status: 401, code: 'invalid_cron_secret' });
    expect(response.headers.get('www-authenticate')).toMatch(/^Bearer /);
    expect(await remaining(db)).toEqual({ challenges: 7, deliveries: 7, refreshes: 7 });
  });

  it('is off (503 cron_not_configured) without CRON_SECRET', async () => {
    const restore = setEnv({ CRON_SECRET: undefined });
    try {
      const response = await get(`Bearer ${CRON_SECRET}`);
      expect({ status: response.status, code: response.body.code }).toEqual({ status: 503, code: 'cron_not_configured' });
      expect(response.headers.get('retry-after')).toBeTruthy();
    } finally {
      restore();
    }
  });

  it('keeps calling while work is left and time remains, and adds up what the calls did', async () => {
    await seed(db, 2_500);
    const seen: unknown[] = [];
    const report = await runMaintenance({ budgetMs: 60_000, callBudgetMs: 1, onCall: (result) => seen.push(result) });
    expect(report).toMatchObject({ calls: 3, done: true, wallets: { challengesDeleted: 2_500, done: true }, leagues: { deliveriesDeleted: 2_500 } });
    expect(seen).toHaveLength(3);
    expect(seen[0]).toMatchObject({ wallets: { challengesDeleted: 1_000 }, done: false });
  });

  it('stops when its own budget is spent, saying it is not done', async () => {
    await seed(db, 2_500);
    expect(await runMaintenance({ budgetMs: 1, callBudgetMs: 1 })).toMatchObject({ calls: 1, done: false, wallets: { challengesDeleted: 1_000 } });
  });
});

describe('adding up maintenance calls', () => {
  it('adds numbers at any depth and takes the later value of anything else', () => {
    expect(addMaintenanceCounts(
      { wallets: { challengesDeleted: 1000, done: false }, billing: { dropped: ['2025_01'], busy: true }, done: false, ms: 2000 },
      { wallets: { challengesDeleted: 20, done: true }, billing: { dropped: [] }, leagues: { deliveriesDeleted: 3 }, done: true, ms: 5 },
    )).toEqual({ wallets: { challengesDeleted: 1020, done: true }, billing: { dropped: [], busy: true }, leagues: { deliveriesDeleted: 3 }, done: true, ms: 2005 });
  });
});

describeOn('postgres')('npm run db:maintain', () => {
  const db = suiteDatabase('postgres');
  const run = (args: string[]) => promisify(execFile)(process.execPath, ['scripts/db-maintain.ts', ...args], {
    env: { ...process.env, DATABASE_URL: db.url!, LOCAL_DEV: '1', LOG_LEVEL: 'silent', SUPABASE_URL: '', VERCEL: '' },
    timeout: 60_000,
  });

  it('applies every rule until done, saying what it does as it goes, and prints the counts; a bad option is a usage error', async () => {
    await seed(db, 1_200);
    const { stdout, stderr } = await run([]);
    expect(JSON.parse(stdout)).toMatchObject({ done: true, wallets: { challengesDeleted: 1_200 }, leagues: { deliveriesDeleted: 1_200 }, billingSync: { refreshRequestsDeleted: 1_200 } });
    // What is due first, then each call as it ends (each works up to its budget), then the verdict.
    const lines = stderr.split('\n').filter(Boolean);
    expect(lines[0]).toBe('Billing event log: no month past the retention; 0 customer(s) to checkpoint first.');
    expect(lines.slice(1, -1)).toEqual(lines.slice(1, -1).map(() => expect.stringMatching(/^Other rules, call \d+: deleted wallet challenges \d+, contract checks 0, league deliveries \d+, refresh requests \d+; (done|more to do)\.$/)));
    expect(lines.at(-2)).toMatch(/; done\.$/);
    expect(lines.at(-1)).toBe('Done: everything due is done (recorded for `npm run status`).');
    expect(await remaining(db)).toEqual({ challenges: 2, deliveries: 2, refreshes: 2 });
    await expect(run(['--budget-ms', 'soon'])).rejects.toMatchObject({ code: 2, stderr: expect.stringContaining('Usage:') });
  });

  it('says which billing months are past the retention and how many customers they wait for, counts the checkpoints, and names what it dropped', async () => {
    const { month: name } = await customersWaitingInAnOldMonth(db, 'maintain', 2);
    const { stderr } = await run([]);
    expect(stderr).toContain(`Billing event log: month(s) past the retention: ${name}; 2 customer(s) to checkpoint first.`);
    expect(stderr).toContain('2/2 customers checkpointed');
    expect(stderr).toContain(`Billing event log: dropped billing_events_${name}.`);
  });
});
