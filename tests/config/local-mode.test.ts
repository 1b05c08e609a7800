import { afterEach, expect, it } from 'vitest';
import * as meRoute from '../../app/api/me/route.ts';
import * as billingRoute from '../../app/api/webhooks/subscription-billing/route.ts';
import * as leaguesRoute from '../../app/api/webhooks/leagues-sync/route.ts';
import * as adminSubscriberRoute from '../../app/api/admin/billing/subscribers/[appUserId]/route.ts';
import * as adminStatusRoute from '../../app/api/admin/status/route.ts';
import * as standInRoute from '../../app/api/dev/revenuecat/v1/subscribers/[appUserId]/route.ts';
import { signInLocally } from '../../app/actions.ts';
import { DEV_ADMIN_SECRET, DEV_WEBHOOK_SECRETS, REVENUECAT_STAND_IN_KEY } from '../../lib/config.ts';
import { fixture } from '../billing/fixtures.ts';
import { delivery, freshSource, league } from '../leagues/fixtures.ts';
import { describeOn, suiteDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { callRoute } from '../support/http.ts';
import { testUser } from '../support/tokens.ts';

/**
 * Development conveniences exist only in local mode. The configurations an outside review found
 * them in (a self-hosted DATABASE_URL; a half-set Supabase project) are refused as a whole: a dev
 * token, a dev webhook secret and local sign-in get nothing, and the database stays untouched.
 */
const MIXED: { name: string; env: Record<string, string> }[] = [
  { name: 'only DATABASE_URL (self-hosting)', env: { DATABASE_URL: 'postgres://app:pw@127.0.0.1:9/app' } },
  { name: 'SUPABASE_URL without a database key or webhook secrets', env: { SUPABASE_URL: 'http://127.0.0.1:9', AUTH_VERIFY_SESSION: 'false' } },
  { name: 'a Supabase database but no webhook secrets', env: { SUPABASE_URL: 'http://127.0.0.1:9', SUPABASE_SECRET_KEY: 'sb_secret_x', AUTH_VERIFY_SESSION: 'false', APP_ORIGIN: 'https://app.example.com' } },
  // Found by a second outside review: a self-hosted deployment that forgot its database.
  { name: 'a public https APP_ORIGIN and real webhook secrets, but no database', env: { APP_ORIGIN: 'https://app.example.com', SUBSCRIPTION_WEBHOOK_SECRET: 'real-billing-secret-0123456789abcdef', LEAGUES_WEBHOOK_SECRET: 'real-leagues-secret-0123456789abcdef' } },
  // Found by a third: real secrets and a chain's RPC elsewhere, no database or Supabase setting.
  {
    name: 'real secrets and an outside RPC, but no database',
    env: {
      REVENUECAT_SECRET_API_KEY: 'sk_real_revenuecat_key', SUBSCRIPTION_WEBHOOK_SECRET: 'real-billing-secret-0123456789abcdef', CRON_SECRET: 'c'.repeat(40),
      ADMIN_API_SECRET: 'a'.repeat(40), WALLET_EVM_RPC_URLS: '1=https://eth.example/v2/key',
    },
  },
];
/** Everything a test process may have set, cleared, so each case is exactly its own settings. */
const CLEAR = Object.fromEntries(['DATABASE_URL', 'SUPABASE_URL', 'SUPABASE_SECRET_KEY', 'SUPABASE_PUBLISHABLE_KEY', 'SUPABASE_JWT_SECRET', 'AUTH_VERIFY_SESSION', 'APP_ORIGIN', 'SUBSCRIPTION_WEBHOOK_SECRET', 'LEAGUES_WEBHOOK_SECRET', 'LOCAL_DEV', 'VERCEL',
  'REVENUECAT_SECRET_API_KEY', 'REVENUECAT_API_URL', 'CRON_SECRET', 'ADMIN_API_SECRET', 'WALLET_EVM_RPC_URLS', 'REVENUECAT_STAND_IN', 'POSTGRES_URL', 'NEXT_PUBLIC_SUPABASE_URL'].map((name) => [name, undefined]));

/**
 * Found by a later outside review: LOCAL_DEV=1 beside a real deployment's settings kept every dev
 * door open onto its data. Each is refused as a whole (503 to every caller, the dev admin secret
 * and the RevenueCat stand-in included).
 */
const LOCAL_DEV_BESIDE_REAL: { name: string; env: Record<string, string> }[] = [
  { name: 'a database on another machine', env: { LOCAL_DEV: '1', DATABASE_URL: 'postgres://app:pw@db.example.com:5432/app', REVENUECAT_STAND_IN: '1' } },
  { name: 'a Supabase project with its database key', env: { LOCAL_DEV: '1', SUPABASE_URL: 'https://abc.supabase.co', SUPABASE_SECRET_KEY: 'sb_secret_x', AUTH_VERIFY_SESSION: 'false' } },
  {
    name: 'a remote database, a Supabase project and real secrets (the reviewers\' mix)',
    env: { LOCAL_DEV: '1', DATABASE_URL: 'postgres://app:pw@db.example.com/app', SUPABASE_URL: 'https://abc.supabase.co', SUBSCRIPTION_WEBHOOK_SECRET: 'real-billing-secret-0123456789abcdef', CRON_SECRET: 'c'.repeat(40), REVENUECAT_STAND_IN: '1' },
  },
];

/** A purchase for `userId` through the billing webhook with the dev secret. */
const deliverAsDev = (userId: string, suffix = '') => callRoute(billingRoute, {
  method: 'POST', headers: { authorization: `Bearer ${DEV_WEBHOOK_SECRETS.subscription}` }, body: fixture('initial-purchase', { id: `evt-dev-${userId}${suffix}`, app_user_id: userId }),
});

const count = async (db: { sql: (text: string) => Promise<unknown[]> }, table: string) => ((await db.sql(`select count(*)::int as n from public.${table}`))[0] as { n: number }).n;

/** What signInLocally did: the redirect it answered with, or the first thing it tried that needs a request. */
async function trySignInLocally(email: string): Promise<string> {
  const form = new FormData();
  form.set('email', email);
  try {
    await signInLocally(form);
    return 'returned';
  } catch (error) {
    const digest = (error as { digest?: string }).digest;
    // redirect() throws NEXT_REDIRECT;<type>;<url>;...; cookies() outside a request throws plainly.
    return digest?.startsWith('NEXT_REDIRECT') ? `redirect ${digest.split(';')[2]}` : `reached: ${(error as Error).message.slice(0, 60)}`;
  }
}

describeOn('pglite')('development conveniences outside local mode', () => {
  const db = suiteDatabase('pglite');
  const restores: (() => void)[] = [];
  afterEach(() => {
    while (restores.length > 0) restores.pop()!();
  });

  it.each(MIXED)('$name: a dev token, the dev webhook secrets and local sign-in are all refused', async ({ env }) => {
    // Minted in local mode, with the same dev key a confused deployment would have used.
    const user = await testUser();
    restores.push(setEnv({ ...CLEAR, ...env }));
    const [events, leagues] = [await count(db, 'billing_events'), await count(db, 'leagues')];

    const me = await callRoute(meRoute, { headers: { authorization: user.authorization } });
    const billing = await callRoute(billingRoute, {
      method: 'POST', headers: { authorization: `Bearer ${DEV_WEBHOOK_SECRETS.subscription}` }, body: fixture('initial-purchase', { id: `evt-local-${user.userId}`, app_user_id: user.userId }),
    });
    const sync = await callRoute(leaguesRoute, {
      method: 'POST', headers: { 'x-webhook-secret': DEV_WEBHOOK_SECRETS.leagues }, body: delivery(freshSource('local'), { leagues: [league('L1', '2026-11-21T17:59:00Z')] }),
    });
    for (const response of [me, billing, sync]) {
      expect({ status: response.status, type: response.headers.get('content-type'), code: response.body?.code, detail: response.body?.detail })
        .toEqual({ status: 503, type: 'application/problem+json', code: 'service_misconfigured', detail: 'The service is misconfigured.' });
      // What to set goes to the log, never to a caller.
      expect(response.text).not.toMatch(/DATABASE_URL|SUPABASE|WEBHOOK_SECRET|APP_ORIGIN|LOCAL_DEV|REVENUECAT|CRON_SECRET|ADMIN_API_SECRET|WALLET_EVM/);
    }
    expect([await count(db, 'billing_events'), await count(db, 'leagues')]).toEqual([events, leagues]);
    expect(await trySignInLocally('mallory@example.com')).toBe('redirect /?error=local-sign-in-unavailable');
  });

  it.each(LOCAL_DEV_BESIDE_REAL)('LOCAL_DEV=1 beside $name: every dev door is a 503, nothing is written', async ({ env }) => {
    const user = await testUser();
    // What the dev admin secret and the stand-in would have read, had they answered.
    expect((await deliverAsDev(user.userId)).status).toBe(200);
    restores.push(setEnv({ ...CLEAR, ...env }));
    const [events, leagues] = [await count(db, 'billing_events'), await count(db, 'leagues')];
    const answers = {
      me: await callRoute(meRoute, { headers: { authorization: user.authorization } }),
      billing: await deliverAsDev(user.userId, 'again'),
      leagues: await callRoute(leaguesRoute, {
        method: 'POST', headers: { 'x-webhook-secret': DEV_WEBHOOK_SECRETS.leagues }, body: delivery(freshSource('local-dev'), { leagues: [league('L1', '2026-11-21T17:59:00Z')] }),
      }),
      adminStatus: await callRoute(adminStatusRoute, { headers: { authorization: `Bearer ${DEV_ADMIN_SECRET}` } }),
      adminHistory: await callRoute(adminSubscriberRoute, { headers: { authorization: `Bearer ${DEV_ADMIN_SECRET}` }, params: { appUserId: user.userId } }),
      standIn: await callRoute(standInRoute, { headers: { authorization: `Bearer ${REVENUECAT_STAND_IN_KEY}` }, params: { appUserId: user.userId } }),
    };
    for (const [name, response] of Object.entries(answers)) {
      // The stand-in is not there at all outside local mode: the 404 of any unknown path.
      const expected = name === 'standIn' ? { status: 404, code: 'not_found' } : { status: 503, code: 'service_misconfigured' };
      expect({ name, status: response.status, code: response.body?.code }).toEqual({ name, ...expected });
      // What to set goes to the log, never to a caller.
      expect(response.text).not.toMatch(/db\.example\.com|supabase\.co|LOCAL_DEV|DATABASE_URL|SUPABASE_URL/);
    }
    expect([await count(db, 'billing_events'), await count(db, 'leagues')]).toEqual([events, leagues]);
    expect(await trySignInLocally('mallory@example.com')).toBe('redirect /?error=local-sign-in-unavailable');
  });

  it('with LOCAL_DEV=1 the same self-hosting settings are local mode: dev tokens, dev secrets and local sign-in work', async () => {
    const user = await testUser({ email: 'dev@example.test' });
    restores.push(setEnv({ ...CLEAR, ...MIXED[0]!.env, LOCAL_DEV: '1' }));
    const me = await callRoute(meRoute, { headers: { authorization: user.authorization } });
    expect({ status: me.status, userId: me.body?.userId }).toEqual({ status: 200, userId: user.userId });
    const billing = await callRoute(billingRoute, {
      method: 'POST', headers: { authorization: `Bearer ${DEV_WEBHOOK_SECRETS.subscription}` }, body: fixture('initial-purchase', { id: `evt-local-${user.userId}`, app_user_id: user.userId }),
    });
    expect(billing.status).toBe(200);
    // Past the gate, local sign-in goes on to set the cookie (which needs a real request here).
    expect(await trySignInLocally('dev@example.test')).toMatch(/^reached: /);
  });

  it('with nothing set (a newcomer\'s npm run dev) local sign-in is on, and refuses a malformed e-mail', async () => {
    restores.push(setEnv(CLEAR));
    expect(await trySignInLocally('dev@localhost')).toMatch(/^reached: /);
    expect(await trySignInLocally('not an e-mail')).toBe('redirect /?error=invalid-email');
  });
});
