import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { describe, expect, it } from 'vitest';
import type { AccountLinkEvent } from '../../packages/client/src/webhooks.ts';
import type { Entitlement } from '../../packages/client/src/index.ts';
import { loadConfig } from '../../lib/config.ts';
import { EVENT_SCHEMAS, EVENT_TYPES } from '../../lib/events/schemas.ts';
import { buildOpenApiDocument } from '../../lib/openapi/document.ts';

/**
 * The events as the OpenAPI document describes them (`webhooks`, OpenAPI 3.1): one entry an event
 * type, its body a component built from lib/events/schemas.ts that reuses the API's Entitlement and
 * WalletLink, and Standard Webhooks' three headers. Sample events, typed as the client package
 * types them, are checked against the document's JSON Schema (Ajv, 2020-12) and the zod schemas.
 */
const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ?? addFormatsModule) as (ajv: Ajv2020) => Ajv2020;
const document = buildOpenApiDocument(loadConfig({})) as unknown as {
  webhooks: Record<string, { post: { parameters: { name: string; in: string; required: boolean }[]; requestBody: { content: Record<string, { schema: { $ref: string } }> }; responses: Record<string, unknown> } }>;
  components: { schemas: Record<string, Record<string, unknown>> };
};

const ajv = new Ajv2020({ allErrors: true, strict: true, strictTypes: false });
addFormats(ajv);
for (const keyword of ['openapi', 'info', 'servers', 'tags', 'paths', 'webhooks', 'components', 'x-path-methods']) ajv.addKeyword({ keyword });
ajv.addSchema({ ...document, $id: 'doc' });
const validate = (type: string, body: unknown) => {
  const check = ajv.compile({ $ref: `doc${document.webhooks[type]!.post.requestBody.content['application/json']!.schema.$ref}` });
  return check(body) ? [] : check.errors!.map((error) => `${error.instancePath} ${error.message}`);
};

const USER = '6f1c2b9e-3d4a-4b5c-8d7e-9f0a1b2c3d4e';
const entitlement: Entitlement = {
  id: 'pro', active: true, status: 'active', productId: 'pro_monthly', expiresAt: '2026-02-01T00:00:00.000Z', willRenew: true,
  graceExpiresAt: null, store: 'APP_STORE', environment: 'PRODUCTION', periodType: 'NORMAL', syncedAt: null,
  sources: [{ productId: 'pro_monthly', store: 'APP_STORE', environment: 'PRODUCTION', status: 'active', active: true, expiresAt: '2026-02-01T00:00:00.000Z', graceExpiresAt: null, willRenew: true }],
};
const wallet = { id: '0b7d3a52-7c1e-4d8e-9a43-2f6b1c0d9e8f', chain: 'evm' as const, address: '0x52908400098527886E0F7030069857D2E4169EE7', chainId: 1, kind: 'eoa' as const, scope: 'evm' as const, accountId: 'eip155:1:0x52908400098527886E0F7030069857D2E4169EE7', createdAt: '2026-01-01T00:00:00.000Z' };
const timestamp = '2026-01-01T00:00:00.000Z';

// Typed as the client package types them: a sample that does not fit its type fails `npm run typecheck`.
const samples: AccountLinkEvent[] = [
  { type: 'entitlement.granted', timestamp, data: { userId: USER, sequence: 1, entitlement } },
  { type: 'entitlement.updated', timestamp, data: { userId: USER, sequence: 2, entitlement: { ...entitlement, expiresAt: '2026-03-01T00:00:00.000Z', willRenew: false }, previous: entitlement, changed: ['expiresAt', 'willRenew'] } },
  { type: 'entitlement.revoked', timestamp, data: { userId: USER, sequence: 3, entitlement: { ...entitlement, active: false, status: 'expired' }, reason: 'expired' } },
  { type: 'wallet.linked', timestamp, data: { userId: USER, sequence: 4, wallet } },
  { type: 'wallet.unlinked', timestamp, data: { userId: USER, sequence: 5, wallet } },
  { type: 'customer.deleted', timestamp, data: { userId: USER, sequence: 6 } },
];

describe('the webhooks of the OpenAPI document', () => {
  it('has one entry an event type, a POST with the three Standard Webhooks headers and a 2xx', () => {
    expect(Object.keys(document.webhooks)).toEqual([...EVENT_TYPES]);
    for (const type of EVENT_TYPES) {
      const { post } = document.webhooks[type]!;
      expect(post.parameters.map(({ name, in: where, required }) => [name, where, required])).toEqual([
        ['webhook-id', 'header', true], ['webhook-timestamp', 'header', true], ['webhook-signature', 'header', true],
      ]);
      expect(Object.keys(post.responses)).toContain('2XX');
      const ref = post.requestBody.content['application/json']!.schema.$ref;
      expect(document.components.schemas[ref.replace('#/components/schemas/', '')]).toBeDefined();
    }
  });

  it("reuses the API's Entitlement and WalletLink rather than copies of them", () => {
    const text = JSON.stringify(document.components.schemas);
    expect(text).toContain('"entitlement":{"$ref":"#/components/schemas/Entitlement"}');
    expect(text).toContain('"wallet":{"$ref":"#/components/schemas/WalletLink"}');
  });

  it('accepts a sample of each event, by its JSON Schema and its zod schema', () => {
    expect(samples.map((event) => event.type).sort()).toEqual([...EVENT_TYPES].sort());
    for (const event of samples) {
      expect(validate(event.type, event)).toEqual([]);
      expect(EVENT_SCHEMAS[event.type].safeParse(event).success).toBe(true);
    }
  });

  const wrong: [string, string, unknown][] = [
    ['another type under a type\'s schema', 'customer.deleted', { ...samples[5]!, type: 'wallet.linked' }],
    ['no sequence', 'customer.deleted', { type: 'customer.deleted', timestamp, data: { userId: USER } }],
    ['a sequence that is not an integer', 'customer.deleted', { type: 'customer.deleted', timestamp, data: { userId: USER, sequence: 1.5 } }],
    ['a timestamp that is not ISO 8601', 'customer.deleted', { type: 'customer.deleted', timestamp: 'yesterday', data: { userId: USER, sequence: 1 } }],
    ['a changed field that is not an entitlement field', 'entitlement.updated', { ...samples[1]!, data: { ...samples[1]!.data, changed: ['price'] } }],
    ['an entitlement without its fields', 'entitlement.granted', { ...samples[0]!, data: { userId: USER, sequence: 1, entitlement: { id: 'pro' } } }],
  ];
  for (const [name, type, body] of wrong) {
    it(`refuses ${name}`, () => {
      expect(validate(type, body)).not.toEqual([]);
      expect(EVENT_SCHEMAS[type as (typeof EVENT_TYPES)[number]].safeParse(body).success).toBe(false);
    });
  }
});
