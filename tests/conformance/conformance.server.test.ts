import { ed25519 } from '@noble/curves/ed25519.js';
import { base58 } from '@scure/base';
import fc from 'fast-check';
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { authorizationGrammarCases } from '../support/authorization-grammar.ts';
import { v1Entitlement, v1Subscription } from '../../scripts/support/fake-revenuecat.ts';
import { evmWallet, solanaWallet, type TestWallet } from '../wallets/wallets.ts';
import { buildContract, HTTP_METHODS, parseEventStream, type Contract, type Observed, type OpenApiDocument } from './contract.ts';
import { mutationOf, valueOf } from './generate.ts';
import { DESCRIBED_RULES, explainedRefusal, SHAPE_CODES } from './rules.ts';
import { startConformanceStack, type ConformanceStack } from './stack.ts';

/**
 * Conformance of the production server to the OpenAPI document it serves, in the spirit of
 * Schemathesis (which cannot be installed here). The suite reads GET /api/openapi.json from a real
 * `next start` and, for every operation: sends valid requests built from the schemas and the
 * examples (the wallet link with real signatures of real keys), fast-check properties that draw
 * bodies from the request schemas and mutate them (a required field missing, wrong types, extra
 * fields, boundary values, characters no body may hold), wrong content types, no or wrong
 * credentials, and every method a path does not have. Every answer must be documented: its status,
 * content type, body (Ajv, JSON Schema 2020-12), headers; never a 5xx. A body the schema accepts is
 * never refused for its shape (unless it breaks a rule the document states in words, rules.ts), and
 * a body the schema refuses always gets a 4xx. The last block breaks the document on purpose and
 * shows these checks fail.
 *
 * CONFORMANCE_RUNS sets the property runs per operation (default 40); CONFORMANCE_SEED replays.
 */
const RUNS = Number(process.env.CONFORMANCE_RUNS ?? 40);
vi.setConfig({ testTimeout: 120_000 }); // hundreds of requests per test, on 2 cores shared with the rest of npm test
const SEED = process.env.CONFORMANCE_SEED ? Number(process.env.CONFORMANCE_SEED) : undefined;

let stack: ConformanceStack;
let contract: Contract;
let served: OpenApiDocument;
const tally = { requests: 0, byStatus: new Map<number, number>(), schemaValid: 0, schemaRefused: 0, explained: 0 };

beforeAll(async () => {
  stack = await startConformanceStack();
  const response = await fetch(`${stack.server.url}/api/openapi.json`);
  served = (await response.json()) as OpenApiDocument;
  contract = buildContract(served);
}, 300_000);

afterAll(async () => {
  await stack?.close();
  const statuses = [...tally.byStatus.entries()].sort(([a], [b]) => a - b).map(([status, count]) => `${status}: ${count}`).join(', ');
  console.info(`conformance: ${tally.requests} requests (${statuses}); bodies the schema accepts: ${tally.schemaValid} (${tally.explained} refused for a rule stated in words), bodies it refuses: ${tally.schemaRefused}`);
});

interface Sent {
  method: string;
  /** The documented path template, e.g. /api/wallet-link/{linkId}. */
  template: string;
  /** The concrete path (template filled in). */
  path?: string;
  headers?: Record<string, string>;
  /** A JSON value to send as application/json, or raw text with `contentType`. */
  json?: unknown;
  raw?: string;
  contentType?: string | null;
}

let clients = 0;

async function send(request: Sent): Promise<Observed & { json?: { code?: string; errors?: { path: string }[] } & Record<string, unknown> }> {
  // Each request from a client address of its own (benchmark range 198.18.0.0/15): wrong operator
  // secrets are throttled per address (429 after 10), and these runs send hundreds on purpose.
  clients++;
  const headers: Record<string, string> = { 'x-forwarded-for': `198.18.${(clients >> 8) & 255}.${clients & 255}`, ...request.headers };
  let body: string | undefined;
  if (request.json !== undefined) body = JSON.stringify(request.json);
  if (request.raw !== undefined) body = request.raw;
  const contentType = request.contentType === undefined ? (body === undefined ? null : 'application/json') : request.contentType;
  if (contentType) headers['content-type'] = contentType;
  const response = await fetch(`${stack.server.url}${request.path ?? request.template}`, { method: request.method.toUpperCase(), headers, body, redirect: 'manual' });
  // A stream of events does not end on its own: read its first block, then hang up.
  const text = isEventStream(response) ? await readEventStream(response, (read) => read.includes('\n\n')) : await response.text();
  tally.requests++;
  tally.byStatus.set(response.status, (tally.byStatus.get(response.status) ?? 0) + 1);
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: response.status, headers: response.headers, text, json };
}

const isEventStream = (response: Response) => response.headers.get('content-type')?.split(';')[0]!.trim() === 'text/event-stream';

