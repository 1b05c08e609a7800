import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEV_WEBHOOK_SECRETS } from '../../lib/config.ts';
import { authorizationGrammarCases } from '../support/authorization-grammar.ts';
import { newTally, runWorkers, seededRandom, send, type Answer, type SendOptions } from './client.ts';
import { billingOutcome, purchaseEvent, type BillingDelivery } from './events.ts';
import { scanLogs, startStack, type ReliabilityStack } from './stack.ts';
import { recordLogScan, recordScenario } from './summary.ts';

/**
 * Load with faults: for 20 s (RELIABILITY_LOAD_SECONDS), 16 loopback connections send billing
 * webhooks without pause: 75% valid events (a tenth of them redeliveries of an id already sent,
 * possibly still in flight), 20% with bad credentials, 5% hostile bodies. Nothing may answer 5xx;
 * afterwards the event rows are exactly the unique valid ids and each has exactly one effect.
 */
const DURATION_MS = Number(process.env.RELIABILITY_LOAD_SECONDS ?? 20) * 1000;
const CONCURRENCY = 16;
const SEED = Number(process.env.RELIABILITY_SEED ?? Date.now() % 2 ** 31);

type Expected = { status: number; code?: string };
type Request = { kind: 'valid' | 'duplicate' | 'bad-credentials' | 'hostile'; name: string; options: SendOptions; expected: Expected; id?: string; path?: string };

