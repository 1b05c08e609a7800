import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import * as meRoute from '../../app/api/me/route.ts';
import * as billingRoute from '../../app/api/webhooks/subscription-billing/route.ts';
import { DEV_WEBHOOK_SECRETS } from '../../lib/config.ts';
import { fixture } from '../billing/fixtures.ts';
import { authorizationGrammarCases, MALFORMED_JWTS } from '../support/authorization-grammar.ts';
import { describeOn, suiteDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { startFakeSupabaseAuth, type FakeSupabaseAuth } from '../support/fake-supabase-auth.ts';
import { callRoute, type RouteResponse } from '../support/http.ts';
import { testUser } from '../support/tokens.ts';

/**
 * One grammar for every Authorization header the service reads (RFC 9110 section 11, RFC 6750):
 * session tokens on the API and the billing webhook's secret. A spelling the grammar allows
 * authenticates; anything else is a 401 problem with WWW-Authenticate, never a 5xx.
 */

function expectRefused(response: RouteResponse, code: string) {
  expect({ status: response.status, type: response.headers.get('content-type'), code: response.body?.code, challenge: response.headers.get('www-authenticate')?.split(' ')[0] })
    .toEqual({ status: 401, type: 'application/problem+json', code, challenge: 'Bearer' });
}

describeOn('pglite')('Authorization grammar: session tokens on GET /api/me (local dev key)', () => {
  suiteDatabase('pglite');
  let user: Awaited<ReturnType<typeof testUser>>;
  beforeAll(async () => {
    user = await testUser();
  });

  it.each(authorizationGrammarCases('TOKEN'))('$name -> accepted: $accepted', async ({ header, accepted }) => {
    const response = await callRoute(meRoute, { headers: { authorization: header.replaceAll('TOKEN', user.token) } });
    if (accepted) expect({ status: response.status, userId: response.body?.userId }).toEqual({ status: 200, userId: user.userId });
    else expectRefused(response, 'invalid_token');
  });

  it.each(MALFORMED_JWTS)('a malformed JWT ($name) is a 401', async ({ token }) => {
    expectRefused(await callRoute(meRoute, { headers: { authorization: `Bearer ${token}` } }), 'invalid_token');
  });
});

describeOn('pglite')('Authorization grammar: session tokens on GET /api/me (Supabase JWKS over real HTTP)', () => {
  suiteDatabase('pglite');
  let auth: FakeSupabaseAuth;
  let restoreEnv: () => void;
  let token: string;
  const userId = randomUUID();
  beforeAll(async () => {
    auth = await startFakeSupabaseAuth();
    restoreEnv = setEnv({ SUPABASE_URL: auth.url, SUPABASE_PUBLISHABLE_KEY: auth.apiKey, SUPABASE_JWT_SECRET: undefined, AUTH_VERIFY_SESSION: 'false', LOCAL_DEV: '1' });
    token = await auth.mint({ userId });
  });
  afterAll(async () => {
    restoreEnv();
    await auth.close();
  });

  it.each(authorizationGrammarCases('TOKEN'))('$name -> accepted: $accepted', async ({ header, accepted }) => {
    const response = await callRoute(meRoute, { headers: { authorization: header.replaceAll('TOKEN', token) } });
    if (accepted) expect({ status: response.status, userId: response.body?.userId }).toEqual({ status: 200, userId });
    else expectRefused(response, 'invalid_token');
  });

  it.each(MALFORMED_JWTS)('a malformed JWT ($name) is a 401', async ({ token: malformed }) => {
    expectRefused(await callRoute(meRoute, { headers: { authorization: `Bearer ${malformed}` } }), 'invalid_token');
  });
});

describeOn('pglite')('Authorization grammar: the billing webhook secret', () => {
  const db = suiteDatabase('pglite');

  it.each(authorizationGrammarCases(DEV_WEBHOOK_SECRETS.subscription))('$name -> accepted: $accepted', async ({ header, accepted }) => {
    const body = fixture('initial-purchase', { id: `evt-grammar-${randomUUID()}` });
    const response = await callRoute(billingRoute, { method: 'POST', headers: { authorization: header }, body });
    const stored = await db.sql('select 1 from public.billing_events where event_id = $1', [body.event.id]);
    if (accepted) {
      expect({ status: response.status, body: response.body, stored: stored.length }).toEqual({ status: 200, body: { received: true }, stored: 1 });
    } else {
      expectRefused(response, 'invalid_webhook_secret');
      expect(stored).toEqual([]);
    }
  });
});
