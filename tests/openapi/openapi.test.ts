import { beforeAll, describe, expect, it } from 'vitest';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import type { z } from 'zod';
import * as openapiRoute from '../../app/api/openapi.json/route.ts';
import * as healthRoute from '../../app/api/health/route.ts';
import * as liveRoute from '../../app/api/health/live/route.ts';
import * as meRoute from '../../app/api/me/route.ts';
import * as walletLinkRoute from '../../app/api/wallet-link/route.ts';
import * as challengeRoute from '../../app/api/wallet-link/challenge/route.ts';
import * as unlinkRoute from '../../app/api/wallet-link/[linkId]/route.ts';
import * as billingRoute from '../../app/api/webhooks/subscription-billing/route.ts';
import * as leaguesRoute from '../../app/api/webhooks/leagues-sync/route.ts';
import fc from 'fast-check';
import { DEV_WEBHOOK_SECRETS, getConfig, loadConfig } from '../../lib/config.ts';
import { closeDatabase } from '../../lib/db/index.ts';
import { buildOpenApiDocument, OPERATIONS } from '../../lib/openapi/document.ts';
import { problemSchema } from '../../lib/openapi/responses.ts';
import { decodeEvmSignature } from '../../lib/wallets/verify.ts';
import { delivery, freshSource, league } from '../leagues/fixtures.ts';
import { describeOn, suiteDatabase } from '../support/databases.ts';
import { buildContract, type OpenApiDocument } from '../conformance/contract.ts';
import { setEnv } from '../support/env.ts';
import { callRoute, type RouteResponse } from '../support/http.ts';
import { freePort } from '../../scripts/support/postgres-server.ts';
import { testUser } from '../support/tokens.ts';
import { evmWallet } from '../wallets/wallets.ts';

function routeFiles(dir = 'app/api'): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    // The catch-all (app/api/[[...path]]) answers unknown paths, and app/api/dev holds local mode's
    // stand-ins of outside services (a 404 anywhere else): neither is an endpoint of the service.
    if (entry.isDirectory()) return entry.name.startsWith('[[...') || full === path.join('app', 'api', 'dev') ? [] : routeFiles(full);
    return entry.name === 'route.ts' ? [full] : [];
  });
}

const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

/** "app/api/wallet-link/[linkId]/route.ts" -> "/api/wallet-link/{linkId}" */
const toPath = (file: string) => `/${path.dirname(file).split(path.sep).slice(1).join('/')}`.replace(/\[(\w+)\]/g, '{$1}');

