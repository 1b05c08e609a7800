import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as adminExportRoute from '../../app/api/admin/users/[userId]/export/route.ts';
import * as exportRoute from '../../app/api/me/export/route.ts';
import { dbCallCount } from '../../lib/db/index.ts';
import { accountExportSchema } from '../../lib/openapi/responses.ts';
import { delivery, freshSource, league } from '../leagues/fixtures.ts';
import { deliverLeagues, deliverNow, linkWallet } from '../support/account-actions.ts';
import { DATABASE_KINDS, suiteDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { callRoute } from '../support/http.ts';
import { testUser } from '../support/tokens.ts';
import { evmWallet } from '../wallets/wallets.ts';

const ADMIN_SECRET = 'admin-secret-for-export-tests-0123456789';

/** GET /api/me/export and the operator's export: everything stored about a user, as a download. */
describe.each(DATABASE_KINDS)('exporting an account on %s', (kind) => {
  const db = suiteDatabase(kind);
  let restoreEnv: () => void;
  beforeAll(() => {
    restoreEnv = setEnv({ ADMIN_API_SECRET: ADMIN_SECRET, LOCAL_DEV: '1' });
  });
  afterAll(() => restoreEnv());

  it('GET /api/me/export: the caller\'s wallet links and challenges, billing rows and event bodies, leagues; nobody else\'s; one call; an attachment', async () => {
    const [user, other] = [await testUser(), await testUser()];
    const wallet = evmWallet();
    const link = await linkWallet(user, wallet);
    const email = `export-${randomUUID()}@example.test`;
    const purchase = await deliverNow('initial-purchase', user.userId, {}, { subscriber_attributes: { $email: { value: email, updated_at_ms: Date.now() } } });
    await deliverNow('initial-purchase', other.userId);
    const source = freshSource('export');
    await deliverLeagues(delivery(source, { leagues: [league('L1', '2026-11-21T17:59:00Z', {
      members: [{ externalUserId: 'u1', displayName: 'Ana', role: 'commissioner', appUserId: user.userId }, { externalUserId: 'u2', displayName: 'Bo', role: 'member', appUserId: other.userId }],
    })] }));

    const before = dbCallCount();
    const response = await callRoute(exportRoute, { headers: { authorization: user.authorization } });

    expect(dbCallCount() - before).toBe(1);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-disposition')).toMatch(new RegExp(`^attachment; filename="account-export-${user.userId}-\\d{4}-\\d{2}-\\d{2}\\.json"$`));
    expect(response.headers.get('cache-control')).toBe('no-store');
    expect(accountExportSchema.safeParse(response.body).success).toBe(true);
    const body = response.body;
    expect(body.userId).toBe(user.userId);
    expect(body.wallets.links).toEqual([expect.objectContaining({ id: link.id, user_id: user.userId, address: wallet.address })]);
    expect(body.wallets.challenges).toEqual([expect.objectContaining({ user_id: user.userId, used_at: expect.any(String) })]);
    expect(body.billing.ids).toEqual([user.userId]);
    expect(body.billing.entitlements).toEqual([expect.objectContaining({ app_user_id: user.userId, entitlement_id: 'pro', status: 'active' })]);
    expect(body.billing.subscribers).toEqual([expect.objectContaining({ app_user_id: user.userId })]);
    expect(body.billing.events).toEqual([expect.objectContaining({ eventId: purchase.event.id, type: 'INITIAL_PURCHASE', outcome: 'applied', body: purchase })]);
    expect(response.text).toContain(email);
    expect(body.leagues).toEqual([{ league: expect.objectContaining({ source, external_id: 'L1' }), member: expect.objectContaining({ external_user_id: 'u1', role: 'commissioner' }) }]);
    expect(response.text).not.toContain(other.userId);
  });

  it('without a session: 401, nothing read', async () => {
    expect(await callRoute(exportRoute)).toMatchObject({ status: 401, body: { code: 'missing_token' } });
  });

  it('GET /api/admin/users/{id}/export: the same export for any user, behind the admin secret only', async () => {
    const user = await testUser();
    await deliverNow('initial-purchase', user.userId);
    const get = (userId: string, authorization = `Bearer ${ADMIN_SECRET}`) => callRoute(adminExportRoute, { params: { userId }, headers: { authorization } });

    const response = await get(user.userId);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-disposition')).toContain(`account-export-${user.userId}-`);
    const own = await callRoute(exportRoute, { headers: { authorization: user.authorization } });
    expect({ ...response.body, exportedAt: null }).toEqual({ ...own.body, exportedAt: null });
    expect(response.body.billing.entitlements).toHaveLength(1);

    expect(await get(user.userId, 'Bearer not-the-admin-secret')).toMatchObject({ status: 401, body: { code: 'invalid_admin_secret' } });
    expect(await get(user.userId, user.authorization)).toMatchObject({ status: 401, body: { code: 'invalid_admin_secret' } });
    expect(await get('not-a-uuid')).toMatchObject({ status: 400, body: { code: 'invalid_request' } });
    const nobody = await get(randomUUID());
    expect(nobody.status).toBe(200);
    expect(nobody.body).toMatchObject({ wallets: { links: [], challenges: [] }, billing: { entitlements: [], events: [] }, leagues: [] });
  });

  it('after the user is deleted, the export of their id holds nothing of them', async () => {
    const user = await testUser();
    await linkWallet(user, evmWallet());
    await deliverNow('initial-purchase', user.userId);
    await db.sql('insert into auth.users (id, email) values ($1, $2)', [user.userId, user.email]);
    await db.sql('delete from auth.users where id = $1', [user.userId]);

    const response = await callRoute(adminExportRoute, { params: { userId: user.userId }, headers: { authorization: `Bearer ${ADMIN_SECRET}` } });
    expect(response.body).toMatchObject({ wallets: { links: [], challenges: [] }, billing: { entitlements: [], events: [] } });
  });
});