/** Read a server-sent events answer until `enough` says so, then hang up. */
async function readEventStream(response: Response, enough: (text: string) => boolean): Promise<string> {
  const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
  let text = '';
  try {
    while (!enough(text)) {
      const { value, done } = await reader.read();
      if (done) break;
      text += value;
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
  return text;
}

/** Send, and require the answer to be one the document describes. */
async function sendDocumented(request: Sent) {
  const observed = await send(request);
  expect(contract.checkResponse(request.method, request.template, observed), summarize(request)).toEqual([]);
  return observed;
}

/** The request, short, for failure messages. */
const summarize = (request: Sent) => `${request.method.toUpperCase()} ${request.path ?? request.template} ${request.json !== undefined ? JSON.stringify(request.json).slice(0, 300) : (request.raw ?? '').slice(0, 100)}`;

type SecurityName = 'session' | 'billingSecret' | 'leaguesSecret' | 'cronSecret' | 'adminSecret';

/** Valid credentials for an operation's security scheme (a new user per call: rate limits are per user). */
async function credentialsFor(method: string, path: string): Promise<Record<string, string>> {
  const scheme = Object.keys(contract.operation(method, path)!.security[0] ?? {})[0] as SecurityName | undefined;
  switch (scheme) {
    case 'session':
      return { authorization: (await stack.mintToken()).authorization };
    case 'billingSecret':
      return { authorization: `Bearer ${stack.secrets.subscription}` };
    case 'leaguesSecret':
      return { 'x-webhook-secret': stack.secrets.leagues };
    case 'cronSecret':
      return { authorization: `Bearer ${stack.secrets.cron}` };
    case 'adminSecret':
      return { authorization: `Bearer ${stack.secrets.admin}` };
    default:
      return {};
  }
}

const fillPath = (template: string) => template.replace('{linkId}', randomUUID()).replace('{appUserId}', `conformance-${randomUUID()}`).replace('{userId}', randomUUID());

/**
 * Judge one answer to a body by the document: documented, and the schema's verdict kept (a body it
 * refuses gets a 4xx; a body it accepts is not refused for its shape unless a stated rule explains it).
 * Returns the violations (empty when the server and the document agree).
 */
function judge(request: Sent, observed: Awaited<ReturnType<typeof send>>): string[] {
  const violations = contract.checkResponse(request.method, request.template, observed);
  const verdict = contract.requestVerdict(request.method, request.template, request.json);
  const code = observed.json?.code;
  if (!verdict.valid) {
    tally.schemaRefused++;
    if (observed.status < 400 || observed.status >= 500) violations.push(`the schema refuses this body (${verdict.errors.slice(0, 3).join('; ')}) but the server answered ${observed.status}: ${summarize(request)}`);
  } else {
    tally.schemaValid++;
    if (code && SHAPE_CODES.has(code)) {
      if (explainedRefusal(request.template, request.json, observed.json as never)) tally.explained++;
      else violations.push(`the schema accepts this body but the server refused it: ${observed.status} ${code} ${JSON.stringify(observed.json?.errors ?? [])}: ${summarize(request)}`);
    }
  }
  return violations;
}

/** The networks the served document lists for a challenge. */
function challengeNetworks(): { evm: number[]; solana: string[] } {
  const schema = contract.requestSchema('post', '/api/wallet-link/challenge') as { oneOf: { properties: { chainId?: { enum: number[] }; cluster?: { enum: string[] } } }[] };
  return { evm: schema.oneOf[0]!.properties.chainId!.enum, solana: schema.oneOf[1]!.properties.cluster!.enum };
}

/** A real wallet from 32 key bytes: a secp256k1 account, or an ed25519 key pair (Solana). */
function walletFromKey(chain: 'evm' | 'solana', key: Uint8Array) {
  if (chain === 'evm') return evmWallet(`0x${Buffer.from(key).toString('hex')}`);
  const publicKey = ed25519.getPublicKey(key);
  return { address: base58.encode(publicKey), sign: async (message: string) => base58.encode(ed25519.sign(new TextEncoder().encode(message), key)) };
}

const operationsWithBodies = () => contract.operations.filter(({ operation }) => operation.requestBody);

describe('the production server and the OpenAPI document it serves', () => {
  it('serves OpenAPI 3.1 as application/json, documented as such, with every route of the app', async () => {
    const observed = await sendDocumented({ method: 'get', template: '/api/openapi.json' });
    expect(observed.headers.get('content-type')).toBe('application/json');
    expect(served.openapi).toBe('3.1.0');
    // Only what a client calls: OPTIONS and 405 are said once for every path (x-path-methods), not per path.
    const documented = contract.operations.map(({ method, path }) => `${method.toUpperCase()} ${path}`).sort();
    expect(documented).toEqual([
      'DELETE /api/wallet-link/{linkId}', 'GET /api/admin/billing/subscribers/{appUserId}', 'GET /api/admin/events', 'GET /api/admin/events/dead-letters', 'GET /api/admin/events/endpoints', 'GET /api/admin/status', 'GET /api/admin/users/{userId}/export', 'GET /api/cron/billing-sync', 'GET /api/cron/events', 'GET /api/cron/maintenance', 'GET /api/health', 'GET /api/health/live', 'GET /api/me', 'GET /api/me/events', 'GET /api/me/export', 'GET /api/openapi.json', 'GET /api/wallet-link',
      'POST /api/admin/billing/sync', 'POST /api/admin/events/deliver', 'POST /api/admin/events/replay', 'POST /api/cron/billing-sync', 'POST /api/cron/events', 'POST /api/cron/maintenance', 'POST /api/me/billing/sync', 'POST /api/wallet-link', 'POST /api/wallet-link/challenge', 'POST /api/webhooks/leagues-sync', 'POST /api/webhooks/subscription-billing',
    ]);
  });

  it('states in words every rule it cannot say in JSON Schema (the ones a schema-valid body may still be refused for)', () => {
    for (const rule of DESCRIBED_RULES) {
      const requestBody = contract.operation('post', rule.path)!.requestBody!;
      expect(JSON.stringify(requestBody), `${rule.path}: "${rule.phrase}"`).toContain(rule.phrase);
    }
  });

  it.each(['evm', 'solana'] as const)('links a %s wallet with a real signature: challenge 201, link 201, again 200 alreadyLinked, list, account, unlink 204, again 404', async (family) => {
    const wallet: TestWallet = family === 'evm' ? evmWallet() : solanaWallet();
    const network = family === 'evm' ? { chainId: challengeNetworks().evm[0]! } : { cluster: challengeNetworks().solana[0]! };
    const { authorization } = await stack.mintToken();
    const auth = { authorization };
    const challenge = await sendDocumented({ method: 'post', template: '/api/wallet-link/challenge', headers: auth, json: { chain: family, address: wallet.address, ...network } });
    expect(challenge.status).toBe(201);
    const message = challenge.json!.message as string;
    const body = { payload: { chain: family, address: wallet.address, ...network, message, signature: await wallet.sign(message) } };
    expect(contract.requestVerdict('post', '/api/wallet-link', body)).toEqual({ valid: true, errors: [] });
    const linked = await sendDocumented({ method: 'post', template: '/api/wallet-link', headers: auth, json: body });
    expect(linked.status).toBe(201);
    expect(linked.json).toMatchObject({ alreadyLinked: false });
    const again = await sendDocumented({ method: 'post', template: '/api/wallet-link', headers: auth, json: body });
    expect(again.status).toBe(200);
    expect(again.json).toMatchObject({ alreadyLinked: true });
    expect((await sendDocumented({ method: 'get', template: '/api/wallet-link', headers: auth })).status).toBe(200);
    expect((await sendDocumented({ method: 'get', template: '/api/me', headers: auth })).status).toBe(200);
    const linkPath = `/api/wallet-link/${(linked.json!.link as { id: string }).id}`;
    expect((await sendDocumented({ method: 'delete', template: '/api/wallet-link/{linkId}', path: linkPath, headers: auth })).status).toBe(204);
    expect((await sendDocumented({ method: 'delete', template: '/api/wallet-link/{linkId}', path: linkPath, headers: auth })).status).toBe(404);
  });

  it("answers every operation's example and the health and billing-sync routes with a documented success", async () => {
    // A subscriber RevenueCat knows, named by a webhook event first (the admin route syncs only those).
    const { userId, authorization } = await stack.mintToken();
    const now = Date.now();
    stack.revenuecat.setCustomer(userId, {
      entitlements: { pro: v1Entitlement('pro_monthly', { purchased: now - 86_400_000, expires: now + 29 * 86_400_000 }) },
      subscriptions: { pro_monthly: v1Subscription({ purchased: now - 86_400_000, expires: now + 29 * 86_400_000 }) },
    });
    const expected: Record<string, number> = {
      'GET /api/health': 200, 'GET /api/health/live': 200, 'GET /api/openapi.json': 200, 'GET /api/me': 200, 'GET /api/wallet-link': 200,
      'POST /api/webhooks/subscription-billing': 200, 'POST /api/webhooks/leagues-sync': 200, 'POST /api/admin/billing/sync': 200,
      'POST /api/me/billing/sync': 200, 'GET /api/cron/billing-sync': 200, 'POST /api/wallet-link/challenge': 201,
    };
    const order = ['POST /api/webhooks/subscription-billing', ...Object.keys(expected).filter((key) => key !== 'POST /api/webhooks/subscription-billing')];
    for (const key of order) {
      const [method, path] = key.split(' ') as [string, string];
      const op = contract.operation(method, path)!;
      let json = op.requestBody?.content['application/json']?.example as Record<string, unknown> | undefined;
      expect(json === undefined, `${key} has an example`).toBe(op.requestBody === undefined);
      if (path === '/api/webhooks/subscription-billing') json = { ...json, event: { ...(json!.event as object), id: randomUUID(), app_user_id: userId, original_app_user_id: userId, aliases: [userId] } };
      if (path === '/api/admin/billing/sync') json = { app_user_id: userId };
      if (path === '/api/webhooks/leagues-sync') json = { ...json, id: randomUUID() };
      const headers = path === '/api/me/billing/sync' ? { authorization } : await credentialsFor(method, path);
      const observed = await sendDocumented({ method, template: path, headers, json });
      expect(observed.status, `${key}: ${observed.text.slice(0, 300)}`).toBe(expected[key]);
    }
  });

  it('streams the documented account_changed events on GET /api/me/events: a webhook for the caller arrives as one, valid against its x-events schema', async () => {
    const { userId, authorization } = await stack.mintToken();
    const response = await fetch(`${stack.server.url}/api/me/events`, { headers: { authorization } });
    expect(response.status).toBe(200);
    let received = '';
    const reading = readEventStream(response, (text) => {
      received = text;
      return text.includes('event: account_changed');
    });
    await expect.poll(() => received).toContain('retry:'); // subscribed
    const purchase = contract.operation('post', '/api/webhooks/subscription-billing')!.requestBody!.content['application/json']!.example as { event: object };
    const event = { ...purchase.event, id: randomUUID(), app_user_id: userId, original_app_user_id: userId, aliases: [userId], purchased_at_ms: Date.now(), event_timestamp_ms: Date.now(), expiration_at_ms: Date.now() + 86_400_000 };
    expect((await sendDocumented({ method: 'post', template: '/api/webhooks/subscription-billing', headers: await credentialsFor('post', '/api/webhooks/subscription-billing'), json: { event } })).status).toBe(200);
    const text = await reading;
    expect(contract.checkResponse('get', '/api/me/events', { status: response.status, headers: response.headers, text })).toEqual([]);
    const changes = parseEventStream(text).filter((block) => block.event === 'account_changed').map((block) => JSON.parse(block.data!));
    expect(changes).toEqual([{ what: 'entitlements', at: expect.any(String) }]);
  });

  it('answers rate limits with the documented 429, Retry-After and retryAfter', async () => {
    const { authorization } = await stack.mintToken();
    const wallet = evmWallet();
    const statuses: number[] = [];
    for (let i = 0; i < 11; i++) {
      statuses.push((await sendDocumented({ method: 'post', template: '/api/wallet-link/challenge', headers: { authorization }, json: { chain: 'evm', address: wallet.address, chainId: 1 } })).status);
    }
    expect(statuses).toEqual([...Array(10).fill(201), 429]);
    expect((await sendDocumented({ method: 'post', template: '/api/me/billing/sync', headers: { authorization } })).status).toBe(200);
    const again = await sendDocumented({ method: 'post', template: '/api/me/billing/sync', headers: { authorization } });
    expect(again.status).toBe(429);
    expect(Number(again.headers.get('retry-after'))).toBe(again.json!.retryAfter);
  });

  it("answers RevenueCat's failures with the documented 502 and 503 (Retry-After) on the user and admin routes", async () => {
    const { userId } = await stack.mintToken();
    // A subscriber this service knows (the admin route syncs only those): a purchase event names it.
    const purchase = contract.operation('post', '/api/webhooks/subscription-billing')!.requestBody!.content['application/json']!.example as { event: object };
    const event = { ...purchase.event, id: randomUUID(), app_user_id: userId, original_app_user_id: userId, aliases: [userId] };
    expect((await sendDocumented({ method: 'post', template: '/api/webhooks/subscription-billing', headers: await credentialsFor('post', '/api/webhooks/subscription-billing'), json: { event } })).status).toBe(200);
    // RevenueCat's client tries a 5xx three times, and a refusal or a garbled answer once.
    const failures = [
      { answer: { status: 500, body: '{"code":7110,"message":"Internal server error"}' }, attempts: 3, status: 503, code: 'upstream_unavailable' },
      { answer: { status: 401, body: '{"code":7225,"message":"Invalid API key."}' }, attempts: 1, status: 502, code: 'upstream_rejected' },
      { answer: { status: 200, body: '<html>not json</html>' }, attempts: 1, status: 502, code: 'upstream_invalid' },
    ];
    for (const { answer, attempts, status, code } of failures) {
      for (const path of ['/api/me/billing/sync', '/api/admin/billing/sync']) {
        const admin = path === '/api/admin/billing/sync';
        // A new user for each refresh: the user's own refresh is limited to one per 5 s.
        const headers = admin ? await credentialsFor('post', path) : { authorization: (await stack.mintToken()).authorization };
        const before = stack.revenuecat.requests.length;
        stack.revenuecat.script(...Array(attempts).fill(answer));
        const observed = await send({ method: 'post', template: path, headers, json: admin ? { app_user_id: userId } : undefined });
        expect(stack.revenuecat.requests.length - before, `${path}: every scripted answer was used`).toBe(attempts);
        expect(contract.checkResponse('post', path, observed, { dependencyDown: true }), observed.text).toEqual([]);
        expect({ path, status: observed.status, code: observed.json?.code }).toEqual({ path, status, code });
      }
    }
  });

  describe('properties (fast-check): bodies from the request schemas, and their mutations', () => {
    it.each(['/api/wallet-link/challenge', '/api/wallet-link', '/api/webhooks/subscription-billing', '/api/webhooks/leagues-sync', '/api/admin/billing/sync'])(
      'POST %s: a body the schema accepts is never refused for its shape; every answer is documented',
      async (path) => {
        const schema = contract.requestSchema('post', path)!;
        await fc.assert(
          fc.asyncProperty(valueOf(schema, contract.resolve), async (json) => {
            const request = { method: 'post', template: path, headers: await credentialsFor('post', path), json };
            expect(judge(request, await send(request))).toEqual([]);
          }),
          { numRuns: RUNS, seed: SEED, endOnFailure: true },
        );
      },
      120_000,
    );

    it.each(['/api/wallet-link/challenge', '/api/wallet-link', '/api/webhooks/subscription-billing', '/api/webhooks/leagues-sync', '/api/admin/billing/sync'])(
      'POST %s: a mutated body the schema refuses gets a 4xx, and every answer is documented',
      async (path) => {
        const schema = contract.requestSchema('post', path)!;
        const example = contract.operation('post', path)!.requestBody!.content['application/json']!.example;
        const mutated = fc.oneof(fc.constant(example), valueOf(schema, contract.resolve)).chain((valid) => mutationOf(schema, valid, contract.resolve));
        await fc.assert(
          fc.asyncProperty(mutated, async ({ value, mutation }) => {
            const request = { method: 'post', template: path, headers: await credentialsFor('post', path), json: value };
            expect(judge(request, await send(request)), mutation).toEqual([]);
          }),
          { numRuns: RUNS * 2, seed: SEED, endOnFailure: true },
        );
      },
      120_000,
    );

    it('POST /api/wallet-link/challenge and /api/wallet-link: bodies with real keys and real signatures are never refused for their shape', async () => {
      const networks = fc.oneof(
        fc.constantFrom(...challengeNetworks().evm).map((chainId) => ({ chain: 'evm' as const, chainId })),
        fc.constantFrom(...challengeNetworks().solana).map((cluster) => ({ chain: 'solana' as const, cluster })),
      );
      const keys = fc.uint8Array({ minLength: 32, maxLength: 32 }).filter((bytes) => bytes.some((byte) => byte !== 0) && bytes[0]! < 0xff);
      await fc.assert(
        fc.asyncProperty(networks, keys, fc.string({ minLength: 1, maxLength: 300 }), fc.boolean(), async (network, key, message, linking) => {
          const { chain, ...networkField } = network;
          const wallet = walletFromKey(chain, key);
          const path = linking ? '/api/wallet-link' : '/api/wallet-link/challenge';
          const json = linking
            ? { payload: { chain, address: wallet.address, ...networkField, message, signature: await wallet.sign(message) } }
            : { chain, address: wallet.address, ...networkField };
          const request = { method: 'post', template: path, headers: await credentialsFor('post', path), json };
          const observed = await send(request);
          expect(judge(request, observed)).toEqual([]);
          // A random message is no challenge of ours: refused for what it says, never for its shape.
          if (linking) expect(['invalid_message', 'challenge_not_found'], observed.text).toContain(observed.json?.code);
          else expect(observed.status, observed.text).toBe(201);
        }),
        { numRuns: RUNS, seed: SEED, endOnFailure: true },
      );
    });

    it('DELETE /api/wallet-link/{linkId}: any link id, valid or not, gets a documented 4xx for a link the caller does not have', async () => {
      await fc.assert(
        // "." and ".." are not ids a URL path can carry (a client resolves them as dot segments).
        fc.asyncProperty(fc.oneof(fc.uuid(), fc.string({ minLength: 1, maxLength: 40 }), fc.constantFrom('%', ' ', 'a/b', '\u00e9', '0'.repeat(300))).filter((id) => id !== '.' && id !== '..'), async (linkId) => {
          const request = { method: 'delete', template: '/api/wallet-link/{linkId}', path: `/api/wallet-link/${encodeURIComponent(linkId)}`, headers: await credentialsFor('delete', '/api/wallet-link/{linkId}') };
          const observed = await send(request);
          expect(contract.checkResponse('delete', request.template, observed), `${linkId}: ${observed.text.slice(0, 200)}`).toEqual([]);
          expect(observed.status).toBe(404);
        }),
        { numRuns: RUNS, seed: SEED, endOnFailure: true },
      );
    });
  });

  it('answers bodies that are not JSON, not declared as JSON, or too large with the documented 400, 415 and 413', async () => {
    for (const { path } of operationsWithBodies()) {
      const maxBytes = Number(/at most (\d+) bytes/.exec(contract.operation('post', path)!.requestBody!.description ?? '')?.[1]);
      expect(maxBytes, `${path}: the body limit is documented`).toBeGreaterThan(0);
      const cases: { raw: string; contentType: string | null; status: number }[] = [
        { raw: '{"event":', contentType: 'application/json', status: 400 },
        { raw: '', contentType: 'application/json', status: 400 },
        { raw: '[]', contentType: 'application/json', status: 400 },
        { raw: '{}', contentType: 'text/plain', status: 415 },
        { raw: '{}', contentType: null, status: 415 },
        { raw: '{}', contentType: 'application/x-www-form-urlencoded', status: 415 },
        { raw: `{"pad":"${'x'.repeat(maxBytes)}"}`, contentType: 'application/json', status: 413 },
        { raw: `${'['.repeat(65)}${']'.repeat(65)}`, contentType: 'application/json', status: 400 },
      ];
      for (const { raw, contentType, status } of cases) {
        const observed = await sendDocumented({ method: 'post', template: path, headers: await credentialsFor('post', path), raw, contentType });
        expect(observed.status, `${path} ${contentType} ${raw.slice(0, 20)}`).toBe(status);
      }
    }
  });

  it('takes the content types the document names and answers any other with 415 (fast-check)', async () => {
    const paths = operationsWithBodies().map(({ path }) => path);
    for (const path of paths) expect(contract.operation('post', path)!.requestBody!.description).toContain('application/json` or another `application/*+json` type (415 otherwise)');
    const mediaTypes = fc.oneof(
      fc.constantFrom('application/json', 'APPLICATION/JSON', 'application/problem+json', 'application/vnd.api+json', 'text/json', 'application/jsonx', 'application/json-seq', 'application/x-json', 'text/plain', 'multipart/form-data', 'application/+json'),
      fc.stringMatching(/^[a-z]{1,12}\/[a-z0-9.+-]{1,20}$/),
    );
    const parameters = fc.constantFrom('', '; charset=utf-8', ';charset=UTF-8', '; boundary=x');
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...paths), mediaTypes, parameters, async (path, mediaType, parameter) => {
        const example = contract.operation('post', path)!.requestBody!.content['application/json']!.example;
        const observed = await sendDocumented({ method: 'post', template: path, headers: await credentialsFor('post', path), json: example, contentType: `${mediaType}${parameter}` });
        // The documented rule: application/json, or an application/ type with the +json suffix (RFC 6839).
        const [type, subtype = ''] = mediaType.toLowerCase().split('/');
        const json = type === 'application' && (subtype === 'json' || (subtype.endsWith('+json') && subtype.length > '+json'.length));
        expect(observed.status === 415, `${mediaType}${parameter}: ${observed.status} ${observed.text.slice(0, 120)}`).toBe(!json);
      }),
      { numRuns: RUNS, seed: SEED, endOnFailure: true },
    );
  });

  it('reads Authorization by one grammar on every Bearer route: a right credential spelled any allowed way is accepted, anything else is a documented 401 (fast-check)', async () => {
    const bearerRoutes = contract.operations.filter(({ operation }) => {
      const scheme = Object.keys(operation.security[0] ?? {})[0];
      return scheme !== undefined && (served as unknown as { components: { securitySchemes: Record<string, { scheme?: string }> } }).components.securitySchemes[scheme]!.scheme === 'bearer';
    });
    expect(bearerRoutes.length).toBe(24); // eight with a session token, the billing webhook, three cron routes (GET and POST each) and nine admin
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...bearerRoutes), fc.nat(), fc.option(fc.string({ minLength: 1, maxLength: 60 }), { nil: undefined }), async ({ path, method, operation }, pick, random) => {
        const valid = (await credentialsFor(method, path)).authorization!.replace(/^Bearer /, '');
        const cases = authorizationGrammarCases(valid);
        const chosen = random === undefined ? cases[pick % cases.length]! : { name: 'random text', header: random, accepted: false };
        const example = operation.requestBody?.content['application/json']?.example;
        const observed = await sendDocumented({ method, template: path, path: fillPath(path), headers: { authorization: chosen.header }, json: path === '/api/admin/billing/sync' ? { app_user_id: randomUUID() } : example });
        const refused = observed.status === 401 || observed.status === 403;
        expect(refused, `${method} ${path}, ${chosen.name} (${JSON.stringify(chosen.header.slice(0, 40))}): ${observed.status} ${observed.text.slice(0, 120)}`).toBe(!chosen.accepted);
      }),
      { numRuns: RUNS * 2, seed: SEED, endOnFailure: true },
    );
  });

  it('answers no, wrong or expired credentials with a documented 401 or 403 (WWW-Authenticate on every 401), for every operation that needs them', async () => {
    const expired = (await stack.mintToken({ expiresInSeconds: -120 })).authorization;
    const anonymous = (await stack.mintToken({ isAnonymous: true })).authorization;
    const serviceRole = (await stack.mintToken({ role: 'service_role' })).authorization;
    const valid = (await stack.mintToken()).authorization;
    const tampered = `${valid.slice(0, -4)}${valid.endsWith('AAAA') ? 'BBBB' : 'AAAA'}`;
    for (const { path, method, operation } of contract.operations.filter(({ operation }) => operation.security.length > 0)) {
      const scheme = Object.keys(operation.security[0]!)[0];
      const wrong: Record<string, string>[] = [
        {},
        { authorization: 'Basic dXNlcjpwYXNz' },
        { authorization: 'Bearer' },
        { authorization: 'Bearer not-the-secret' },
        { 'x-webhook-secret': 'not-the-secret' },
        ...(scheme === 'session' ? [{ authorization: expired }, { authorization: anonymous }, { authorization: serviceRole }, { authorization: tampered }] : [{ authorization: valid }]),
      ];
      const example = operation.requestBody?.content['application/json']?.example;
      for (const headers of wrong) {
        const observed = await sendDocumented({ method, template: path, path: fillPath(path), headers, json: example });
        expect([401, 403], `${method} ${path} with ${JSON.stringify(headers).slice(0, 60)}: ${observed.status}`).toContain(observed.status);
      }
    }
  });

  it('answers OPTIONS with the 204 and Allow documented once for every path, HEAD as GET, and every other method with the documented 405, problem+json and the same Allow', async () => {
    const every = served['x-path-methods']!;
    expect(every.description).toContain('Any other of GET, POST, PUT, PATCH and DELETE answers 405 `method_not_allowed` (problem+json) with the same `Allow`');
    expect(every.otherMethods.methods).toEqual(['GET', 'POST', 'PUT', 'PATCH', 'DELETE']);
    for (const [path, item] of Object.entries(served.paths)) {
      const concrete = fillPath(path);
      const options = await sendDocumented({ method: 'options', template: path, path: concrete });
      expect(options.status).toBe(204);
      const allow = options.headers.get('allow')!;
      const documented = HTTP_METHODS.filter((method) => item[method]);
      for (const method of ['get', 'put', 'post', 'delete', 'patch'].filter((m) => !documented.includes(m as never))) {
        const observed = await sendDocumented({ method, template: path, path: concrete, headers: { 'content-type': 'application/json' }, raw: method === 'get' ? undefined : '{}' });
        expect({ method, status: observed.status, allow: observed.headers.get('allow'), type: observed.headers.get('content-type'), code: observed.json?.code }).toEqual({
          method, status: 405, allow, type: 'application/problem+json', code: 'method_not_allowed',
        });
      }
      if (documented.includes('get')) {
        const head = await sendDocumented({ method: 'head', template: path, path: concrete });
        const get = await send({ method: 'get', template: path, path: concrete });
        expect({ status: head.status, body: head.text }).toEqual({ status: get.status, body: '' });
      }
    }
  });

  it('refuses a method outside the common set (any token, e.g. PROPFIND) with a 4xx, never a 5xx (fast-check)', async () => {
    // One Node's HTTP parser knows (PROPFIND, QUERY, LOCK...) is answered by the server before Next
    // with a 405 problem+json, one it does not know with a 400 problem+json (lib/http/before-next.ts). TRACE, TRACK and CONNECT cannot be sent by fetch (tests/http/server-contract.server.test.ts
    // sends them). The document says so, once for every path.
    const methods = fc.oneof(fc.constantFrom('PROPFIND', 'MKCOL', 'LINK', 'QUERY', 'SEARCH', 'PURGE', 'purge'), fc.stringMatching(/^[A-Za-z]{3,10}$/))
      .filter((method) => !['TRACE', 'TRACK', 'CONNECT', 'GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'].includes(method.toUpperCase()));
    expect(served['x-path-methods']!.description).toContain('that Node\'s HTTP parser knows (TRACE, PROPFIND, QUERY, ...) answers 405 `method_not_allowed`');
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...Object.keys(served.paths)), methods, async (path, method) => {
        const observed = await send({ method, template: path, path: fillPath(path) });
        const known = http.METHODS.includes(method.toUpperCase());
        expect({ method, path, status: observed.status, type: observed.headers.get('content-type'), code: observed.json?.code })
          .toEqual({ method, path, status: known ? 405 : 400, type: 'application/problem+json', code: known ? 'method_not_allowed' : 'invalid_request' });
      }),
      { numRuns: RUNS, seed: SEED, endOnFailure: true },
    );
  });
});

