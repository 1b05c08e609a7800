import { randomUUID } from 'node:crypto';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import fc from 'fast-check';
import { SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIXTURE_NAMES, fixture } from '../billing/fixtures.ts';
import { at, delivery, league, members } from '../leagues/fixtures.ts';
import { evmWallet, networkOf, solanaWallet } from '../wallets/wallets.ts';
import { newTally, send, type Answer, type SendOptions } from './client.ts';
import { hostileBodies, type BodyCase } from './mutations.ts';
import { scanLogs, startStack, type ReliabilityStack } from './stack.ts';
import { recordLogScan, recordScenario } from './summary.ts';

/**
 * Bounded property-based runs (fast-check) against every endpoint of the production server:
 * mutated valid bodies and random JSON, fuzzed credentials, and every method. Each request is
 * checked on its own: never a 5xx (nor a dropped connection), and the database changes only when
 * the answer is 2xx (every table's row count and checksum, before and after).
 * RELIABILITY_FUZZ_RUNS sets the runs per property; RELIABILITY_SEED replays a run.
 */
const RUNS = Number(process.env.RELIABILITY_FUZZ_RUNS ?? 12);
const SEED = Number(process.env.RELIABILITY_SEED ?? Date.now() % 2 ** 31);

type Auth = 'none' | 'session' | 'billing' | 'leagues' | 'cron' | 'admin';
interface Target {
  /** The route folder under app/api. */
  route: string;
  auth: Auth;
  methods: string[];
}

const TARGETS: Target[] = [
  { route: 'health', auth: 'none', methods: ['GET'] },
  { route: 'health/live', auth: 'none', methods: ['GET'] },
  { route: 'openapi.json', auth: 'none', methods: ['GET'] },
  { route: 'me', auth: 'session', methods: ['GET'] },
  { route: 'me/events', auth: 'session', methods: ['GET'] },
  { route: 'wallet-link', auth: 'session', methods: ['GET', 'POST'] },
  { route: 'wallet-link/challenge', auth: 'session', methods: ['POST'] },
  { route: 'wallet-link/[linkId]', auth: 'session', methods: ['DELETE'] },
  { route: 'webhooks/subscription-billing', auth: 'billing', methods: ['POST'] },
  { route: 'webhooks/leagues-sync', auth: 'leagues', methods: ['POST'] },
  { route: 'me/billing/sync', auth: 'session', methods: ['POST'] },
  { route: 'me/export', auth: 'session', methods: ['GET'] },
  { route: 'cron/billing-sync', auth: 'cron', methods: ['GET', 'POST'] },
  { route: 'cron/maintenance', auth: 'cron', methods: ['GET', 'POST'] },
  { route: 'cron/events', auth: 'cron', methods: ['GET', 'POST'] },
  { route: 'admin/billing/sync', auth: 'admin', methods: ['POST'] },
  { route: 'admin/status', auth: 'admin', methods: ['GET'] },
  { route: 'admin/billing/subscribers/[appUserId]', auth: 'admin', methods: ['GET'] },
  { route: 'admin/users/[userId]/export', auth: 'admin', methods: ['GET'] },
  { route: 'admin/events', auth: 'admin', methods: ['GET'] },
  { route: 'admin/events/endpoints', auth: 'admin', methods: ['GET'] },
  { route: 'admin/events/dead-letters', auth: 'admin', methods: ['GET'] },
  { route: 'admin/events/replay', auth: 'admin', methods: ['POST'] },
  { route: 'admin/events/deliver', auth: 'admin', methods: ['POST'] },
  // Local mode's RevenueCat stand-in: off here (no REVENUECAT_STAND_IN), so a problem+json 404.
  { route: 'dev/revenuecat/v1/subscribers/[appUserId]', auth: 'none', methods: ['GET'] },
  // Any other /api path: a problem+json 404.
  { route: '[[...path]]', auth: 'none', methods: ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] },
];

function routesOnDisk(dir = path.resolve('app/api'), prefix = ''): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    if (entry.isFile() && entry.name === 'route.ts') return [prefix.slice(1)];
    return entry.isDirectory() ? routesOnDisk(path.join(dir, entry.name), `${prefix}/${entry.name}`) : [];
  });
}

/** Percent-encode every byte but the unreserved ones, so any string (even a lone surrogate) is one path segment. */
const segment = (value: string) => [...Buffer.from(value, 'utf8')].map((byte) => (/[A-Za-z0-9\-._~]/.test(String.fromCharCode(byte)) ? String.fromCharCode(byte) : `%${byte.toString(16).padStart(2, '0').toUpperCase()}`)).join('');

