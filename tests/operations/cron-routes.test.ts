import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as statusRoute from '../../app/api/admin/status/route.ts';
import * as sweepRoute from '../../app/api/cron/billing-sync/route.ts';
import * as maintenanceRoute from '../../app/api/cron/maintenance/route.ts';
import { resetOperatorSecretThrottle } from '../../lib/auth/operator-secret.ts';
import { SWEEP_WITHOUT_REVENUECAT } from '../../lib/billing/sync.ts';
import { billingSweepResponseSchema, maintenanceResponseSchema } from '../../lib/openapi/responses.ts';
import { suiteDatabase } from '../support/databases.ts';
import { DEPLOYMENT_SETTINGS, setEnv } from '../support/env.ts';
import { callRoute } from '../support/http.ts';
import { startFakeRevenueCat, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';

/**
 * The cron routes as schedulers call them: Vercel Cron sends GET with `Authorization: Bearer
 * <CRON_SECRET>`; Supabase Cron's `net.http_post` sends POST with a JSON body ('{}' unless told).
 * A deployment on webhooks only (no RevenueCat REST key) still runs the daily sweep: a 200 that
 * says there is nothing to do, never a failure every day.
 */
const CRON_SECRET = 'cron-secret-for-cron-route-tests-0123456789';
const ADMIN_API_SECRET = 'admin-secret-for-cron-route-tests-0123456789';
const cron = { authorization: `Bearer ${CRON_SECRET}` };
// What net.http_post sends by default: POST, Content-Type application/json, body '{}'.
const asSupabaseCron = { method: 'POST', headers: { ...cron, 'content-type': 'application/json' }, body: '{}' };

describe('the cron routes on a deployment that uses webhooks only', () => {
  suiteDatabase('postgres');
  let restore: () => void;
  beforeAll(() => {
    restore = setEnv({ ...DEPLOYMENT_SETTINGS, CRON_SECRET, ADMIN_API_SECRET, REVENUECAT_SECRET_API_KEY: undefined, REVENUECAT_API_URL: undefined, REVENUECAT_STAND_IN: undefined });
  });
  afterAll(() => {
    restore();
    resetOperatorSecretThrottle();
  });

  it.each([['GET (Vercel Cron)', { headers: cron }], ['POST (Supabase Cron\'s net.http_post)', asSupabaseCron]])('billing-sync by %s: 200, nothing to do and why; the run is recorded for the status', async (_name, request) => {
    const response = await callRoute(sweepRoute, request);
    expect(response.status, response.text).toBe(200);
    expect(response.body).toEqual({ claimed: 0, synced: 0, failed: 0, due: 0, nothingToDo: SWEEP_WITHOUT_REVENUECAT });
    expect(billingSweepResponseSchema.safeParse(response.body).error).toBeUndefined();
    expect(response.body.nothingToDo).toContain('RevenueCat sync is off on this server');
    const status = await callRoute(statusRoute, { headers: { authorization: `Bearer ${ADMIN_API_SECRET}` } });
    expect(status.body.syncQueue.lastSweep.result).toEqual(response.body);
  });

  it.each([['GET', { headers: cron }], ['POST', asSupabaseCron]])('maintenance by %s: 200 with its report', async (_name, request) => {
    const response = await callRoute(maintenanceRoute, request);
    expect(response.status, response.text).toBe(200);
    expect(maintenanceResponseSchema.safeParse(response.body).error).toBeUndefined();
    expect(response.body.done).toBe(true);
  });

  it('both methods still take the cron secret only', async () => {
    for (const route of [sweepRoute, maintenanceRoute]) {
      for (const method of ['GET', 'POST']) {
        const response = await callRoute(route, { method, headers: { authorization: `Bearer ${ADMIN_API_SECRET}` } });
        expect({ method, status: response.status, code: response.body.code }).toEqual({ method, status: 401, code: 'invalid_cron_secret' });
      }
    }
    const options = await callRoute(sweepRoute, { method: 'OPTIONS' });
    expect(options.headers.get('allow')).toBe('GET, POST, HEAD, OPTIONS');
  });
});

describe('the sweep by POST with a RevenueCat key', () => {
  suiteDatabase('pglite');
  let revenuecat: FakeRevenueCat;
  let restore: () => void;
  beforeAll(async () => {
    revenuecat = await startFakeRevenueCat();
    restore = setEnv({ LOCAL_DEV: '1', CRON_SECRET, REVENUECAT_SECRET_API_KEY: revenuecat.apiKey, REVENUECAT_API_URL: revenuecat.url });
  });
  afterAll(async () => {
    restore();
    await revenuecat.close();
  });

  it('sweeps as GET does: counts, and no "nothing to do"', async () => {
    const response = await callRoute(sweepRoute, asSupabaseCron);
    expect(response.status, response.text).toBe(200);
    expect(response.body).toEqual({ claimed: expect.any(Number), synced: expect.any(Number), failed: 0, due: expect.any(Number) });
  });
});