describe('the suite catches a server and a document that drift apart', () => {
  /** The served document with one thing changed, as a checker. */
  function drifted(change: (document: OpenApiDocument) => void): Contract {
    const copy = structuredClone(served);
    change(copy);
    return buildContract(copy);
  }

  it('a response rule: a success status, a body field or a header the server does not send as documented', async () => {
    const live = await send({ method: 'get', template: '/api/health/live' });
    expect(contract.checkResponse('get', '/api/health/live', live)).toEqual([]);

    const otherStatus = drifted((d) => {
      const responses = (d.paths['/api/health/live']!.get as { responses: Record<string, unknown> }).responses;
      responses['202'] = responses['200'];
      delete responses['200'];
    });
    expect(otherStatus.checkResponse('get', '/api/health/live', live).join('\n')).toMatch(/status not documented/);

    const otherBody = drifted((d) => {
      (d.components.schemas.Live as { properties: { status: unknown } }).properties.status = { type: 'string', const: 'alive' };
    });
    expect(otherBody.checkResponse('get', '/api/health/live', live).join('\n')).toMatch(/body does not match the application\/json schema: data\/status must be equal to constant/);

    const extraRequired = drifted((d) => {
      const live = d.components.schemas.Live as { properties: Record<string, unknown>; required: string[] };
      live.properties.uptimeSeconds = { type: 'integer' };
      live.required.push('uptimeSeconds');
    });
    expect(extraRequired.checkResponse('get', '/api/health/live', live).join('\n')).toMatch(/must have required property 'uptimeSeconds'/);

    const header = drifted((d) => {
      (d.components.headers!.RequestId as { schema: Record<string, unknown> }).schema = { type: 'string', format: 'uuid' };
    });
    const withOwnId = await send({ method: 'get', template: '/api/health/live', headers: { 'x-request-id': 'my-trace-id.42' } });
    expect(header.checkResponse('get', '/api/health/live', withOwnId).join('\n')).toMatch(/header x-request-id: "my-trace-id.42" data must match format "uuid"/);

    const problemCode = drifted((d) => {
      const unauthorized = (d.paths['/api/me']!.get as { responses: Record<string, { 'x-problem-codes': string[] }> }).responses['401']!;
      unauthorized['x-problem-codes'] = unauthorized['x-problem-codes'].filter((code) => code !== 'missing_token');
    });
    const noToken = await send({ method: 'get', template: '/api/me' });
    expect(contract.checkResponse('get', '/api/me', noToken)).toEqual([]);
    expect(problemCode.checkResponse('get', '/api/me', noToken).join('\n')).toMatch(/problem code missing_token not listed/);
  });

  it('an event stream whose events the document does not describe', async () => {
    const headers = new Headers({ 'content-type': 'text/event-stream', 'x-request-id': 'drift-1', 'server-timing': 'db;desc="0 calls";dur=0.0, total;dur=1.2' });
    const observed = { status: 200, headers, text: 'retry: 2000\n\nevent: account_changed\ndata: {"what":"wallets","at":"2026-01-01T00:00:00.000Z"}\n\n' };
    expect(contract.checkResponse('get', '/api/me/events', observed)).toEqual([]);
    const otherKinds = drifted((d) => {
      const media = (d.paths['/api/me/events']!.get as { responses: Record<string, { content: Record<string, { 'x-events': Record<string, { properties: { what: { enum: string[] } } }> }> }> }).responses['200']!.content['text/event-stream']!;
      media['x-events'].account_changed!.properties.what.enum = ['entitlements'];
    });
    expect(otherKinds.checkResponse('get', '/api/me/events', observed).join('\n')).toMatch(/event "account_changed" data does not match its schema: data\/what must be equal to one of the allowed values/);
    const renamed = drifted((d) => {
      const media = (d.paths['/api/me/events']!.get as { responses: Record<string, { content: Record<string, { 'x-events': Record<string, unknown> }> }> }).responses['200']!.content['text/event-stream']!;
      media['x-events'] = { accountChanged: media['x-events'].account_changed };
    });
    expect(renamed.checkResponse('get', '/api/me/events', observed).join('\n')).toMatch(/event "account_changed" not documented \(documented: accountChanged\)/);
    expect(contract.checkResponse('get', '/api/me/events', { ...observed, text: 'retry: 2000\n\nevnt: account_changed\n\n' }).join('\n')).toMatch(/lines the format does not have: evnt/);
  });

  it('an OPTIONS or 405 answer that breaks what x-path-methods says for every path', async () => {
    const options = await send({ method: 'options', template: '/api/me', path: '/api/me' });
    const put = await send({ method: 'put', template: '/api/me', path: '/api/me', headers: { 'content-type': 'application/json' }, raw: '{}' });
    expect(contract.checkResponse('options', '/api/me', options)).toEqual([]);
    expect(contract.checkResponse('put', '/api/me', put)).toEqual([]);

    // The rule puts OPTIONS before HEAD: the server's Allow no longer follows it.
    const otherOrder = drifted((d) => {
      d['x-path-methods']!.allow.order = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'HEAD'];
    });
    expect(otherOrder.checkResponse('options', '/api/me', options).join('\n')).toMatch(/header Allow: "GET, HEAD, OPTIONS", the document's rule says "GET, OPTIONS, HEAD"/);
    expect(otherOrder.checkResponse('put', '/api/me', put).join('\n')).toMatch(/header Allow/);

    // A path documenting a method it does not have: its Allow (and the 405 for that method) disagree.
    const extraMethod = drifted((d) => {
      d.paths['/api/me']!.post = d.paths['/api/me']!.get;
    });
    expect(extraMethod.checkResponse('options', '/api/me', options).join('\n')).toMatch(/the document's rule says "GET, POST, HEAD, OPTIONS"/);

    // The 405 without its code, or with a body schema the problem does not match.
    const noCode = drifted((d) => {
      d['x-path-methods']!.otherMethods.responses['405']!['x-problem-codes'] = ['not_found'];
    });
    expect(noCode.checkResponse('put', '/api/me', put).join('\n')).toMatch(/problem code method_not_allowed not listed/);
    const otherStatus = drifted((d) => {
      const responses = d['x-path-methods']!.options.responses;
      responses['200'] = responses['204']!;
      delete responses['204'];
    });
    expect(otherStatus.checkResponse('options', '/api/me', options).join('\n')).toMatch(/status not documented/);
    // Without x-path-methods nothing documents OPTIONS at all.
    const none = drifted((d) => {
      delete d['x-path-methods'];
    });
    expect(none.checkResponse('options', '/api/me', options).join('\n')).toMatch(/OPTIONS is not documented for \/api\/me/);
  });

  it('a request rule: the document accepting what the server refuses, or refusing what it accepts', async () => {
    const path = '/api/webhooks/subscription-billing';
    const headers = await credentialsFor('post', path);
    const eventId = (length: number) => ({ event: { id: randomUUID().padEnd(length, 'x'), type: 'TEST' } });

    // The document says event.id may be 300 characters; the server's limit is 256.
    const looser = drifted((d) => {
      const schema = (d.paths[path]!.post as { requestBody: { content: { 'application/json': { schema: { properties: { event: { properties: { id: { anyOf: { maxLength: number }[] } } } } } } } } }).requestBody.content['application/json'].schema;
      schema.properties.event.properties.id.anyOf[0]!.maxLength = 300;
    });
    const long = { method: 'post', template: path, headers, json: eventId(300) };
    const answer = await send(long);
    expect(answer.status).toBe(400);
    expect(judge(long, answer)).toEqual([]); // the served document refuses it too: they agree
    const swapped = contract;
    contract = looser;
    try {
      expect(judge(long, answer).join('\n')).toMatch(/the schema accepts this body but the server refused it: 400 invalid_request/);
    } finally {
      contract = swapped;
    }

    // The document says event.id is at most 100 characters; the server takes 200.
    const stricter = drifted((d) => {
      const schema = (d.paths[path]!.post as { requestBody: { content: { 'application/json': { schema: { properties: { event: { properties: { id: { anyOf: { maxLength: number }[] } } } } } } } } }).requestBody.content['application/json'].schema;
      schema.properties.event.properties.id.anyOf[0]!.maxLength = 100;
    });
    const medium = { method: 'post', template: path, headers, json: eventId(200) };
    const accepted = await send(medium);
    expect(accepted.status).toBe(200);
    contract = stricter;
    try {
      expect(judge(medium, accepted).join('\n')).toMatch(/the schema refuses this body .* but the server answered 200/);
    } finally {
      contract = swapped;
    }

    // Without the EVM address pattern, "0x12" is a body the document accepts and the server refuses.
    const noPattern = drifted((d) => {
      const schema = (d.paths['/api/wallet-link/challenge']!.post as { requestBody: { content: { 'application/json': { schema: { oneOf: { properties: { address: Record<string, unknown> } }[] } } } } }).requestBody.content['application/json'].schema;
      delete schema.oneOf[0]!.properties.address.pattern;
    });
    const shortAddress = { method: 'post', template: '/api/wallet-link/challenge', headers: await credentialsFor('post', '/api/wallet-link/challenge'), json: { chain: 'evm', address: '0x12', chainId: 1 } };
    const refused = await send(shortAddress);
    expect(refused.json?.code).toBe('invalid_address');
    contract = noPattern;
    try {
      expect(judge(shortAddress, refused).join('\n')).toMatch(/the schema accepts this body but the server refused it: 400 invalid_address/);
    } finally {
      contract = swapped;
    }
  });
});
