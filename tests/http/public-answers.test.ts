import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as adminSyncRoute from '../../app/api/admin/billing/sync/route.ts';
import * as cronSyncRoute from '../../app/api/cron/billing-sync/route.ts';
import * as maintenanceRoute from '../../app/api/cron/maintenance/route.ts';
import * as userSyncRoute from '../../app/api/me/billing/sync/route.ts';
import { resetOperatorSecretThrottle } from '../../lib/auth/operator-secret.ts';
import { DbError } from '../../lib/db/errors.ts';
import { DomainError } from '../../lib/errors.ts';
import { defineRoute, toApiError } from '../../lib/http/route.ts';
import type { Logger } from '../../lib/log.ts';
import { describeOn, suiteDatabase } from '../support/databases.ts';
import { DEPLOYMENT_SETTINGS, setEnv } from '../support/env.ts';
import { startFakeRevenueCat, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { callRoute, type RouteResponse } from '../support/http.ts';
import { operatorDetailIn, SETTING_NAMES } from '../support/public-answers.ts';
import { testUser } from '../support/tokens.ts';

/**
 * Public answers name no setting and carry no database or upstream text; the log has the detail.
 * Every problem answer a route test provokes is checked for that (tests/support/http.ts, with the
 * settings drawn from the configuration's schema); this file checks the checker, and provokes the
 * answers an outside review found carrying operator detail: the 503s of routes whose setting is
 * unset, RevenueCat's refusal of the key, and the database's own words.
 */

describe('the check every route test applies to problem answers', () => {
  it('knows every setting of the configuration, and finds each in an answer', () => {
    expect(SETTING_NAMES).toEqual(expect.arrayContaining(['CRON_SECRET', 'ADMIN_API_SECRET', 'REVENUECAT_SECRET_API_KEY', 'DATABASE_URL', 'WALLET_EVM_RPC_URLS', 'LOCAL_DEV']));
    for (const name of SETTING_NAMES) expect(operatorDetailIn(`{"detail":"This route is off: set ${name} on the server."}`)).toEqual([`names the setting ${name}`]);
  });

  it.each([
    'A value in the request cannot be stored: value too long for type character varying(256).',
    'duplicate key value violates unique constraint "wallet_links_pkey"',
    'Key (app_user_id)=(abc) already exists.',
    'unsupported Unicode escape sequence',
    'time zone displacement out of range',
    'function public.billing_sync_begin(text, integer) does not exist',
    'invalid input syntax for type uuid: "x"',
    'null value in column "user_id" of relation "wallet_links" violates not-null constraint',
  ])('finds database text: %s', (text) => {
    expect(operatorDetailIn(JSON.stringify({ detail: text }))).not.toEqual([]);
  });

  it.each([
    'This route is not enabled on this server.',
    'Missing or wrong secret in the "Authorization: Bearer <secret>" header.',
    'A value in the request cannot be stored; nothing was changed.',
    'RevenueCat refused this service\'s request; nothing was changed. The operator can see why in the server log.',
    'The body must be at most 1048576 bytes.',
  ])('passes what an answer should say: %s', (text) => {
    expect(operatorDetailIn(JSON.stringify({ detail: text }))).toEqual([]);
  });
});

describe('the database\'s words stay in the log', () => {
  const logged: unknown[] = [];
  const requestLog = { warn: (fields: unknown) => logged.push(fields), error: (fields: unknown) => logged.push(fields) } as unknown as Logger;

  it.each([
    { name: 'a value too long', error: new DbError('invalid', 'value too long for type character varying(256)', { sqlState: '22001' }), code: 'invalid_request' },
    { name: 'a unique violation', error: new DbError('conflict', 'duplicate key value violates unique constraint "x_pkey"', { sqlState: '23505', detail: 'Key (id)=(secret-id-1) already exists.' }), code: 'conflict' },
    { name: 'a missing row', error: new DbError('not_found', 'relation "public.gone" does not exist', { sqlState: 'PT404', detail: 'no rows in public.gone' }), code: 'not_found' },
    { name: 'an outage', error: new DbError('unavailable', 'connect ECONNREFUSED 10.0.0.5:5432', { sqlState: '08006' }), code: 'database_unavailable' },
  ])('$name: the answer says what it means, the log has the words', async ({ error, code }) => {
    logged.length = 0;
    const problem = toApiError(error, requestLog);
    expect(problem.code).toBe(code);
    const answer = JSON.stringify({ detail: problem.options.detail });
    for (const words of [error.reason, error.detail, error.sqlState].filter(Boolean)) expect(answer).not.toContain(words);
    expect(operatorDetailIn(answer)).toEqual([]);
    expect((logged as { err: { message: string } }[]).map((fields) => fields.err.message)).toEqual([expect.stringContaining(error.reason)]);
  });

  it('logs a domain error\'s operator detail beside an answer without it', async () => {
    logged.length = 0;
    const problem = toApiError(new DomainError('sync_not_configured', 'Not enabled.', { operatorDetail: 'Set REVENUECAT_SECRET_API_KEY.' }), requestLog);
    expect(problem.options.detail).toBe('Not enabled.');
    expect(logged).toEqual([{ code: 'sync_not_configured', operatorDetail: 'Set REVENUECAT_SECRET_API_KEY.' }]);
  });

  it('answers a route that throws the database\'s words without them', async () => {
    const route = defineRoute({ GET: () => { throw new DbError('invalid', 'value too long for type character varying(256)', { sqlState: '22001' }); } });
    const response = await callRoute(route);
    expect({ status: response.status, code: response.body.code, detail: response.body.detail })
      .toEqual({ status: 400, code: 'invalid_request', detail: 'A value in the request cannot be stored; nothing was changed.' });
  });
});

describeOn('pglite')('answers to unauthenticated callers and end users name no setting', () => {
  suiteDatabase('pglite');
  let revenuecat: FakeRevenueCat;
  let restoreEnv: () => void;
  beforeAll(async () => {
    revenuecat = await startFakeRevenueCat();
    restoreEnv = setEnv({ LOCAL_DEV: '1', CRON_SECRET: undefined, ADMIN_API_SECRET: undefined, REVENUECAT_SECRET_API_KEY: undefined, REVENUECAT_API_URL: revenuecat.url });
  });
  afterAll(async () => {
    restoreEnv();
    resetOperatorSecretThrottle();
    await revenuecat.close();
  });

  const outsideLocalMode = async <T>(work: () => Promise<T>): Promise<T> => {
    const restore = setEnv(DEPLOYMENT_SETTINGS);
    try {
      return await work();
    } finally {
      restore();
    }
  };

  /** The whole answer, checked: a leak throws inside callRoute, and the text is checked again here for the names it had. */
  const clean = (response: RouteResponse, names: string[]) => {
    // The request id is a random UUID: it may hold a short name such as RevenueCat's code 7225 by chance.
    const answerWithoutRequestId = response.text.replace(response.body.requestId, '');
    for (const name of names) expect(answerWithoutRequestId).not.toContain(name);
    return response;
  };

  it('the routes whose setting is unset: 503, saying the route is off, not which setting turns it on', async () => {
    const user = await testUser();
    const answers = [
      clean(await callRoute(cronSyncRoute, { headers: { authorization: 'Bearer anything' } }), ['CRON_SECRET']),
      clean(await callRoute(maintenanceRoute), ['CRON_SECRET']),
      // Local mode opens it with the dev admin secret: a deployment without ADMIN_API_SECRET.
      clean(await outsideLocalMode(() => callRoute(adminSyncRoute, { method: 'POST', body: { app_user_id: 'x' } })), ['ADMIN_API_SECRET']),
      clean(await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } }), ['REVENUECAT_SECRET_API_KEY']),
    ];
    expect(answers.map((answer) => `${answer.status} ${answer.body.code}`))
      .toEqual(['503 cron_not_configured', '503 cron_not_configured', '503 admin_not_configured', '503 sync_not_configured']);
  });

  it('RevenueCat refusing the key: 502 for the user, "check the key" only in the log', async () => {
    const restore = setEnv({ REVENUECAT_SECRET_API_KEY: 'sk_revoked_key' });
    try {
      const user = await testUser();
      const response = clean(await callRoute(userSyncRoute, { method: 'POST', headers: { authorization: user.authorization } }), ['REVENUECAT', 'Invalid API key', '7225']);
      expect({ status: response.status, code: response.body.code }).toEqual({ status: 502, code: 'upstream_rejected' });
    } finally {
      restore();
    }
  });
});
