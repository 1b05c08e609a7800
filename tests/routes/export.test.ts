import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as adminExportRoute from '../../app/api/admin/users/[userId]/export/route.ts';
import * as exportRoute from '../../app/api/me/export/route.ts';
import { dbCallCount } from '../../lib/db/index.ts';
import { accountExportSchema } from '../../lib/openapi/responses.ts';
import { delivery, freshSource, league } from '../leagues/fixtures.ts';
import { deliverLeagues, deliverNow, linkWallet } from '../support/account-actions.ts';
import { DATABASE_KINDS, describeOn, suiteDatabase } from '../support/databases.ts';
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

/**
 * `npm run user:export` as an operator runs it from a shell beside the database (PATH, HOME and the
 * database's URL, nothing of this test run's settings): the script in a child process, its JSON on
 * stdout, its refusals on stderr with a non-zero exit.
 */
describeOn('postgres')('npm run user:export', () => {
  const db = suiteDatabase('postgres');
  let restoreEnv: () => void;
  beforeAll(() => {
    restoreEnv = setEnv({ LOCAL_DEV: '1' });
  });
  afterAll(() => restoreEnv());
  const run = (args: string[]) => promisify(execFile)(process.execPath, ['scripts/user-export.ts', ...args], {
    env: { PATH: process.env.PATH!, HOME: process.env.HOME!, DATABASE_URL: db.url! } as unknown as NodeJS.ProcessEnv, timeout: 60_000,
  });

  it('prints one user\'s export as JSON: their wallet link, billing rows and event bodies, league membership; nothing of another user; what GET /api/me/export answers', async () => {
    const [user, other] = [await testUser(), await testUser()];
    const wallet = evmWallet();
    const link = await linkWallet(user, wallet);
    const otherLink = await linkWallet(other, evmWallet());
    const purchase = await deliverNow('initial-purchase', user.userId);
    const otherPurchase = await deliverNow('initial-purchase', other.userId);
    const source = freshSource('export-script');
    await deliverLeagues(delivery(source, { leagues: [league('L1', '2026-11-21T17:59:00Z', {
      members: [{ externalUserId: 'u1', displayName: 'Ana', role: 'commissioner', appUserId: user.userId }, { externalUserId: 'u2', displayName: 'Bo', role: 'member', appUserId: other.userId }],
    })] }));

    const { stdout } = await run(['--user', user.userId]);
    const exported = JSON.parse(stdout);
    expect(accountExportSchema.safeParse(exported).success).toBe(true);
    expect(exported.userId).toBe(user.userId);
    expect(exported.wallets.links).toEqual([expect.objectContaining({ id: link.id, user_id: user.userId, address: wallet.address })]);
    expect(exported.billing.ids).toEqual([user.userId]);
    expect(exported.billing.subscribers).toEqual([expect.objectContaining({ app_user_id: user.userId })]);
    expect(exported.billing.entitlements).toEqual([expect.objectContaining({ app_user_id: user.userId, entitlement_id: 'pro', status: 'active' })]);
    expect(exported.billing.events).toEqual([expect.objectContaining({ eventId: purchase.event.id, type: 'INITIAL_PURCHASE', outcome: 'applied', body: purchase })]);
    expect(exported.leagues).toEqual([{ league: expect.objectContaining({ source, external_id: 'L1' }), member: expect.objectContaining({ external_user_id: 'u1', app_user_id: user.userId }) }]);
    for (const theirs of [other.userId, otherLink.id, otherPurchase.event.id]) expect(stdout).not.toContain(theirs);
    const own = await callRoute(exportRoute, { headers: { authorization: user.authorization } });
    expect({ ...exported, exportedAt: null }).toEqual({ ...own.body, exportedAt: null });
  });

  it('--out writes the same JSON to a file only its owner may read, and says what it holds', async () => {
    const user = await testUser();
    await deliverNow('initial-purchase', user.userId);
    const dir = mkdtempSync(path.join(tmpdir(), 'user-export-'));
    try {
      const file = path.join(dir, 'export.json');
      const { stdout, stderr } = await run(['--user', user.userId, '--out', file]);
      expect(stdout).toBe('');
      expect(stderr).toBe(`Wrote ${file}: 1 billing events, 0 wallet links, 0 league memberships.\n`);
      expect(statSync(file).mode & 0o777).toBe(0o600);
      const written = JSON.parse(readFileSync(file, 'utf8'));
      expect(written).toMatchObject({ userId: user.userId, billing: { ids: [user.userId], entitlements: [expect.objectContaining({ entitlement_id: 'pro' })] } });
      expect({ ...written, exportedAt: null }).toEqual({ ...JSON.parse((await run(['--user', user.userId])).stdout), exportedAt: null });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses a missing --user (usage, exit 2) and an id that is not a user id (exit 1); a user id with no rows gets empty lists, as the route answers', async () => {
    for (const args of [[], ['--user'], ['--out', 'export.json']]) {
      await expect(run(args)).rejects.toMatchObject({ code: 2, stdout: '', stderr: expect.stringContaining('Usage: npm run user:export -- --user <user id>') });
    }
    await expect(run(['--user', 'not-a-uuid'])).rejects.toMatchObject({ code: 1, stdout: '', stderr: 'invalid_request: The user id must be a UUID.\n' });
    // operations.md: "A user with none of these rows gets empty lists" (the id may be of a user since deleted); their own id is their billing id.
    const nobody = randomUUID();
    const { stdout } = await run(['--user', nobody]);
    expect(JSON.parse(stdout)).toMatchObject({
      userId: nobody, wallets: { links: [], challenges: [], contractChecks: [] },
      billing: { ids: [nobody], subscribers: [], entitlements: [], syncQueue: [], syncRequests: [], events: [] }, leagues: [],
    });
  });
});
