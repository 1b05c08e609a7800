import { randomUUID } from 'node:crypto';
import { expect } from 'vitest';
import * as meRoute from '../../app/api/me/route.ts';
import * as leaguesRoute from '../../app/api/webhooks/leagues-sync/route.ts';
import * as linkIdRoute from '../../app/api/wallet-link/[linkId]/route.ts';
import * as challengeRoute from '../../app/api/wallet-link/challenge/route.ts';
import * as linkRoute from '../../app/api/wallet-link/route.ts';
import { DEV_WEBHOOK_SECRETS } from '../../lib/config.ts';
import { deliver } from '../billing/support.ts';
import { fixture } from '../billing/fixtures.ts';
import { networkOf, type TestWallet } from '../wallets/wallets.ts';
import { callRoute } from './http.ts';
import type { testUser } from './tokens.ts';

/** What a signed-in user does through the service's routes, over real HTTP, for tests of what follows. */

export type User = Awaited<ReturnType<typeof testUser>>;

const HOUR_MS = 3_600_000;

/** GET /api/me for the user (200). */
export async function getMe(user: User) {
  const response = await callRoute(meRoute, { headers: { authorization: user.authorization } });
  expect(response.status).toBe(200);
  return response.body as { wallets: Record<string, unknown>[]; entitlements: Record<string, unknown>[]; leagues: Record<string, unknown>[] };
}

/** Challenge, sign, link (201); the link. */
export async function linkWallet(user: User, wallet: TestWallet): Promise<{ id: string }> {
  const challenge = await callRoute(challengeRoute, {
    method: 'POST', headers: { authorization: user.authorization }, body: { chain: wallet.chain, address: wallet.address, ...networkOf(wallet) },
  });
  expect(challenge.status).toBe(201);
  const message = challenge.body.message as string;
  const linked = await callRoute(linkRoute, {
    method: 'POST', headers: { authorization: user.authorization },
    body: { payload: { chain: wallet.chain, address: wallet.address, ...networkOf(wallet), message, signature: await wallet.sign(message) } },
  });
  expect(linked.status).toBe(201);
  return linked.body.link;
}

/** DELETE /api/wallet-link/{id} (204). */
export async function unlinkWallet(user: User, linkId: string): Promise<void> {
  const response = await callRoute(linkIdRoute, { method: 'DELETE', headers: { authorization: user.authorization }, params: { linkId } });
  expect(response.status).toBe(204);
}

/**
 * A RevenueCat event of the corpus about `appUserId`, happening now (the real clock): its period ran
 * from `purchasedHoursAgo` hours ago to `expiresInHours` from now (null: no end). Delivered (200).
 */
export async function deliverNow(fixtureName: string, appUserId: string, period: { purchasedHoursAgo?: number; expiresInHours?: number | null } = {},
  fields: Record<string, unknown> = {}) {
  const now = Date.now();
  const body = fixture(fixtureName, {
    id: `evt-${randomUUID()}`,
    app_user_id: appUserId,
    aliases: [appUserId],
    original_app_user_id: appUserId,
    event_timestamp_ms: now,
    purchased_at_ms: now - (period.purchasedHoursAgo ?? 1) * HOUR_MS,
    expiration_at_ms: period.expiresInHours === null ? null : now + (period.expiresInHours ?? 24 * 30) * HOUR_MS,
    ...fields,
  });
  const response = await deliver(body);
  expect({ event: body.event.type, status: response.status }).toEqual({ event: body.event.type, status: 200 });
  return body;
}

/** A leagues-sync delivery (200). */
export async function deliverLeagues(body: unknown): Promise<void> {
  const response = await callRoute(leaguesRoute, { method: 'POST', headers: { 'x-webhook-secret': DEV_WEBHOOK_SECRETS.leagues }, body });
  expect(response.status).toBe(200);
}