describe('fuzz: every endpoint (production server, Postgres)', () => {
  let stack: ReliabilityStack;
  let snapshotSql: string;
  type User = Awaited<ReturnType<ReliabilityStack['mintUser']>>;
  let users: User[];
  let linkPool: { user: User; body: unknown }[];
  let owner: User;
  let ownedLinkIds: string[];
  let specialTokens: string[];
  let knownSubscriber: string;
  const tally = newTally();
  const perTarget: Record<string, { requests: number; statuses: Record<string, number> }> = {};
  const changedWithout2xx: string[] = [];
  const notProblemJson: string[] = [];

  beforeAll(async () => {
    // Billing sync against a RevenueCat stand-in, so the sync, sweep and admin routes do real work.
    stack = await startStack({ revenuecat: true });
    // Every base table, so a write anywhere is seen.
    const tables = await stack.sql<{ name: string }>(
      `select format('%I.%I', table_schema, table_name) as name from information_schema.tables
       where table_type = 'BASE TABLE' and table_schema in ('public', 'auth', 'reliability') order by 1`);
    // In table order: Postgres may run the union's parts in parallel and return them in any order.
    snapshotSql = `select * from (${tables.map(({ name }) =>
      `select '${name}' as t, count(*)::int as n, md5(coalesce(string_agg(x::text, '|' order by x::text), '')) as h from ${name} x`).join(' union all ')}) tables order by t`;

    users = await Promise.all(Array.from({ length: 12 }, () => stack.mintUser()));
    owner = await stack.mintUser();
    // A subscriber RevenueCat told the service about, and its record at RevenueCat: what an operator syncs.
    knownSubscriber = randomUUID();
    const purchase = fixture('initial-purchase', { id: `fuzz-known-${randomUUID()}`, app_user_id: knownSubscriber });
    expect((await send(newTally(), `${stack.server.url}/api/webhooks/subscription-billing`, { method: 'POST', headers: { authorization: stack.billingAuthorization }, body: purchase })).status).toBe(200);
    stack.revenuecat!.setCustomer(knownSubscriber, {});
    // Real challenges, signed by real wallets: the valid link bodies the mutations start from.
    const base = stack.server.url;
    const challengeFor = async (user: User, wallet: ReturnType<typeof evmWallet> | ReturnType<typeof solanaWallet>) => {
      const answer = await send(newTally(), `${base}/api/wallet-link/challenge`, {
        method: 'POST', headers: { authorization: user.authorization }, body: { chain: wallet.chain, address: wallet.address, ...networkOf(wallet) },
      });
      expect(answer.status).toBe(201);
      const message = (answer.body as { message: string }).message;
      return { payload: { chain: wallet.chain, address: wallet.address, ...networkOf(wallet), message, signature: await wallet.sign(message) } };
    };
    linkPool = await Promise.all(users.map(async (user, i) => ({ user, body: await challengeFor(user, i % 2 === 0 ? evmWallet() : solanaWallet()) })));
    ownedLinkIds = [];
    for (let i = 0; i < 4; i++) {
      const answer = await send(newTally(), `${base}/api/wallet-link`, { method: 'POST', headers: { authorization: owner.authorization }, body: await challengeFor(owner, evmWallet()) });
      expect(answer.status).toBe(201);
      ownedLinkIds.push((answer.body as { link: { id: string } }).link.id);
    }
    // Tokens that are real but must not pass: expired, anonymous, wrong role, no UUID subject;
    // and forged ones: HS256 with a made-up key, alg none.
    const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
    const claims = { sub: users[0]!.userId, role: 'authenticated', aud: 'authenticated', iss: 'account-link-dev', exp: Math.floor(Date.now() / 1000) + 3600 };
    specialTokens = [
      (await stack.mintUser({ expiresInSeconds: -3600 })).token,
      (await stack.mintUser({ isAnonymous: true })).token,
      (await stack.mintUser({ role: 'service_role' })).token,
      (await stack.mintUser({ role: 'anon' })).token,
      (await stack.mintUser({ userId: 'not-a-uuid' })).token,
      await new SignJWT(claims).setProtectedHeader({ alg: 'HS256', kid: 'dev-key-1' }).sign(new TextEncoder().encode('made-up-key-made-up-key-made-up-key')),
      `${b64({ alg: 'none', typ: 'JWT' })}.${b64(claims)}.`,
    ];
  });
  afterAll(async () => {
    await stack?.close();
  });

  const snapshot = async () => JSON.stringify(await stack.sql(snapshotSql));

  /** One request, checked on its own: no 5xx, no lost connection, no change unless 2xx. */
  async function probe(target: Target, what: string, url: string, options: SendOptions): Promise<Answer> {
    const before = await snapshot();
    const answer = await send(tally, url, options);
    const after = await snapshot();
    const stats = (perTarget[target.route] ??= { requests: 0, statuses: {} });
    stats.requests++;
    stats.statuses[answer.status] = (stats.statuses[answer.status] ?? 0) + 1;
    const ok = answer.status >= 200 && answer.status < 300;
    const describe = `${options.method} ${url.replace(stack.server.url, '')} (${what}) -> ${answer.status} ${answer.error ?? answer.text.slice(0, 300)}`;
    if (!ok && before !== after) changedWithout2xx.push(describe);
    // URL normalisation can take a request off its route ("/api/wallet-link/.." is "/api/"): Next's own 404 page then answers.
    const reached = new RegExp(`^/api/${target.route.replace(/\./g, '\\.').replace('[[...path]]', '.+').replace(/\[\w+\]/, '[^/]+')}$`).test(new URL(url).pathname);
    if (!ok && reached && answer.status > 0 && !answer.headers.get('content-type')?.startsWith('application/problem+json')) notProblemJson.push(describe);
    if (answer.status === 0 || answer.status >= 500) throw new Error(`5xx or no answer: ${describe}`);
    if (!ok && before !== after) throw new Error(`the database changed without a 2xx: ${describe}`);
    return answer;
  }

  /**
   * The route's URL. `param` fills its one parameter ([linkId], [appUserId]: one segment) or
   * [[...path]] (segments split on "/"), percent-encoded, or (raw) sent as written, malformed
   * escapes and all. An [appUserId] without a given value is the subscriber the operator knows.
   */
  const urlOf = (route: string, param?: string, raw = false) => {
    const value = param ?? (route.includes('[appUserId]') ? knownSubscriber : '00000000-0000-4000-8000-000000000000');
    const encode = (text: string) => (raw ? text.replace(/[/?#]/g, (c) => segment(c)) : segment(text));
    return `${stack.server.url}/api/${route.replace('[[...path]]', `unknown/${value.split('/').map(encode).join('/')}`).replace(/\[\w+\]/, encode(value))}`;
  };

  function credentials(target: Target, user: User = users[0]!): Record<string, string> {
    switch (target.auth) {
      case 'none':
        return {};
      case 'session':
        return { authorization: user.authorization };
      case 'billing':
        return { authorization: stack.billingAuthorization };
      case 'leagues':
        return { 'x-webhook-secret': stack.secrets.leagues };
      case 'cron':
        return { authorization: `Bearer ${stack.secrets.cron}` };
      case 'admin':
        return { authorization: `Bearer ${stack.secrets.admin}` };
    }
  }

  const json = { 'content-type': 'application/json' };
  let properties = 0;
  const assertRuns = <Ts extends [unknown, ...unknown[]]>(property: fc.IAsyncPropertyWithHooks<Ts>, examples: Ts[] = []) => {
    properties++;
    // (fast-check counts the examples among numRuns: each property runs them and RUNS random ones.)
    return fc.assert(property, { numRuns: RUNS + examples.length, seed: SEED, examples });
  };

  // Valid bodies, built from fast-check values so a failing case replays with its seed.
  const billingBody = fc.record({ name: fc.constantFrom(...FIXTURE_NAMES), key: fc.uuid() })
    .map(({ name, key }) => fixture(name, { id: `fuzz-${key}` }));
  const leaguesBody = fc.record({ key: fc.uuid(), withId: fc.boolean() }).map(({ key, withId }) => delivery('fuzz', {
    id: withId ? `d-${key}` : undefined,
    leagues: [league(`l-${key}`, at(1)), league(`m-${key}`, at(2), { members: members(2) })],
    deleted: [{ externalId: `g-${key}`, deletedAt: at(3) }],
  }));
  const evm = evmWallet();
  const sol = solanaWallet();
  const challengeBody = fc.constantFrom<unknown>(
    { chain: 'evm', address: evm.address, chainId: 1 },
    { chain: 'solana', address: sol.address, cluster: 'mainnet' },
  );

  const adminSyncBody = fc.oneof(fc.constant(null), fc.uuid(), fc.string({ unit: 'binary', minLength: 1, maxLength: 300 }))
    .map((id) => ({ app_user_id: id ?? knownSubscriber }));

  it('fuzzes the routes that exist: the targets are exactly the route files under app/api', () => {
    expect(TARGETS.map((target) => target.route).sort()).toEqual(routesOnDisk().sort());
  });

  it(`POST /api/webhooks/subscription-billing: ${RUNS} mutated corpus bodies and random JSON`, async () => {
    const target = TARGETS.find((t) => t.route === 'webhooks/subscription-billing')!;
    await assertRuns(fc.asyncProperty(hostileBodies(billingBody), async ({ name, body }: BodyCase) => {
      await probe(target, name, urlOf(target.route), { method: 'POST', headers: { ...credentials(target), ...json }, body });
    }));
  });

  it(`POST /api/webhooks/leagues-sync: ${RUNS} mutated deliveries and random JSON`, async () => {
    const target = TARGETS.find((t) => t.route === 'webhooks/leagues-sync')!;
    await assertRuns(fc.asyncProperty(hostileBodies(leaguesBody), async ({ name, body }: BodyCase) => {
      await probe(target, name, urlOf(target.route), { method: 'POST', headers: { ...credentials(target), ...json }, body });
    }));
  });

  it(`POST /api/wallet-link/challenge: ${RUNS} mutated challenge requests and random JSON`, async () => {
    const target = TARGETS.find((t) => t.route === 'wallet-link/challenge')!;
    await assertRuns(fc.asyncProperty(hostileBodies(challengeBody), fc.nat({ max: 11 }), async ({ name, body }: BodyCase, userIndex: number) => {
      await probe(target, name, urlOf(target.route), { method: 'POST', headers: { ...credentials(target, users[userIndex]), ...json }, body });
    }));
  });

  it(`POST /api/wallet-link: ${RUNS} mutated signed link requests and random JSON`, async () => {
    const target = TARGETS.find((t) => t.route === 'wallet-link')!;
    const pooled = fc.nat({ max: 11 }).chain((i) => hostileBodies(fc.constant(linkPool[i]!.body)).map((body) => ({ i, ...body })));
    await assertRuns(fc.asyncProperty(pooled, async ({ i, name, body }: BodyCase & { i: number }) => {
      await probe(target, name, urlOf(target.route), { method: 'POST', headers: { ...credentials(target, linkPool[i]!.user), ...json }, body });
    }));
  });

  it(`POST /api/admin/billing/sync: ${RUNS} mutated operator requests and random JSON`, async () => {
    const target = TARGETS.find((t) => t.route === 'admin/billing/sync')!;
    await assertRuns(fc.asyncProperty(hostileBodies(adminSyncBody), async ({ name, body }: BodyCase) => {
      await probe(target, name, urlOf(target.route), { method: 'POST', headers: { ...credentials(target), ...json }, body });
    }));
  });

  // Found by the property below: Next answered these with a bare 500 before the route ran. The
  // proxy answers them itself (lib/http/malformed-path.ts): the path names nothing, whatever the method.
  const malformedIds: { method: string; id: string }[] = [
    { method: 'DELETE', id: '%' },
    { method: 'DELETE', id: '%zz' },
    { method: 'DELETE', id: '%FF' },
    { method: 'DELETE', id: '%C0%AF' },
    { method: 'DELETE', id: '%E0%A4%A' },
    { method: 'DELETE', id: '00000000-0000-4000-8000-00000000000%' },
    { method: 'GET', id: '%zz' },
    { method: 'POST', id: '%FF' },
  ];
  it.each(malformedIds)('$method /api/wallet-link/$id (malformed percent-encoding) -> 404 not_found as problem+json, nothing changed', async ({ method, id }) => {
    const target = TARGETS.find((t) => t.route === 'wallet-link/[linkId]')!;
    const answer = await probe(target, 'malformed escape', urlOf(target.route, id, true), { method, headers: credentials(target, owner) });
    expect({ status: answer.status, type: answer.headers.get('content-type'), code: answer.body?.code, requestId: answer.body?.requestId })
      .toEqual({ status: 404, type: 'application/problem+json', code: 'not_found', requestId: answer.headers.get('x-request-id') });
  });

  it('a well-formed link id still reaches the route untouched (the owner unlinks: 204)', async () => {
    const target = TARGETS.find((t) => t.route === 'wallet-link/[linkId]')!;
    const answer = await probe(target, 'real link id', urlOf(target.route, ownedLinkIds.pop()!), { method: 'DELETE', headers: credentials(target, owner) });
    expect(answer.status).toBe(204);
  });

  it(`DELETE /api/wallet-link/{linkId}: ${RUNS} link ids (real, foreign, malformed, any bytes)`, async () => {
    const target = TARGETS.find((t) => t.route === 'wallet-link/[linkId]')!;
    const linkId = fc.oneof(
      fc.constantFrom(...ownedLinkIds),
      fc.constantFrom(...ownedLinkIds).map((id) => id.toUpperCase()),
      fc.uuid(),
      fc.uuid().map((id) => `{${id}}`),
      fc.uuid().map((id) => id.replace(/-/g, '')),
      fc.uuid().map((id) => `${id} `),
      fc.string({ unit: 'binary', maxLength: 60 }),
      fc.constantFrom('', '.', '..', '%', 'null', 'undefined', '0', '-1', '00000000-0000-0000-0000-000000000000', 'x'.repeat(5000)),
    ).map((id) => ({ id, raw: false }));
    // Written into the URL as is: escapes that are malformed (%zz) or not UTF-8 (%FF, %C0%AF).
    const rawLinkId = fc.array(fc.constantFrom('%', '%z', '%zz', '%FF', '%E0%A4%A', '%C0%AF', '%25', '%2', '%2F', '%00', 'a', '0', '-', 'é'), { minLength: 1, maxLength: 6 })
      .map((parts) => ({ id: parts.join(''), raw: true }));
    await assertRuns(fc.asyncProperty(fc.oneof({ weight: 3, arbitrary: linkId }, { weight: 1, arbitrary: rawLinkId }), fc.boolean(), async ({ id, raw }: { id: string; raw: boolean }, asOwner: boolean) => {
      await probe(target, `link id ${JSON.stringify(id).slice(0, 80)}${raw ? ' (raw)' : ''}`, urlOf(target.route, id, raw), { method: 'DELETE', headers: credentials(target, asOwner ? owner : users[1]) });
    }));
  });

  it(`every endpoint: ${RUNS} fuzzed credentials (mutated secrets and tokens, forged and refused tokens, noise)`, async () => {
    const realValue = (target: Target) => Object.values(credentials(target))[0] ?? `Bearer ${users[0]!.token}`;
    const headerName = (target: Target) => (target.auth === 'leagues' ? 'x-webhook-secret' : 'authorization');
    const mutate = (value: string, m: { at: number; op: string; ch: string }) => {
      const i = m.at % Math.max(1, value.length);
      switch (m.op) {
        case 'flip': return value.slice(0, i) + m.ch + value.slice(i + 1);
        case 'cut': return value.slice(0, i);
        case 'insert': return value.slice(0, i) + m.ch + value.slice(i);
        case 'upper': return value.toUpperCase();
        default: return `${value}${m.ch}`;
      }
    };
    const credential = (target: Target) => fc.oneof(
      fc.record({ at: fc.nat(), op: fc.constantFrom('flip', 'cut', 'insert', 'upper', 'append'), ch: fc.string({ unit: 'grapheme-ascii', minLength: 1, maxLength: 1 }) })
        .map((m) => mutate(realValue(target), m)),
      fc.constantFrom(...specialTokens).map((token) => (target.auth === 'leagues' ? token : `Bearer ${token}`)),
      fc.constantFrom('', 'Bearer', 'Bearer ', 'Basic dXNlcjpwYXNz', 'Bearer null', `Bearer ${stack.secrets.leagues}`, `Bearer ${stack.secrets.subscription}`, stack.secrets.subscription, 'dev-subscription-webhook-secret', 'dev-leagues-webhook-secret'),
      fc.string({ unit: 'grapheme-ascii', maxLength: 200 }),
    ).filter((value) => /^[\x20-\x7e]*$/.test(value));
    const withTarget = fc.constantFrom(...TARGETS).chain((target) => fc.tuple(fc.constant(target), credential(target), fc.constantFrom(...target.methods), billingBody, leaguesBody, challengeBody));
    await assertRuns(fc.asyncProperty(withTarget, async ([target, value, method, billing, leagues, challenge]) => {
      const body = target.auth === 'billing' ? billing : target.auth === 'leagues' ? leagues : target.route === 'wallet-link/challenge' ? challenge
        : target.route === 'wallet-link' ? linkPool[0]!.body : target.auth === 'admin' ? { app_user_id: knownSubscriber } : undefined;
      await probe(target, `${headerName(target)}: ${JSON.stringify(value).slice(0, 120)}`, urlOf(target.route, target.route.includes('[linkId]') ? ownedLinkIds[0] : undefined), {
        method, headers: { [headerName(target)]: value, ...(body === undefined ? {} : json) }, body: method === 'GET' ? undefined : body === undefined ? undefined : JSON.stringify(body),
      });
    }));
  });

  it(`every endpoint: ${RUNS} requests with any method, valid credentials and random JSON, with and without a trailing slash`, async () => {
    const methods = ['GET', 'HEAD', 'OPTIONS', 'POST', 'PUT', 'PATCH', 'DELETE'];
    // Every route once first, with a method it takes: the random picks of some seeds miss one.
    const everyRouteOnce = TARGETS.map((target): [Target, string, unknown, string, boolean] =>
      [target, target.methods[0]!, {}, '00000000-0000-4000-8000-000000000000', false]);
    await assertRuns(fc.asyncProperty(fc.constantFrom(...TARGETS), fc.constantFrom(...methods), fc.jsonValue({ maxDepth: 3 }), fc.uuid(), fc.boolean(), async (target: Target, method: string, value: unknown, linkId: string, slash: boolean) => {
      const hasBody = !['GET', 'HEAD'].includes(method);
      // A trailing slash reaches the same route (never a redirect): the answer is checked like any other.
      await probe(target, `${method}${slash ? ' (trailing slash)' : ''} with ${JSON.stringify(value).slice(0, 120)}`, `${urlOf(target.route, target.route.includes('[linkId]') ? linkId : undefined)}${slash ? '/' : ''}`, {
        method, headers: { ...credentials(target), ...(hasBody ? json : {}) }, body: hasBody ? JSON.stringify(value) : undefined,
      });
    }), everyRouteOnce);
  });

  it(`any other /api path: ${RUNS} unknown paths (any bytes, malformed escapes), any method, random JSON`, async () => {
    const target = TARGETS.find((t) => t.route === '[[...path]]')!;
    const raw = fc.array(fc.constantFrom('%', '%zz', '%FF', '%C0%AF', '%2F', '%00', 'a', 'é', '..', '/'), { minLength: 1, maxLength: 6 }).map((parts) => ({ path: parts.join(''), raw: true }));
    const encoded = fc.array(fc.string({ unit: 'binary', minLength: 1, maxLength: 20 }), { minLength: 1, maxLength: 4 }).map((parts) => ({ path: parts.join('/'), raw: false }));
    await assertRuns(fc.asyncProperty(fc.oneof(raw, encoded), fc.constantFrom(...target.methods), fc.jsonValue({ maxDepth: 2 }), async ({ path: unknownPath, raw: isRaw }: { path: string; raw: boolean }, method: string, value: unknown) => {
      const hasBody = !['GET', 'OPTIONS'].includes(method);
      await probe(target, `${method} ${JSON.stringify(unknownPath)}${isRaw ? ' (raw)' : ''}`, urlOf(target.route, unknownPath, isRaw), {
        method, headers: hasBody ? json : {}, body: hasBody ? JSON.stringify(value) : undefined,
      });
    }));
  });

  it('summary: no 5xx, no change without a 2xx, every error as problem+json', () => {
    const statuses = Object.entries(tally.statuses).sort().map(([status, count]) => `${status}: ${count}`).join(', ');
    recordScenario({
      order: 7,
      scenario: `Fuzz: ${TARGETS.length} routes, ${properties} properties x ${RUNS} runs (fast-check)`,
      requests: tally.requests,
      fiveXx: tally.fiveXx,
      eventsLost: null,
      duplicatesApplied: null,
      notes: `changes without a 2xx: ${changedWithout2xx.length}; statuses ${statuses}; seed ${SEED}`,
    });
    expect(tally.fiveXx).toBe(0);
    expect(changedWithout2xx).toEqual([]);
    expect(notProblemJson).toEqual([]);
    // Every route was reached.
    expect(Object.keys(perTarget).sort()).toEqual(TARGETS.map((target) => target.route).sort());
  });

  it('no configured secret and no issued token appears in the server logs', () => {
    const { leaks, requestLines, scan } = scanLogs(stack);
    recordLogScan(scan);
    expect(requestLines).toBeGreaterThan(100);
    expect(leaks).toEqual([]);
  });
});
