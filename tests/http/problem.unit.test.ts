import { describe, expect, it } from 'vitest';
import { ApiError, PROBLEM_CATALOG, problemResponse } from '../../lib/http/problem.ts';
import { defineRoute } from '../../lib/http/route.ts';
import { DbError } from '../../lib/db/errors.ts';
import { ConfigError } from '../../lib/config.ts';
import { DomainError } from '../../lib/errors.ts';
import { callRoute } from '../support/http.ts';

describe('problem+json bodies (RFC 9457)', () => {
  it('has a 4xx or 5xx status and a title for every code', () => {
    for (const [code, [status, title]] of Object.entries(PROBLEM_CATALOG)) {
      expect(code).toMatch(/^[a-z]+(_[a-z0-9]+)*$/);
      expect(status).toBeGreaterThanOrEqual(400);
      expect(status).toBeLessThan(600);
      expect(title.length).toBeGreaterThan(0);
    }
  });

  it('carries type, title, status, detail, code, requestId and field errors', async () => {
    const response = problemResponse(new ApiError('invalid_request', { detail: 'Fix the body.', errors: [{ path: 'payload.address', message: 'Required' }] }), 'req-1');
    expect(response.status).toBe(400);
    expect(response.headers.get('content-type')).toBe('application/problem+json');
    expect(await response.json()).toEqual({
      type: '/docs#problem-invalid_request',
      title: 'Invalid request',
      status: 400,
      detail: 'Fix the body.',
      code: 'invalid_request',
      requestId: 'req-1',
      errors: [{ path: 'payload.address', message: 'Required' }],
    });
  });
});

describe('the route wrapper', () => {
  const throwing = (error: unknown) => defineRoute({ GET: () => { throw error; } });

  const cases: { name: string; error: unknown; status: number; code: string; retryAfter?: boolean }[] = [
    { name: 'an ApiError', error: new ApiError('link_not_found'), status: 404, code: 'link_not_found' },
    { name: 'a domain error', error: new DomainError('link_not_found', 'No such link.'), status: 404, code: 'link_not_found' },
    { name: 'a domain error that says when to retry', error: new DomainError('auth_unavailable', 'Auth is down.'), status: 503, code: 'auth_unavailable', retryAfter: true },
    { name: 'a database outage', error: new DbError('unavailable', 'connect ECONNREFUSED'), status: 503, code: 'database_unavailable', retryAfter: true },
    { name: 'a domain error raised in SQL', error: new DbError('conflict', 'wallet_already_linked', { sqlState: 'PT409' }), status: 409, code: 'wallet_already_linked' },
    { name: 'a rate limit raised in SQL', error: new DbError('conflict', 'rate_limited', { sqlState: 'PT429' }), status: 429, code: 'rate_limited', retryAfter: true },
    { name: 'an unnamed unique violation', error: new DbError('conflict', 'duplicate key value', { sqlState: '23505' }), status: 409, code: 'conflict' },
    { name: 'a value the database cannot store (a client mistake validation missed)', error: new DbError('invalid', 'time zone displacement out of range', { sqlState: '22009' }), status: 400, code: 'invalid_request' },
    { name: 'a reason that only looks like a catalog key', error: new DbError('conflict', 'toString', { sqlState: 'PT409' }), status: 409, code: 'conflict' },
    { name: 'a configuration error', error: new ConfigError('Set DATABASE_URL'), status: 503, code: 'service_misconfigured' },
    { name: 'a bug', error: new TypeError('x is undefined'), status: 500, code: 'internal_error' },
  ];

  it.each(cases)('turns $name into $status $code', async ({ error, status, code, retryAfter }) => {
    const response = await callRoute(throwing(error));
    expect(response.status).toBe(status);
    expect(response.headers.get('content-type')).toBe('application/problem+json');
    expect(response.body).toMatchObject({ status, code, requestId: response.headers.get('x-request-id') });
    if (retryAfter) expect(Number(response.headers.get('retry-after'))).toBeGreaterThan(0);
  });

  // The domain says what happened (code, detail, which credential, how long to wait); this table
  // says how HTTP answers it.
  const domainCases: { name: string; error: DomainError; status: number; headers: Record<string, string | null>; body: Record<string, unknown> }[] = [
    {
      name: 'a refused bearer token (RFC 6750 error attribute)',
      error: new DomainError('token_expired', 'The "session" token has expired.', { challenge: { scheme: 'Bearer', realm: 'account-link' } }),
      status: 401,
      headers: { 'www-authenticate': `Bearer realm="account-link", error="invalid_token", error_description="The 'session' token has expired."`, 'retry-after': null },
      body: { detail: 'The "session" token has expired.' },
    },
    {
      name: 'no token sent (no error attribute)',
      error: new DomainError('missing_token', 'Send a token.', { challenge: { scheme: 'Bearer', realm: 'account-link' } }),
      status: 401,
      headers: { 'www-authenticate': 'Bearer realm="account-link"' },
      body: {},
    },
    {
      name: 'a wrong webhook secret',
      error: new DomainError('invalid_webhook_secret', 'Wrong secret.', { challenge: { scheme: 'WebhookSecret', realm: 'leagues-sync' } }),
      status: 401,
      headers: { 'www-authenticate': 'WebhookSecret realm="leagues-sync"' },
      body: {},
    },
    {
      name: 'a rate limit with its own wait',
      error: new DomainError('rate_limited', 'Slow down.', { retryAfterSeconds: 42.2 }),
      status: 429,
      headers: { 'retry-after': '43' },
      body: { retryAfter: 43 },
    },
    {
      name: 'a field error',
      error: new DomainError('invalid_address', 'Bad address.', { errors: [{ path: 'address', message: 'Bad address.' }] }),
      status: 400,
      headers: { 'retry-after': null, 'www-authenticate': null },
      body: { errors: [{ path: 'address', message: 'Bad address.' }] },
    },
  ];
  it.each(domainCases)('maps $name to $status and its headers', async ({ error, status, headers, body }) => {
    const response = await callRoute(throwing(error));
    expect(response.status).toBe(status);
    for (const [name, value] of Object.entries(headers)) expect(response.headers.get(name)).toBe(value);
    expect(response.body).toMatchObject({ code: error.code, detail: error.detail, ...body });
  });

  it('never shows a bug\'s message or stack to the client', async () => {
    const response = await callRoute(throwing(new Error('password=hunter2 at /srv/app.ts:12')));
    expect(response.text).not.toContain('hunter2');
    expect(response.text).not.toContain('app.ts');
  });

  it('echoes a sane x-request-id and replaces an unsafe one', async () => {
    const route = defineRoute({ GET: () => new Response('ok') });
    expect((await callRoute(route, { headers: { 'x-request-id': 'abc-123.def' } })).headers.get('x-request-id')).toBe('abc-123.def');
    const replaced = (await callRoute(route, { headers: { 'x-request-id': 'bad id with spaces' } })).headers.get('x-request-id');
    expect(replaced).toMatch(/^[0-9a-f-]{36}$/);
  });
});