describe('the OpenAPI document', () => {
  let document: ReturnType<typeof JSON.parse>;
  beforeAll(async () => {
    const response = await callRoute(openapiRoute);
    expect(response.status).toBe(200);
    document = response.body;
  });

  it('is OpenAPI 3.1 with its six security schemes', () => {
    expect(document.openapi).toBe('3.1.0');
    expect(Object.keys(document.components.securitySchemes).sort()).toEqual(['adminSecret', 'billingSecret', 'cronSecret', 'leaguesSecret', 'pageSession', 'session']);
    expect(document.components.securitySchemes.leaguesSecret).toMatchObject({ type: 'apiKey', in: 'header', name: 'x-webhook-secret' });
    // The page's cookie is taken by the event stream alone (EventSource sends no headers).
    expect(document.components.securitySchemes.pageSession).toMatchObject({ type: 'apiKey', in: 'cookie', name: 'account_session' });
    const withCookie = Object.entries(document.paths as Record<string, Record<string, { security?: Record<string, string[]>[] }>>)
      .flatMap(([p, item]) => Object.entries(item).filter(([, op]) => op.security?.some((requirement) => 'pageSession' in requirement)).map(([m]) => `${m.toUpperCase()} ${p}`));
    expect(withCookie).toEqual(['GET /api/me/events']);
  });

  it('describes exactly the routes that exist, method by method, and OPTIONS and 405 once for every path', async () => {
    const onDisk: string[] = [];
    for (const file of routeFiles()) {
      const routeModule = await import(`../../${file}`);
      const params = Object.fromEntries([...file.matchAll(/\[(\w+)\]/g)].map(([, name]) => [name!, '00000000-0000-4000-8000-000000000000']));
      const allow = (await callRoute(routeModule, { method: 'OPTIONS', params })).headers.get('allow')!.split(', ');
      // HEAD (with GET) and OPTIONS are on every path: the document says them once, not per path.
      for (const method of allow.filter((m) => m !== 'HEAD' && m !== 'OPTIONS')) onDisk.push(`${method} ${toPath(file)}`);
    }
    const documented = Object.entries(document.paths as Record<string, Record<string, unknown>>).flatMap(([p, item]) => Object.keys(item).filter((key) => HTTP_METHODS.includes(key)).map((m) => `${m.toUpperCase()} ${p}`));
    expect(documented.sort()).toEqual(onDisk.sort());
    // Every operation is one a client calls: none is OPTIONS, and no path repeats the rule.
    for (const [p, item] of Object.entries(document.paths as Record<string, Record<string, unknown>>)) {
      expect({ p, options: item.options, description: item.description }).toEqual({ p, options: undefined, description: undefined });
    }
    const every = document['x-path-methods'];
    expect(every.allow).toEqual({ order: ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS'], headWithGet: true });
    expect(every.options.responses['204'].headers.Allow.required).toBe(true);
    expect(every.otherMethods.responses['405']['x-problem-codes']).toEqual(['method_not_allowed']);
    expect(document.info.description).toContain(every.description);
  });

  it('resolves every $ref', () => {
    const text = JSON.stringify(document);
    for (const [, ref] of text.matchAll(/"\$ref":"([^"]+)"/g)) {
      const target = ref!.replace(/^#\//, '').split('/').reduce((node, key) => node?.[key.replace(/~1/g, '/').replace(/~0/g, '~')], document);
      expect(target, ref).toBeTypeOf('object');
    }
  });

  it('documents smart-contract wallets: the link kind and scope, 503 chain_unavailable and 429 rate_limited with Retry-After on POST /api/wallet-link', () => {
    const link = document.components.schemas.WalletLink;
    const [evm, solana] = link.oneOf ?? link.anyOf;
    expect(evm.properties.kind.enum).toEqual(['eoa', 'erc1271', 'erc6492']);
    expect(evm.properties.scope.enum).toEqual(['evm', 'chain']);
    expect(evm.properties.accountId.pattern).toBe('^eip155:[0-9]{1,32}:0x[0-9a-fA-F]{40}$');
    expect(solana.properties.kind.const).toBe('eoa');
    expect(solana.properties).not.toHaveProperty('scope');
    expect(evm.required).toEqual(expect.arrayContaining(['kind', 'scope', 'accountId']));
    const responses = document.paths['/api/wallet-link'].post.responses;
    expect(responses['503']['x-problem-codes']).toContain('chain_unavailable');
    expect(responses['503'].headers).toHaveProperty('Retry-After');
    expect(responses['429']['x-problem-codes']).toContain('rate_limited');
    expect(responses['429'].headers).toHaveProperty('Retry-After');
    expect(document.paths['/api/wallet-link'].post.description).toContain('2,000,000 gas');
    // A challenge is asked for with a live session, as a link is.
    expect(document.paths['/api/wallet-link/challenge'].post.responses['401']['x-problem-codes']).toContain('session_revoked');
  });

  it('names no setting in the wallet-link operations: the document is public', () => {
    for (const [p, ops] of Object.entries(document.paths as Record<string, unknown>).filter(([p]) => p.startsWith('/api/wallet-link'))) {
      expect({ p, text: JSON.stringify(ops).match(/WALLET_[A-Z_]+/g) }).toEqual({ p, text: null });
    }
  });

  it('lists problem codes, with problem+json bodies, for every operation that can fail', () => {
    for (const [p, ops] of Object.entries(document.paths as Record<string, Record<string, { responses: Record<string, { content?: Record<string, unknown>; 'x-problem-codes'?: string[] }> }>>)) {
      for (const [method, op] of Object.entries(ops).filter(([key]) => HTTP_METHODS.includes(key))) {
        for (const [status, response] of Object.entries(op.responses)) {
          if (Number(status) < 400) continue;
          expect(response.content, `${method} ${p} ${status}`).toHaveProperty(['application/problem+json']);
          expect(response['x-problem-codes']!.length).toBeGreaterThan(0);
        }
      }
    }
  });
});

describe('the operator routes in the OpenAPI document', () => {
  // Guessing at an operator secret is throttled per client address, whichever route it was tried
  // on (lib/auth/operator-secret.ts): every route behind one answers 429 to that address then.
  it('document 429 rate_limited, with Retry-After, on every route behind the cron or admin secret', () => {
    const document = buildOpenApiDocument(loadConfig({ LOCAL_DEV: '1' })) as unknown as { paths: Record<string, Record<string, { security?: Record<string, unknown>[]; responses: Record<string, { 'x-problem-codes'?: string[]; headers?: Record<string, unknown> }> }>> };
    const operatorRoutes = Object.entries(document.paths).flatMap(([p, ops]) => Object.entries(ops)
      .filter(([method, op]) => HTTP_METHODS.includes(method) && op.security?.some((scheme) => 'adminSecret' in scheme || 'cronSecret' in scheme))
      .map(([method, op]) => ({ route: `${method} ${p}`, codes: op.responses['429']?.['x-problem-codes'], retryAfter: Boolean(op.responses['429']?.headers?.['Retry-After']) })));
    expect(operatorRoutes.length).toBeGreaterThan(10);
    expect(operatorRoutes.filter((op) => !op.codes?.includes('rate_limited') || !op.retryAfter)).toEqual([]);
  });
});

describe('payload.signature of an EVM wallet link, as this deployment is configured', () => {
  type Schema = { description: string; pattern: string; maxLength: number };
  // An RPC of another machine is production-like: these documents are built in local mode, asked for.
  const documentFor = (env: Record<string, string>) => buildOpenApiDocument(loadConfig({ LOCAL_DEV: '1', ...env })) as unknown as OpenApiDocument;
  function evmSignatureOf(document: OpenApiDocument): Schema {
    const body = buildContract(document).requestSchema('post', '/api/wallet-link') as { properties: { payload: { oneOf: { properties: Record<string, Schema & { const?: string }> }[] } } };
    return body.properties.payload.oneOf.find((variant) => variant.properties.chain!.const === 'evm')!.properties.signature!;
  }

  it('with no RPC: contract-wallet signatures are 422 on every chain, named', () => {
    const { description } = evmSignatureOf(documentFor({ WALLET_EVM_CHAIN_IDS: '1,8453' }));
    expect(description).toContain('Chains 1, 8453 have no contract-wallet checks here, so there it is 422 `unsupported_signature_type`');
    expect(description).not.toContain('checked on that chain');
    expect(description).not.toContain('chain_unavailable');
  });

  it('with an RPC for some chains: checked on those chains (422 invalid_signature, 503 chain_unavailable), 422 unsupported on the others', () => {
    const document = documentFor({ WALLET_EVM_CHAIN_IDS: '1,8453,10', WALLET_EVM_RPC_URLS: '8453=https://base.example/v2/doc-key-5150,10=https://op.example/k' });
    const { description } = evmSignatureOf(document);
    expect(description).toContain('on chains 8453, 10 it is checked on that chain through its RPC: 422 `invalid_signature` if the contract refuses it, 503 `chain_unavailable` if the RPC does not answer');
    expect(description).toContain('Chain 1 has no contract-wallet checks here, so there it is 422 `unsupported_signature_type`');
    // The document is public: it names chains, never where their RPC is.
    for (const secret of ['base.example', 'doc-key-5150', 'op.example']) expect(JSON.stringify(document)).not.toContain(secret);
  });

  it('with an RPC for every chain: no chain refuses a contract wallet for its signature type (only ERC-8010)', () => {
    const { description } = evmSignatureOf(documentFor({ WALLET_EVM_CHAIN_IDS: '1,8453', WALLET_EVM_RPC_URLS: '1=https://eth.example,8453=https://base.example' }));
    expect(description).toContain('on chains 1, 8453 it is checked on that chain through its RPC');
    expect(description).not.toContain('no contract-wallet checks');
    expect(description.match(/unsupported_signature_type/g)).toEqual(['unsupported_signature_type']);
    expect(description).toContain('ERC-8010 (EIP-7702 delegation) signatures: 422 `unsupported_signature_type`');
  });

  // The server checks the shape of any EVM signature alike (lib/wallets/verify.ts decodeEvmSignature:
  // hex bytes, 400 invalid_request otherwise) and leaves the rest to the key or the contract, so the
  // document's pattern must accept and refuse exactly the same strings: a Safe's 65 bytes with v 31
  // or 32, or a short contract signature, are for the chain to judge, not a 400.
  it('accepts exactly the signatures the server decodes, whatever their length or v', () => {
    for (const env of [{}, { WALLET_EVM_CHAIN_IDS: '1,8453', WALLET_EVM_RPC_URLS: '8453=https://base.example' }] as Record<string, string>[]) {
      const contract = buildContract(documentFor(env));
      const verdict = (signature: string) => contract.requestVerdict('post', '/api/wallet-link', { payload: { ...linkExample(contract), signature } }).valid;
      const cases = [
        `0x${'ab'.repeat(64)}1b`, `0x${'ab'.repeat(64)}00`, `0x${'ab'.repeat(64)}1f`, `0x${'ab'.repeat(64)}20`, `0x${'ab'.repeat(64)}FF`,
        '0x01', `0x${'cd'.repeat(64)}`, `0x${'cd'.repeat(66)}`, `0x${'00'.repeat(200)}${'6492'.repeat(16)}`,
        '0x', '0x0', `0x${'ab'.repeat(64)}1`, `ab${'ab'.repeat(64)}1b`, `0X${'ab'.repeat(65)}`, `0x${'zz'.repeat(65)}`, `0x${'ab'.repeat(65)}\n`, ` 0x${'ab'.repeat(65)}`,
      ];
      for (const signature of cases) expect({ signature, documented: verdict(signature) }).toEqual({ signature, documented: decodeEvmSignature(signature).ok });
      expect(verdict(`0x${'ab'.repeat(64)}1f`)).toBe(true); // a Safe's eth_sign signature (v 31)
      fc.assert(
        fc.property(fc.constantFrom('0x', '', '0X'), fc.string({ unit: fc.constantFrom(...'0123456789abcdefABCDEFxg'), maxLength: 200 }), (prefix, digits) => {
          const signature = prefix + digits;
          expect(verdict(signature), signature).toBe(decodeEvmSignature(signature).ok);
        }),
        { numRuns: 300 },
      );
    }
  });
});

/** The documented example of POST /api/wallet-link's payload, which the schema accepts. */
function linkExample(contract: ReturnType<typeof buildContract>): Record<string, unknown> {
  const example = contract.operation('post', '/api/wallet-link')!.requestBody!.content['application/json']!.example as { payload: Record<string, unknown> };
  expect(contract.requestVerdict('post', '/api/wallet-link', example).valid).toBe(true);
  return example.payload;
}

describeOn('pglite')('real responses match the documented schemas', () => {
  suiteDatabase('pglite');

  const operation = (method: string, p: string) => OPERATIONS.find((op) => op.method === method && op.path === p)!;
  function expectDocumented(method: string, p: string, response: RouteResponse) {
    const op = operation(method, p);
    if (response.status >= 400) {
      expect(op.errors, `${method} ${p} answered ${response.body?.code}`).toContain(response.body.code);
      expect(() => problemSchema.parse(response.body)).not.toThrow();
      return;
    }
    const answer = op.answers.find((candidate) => candidate.status === response.status);
    expect(answer, `${method} ${p} answered ${response.status}`).toBeDefined();
    if (answer!.schema) {
      const result = (answer!.schema as z.ZodType).safeParse(response.body);
      expect(result.success, `${method} ${p}: ${JSON.stringify(result.error?.issues)}`).toBe(true);
    }
  }

  it('for every operation, success and error', async () => {
    const user = await testUser();
    const auth = { authorization: user.authorization };
    const wallet = evmWallet();

    expectDocumented('get', '/api/health', await callRoute(healthRoute));
    expectDocumented('get', '/api/health/live', await callRoute(liveRoute));
    expectDocumented('get', '/api/me', await callRoute(meRoute, { headers: auth }));
    expectDocumented('get', '/api/me', await callRoute(meRoute));

    const challenge = await callRoute(challengeRoute, { method: 'POST', headers: auth, body: { chain: 'evm', address: wallet.address, chainId: 1 } });
    expect(challenge.status).toBe(201);
    expectDocumented('post', '/api/wallet-link/challenge', challenge);
    expectDocumented('post', '/api/wallet-link/challenge', await callRoute(challengeRoute, { method: 'POST', headers: auth, body: { chain: 'evm', address: '0x12', chainId: 1 } }));

    const link = await callRoute(walletLinkRoute, {
      method: 'POST', headers: auth,
      body: { payload: { chain: 'evm', address: wallet.address, chainId: 1, message: challenge.body.message, signature: await wallet.sign(challenge.body.message) } },
    });
    expect(link.status).toBe(201);
    expectDocumented('post', '/api/wallet-link', link);
    expectDocumented('get', '/api/wallet-link', await callRoute(walletLinkRoute, { headers: auth }));
    expectDocumented('get', '/api/me', await callRoute(meRoute, { headers: auth }));
    expectDocumented('delete', '/api/wallet-link/{linkId}', await callRoute(unlinkRoute, { method: 'DELETE', headers: auth, params: { linkId: link.body.link.id } }));
    expectDocumented('delete', '/api/wallet-link/{linkId}', await callRoute(unlinkRoute, { method: 'DELETE', headers: auth, params: { linkId: link.body.link.id } }));

    const billing = { authorization: `Bearer ${DEV_WEBHOOK_SECRETS.subscription}` };
    expectDocumented('post', '/api/webhooks/subscription-billing', await callRoute(billingRoute, { method: 'POST', headers: billing, body: { event: { id: 'evt-doc-1', type: 'TEST' } } }));
    expectDocumented('post', '/api/webhooks/subscription-billing', await callRoute(billingRoute, { method: 'POST', headers: billing, body: { event: {} } }));

    const leagues = { 'x-webhook-secret': DEV_WEBHOOK_SECRETS.leagues };
    expectDocumented('post', '/api/webhooks/leagues-sync', await callRoute(leaguesRoute, { method: 'POST', headers: leagues, body: delivery(freshSource('doc'), { leagues: [league('L1', '2026-11-21T17:59:00Z')] }) }));
    expectDocumented('post', '/api/webhooks/leagues-sync', await callRoute(leaguesRoute, { method: 'POST', headers: { 'x-webhook-secret': 'wrong' }, body: {} }));
  });
});

describe('answers when the database is down, as documented', () => {
  // tests/conformance checks the production server with everything up; these answers need a
  // dependency down, so they are checked here, through the routes, against the same document.
  it('GET /api/health 503 is application/json with the Health body; other routes a problem+json 503 database_unavailable, with Retry-After', async () => {
    const auth = { authorization: (await testUser()).authorization };
    const contract = buildContract(buildOpenApiDocument(getConfig()) as unknown as OpenApiDocument);
    const restore = setEnv({ DATABASE_URL: `postgres://nobody:secret@127.0.0.1:${await freePort()}/none`, LOCAL_DEV: '1' });
    try {
      await closeDatabase();
      const answers = [
        { method: 'get', path: '/api/health', response: await callRoute(healthRoute), type: 'application/json' },
        { method: 'get', path: '/api/me', response: await callRoute(meRoute, { headers: auth }), type: 'application/problem+json' },
        {
          method: 'post', path: '/api/webhooks/subscription-billing', type: 'application/problem+json',
          response: await callRoute(billingRoute, { method: 'POST', headers: { authorization: `Bearer ${DEV_WEBHOOK_SECRETS.subscription}` }, body: { event: { id: 'evt-db-down', type: 'TEST' } } }),
        },
      ];
      for (const { method, path, response, type } of answers) {
        expect({ path, status: response.status, type: response.headers.get('content-type') }).toEqual({ path, status: 503, type });
        expect(contract.checkResponse(method, path, response, { dependencyDown: true })).toEqual([]);
      }
    } finally {
      restore();
      await closeDatabase();
    }
  });
});
