import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import * as route from '../../app/api/webhooks/leagues-sync/route.ts';
import type { AccountLeague } from '../../lib/leagues/account-leagues.ts';
import { callDb, closeDatabase, dbCallCount } from '../../lib/db/index.ts';
import { DATABASE_KINDS, engineOn, useTestDatabase, type TestDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { callRoute, type RouteRequest } from '../support/http.ts';
import { freePort } from '../../scripts/support/postgres-server.ts';
import { at, delivery, freshSource, issueBody, league, member, members, storedLeagues, tableCounts } from './fixtures.ts';

const SECRET = 'leagues-secret-current-0123456789';
const PREVIOUS = 'leagues-secret-previous-9876543210';

const post = (body: unknown, headers: Record<string, string> = { 'x-webhook-secret': SECRET }, extra: Partial<RouteRequest> = {}) =>
  callRoute(route, { method: 'POST', headers, body, ...extra });

describe.each(DATABASE_KINDS)('POST /api/webhooks/leagues-sync on %s', (kind) => {
  let db: TestDatabase;
  let restoreEnv: () => void;
  beforeAll(async () => {
    // Real secrets: local mode (the dev tokens these tests use) is asked for.
    restoreEnv = setEnv({ LEAGUES_WEBHOOK_SECRET: SECRET, LEAGUES_WEBHOOK_SECRET_PREVIOUS: PREVIOUS, LOCAL_DEV: '1' });
    db = await useTestDatabase(kind);
  });
  afterAll(async () => {
    restoreEnv();
    await closeDatabase();
    await db.close();
  });

  it('applies the body of the issue and answers the counts; the same id again is a duplicate', async () => {
    const appUserId = randomUUID();
    const body = issueBody(`delivery-${randomUUID()}`, { appUserId });
    const calls = dbCallCount();
    const first = await post(body);
    expect(dbCallCount() - calls).toBe(1);
    expect({ status: first.status, type: first.headers.get('content-type'), body: first.body })
      .toEqual({ status: 200, type: 'application/json', body: { received: true, upserted: 1, unchanged: 0, stale: 0, deleted: 1 } });
    for (let i = 0; i < 2; i++) {
      const again = await post(body);
      expect({ status: again.status, body: again.body })
        .toEqual({ status: 200, body: { received: true, upserted: 1, unchanged: 0, stale: 0, deleted: 1, duplicate: true } });
    }
    expect(await callDb<AccountLeague[]>('account_leagues', { p_user_id: appUserId })).toEqual([{
      source: 'sleeper', externalId: '1249067741470539776', name: 'Sunday Funday', sport: 'nfl', season: '2026',
      status: 'in_season', role: 'commissioner', updatedAt: '2026-11-21T17:59:00Z',
    }]);
  });

  const secretCases: { name: string; headers: Record<string, string>; status: number }[] = [
    { name: 'the current secret', headers: { 'x-webhook-secret': SECRET }, status: 200 },
    { name: 'the previous secret (rotation)', headers: { 'x-webhook-secret': PREVIOUS }, status: 200 },
    { name: 'the header name in another case', headers: { 'X-Webhook-Secret': SECRET }, status: 200 },
    { name: 'no header', headers: {}, status: 401 },
    { name: 'an empty value', headers: { 'x-webhook-secret': '' }, status: 401 },
    { name: 'a wrong secret', headers: { 'x-webhook-secret': 'not-the-secret' }, status: 401 },
    { name: 'the secret truncated', headers: { 'x-webhook-secret': SECRET.slice(0, -1) }, status: 401 },
    { name: 'the secret with a character more', headers: { 'x-webhook-secret': `${SECRET}x` }, status: 401 },
    { name: 'the secret in upper case', headers: { 'x-webhook-secret': SECRET.toUpperCase() }, status: 401 },
    { name: 'the header twice (joined as "a, a")', headers: { 'x-webhook-secret': `${SECRET}, ${SECRET}` }, status: 401 },
    { name: 'current and previous in one header', headers: { 'x-webhook-secret': `${SECRET},${PREVIOUS}` }, status: 401 },
    { name: 'an 8 KiB value', headers: { 'x-webhook-secret': 'x'.repeat(8192) }, status: 401 },
    { name: 'the secret as a bearer token instead', headers: { authorization: `Bearer ${SECRET}` }, status: 401 },
    { name: 'the embedded dev secret (a secret is configured)', headers: { 'x-webhook-secret': 'dev-leagues-webhook-secret' }, status: 401 },
  ];
  it.each(secretCases)('secret matrix: $name -> $status', async ({ headers, status }) => {
    const source = freshSource();
    const before = await tableCounts(db);
    const response = await post(delivery(source, { leagues: [league('a', at(1))] }), headers);
    expect(response.status).toBe(status);
    if (status === 200) {
      expect(response.body).toEqual({ received: true, upserted: 1, unchanged: 0, stale: 0, deleted: 0 });
      return;
    }
    expect(response.headers.get('content-type')).toBe('application/problem+json');
    expect(response.headers.get('www-authenticate')).toBe('WebhookSecret realm="leagues-sync"');
    expect(response.body).toMatchObject({ status: 401, code: 'invalid_webhook_secret' });
    expect(response.text).not.toContain(SECRET);
    expect(await tableCounts(db)).toEqual(before);
  });

  const hostileCases: { name: string; body: string | Uint8Array; status: number; code: string; contentType?: string }[] = [
    { name: 'an empty body', body: '', status: 400, code: 'invalid_json' },
    { name: 'whitespace only', body: ' \n ', status: 400, code: 'invalid_json' },
    { name: 'truncated JSON', body: '{"source":"x","sentAt":"2026-', status: 400, code: 'invalid_json' },
    { name: 'a NUL in a string', body: JSON.stringify(delivery('nul', { leagues: [league('a', at(1), { name: 'a\u0000b' })] })), status: 400, code: 'invalid_json' },
    { name: 'a lone surrogate', body: JSON.stringify(delivery('sur', { leagues: [league('a', at(1))] })).replace('League a', 'League \\ud800'), status: 400, code: 'invalid_json' },
    { name: 'deep nesting in settings', body: JSON.stringify(delivery('deep', { leagues: [league('a', at(1), { settings: {} })] })).replace('"settings":{}', `"settings":{"a":${'['.repeat(5000)}${']'.repeat(5000)}}`), status: 400, code: 'invalid_json' },
    { name: 'a huge number', body: JSON.stringify(delivery('num', { leagues: [league('a', at(1), { settings: {} })] })).replace('"settings":{}', '"settings":{"n":1e400}'), status: 400, code: 'invalid_json' },
    { name: '__proto__ in settings', body: JSON.stringify(delivery('proto', { leagues: [league('a', at(1), { settings: {} })] })).replace('"settings":{}', '"settings":{"__proto__":{"admin":true}}'), status: 400, code: 'invalid_json' },
    { name: 'bytes that are not UTF-8', body: new Uint8Array([0x7b, 0xff, 0xfe, 0x7d]), status: 400, code: 'invalid_json' },
    { name: 'an array', body: '[]', status: 400, code: 'invalid_request' },
    { name: 'null', body: 'null', status: 400, code: 'invalid_request' },
    { name: 'a string', body: '"leagues"', status: 400, code: 'invalid_request' },
    { name: 'form data', body: 'source=x', status: 415, code: 'unsupported_media_type', contentType: 'application/x-www-form-urlencoded' },
  ];
  it.each(hostileCases)('hostile body: $name -> $status $code, nothing changed, no database call', async ({ body, status, code, contentType }) => {
    const before = await tableCounts(db);
    const calls = dbCallCount();
    const response = await post(body, { 'x-webhook-secret': SECRET, 'content-type': contentType ?? 'application/json' });
    expect({ status: response.status, code: response.body?.code, type: response.headers.get('content-type') })
      .toEqual({ status, code, type: 'application/problem+json' });
    expect(dbCallCount()).toBe(calls);
    expect(await tableCounts(db)).toEqual(before);
  });

  it('refuses a batch with one invalid league whole, listing every failing path, and changes nothing', async () => {
    const source = freshSource();
    await post(delivery(source, { leagues: [league('keep', at(1))] }));
    const stored = await storedLeagues(db, source);
    const before = await tableCounts(db);
    const leagues = Array.from({ length: 10 }, (_, i) => league(`l${i}`, at(5)));
    // (Its unknown fields, `colour` and `extra`, are not among the failures: they are ignored.)
    leagues[3] = league('l3', at(5), { status: 'playoffs', colour: 'red', members: [{ externalUserId: 'u1', displayName: 'A', role: 'owner' }] });
    leagues.push(league('keep', at(9), { name: 'changed' }));
    const response = await post({ ...delivery(source, { leagues }), sentAt: 'now', extra: true });
    expect(response.status).toBe(400);
    expect(response.body).toMatchObject({ code: 'invalid_request', status: 400 });
    expect(response.body.errors.map((e: { path: string }) => e.path).sort()).toEqual(
      ['leagues.3.members.0.role', 'leagues.3.status', 'sentAt'],
    );
    for (const error of response.body.errors) expect(error.message).toEqual(expect.any(String));
    expect(await storedLeagues(db, source)).toEqual(stored);
    expect(await tableCounts(db)).toEqual(before);
  });

  it('accepts and ignores fields it does not know, at every level, and applies the rest', async () => {
    const source = freshSource();
    const response = await post({
      ...delivery(source, { id: 'with-unknown-fields', leagues: [league('a', at(1), { colour: 'red', members: [{ ...member(1), email: 'a@example.test' }] })],
        deleted: [{ externalId: 'b', deletedAt: at(1), why: 'merged' }] }),
      schemaVersion: 2,
    });
    expect({ status: response.status, body: response.body }).toEqual({ status: 200, body: { received: true, upserted: 1, unchanged: 0, stale: 0, deleted: 1 } });
    expect((await storedLeagues(db, source)).map((l) => [l.external_id, l.deleted_at === null, l.members.length])).toEqual([['a', true, 1], ['b', false, 0]]);
  });

  it('takes time zone offsets up to ±15:59 (what Postgres stores) and refuses larger ones with 400, changing nothing', async () => {
    const source = freshSource();
    const accepted = await post({ ...delivery(source, { leagues: [league('far-east', '2026-11-20T10:00:00+15:59'), league('far-west', '2026-11-20T10:00:00-15:59')] }), sentAt: '2026-11-20T10:00:00+15:59' });
    expect(accepted.status).toBe(200);
    expect(accepted.body).toMatchObject({ upserted: 2 });
    const before = await tableCounts(db);
    for (const offset of ['+16:00', '-16:00', '+23:59']) {
      const refused = await post({ ...delivery(source, { leagues: [league('beyond', `2026-11-20T10:00:00${offset}`)] }), sentAt: `2026-11-20T10:00:00${offset}` });
      expect({ offset, status: refused.status, code: refused.body.code }).toEqual({ offset, status: 400, code: 'invalid_request' });
      expect(refused.body.errors.map((e: { path: string }) => e.path).sort()).toEqual(['leagues.0.updatedAt', 'sentAt']);
    }
    expect(await tableCounts(db)).toEqual(before);
  });

  it('takes `t` and `z` in lower case (RFC 3339 §5.6) and stores the same times as in upper case', async () => {
    const source = freshSource();
    const lower = (time: string) => time.replace('T', 't').replace('Z', 'z');
    const response = await post({
      ...delivery(source, { leagues: [league('a', lower(at(5)))], deleted: [{ externalId: 'b', deletedAt: lower(at(4)) }] }),
      sentAt: lower(at(6)),
    });
    expect({ status: response.status, body: response.body }).toEqual({ status: 200, body: { received: true, upserted: 1, unchanged: 0, stale: 0, deleted: 1 } });
    expect((await storedLeagues(db, source)).map((l) => [l.external_id, l.updated_at, l.deleted_at])).toEqual([['a', at(5), null], ['b', null, at(4)]]);
    // The same times in upper case are the same times: nothing changes.
    const again = await post(delivery(source, { leagues: [league('a', at(5))], deleted: [{ externalId: 'b', deletedAt: at(4) }] }));
    expect(again.body).toEqual({ received: true, upserted: 0, unchanged: 2, stale: 0, deleted: 0 });
  });

  it('refuses names of only invisible characters, combining marks or the Braille blank as blank with 400, naming each field, and changes nothing', async () => {
    const source = freshSource();
    const before = await tableCounts(db);
    const calls = dbCallCount();
    const response = await post(delivery(source, {
      leagues: [
        league('zero-width', at(1), { name: '\u200B' }),
        league('joiners', at(1), { name: '\u2060\uFEFF', members: [member(1, { displayName: '\u3164' })] }),
        league('visible', at(1), { name: '\u200BA' }),
        league('marks', at(1), { name: '\u2800\u2800', members: [member(1, { displayName: '\u0301\u20DD' })] }),
      ],
    }));
    expect({ status: response.status, type: response.headers.get('content-type'), code: response.body.code })
      .toEqual({ status: 400, type: 'application/problem+json', code: 'invalid_request' });
    expect(response.body.errors).toEqual([
      { path: 'leagues.0.name', message: 'must not be empty or blank' },
      { path: 'leagues.1.name', message: 'must not be empty or blank' },
      { path: 'leagues.1.members.0.displayName', message: 'must not be empty or blank' },
      { path: 'leagues.3.name', message: 'must not be empty or blank' },
      { path: 'leagues.3.members.0.displayName', message: 'must not be empty or blank' },
    ]);
    expect(dbCallCount()).toBe(calls);
    expect(await tableCounts(db)).toEqual(before);
  });

  it('answers 413 above 1 MB (declared or streamed) and changes nothing', async () => {
    const before = await tableCounts(db);
    const big = JSON.stringify(delivery(freshSource(), { leagues: [league('a', at(1), { settings: { pad: 'x'.repeat(1024 * 1024) } })] }));
    const declared = await post(big, { 'x-webhook-secret': SECRET, 'content-type': 'application/json' });
    expect({ status: declared.status, code: declared.body?.code }).toEqual({ status: 413, code: 'payload_too_large' });
    const bytes = new TextEncoder().encode(big);
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let offset = 0; offset < bytes.length; offset += 64 * 1024) controller.enqueue(bytes.slice(offset, offset + 64 * 1024));
        controller.close();
      },
    });
    const streamed = await post(stream, { 'x-webhook-secret': SECRET, 'content-type': 'application/json' });
    expect({ status: streamed.status, code: streamed.body?.code }).toEqual({ status: 413, code: 'payload_too_large' });
    expect(await tableCounts(db)).toEqual(before);
  });

  it('takes 500 leagues x 20 members under 1 MB in one request and one database call', async () => {
    const source = freshSource();
    const leagues = Array.from({ length: 500 }, (_, i) => league(String(1_249_067_741_470_539_776n + BigInt(i)), at(1), { members: members(20) }));
    const body = delivery(source, { id: 'big', leagues });
    expect(JSON.stringify(body).length).toBeLessThan(1024 * 1024);
    const calls = dbCallCount();
    const response = await post(body);
    expect({ status: response.status, body: response.body }).toEqual({ status: 200, body: { received: true, upserted: 500, unchanged: 0, stale: 0, deleted: 0 } });
    expect(dbCallCount() - calls).toBe(1);
    const [row] = await db.sql<{ members: number }>(
      'select count(*)::int as members from public.league_members m join public.leagues l on l.id = m.league_id where l.source = $1',
      [source],
    );
    expect(row!.members).toBe(10_000);
  });

  it('answers 405 with Allow for other methods', async () => {
    const response = await callRoute(route, { method: 'GET' });
    expect(response.status).toBe(405);
    expect(response.headers.get('allow')).toBe('POST, OPTIONS');
  });
});

