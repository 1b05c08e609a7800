import { randomUUID } from 'node:crypto';
import { testApiHandler } from 'next-test-api-route-handler';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import * as eventsRoute from '../../app/api/me/events/route.ts';
import * as userSyncRoute from '../../app/api/me/billing/sync/route.ts';
import * as walletLinkRoute from '../../app/api/wallet-link/route.ts';
import * as unlinkRoute from '../../app/api/wallet-link/[linkId]/route.ts';
import * as challengeRoute from '../../app/api/wallet-link/challenge/route.ts';
import * as leaguesRoute from '../../app/api/webhooks/leagues-sync/route.ts';
import { accountChangeListenerCount, MAX_ACCOUNT_STREAMS_PER_USER, subscribeAccountChanges, type AccountChange } from '../../lib/account-changes.ts';
import { DEV_WEBHOOK_SECRETS } from '../../lib/config.ts';
import { parseEventStream } from '../conformance/contract.ts';
import { billingEvent, deliver } from '../billing/support.ts';
import { delivery, freshSource, league, member } from '../leagues/fixtures.ts';
import { DATABASE_KINDS, suiteDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { startFakeRevenueCat, v1Entitlement, v1Subscription, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { callRoute } from '../support/http.ts';
import { testUser } from '../support/tokens.ts';
import { evmWallet } from '../wallets/wallets.ts';

/**
 * "User X's account changed", in local mode: every path that changes an account publishes it for
 * the users it changed, and only when it changed something (a repeated or stale delivery does
 * not), and GET /api/me/events streams it to that user alone, over real HTTP, with a Bearer token
 * or the account page's session cookie.
 */
const DAY = 86_400_000;

let revenuecat: FakeRevenueCat;
let restoreEnv: () => void;
beforeAll(async () => {
  revenuecat = await startFakeRevenueCat();
  // A RevenueCat key is a real secret: local mode (dev tokens) is asked for beside it.
  restoreEnv = setEnv({ LOCAL_DEV: '1', REVENUECAT_SECRET_API_KEY: revenuecat.apiKey, REVENUECAT_API_URL: revenuecat.url, REVENUECAT_REQUESTS_PER_SECOND: '100', BILLING_SYNC_AFTER: 'none' });
});
afterAll(async () => {
  restoreEnv();
  await revenuecat.close();
});

/** What the users' listeners heard, by user. */
function listen(...userIds: string[]): Record<string, AccountChange['what'][]> {
  const heard = Object.fromEntries(userIds.map((id) => [id, [] as AccountChange['what'][]]));
  for (const id of userIds) {
    const stop = subscribeAccountChanges(id, (change) => heard[id]!.push(change.what));
    onTestFinished(stop);
  }
  return heard;
}

/** A purchase event dated now (so it grants now), for `userId`. */
const purchaseNow = (userId: string, fields: Record<string, unknown> = {}) => {
  const now = Date.now();
  return billingEvent('initial-purchase', userId, { at: 0 }, { event_timestamp_ms: now, purchased_at_ms: now, expiration_at_ms: now + 30 * DAY, ...fields });
};

interface OpenStream {
  status: number;
  headers: Headers;
  /** Read until the text read so far satisfies `enough`; the text. */
  readUntil(enough: (text: string) => boolean): Promise<string>;
}

/** Open GET /api/me/events over real HTTP, run `use` with it, then hang up. */
async function withEventStream(request: { method?: string; headers?: Record<string, string> }, use: (stream: OpenStream & { text: string }) => Promise<void>): Promise<void> {
  await testApiHandler({
    appHandler: eventsRoute,
    test: async ({ fetch }) => {
      const response = await fetch({ method: request.method ?? 'GET', headers: request.headers });
      const reader = response.body?.pipeThrough(new TextDecoderStream()).getReader();
      const stream = {
        status: response.status,
        headers: response.headers,
        text: '',
        async readUntil(enough: (text: string) => boolean) {
          while (reader && !enough(stream.text)) {
            const { value, done } = await reader.read();
            if (done) break;
            stream.text += value;
          }
          return stream.text;
        },
      };
      try {
        await use(stream);
      } finally {
        await reader?.cancel().catch(() => undefined);
      }
    },
  });
}

const changesIn = (text: string) => parseEventStream(text).filter((block) => block.event === 'account_changed').map((block) => JSON.parse(block.data!) as AccountChange);

describe.each(DATABASE_KINDS)('account changes, published and streamed, on %s', (kind) => {
  suiteDatabase(kind);

  it('a billing event that changes entitlements tells its owner, once; a repeated or stale one, and other users, hear nothing', async () => {
    const ana = randomUUID();
    const bo = randomUUID();
    const heard = listen(ana, bo);
    const purchase = purchaseNow(ana);
    expect((await deliver(purchase)).status).toBe(200);
    expect(heard).toEqual({ [ana]: ['entitlements'], [bo]: [] });

    expect((await deliver(purchase)).status).toBe(200); // the same event id again: nothing applied
    const older = billingEvent('renewal', ana, { at: 0 }, { event_timestamp_ms: Date.now() - 10 * DAY, purchased_at_ms: Date.now() - 40 * DAY, expiration_at_ms: Date.now() - 10 * DAY });
    expect((await deliver(older)).status).toBe(200); // older than what is stored: stale
    expect(heard).toEqual({ [ana]: ['entitlements'], [bo]: [] });

    const refund = billingEvent('cancellation-customer-support', ana, { at: 0 }, { event_timestamp_ms: Date.now(), expiration_at_ms: Date.now() });
    expect((await deliver(refund)).status).toBe(200);
    expect(heard).toEqual({ [ana]: ['entitlements', 'entitlements'], [bo]: [] });
  });

  it('a transfer tells the user it moved to and the users it moved from', async () => {
    const from = randomUUID();
    const to = randomUUID();
    const bystander = randomUUID();
    expect((await deliver(purchaseNow(from))).status).toBe(200);
    const heard = listen(from, to, bystander);
    const transfer = billingEvent('transfer', to, { at: 0 }, { event_timestamp_ms: Date.now(), transferred_from: [from], transferred_to: [to], app_user_id: undefined, aliases: undefined, original_app_user_id: undefined });
    expect((await deliver(transfer)).status).toBe(200);
    expect(heard).toEqual({ [from]: ['entitlements'], [to]: ['entitlements'], [bystander]: [] });
  });

  it("the user's refresh from RevenueCat tells them when it changed something, and not when it did not", async () => {
    const user = await testUser();
    const heard = listen(user.userId);
    const now = Date.now();
    revenuecat.setCustomer(user.userId, {
      entitlements: { pro: v1Entitlement('pro_monthly', { purchased: now - DAY, expires: now + 29 * DAY }) },
      subscriptions: { pro_monthly: v1Subscription({ purchased: now - DAY, expires: now + 29 * DAY }) },
    });
    expect((await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } })).status).toBe(200);
    expect(heard[user.userId]).toEqual(['entitlements']);
  });

  it('linking a wallet tells the user (linking it again does not); unlinking tells them too', async () => {
    const user = await testUser();
    const other = await testUser();
    const heard = listen(user.userId, other.userId);
    const wallet = evmWallet();
    const challenge = await callRoute(challengeRoute, { method: 'POST', headers: { authorization: user.authorization }, body: { chain: 'evm', address: wallet.address, chainId: 1 } });
    expect(heard[user.userId]).toEqual([]); // a challenge changes nothing the account shows
    const body = { payload: { chain: 'evm', address: wallet.address, chainId: 1, message: challenge.body.message, signature: await wallet.sign(challenge.body.message) } };
    const linked = await callRoute(walletLinkRoute, { method: 'POST', headers: { authorization: user.authorization }, body });
    expect(linked.status).toBe(201);
    expect((await callRoute(walletLinkRoute, { method: 'POST', headers: { authorization: user.authorization }, body })).body.alreadyLinked).toBe(true);
    expect(heard[user.userId]).toEqual(['wallets']);
    const unlinked = await callRoute(unlinkRoute, { method: 'DELETE', headers: { authorization: user.authorization }, params: { linkId: linked.body.link.id } });
    expect(unlinked.status).toBe(204);
    expect(heard).toEqual({ [user.userId]: ['wallets', 'wallets'], [other.userId]: [] });
  });

  it('a league delivery tells the members it names; a repeated delivery tells no one', async () => {
    const [ana, bo, outsider] = [randomUUID(), randomUUID(), randomUUID()];
    const heard = listen(ana, bo, outsider);
    const body = delivery(freshSource('events'), {
      id: randomUUID(),
      leagues: [league('L1', '2025-06-01T12:00:00Z', { members: [member(1, { appUserId: ana }), member(2, { appUserId: bo }), member(3)] })],
    });
    const send = () => callRoute(leaguesRoute, { method: 'POST', headers: { 'x-webhook-secret': DEV_WEBHOOK_SECRETS.leagues }, body });
    expect((await send()).status).toBe(200);
    expect((await send()).body.duplicate).toBe(true);
    expect(heard).toEqual({ [ana]: ['leagues'], [bo]: ['leagues'], [outsider]: [] });
  });

  it('a league delivery also tells the members it leaves out or whose league it deletes', async () => {
    const [ana, bo, cy] = [randomUUID(), randomUUID(), randomUUID()];
    const source = freshSource('events');
    const send = (body: unknown) => callRoute(leaguesRoute, { method: 'POST', headers: { 'x-webhook-secret': DEV_WEBHOOK_SECRETS.leagues }, body });
    expect((await send(delivery(source, { leagues: [league('L1', '2025-06-01T12:00:00Z', { members: [member(1, { appUserId: ana }), member(2, { appUserId: bo })] })] }))).status).toBe(200);
    expect((await send(delivery(source, { leagues: [league('L2', '2025-06-01T12:00:00Z', { members: [member(3, { appUserId: cy })] })] }))).status).toBe(200);

    const heard = listen(ana, bo, cy);
    // A newer snapshot of L1 without bo: bo's leagues changed although the delivery does not name him.
    expect((await send(delivery(source, { leagues: [league('L1', '2025-06-02T12:00:00Z', { members: [member(1, { appUserId: ana })] })] }))).status).toBe(200);
    expect(heard).toEqual({ [ana]: ['leagues'], [bo]: ['leagues'], [cy]: [] });
    // L2 deleted: cy, named nowhere in the delivery, is told.
    expect((await send(delivery(source, { deleted: [{ externalId: 'L2', deletedAt: '2025-06-03T12:00:00Z' }] }))).status).toBe(200);
    expect(heard).toEqual({ [ana]: ['leagues'], [bo]: ['leagues'], [cy]: ['leagues'] });
  });

  it("GET /api/me/events streams the caller's changes, and only theirs, and lets go when the client hangs up", async () => {
    const ana = await testUser();
    const bo = await testUser();
    await withEventStream({ headers: { authorization: ana.authorization } }, async (anaStream) => {
      expect(anaStream.status).toBe(200);
      expect(anaStream.headers.get('content-type')).toBe('text/event-stream');
      expect(anaStream.headers.get('cache-control')).toBe('no-cache, no-transform');
      expect(await anaStream.readUntil((text) => text.includes('\n\n'))).toBe('retry: 2000\n\n');
      await withEventStream({ headers: { authorization: bo.authorization } }, async (boStream) => {
        await boStream.readUntil((text) => text.includes('\n\n'));
        expect(accountChangeListenerCount(ana.userId)).toBe(1);
        expect((await deliver(purchaseNow(ana.userId))).status).toBe(200);
        const text = await anaStream.readUntil((read) => read.includes('event: account_changed'));
        expect(changesIn(text)).toEqual([{ what: 'entitlements', at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) }]);
        // Published to both streams' listeners at once: Bo's got nothing.
        expect(boStream.text).toBe('retry: 2000\n\n');
      });
    });
    await expect.poll(() => accountChangeListenerCount(ana.userId) + accountChangeListenerCount(bo.userId)).toBe(0);
  });

  it("takes the account page's session cookie when no Authorization header is sent, but not on a request from another site", async () => {
    const user = await testUser();
    await withEventStream({ headers: { cookie: `theme=dark; account_session=${user.token}` } }, async (stream) => {
      expect(stream.status).toBe(200);
      await stream.readUntil((text) => text.includes('\n\n'));
      expect((await deliver(purchaseNow(user.userId))).status).toBe(200);
      expect(changesIn(await stream.readUntil((text) => text.includes('event: account_changed')))).toMatchObject([{ what: 'entitlements' }]);
    });
    for (const site of ['cross-site', 'same-site']) {
      const refused = await callRoute(eventsRoute, { headers: { cookie: `account_session=${user.token}`, 'sec-fetch-site': site } });
      expect({ site, status: refused.status, code: refused.body.code }).toEqual({ site, status: 401, code: 'missing_token' });
      expect(refused.headers.get('www-authenticate')).toBe('Bearer realm="account-link"');
    }
    const sameOrigin = await withStatus({ cookie: `account_session=${user.token}`, 'sec-fetch-site': 'same-origin' });
    expect(sameOrigin).toBe(200);
    // A header that is there wins, even when it is wrong: the cookie does not paper over it.
    const wrongHeader = await callRoute(eventsRoute, { headers: { cookie: `account_session=${user.token}`, authorization: 'Bearer nope' } });
    expect({ status: wrongHeader.status, code: wrongHeader.body.code }).toEqual({ status: 401, code: 'invalid_token' });
    const none = await callRoute(eventsRoute);
    expect({ status: none.status, code: none.body.code }).toEqual({ status: 401, code: 'missing_token' });
    const tampered = await callRoute(eventsRoute, { headers: { cookie: `account_session=${user.token.slice(0, -3)}abc` } });
    expect({ status: tampered.status, code: tampered.body.code }).toEqual({ status: 401, code: 'invalid_token' });
    expect(accountChangeListenerCount(user.userId)).toBe(0);
  });

  it(`opens at most ${MAX_ACCOUNT_STREAMS_PER_USER} streams per account: another gets 429 with Retry-After until one ends`, async () => {
    const ana = await testUser();
    const bo = await testUser();
    const held = Array.from({ length: MAX_ACCOUNT_STREAMS_PER_USER - 1 }, () => subscribeAccountChanges(ana.userId, () => undefined));
    onTestFinished(() => held.forEach((stop) => stop()));
    await withEventStream({ headers: { authorization: ana.authorization } }, async (last) => {
      expect(last.status).toBe(200); // the tenth
      await withEventStream({ headers: { authorization: ana.authorization } }, async (refused) => {
        expect(refused.status).toBe(429);
        expect(refused.headers.get('content-type')).toBe('application/problem+json');
        expect(refused.headers.get('retry-after')).toBe('2');
        expect(JSON.parse(await refused.readUntil(() => false))).toMatchObject({ code: 'rate_limited' });
        expect(accountChangeListenerCount(ana.userId)).toBe(MAX_ACCOUNT_STREAMS_PER_USER);
      });
      await withEventStream({ headers: { authorization: bo.authorization } }, async (other) => expect(other.status).toBe(200));
    });
    held.pop()!();
    await withEventStream({ headers: { authorization: ana.authorization } }, async (again) => expect(again.status).toBe(200));
  });

  it('answers HEAD with the stream headers and listens to nothing', async () => {
    const user = await testUser();
    await withEventStream({ method: 'HEAD', headers: { authorization: user.authorization } }, async (stream) => {
      expect(stream.status).toBe(200);
      expect(stream.headers.get('content-type')).toBe('text/event-stream');
      expect(accountChangeListenerCount(user.userId)).toBe(0);
    });
  });

  it('outside local mode answers 404 live_updates_not_served, pointing to Supabase Realtime', async () => {
    const user = await testUser();
    const restore = setEnv({ DATABASE_URL: 'postgres://app:pw@127.0.0.1:9/app', SUPABASE_JWT_SECRET: 'j'.repeat(40), APP_ORIGIN: 'https://app.example.com', SUBSCRIPTION_WEBHOOK_SECRET: 'billing-secret-0123456789abcdef01234', LOCAL_DEV: undefined });
    try {
      const response = await callRoute(eventsRoute, { headers: { authorization: user.authorization } });
      expect({ status: response.status, code: response.body.code }).toEqual({ status: 404, code: 'live_updates_not_served' });
      expect(response.body.detail).toContain('"user:<your user id>", event "account_changed"');
    } finally {
      restore();
    }
  });
});

/** The status of GET /api/me/events with these headers (the stream hung up at once). */
async function withStatus(headers: Record<string, string>): Promise<number> {
  let status = 0;
  await withEventStream({ headers }, async (stream) => {
    status = stream.status;
  });
  return status;
}
