import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as adminSyncRoute from '../../app/api/admin/billing/sync/route.ts';
import * as explainRoute from '../../app/api/admin/billing/subscribers/[appUserId]/route.ts';
import type { SubscriberExplanation } from '../../lib/billing/explain.ts';
import { callRoute } from '../support/http.ts';
import { DATABASE_KINDS, suiteDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { startFakeRevenueCat, v1Entitlement, v1Subscription, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { day, deliver, flowSettings, MONTHLY, purchase, transfer } from './support.ts';

const ADMIN_SECRET = 'admin-secret-for-explain-outcome-0123456789';

/** GET /api/admin/billing/subscribers/{id}, as an operator asks (the same words as npm run billing:explain). */
async function explain(appUserId: string): Promise<SubscriberExplanation> {
  const response = await callRoute(explainRoute, { params: { appUserId }, headers: { authorization: `Bearer ${ADMIN_SECRET}` } });
  expect(response.status).toBe(200);
  return response.body as SubscriberExplanation;
}

/**
 * explain's words come from what the fold did, not from what an entry's plan asked for: a TRANSFER
 * that found nothing to move reads as one, and a sync whose record showed an active entitlement
 * (of a purchase this service counts for nothing: sandbox ones, where sandbox grants nothing) says so.
 */
describe.each(DATABASE_KINDS)('explain tells what happened, on %s', (kind) => {
  suiteDatabase(kind);
  let revenuecat: FakeRevenueCat;
  let restoreEnv: () => void;
  beforeAll(async () => {
    revenuecat = await startFakeRevenueCat();
    restoreEnv = setEnv({ ...flowSettings(revenuecat), BILLING_SANDBOX_GRANTS: '0', ADMIN_API_SECRET: ADMIN_SECRET });
  });
  afterAll(async () => {
    revenuecat.setClock(undefined);
    restoreEnv();
    await revenuecat.close();
  });

  it('a transfer that moved nothing reads as one that moved nothing, on both sides; one that moved purchases as one that did', async () => {
    const [carol, dave, erin] = [`carol-${randomUUID()}`, `dave-${randomUUID()}`, `erin-${randomUUID()}`];
    expect((await deliver(purchase(dave, 0, 0, 30))).status).toBe(200);
    // carol holds nothing: the transfer from her moves nothing.
    const empty = transfer([carol], [dave], 5);
    expect((await deliver(empty)).status).toBe(200);
    // Then dave's purchase goes to erin: that one moves a row.
    const moved = transfer([dave], [erin], 10);
    expect((await deliver(moved)).status).toBe(200);

    const explanation = await explain(dave);
    const role = (id: string) => explanation.ids.find((entry) => entry.appUserId === id)?.role ?? '';
    expect(role(carol)).not.toContain('its purchases were transferred');
    expect(role(carol)).toContain(`named as the source of TRANSFER ${empty.event.id}`);
    expect(role(carol)).toContain('it held no purchases to move');
    expect(role(dave)).not.toContain(`received the purchases of ${carol}`);
    expect(role(dave)).toContain(`its purchases were transferred to ${erin}`);
    expect(role(erin)).toContain(`received the purchases of ${dave}`);
    const did = (eventId: string) => explanation.history.find((entry) => entry.eventId === eventId)!.did;
    expect(did(empty.event.id)).not.toContain('moved the purchases');
    expect(did(empty.event.id)).toContain(`found no purchases of ${carol} to move to ${dave}`);
    expect(did(moved.event.id)).toBe(`moved the purchases of ${dave} to ${erin}: changed 2 row(s).`);
  });

  it('a sync whose record showed an active entitlement says so, and why it wrote no row for it', async () => {
    const frank = `frank-${randomUUID()}`;
    expect((await deliver(purchase(frank, 0, 0, 30))).status).toBe(200);
    revenuecat.setCustomer(frank, {
      entitlements: { pro: v1Entitlement(MONTHLY, { purchased: day(30), expires: day(60) }) },
      subscriptions: { [MONTHLY]: v1Subscription({ purchased: day(30), expires: day(60), sandbox: true }) },
    });
    revenuecat.setClock(day(40));
    const synced = await callRoute(adminSyncRoute, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_SECRET}` }, body: { app_user_id: frank } });
    expect(synced.status).toBe(200);
    const explanation = await explain(frank);
    const sync = explanation.history.find((entry) => entry.type === 'SYNC')!;
    expect(sync.did).not.toContain('RevenueCat showed no purchase');
    expect(sync.did).toContain(`RevenueCat showed pro active until`);
    expect(sync.did).toContain(`${MONTHLY} (sandbox) left out: sandbox purchases grant nothing here`);
  });
});