describe('POST /api/webhooks/leagues-sync when a secret or the database is missing', () => {
  const restores: (() => void)[] = [];
  afterEach(() => {
    while (restores.length > 0) restores.pop()!();
  });

  it('answers 503 service_misconfigured when no secret is set outside local mode (the dev secret included)', async () => {
    restores.push(setEnv({ DATABASE_URL: 'postgres://app:secret@127.0.0.1:1/app', LEAGUES_WEBHOOK_SECRET: undefined, LEAGUES_WEBHOOK_SECRET_PREVIOUS: undefined, LOCAL_DEV: undefined }));
    const calls = dbCallCount();
    for (const headers of [{ 'x-webhook-secret': 'dev-leagues-webhook-secret' }, { 'x-webhook-secret': 'anything' }, {}] as Record<string, string>[]) {
      const response = await post(delivery('s', {}), headers);
      expect({ status: response.status, code: response.body?.code, retryAfter: response.headers.get('retry-after') })
        .toEqual({ status: 503, code: 'service_misconfigured', retryAfter: expect.stringMatching(/^\d+$/) });
      // The server log names what to set; the caller is told only that the service is misconfigured.
      expect(response.body.detail).not.toContain('LEAGUES_WEBHOOK_SECRET');
    }
    expect(dbCallCount()).toBe(calls);
  });

  it.runIf(engineOn('pglite'))('accepts the documented dev secret in local mode when none is set, and the documented curl line works', async () => {
    restores.push(setEnv({ DATABASE_URL: undefined, SUPABASE_URL: undefined, LEAGUES_WEBHOOK_SECRET: undefined, LEAGUES_WEBHOOK_SECRET_PREVIOUS: undefined, LOCAL_DEV: undefined }));
    const db = await useTestDatabase('pglite');
    try {
      const ok = await post(delivery(freshSource(), { leagues: [league('a', at(1))] }), { 'x-webhook-secret': 'dev-leagues-webhook-secret' });
      expect({ status: ok.status, body: ok.body }).toEqual({ status: 200, body: { received: true, upserted: 1, unchanged: 0, stale: 0, deleted: 0 } });
      expect((await post(delivery(freshSource()), { 'x-webhook-secret': 'wrong' })).status).toBe(401);

      // The newcomer's curl line in the leagues docs: its headers, its body, its answer, then its replay.
      const section = readFileSync('docs/leagues.md', 'utf8');
      const line = /^curl -s localhost:3000\/api\/webhooks\/leagues-sync (.*) -d '(.*)'\n# (\{.*?\});/m.exec(section);
      expect(line).not.toBeNull();
      const [, flags, body, answer] = line!;
      expect(flags).toBe("-H 'x-webhook-secret: dev-leagues-webhook-secret' -H 'content-type: application/json'");
      const headers = { 'x-webhook-secret': 'dev-leagues-webhook-secret', 'content-type': 'application/json' };
      const first = await post(body!, headers);
      expect({ status: first.status, body: first.body }).toEqual({ status: 200, body: JSON.parse(answer!) });
      expect((await post(body!, headers)).body).toEqual({ ...JSON.parse(answer!), duplicate: true });
    } finally {
      await closeDatabase();
      await db.close();
    }
  });

  it('answers 503 database_unavailable with Retry-After when the database does not answer', async () => {
    // The configured database is a real Postgres address where nothing listens.
    restores.push(setEnv({ DATABASE_URL: `postgres://nobody:secret@127.0.0.1:${await freePort()}/none`, LEAGUES_WEBHOOK_SECRET: SECRET, LOCAL_DEV: '1' }));
    await closeDatabase();
    try {
      const response = await post(delivery(freshSource(), { id: 'retry-me', leagues: [league('a', at(1))] }));
      expect({ status: response.status, code: response.body?.code, retryAfter: response.headers.get('retry-after'), type: response.headers.get('content-type') })
        .toEqual({ status: 503, code: 'database_unavailable', retryAfter: expect.stringMatching(/^\d+$/), type: 'application/problem+json' });
      expect(response.text).not.toContain('secret');
    } finally {
      await closeDatabase();
    }
  });
});
