import { randomUUID } from 'node:crypto';
import { createElement } from 'react';
import { renderToStaticMarkup } from 'react-dom/server';
import * as chains from 'viem/chains';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as statusRoute from '../../app/api/admin/status/route.ts';
import * as explainRoute from '../../app/api/admin/billing/subscribers/[appUserId]/route.ts';
import { AccountView, LiveAccount } from '../../app/components/account-view.tsx';
import { ENTITLEMENT_STATUSES } from '../../lib/billing/event-effects.ts';
import type { Account } from '../../packages/client/src/index.ts';
import { EVM_CHAIN_NAMES } from '../../lib/wallets/chains.ts';
import { describeEntitlementStatus } from '../../app/components/entitlement-status.ts';
import { fixture } from '../billing/fixtures.ts';
import { deliver } from '../billing/support.ts';
import * as challengeRoute from '../../app/api/wallet-link/challenge/route.ts';
import * as linkRoute from '../../app/api/wallet-link/route.ts';
import { deliverNow, getMe, type User } from '../support/account-actions.ts';
import { suiteDatabase } from '../support/databases.ts';
import { DEPLOYMENT_SETTINGS, setEnv } from '../support/env.ts';
import { callRoute } from '../support/http.ts';
import { testUser } from '../support/tokens.ts';
import { evmWallet } from '../wallets/wallets.ts';

/** What a person reads: the status and explanations of RevenueCat's TEST, the account page's chains and statuses. */
const ADMIN_API_SECRET = 'admin-secret-for-words-tests-0123456789';
const admin = { authorization: `Bearer ${ADMIN_API_SECRET}` };

describe('RevenueCat\'s TEST on a deployment (where sandbox purchases grant nothing)', () => {
  suiteDatabase('pglite');
  let restore: () => void;
  beforeAll(() => {
    restore = setEnv({ ...DEPLOYMENT_SETTINGS, ADMIN_API_SECRET });
  });
  afterAll(() => restore());

  it('is named as the dashboard\'s test event, never as a sandbox purchase', async () => {
    // What "Send test event" sends: a TEST in the SANDBOX environment, for a made-up user.
    const test = fixture('test', { id: `TEST-${randomUUID()}`, event_timestamp_ms: Date.now() });
    expect(test.event.environment).toBe('SANDBOX');
    expect((await deliver(test, { authorization: `Bearer ${DEPLOYMENT_SETTINGS.SUBSCRIPTION_WEBHOOK_SECRET}` })).status).toBe(200);
    const status = await callRoute(statusRoute, { headers: admin });
    expect(status.body.parts.sandboxPurchases).toBe('recorded only');
    expect(status.body.webhooks.billing.last).toMatchObject({ type: 'TEST', outcome: 'ignored', reason: 'record_only_type' });
    const explained = await callRoute(explainRoute, { headers: admin, params: { appUserId: String(test.event.app_user_id) } });
    expect(explained.status, explained.text).toBe(200);
    expect(explained.text).toContain('RevenueCat\'s TEST, which its dashboard\'s \\"Send test event\\" sends');
    expect(explained.text).not.toMatch(/sandbox purchase/);
  });
});

describe('the account page', () => {
  suiteDatabase('pglite');
  let restore: () => void;
  beforeAll(() => {
    restore = setEnv({ WALLET_EVM_CHAIN_IDS: '1,8453' });
  });
  afterAll(() => restore());

  /** Link an ordinary wallet on Base through the routes: challenge, sign, link. */
  const linkOnBase = async (user: User) => {
    const wallet = evmWallet();
    const network = { chain: 'evm', address: wallet.address, chainId: 8453 };
    const challenge = await callRoute(challengeRoute, { method: 'POST', headers: { authorization: user.authorization }, body: network });
    expect(challenge.status, challenge.text).toBe(201);
    const message = challenge.body.message as string;
    const linked = await callRoute(linkRoute, { method: 'POST', headers: { authorization: user.authorization }, body: { payload: { ...network, message, signature: await wallet.sign(message) } } });
    expect(linked.status, linked.text).toBe(201);
  };

  /** The page's account section as the server renders it, from what GET /api/me answered. */
  const render = (account: Account) => {
    const view = createElement(AccountView, { evmChainIds: [1, 8453], solanaClusters: ['mainnet'], canRefreshPurchases: false });
    // (createElement's typings want the children among the props; at run time they are the third argument, as JSX passes them.)
    const live = createElement(LiveAccount as (props: Omit<Parameters<typeof LiveAccount>[0], 'children'>) => ReturnType<typeof LiveAccount>, { initialAccount: account }, view);
    return renderToStaticMarkup(live);
  };

  it('names Base as Base, and says a cancelled subscription in words', async () => {
    const user = await testUser();
    await linkOnBase(user);
    await deliverNow('initial-purchase', user.userId);
    await deliverNow('cancellation-unsubscribe', user.userId);
    const account = await getMe(user) as unknown as Account;
    expect(account.entitlements.map((entitlement) => entitlement.status)).toEqual(['cancelled_active']);
    const html = render(account);
    expect(html).toContain('<td data-testid="wallet-chain">Base (chain 8453)</td>');
    expect(html).not.toContain('Ethereum (chain 8453)');
    expect(html).toMatch(/<td data-testid="entitlement-access"><span class="badge ok">active<\/span> <span class="muted">cancelled: access until the period ends<\/span><\/td>/);
    expect(html).not.toMatch(/cancelled active/);
  });

  it('an active, renewing subscription: the badge alone, not "active active"', async () => {
    const user = await testUser();
    await deliverNow('initial-purchase', user.userId);
    const html = render(await getMe(user) as unknown as Account);
    expect(html).toContain('<td data-testid="entitlement-access"><span class="badge ok">active</span></td>');
  });

  it('has words for every status, and the chains\' names as the chains spell them (viem\'s definitions)', () => {
    for (const status of ENTITLEMENT_STATUSES) expect(describeEntitlementStatus(status) ?? 'badge only').not.toContain('_');
    const known = Object.values(chains) as { id: number; name: string }[];
    for (const [id, name] of Object.entries(EVM_CHAIN_NAMES)) {
      expect(known.filter((chain) => chain.id === Number(id)).map((chain) => chain.name), `chain ${id}`).toContain(name);
    }
  });
});