describe('billing webhook under load with faults (production server, Postgres)', () => {
  let stack: ReliabilityStack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(async () => {
    await stack?.close();
  });

  it(`${DURATION_MS / 1000} s of valid events, 10% duplicates, 20% bad credentials, 5% hostile bodies: no 5xx, every unique id stored once with one effect`, async () => {
    const url = `${stack.server.url}/api/webhooks/subscription-billing`;
    const secret = stack.secrets.subscription;
    const { token: sessionToken } = await stack.mintUser();
    const random = seededRandom(SEED);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
    const auth = { authorization: stack.billingAuthorization };
    const json = { ...auth, 'content-type': 'application/json' };
    const grammar = authorizationGrammarCases(secret).filter(({ header }) => /^[\x20-\x7e\t]*$/.test(header));

    const badCredentials: { name: string; headers: Record<string, string> }[] = [
      { name: 'no credentials', headers: {} },
      { name: 'a wrong secret', headers: { authorization: `Bearer wrong-${randomUUID()}` } },
      { name: 'the secret truncated', headers: { authorization: `Bearer ${secret.slice(0, -1)}` } },
      { name: 'the secret with a character more', headers: { authorization: `Bearer ${secret}x` } },
      { name: 'Basic instead of Bearer', headers: { authorization: `Basic ${Buffer.from(`:${secret}`).toString('base64')}` } },
      { name: 'the secret in x-webhook-secret', headers: { 'x-webhook-secret': secret } },
      { name: 'the leagues secret', headers: { authorization: `Bearer ${stack.secrets.leagues}` } },
      { name: 'the embedded dev secret', headers: { authorization: `Bearer ${DEV_WEBHOOK_SECRETS.subscription}` } },
      { name: 'a session token', headers: { authorization: `Bearer ${sessionToken}` } },
      // RFC 9110 / RFC 6750 spellings of the right secret that are not Bearer credentials (a tab, a comma, quotes, ...).
      ...grammar.filter((spelling) => !spelling.accepted).map(({ name, header }) => ({ name: `grammar: ${name}`, headers: { authorization: header } })),
    ];
    // Spellings that are (lower-case scheme, several spaces, spaces around): delivered like any other.
    const acceptedSpellings = grammar.filter((spelling) => spelling.accepted);

    const oversize = JSON.stringify({ ...purchaseEvent('rejected').body, pad: 'x'.repeat(1024 * 1024 + 1024) });
    /** Hostile bodies with valid credentials: each a 4xx that changes nothing. `text` is a fresh valid event to corrupt. */
    const hostile: { name: string; make: (event: BillingDelivery) => SendOptions; expected: Expected }[] = [
      { name: 'truncated JSON', make: (e) => ({ headers: json, body: e.text.slice(0, e.text.length / 2) }), expected: { status: 400, code: 'invalid_json' } },
      { name: 'a NUL in a string', make: (e) => ({ headers: json, body: e.text.replace('"PRODUCTION"', '"PROD\\u0000UCTION"') }), expected: { status: 400, code: 'invalid_json' } },
      { name: 'a lone surrogate', make: (e) => ({ headers: json, body: e.text.replace('"PRODUCTION"', '"PROD\\ud800"') }), expected: { status: 400, code: 'invalid_json' } },
      { name: 'nesting 5000 deep', make: (e) => ({ headers: json, body: e.text.replace('"metadata":null', `"metadata":${'['.repeat(5000)}${']'.repeat(5000)}`) }), expected: { status: 400, code: 'invalid_json' } },
      { name: 'a number out of range', make: (e) => ({ headers: json, body: e.text.replace('"price":9.99', '"price":1e400') }), expected: { status: 400, code: 'invalid_json' } },
      { name: 'a __proto__ key', make: (e) => ({ headers: json, body: e.text.replace('"metadata":null', '"metadata":{"__proto__":{"admin":true}}') }), expected: { status: 400, code: 'invalid_json' } },
      { name: 'bytes that are not UTF-8', make: () => ({ headers: json, body: new Uint8Array([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d]) }), expected: { status: 400, code: 'invalid_json' } },
      { name: 'an empty body', make: () => ({ headers: json, body: '' }), expected: { status: 400, code: 'invalid_json' } },
      { name: 'a JSON array', make: (e) => ({ headers: json, body: `[${e.text}]` }), expected: { status: 400, code: 'invalid_request' } },
      { name: 'JSON null', make: () => ({ headers: json, body: 'null' }), expected: { status: 400, code: 'invalid_request' } },
      { name: 'an empty event id', make: (e) => ({ headers: json, body: { ...e.body, event: { ...e.body.event, id: '' } } }), expected: { status: 400, code: 'invalid_request' } },
      { name: 'an event id of 257 characters', make: (e) => ({ headers: json, body: { ...e.body, event: { ...e.body.event, id: `${e.id}${'x'.repeat(257)}`.slice(0, 257) } } }), expected: { status: 400, code: 'invalid_request' } },
      { name: 'a numeric event id', make: (e) => ({ headers: json, body: { ...e.body, event: { ...e.body.event, id: 12345 } } }), expected: { status: 400, code: 'invalid_request' } },
      { name: 'event as a string', make: (e) => ({ headers: json, body: { ...e.body, event: e.text } }), expected: { status: 400, code: 'invalid_request' } },
      { name: 'text/plain', make: (e) => ({ headers: { ...auth, 'content-type': 'text/plain' }, body: e.text }), expected: { status: 415, code: 'unsupported_media_type' } },
      { name: 'no content type', make: (e) => ({ headers: auth, body: new TextEncoder().encode(e.text) }), expected: { status: 415, code: 'unsupported_media_type' } },
      { name: 'a form body', make: (e) => ({ headers: { ...auth, 'content-type': 'application/x-www-form-urlencoded' }, body: `event=${encodeURIComponent(e.text)}` }), expected: { status: 415, code: 'unsupported_media_type' } },
      { name: 'over 1 MiB', make: () => ({ headers: json, body: oversize }), expected: { status: 413, code: 'payload_too_large' } },
    ];

    const events: BillingDelivery[] = [];
    const rejectedIds: string[] = [];
    const counts = { valid: 0, duplicate: 0, 'bad-credentials': 0, hostile: 0 };
    const wrong: string[] = [];
    const tally = newTally();

    const next = (): Request => {
      const r = random();
      if (r < 0.2) {
        const event = purchaseEvent('rejected');
        const bad = pick(badCredentials);
        return { kind: 'bad-credentials', name: bad.name, id: event.id, options: { headers: { ...bad.headers, 'content-type': 'application/json' }, body: event.text }, expected: { status: 401, code: 'invalid_webhook_secret' } };
      }
      if (r < 0.25) {
        const event = purchaseEvent('rejected');
        const kind = pick(hostile);
        return { kind: 'hostile', name: kind.name, id: event.id, options: kind.make(event), expected: kind.expected };
      }
      // Valid deliveries: one in ten is a redelivery of an id already sent (RevenueCat retries).
      if (events.length > 0 && random() < 0.1) {
        const event = pick(events);
        return { kind: 'duplicate', name: 'a redelivery', options: { headers: json, body: event.text }, expected: { status: 200 } };
      }
      const event = purchaseEvent('load');
      events.push(event);
      // A URL pasted with a trailing slash and an Authorization spelled another valid way both deliver (never a 308).
      const spelling = random() < 0.2 ? pick(acceptedSpellings) : null;
      const slash = random() < 0.1;
      return {
        kind: 'valid',
        name: `a new event${spelling ? ` (${spelling.name})` : ''}${slash ? ' (trailing slash)' : ''}`,
        path: slash ? '/' : '',
        options: { headers: spelling ? { ...json, authorization: spelling.header } : json, body: event.text },
        expected: { status: 200 },
      };
    };

    const check = (request: Request, answer: Answer) => {
      const ok = answer.status === request.expected.status
        && (request.expected.code === undefined ? answer.body?.received === true : answer.body?.code === request.expected.code);
      if (!ok && wrong.length < 20) wrong.push(`${request.kind} (${request.name}): expected ${request.expected.status} ${request.expected.code ?? ''}, got ${answer.status} ${answer.error ?? answer.text.slice(0, 200)}`);
    };

    const started = performance.now();
    const deadline = Date.now() + DURATION_MS;
    await runWorkers(CONCURRENCY, () => Date.now() < deadline, async () => {
      const request = next();
      counts[request.kind]++;
      if (request.kind === 'bad-credentials' || request.kind === 'hostile') rejectedIds.push(request.id!);
      check(request, await send(tally, `${url}${request.path ?? ''}`, { method: 'POST', ...request.options }));
    });
    const seconds = (performance.now() - started) / 1000;

    const outcome = await billingOutcome(stack, events);
    const [table] = await stack.sql<{ events: number; entitlement_writes: number; rejected: number }>(
      `select (select count(*)::int from public.billing_events) as events,
              (select count(*)::int from reliability.writes where tbl = 'entitlements') as entitlement_writes,
              (select count(*)::int from public.billing_events where event_id = any($1)) as rejected`, [rejectedIds]);
    recordScenario({
      order: 1,
      scenario: `Load with faults (${Math.round(seconds)} s, ${CONCURRENCY} connections)`,
      requests: tally.requests,
      fiveXx: tally.fiveXx,
      eventsLost: outcome.lost,
      duplicatesApplied: outcome.duplicatesApplied + table!.rejected,
      notes: `${counts.valid} unique events + ${counts.duplicate} redeliveries (200), ${counts['bad-credentials']} bad credentials (401), ` +
        `${counts.hostile} hostile bodies (4xx); ${table!.events} event rows, ${outcome.effects} effects; ${Math.round(tally.requests / seconds)} req/s; seed ${SEED}`,
    });

    expect(wrong).toEqual([]);
    expect({ fiveXx: tally.fiveXx, noResponse: tally.noResponse }).toEqual({ fiveXx: 0, noResponse: 0 });
    expect(counts.duplicate).toBeGreaterThan(0);
    expect(counts['bad-credentials']).toBeGreaterThan(0);
    expect(counts.hostile).toBeGreaterThan(0);
    // Event rows = unique ids; effects = unique ids; nothing from a refused request.
    expect(table).toEqual({ events: events.length, entitlement_writes: events.length, rejected: 0 });
    expect(outcome).toEqual({ rows: events.length, effects: events.length, lost: 0, duplicatesApplied: 0 });
  });

  it('no configured secret and no issued token appears in the server logs', () => {
    const { leaks, requestLines, scan } = scanLogs(stack);
    recordLogScan(scan);
    expect(requestLines).toBeGreaterThan(100);
    expect(leaks).toEqual([]);
  });
});
