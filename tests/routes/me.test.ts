import { describe, expect, it } from 'vitest';
import * as meRoute from '../../app/api/me/route.ts';
import * as walletLinkRoute from '../../app/api/wallet-link/route.ts';
import * as challengeRoute from '../../app/api/wallet-link/challenge/route.ts';
import * as leaguesRoute from '../../app/api/webhooks/leagues-sync/route.ts';
import { DEV_WEBHOOK_SECRETS } from '../../lib/config.ts';
import { dbCallCount } from '../../lib/db/index.ts';
import { deliver } from '../billing/support.ts';
import { delivery, freshSource, league } from '../leagues/fixtures.ts';
import { DATABASE_KINDS, suiteDatabase } from '../support/databases.ts';
import { callRoute } from '../support/http.ts';
import { testUser } from '../support/tokens.ts';
import { evmWallet } from '../wallets/wallets.ts';

describe.each(DATABASE_KINDS)('GET /api/me on %s', (kind) => {
  suiteDatabase(kind);

  it('answers a new user with empty lists', async () => {
    const user = await testUser({ email: 'new@example.test' });
    const response = await callRoute(meRoute, { headers: { authorization: user.authorization } });
    expect(response.status).toBe(200);
    expect(response.body).toEqual({ userId: user.userId, email: 'new@example.test', wallets: [], entitlements: [], leagues: [] });
  });

  it('shows the wallets, entitlements and leagues the three endpoints stored, in one database call', async () => {
    const user = await testUser({ email: 'ana@example.test' });
    const wallet = evmWallet();

    const challenge = await callRoute(challengeRoute, { method: 'POST', headers: { authorization: user.authorization }, body: { chain: 'evm', address: wallet.address, chainId: 8453 } });
    expect(challenge.status).toBe(201);
    const link = await callRoute(walletLinkRoute, {
      method: 'POST',
      headers: { authorization: user.authorization },
      body: { payload: { chain: 'evm', address: wallet.address, chainId: 8453, message: challenge.body.message, signature: await wallet.sign(challenge.body.message) } },
    });
    expect(link.status).toBe(201);

    const now = Date.now();
    const purchase = await deliver({
      api_version: '1.0',
      event: {
        id: `evt-me-${user.userId}`, type: 'INITIAL_PURCHASE', app_user_id: user.userId, aliases: [user.userId], original_app_user_id: user.userId,
        product_id: 'pro_monthly', entitlement_ids: ['pro'], period_type: 'NORMAL', store: 'APP_STORE', environment: 'PRODUCTION',
        event_timestamp_ms: now, purchased_at_ms: now, expiration_at_ms: now + 30 * 86_400_000, transaction_id: 't1', original_transaction_id: 't1',
      },
    });
    expect(purchase.status).toBe(200);

    const source = freshSource('me');
    const updatedAt = '2026-11-21T17:59:00Z';
    const synced = await callRoute(leaguesRoute, {
      method: 'POST',
      headers: { 'x-webhook-secret': DEV_WEBHOOK_SECRETS.leagues },
      body: delivery(source, { leagues: [league('L1', updatedAt, { name: 'Sunday Funday', season: '2026', members: [{ externalUserId: 'u1', displayName: 'Ana', role: 'commissioner', appUserId: user.userId }] })] }),
    });
    expect(synced.status).toBe(200);

    const before = dbCallCount();
    const response = await callRoute(meRoute, { headers: { authorization: user.authorization } });
    expect(dbCallCount() - before).toBe(1);
    expect(response.status).toBe(200);
    expect(response.body).toEqual({
      userId: user.userId,
      email: 'ana@example.test',
      wallets: [{
        id: link.body.link.id, chain: 'evm', address: wallet.address, chainId: 8453, kind: 'eoa', scope: 'evm', accountId: `eip155:8453:${wallet.address}`, createdAt: expect.any(String),
      }],
      entitlements: [{
        id: 'pro', active: true, status: 'active', productId: 'pro_monthly', expiresAt: new Date(now + 30 * 86_400_000).toISOString(),
        willRenew: true, graceExpiresAt: null, store: 'APP_STORE', environment: 'PRODUCTION', periodType: 'NORMAL', syncedAt: null,
        sources: [{ productId: 'pro_monthly', store: 'APP_STORE', environment: 'PRODUCTION', status: 'active', active: true,
          expiresAt: new Date(now + 30 * 86_400_000).toISOString(), graceExpiresAt: null, willRenew: true }],
      }],
      leagues: [{ source, externalId: 'L1', name: 'Sunday Funday', sport: 'nfl', season: '2026', status: 'in_season', role: 'commissioner', updatedAt }],
    });

    // Another user sees none of it.
    const other = await testUser();
    const theirs = await callRoute(meRoute, { headers: { authorization: other.authorization } });
    expect(theirs.body).toMatchObject({ wallets: [], entitlements: [], leagues: [] });
  });

  it('answers 401 without a token and makes no database call', async () => {
    const before = dbCallCount();
    const response = await callRoute(meRoute);
    expect(response.status).toBe(401);
    expect(dbCallCount()).toBe(before);
  });
});
