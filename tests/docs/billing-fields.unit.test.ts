import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { entitlementSchema, entitlementSourceSchema } from '../../lib/openapi/responses.ts';

/** docs/billing.md lists the fields of an entitlement of GET /api/me: the list is the API's. */
describe('docs/billing.md, what GET /api/me shows', () => {
  const text = readFileSync('docs/billing.md', 'utf8').replace(/\s+/g, ' ');
  const fieldsAfter = (words: string) => {
    const list = new RegExp(`${words}[^{]*\\{ ([^}]+) \\}`).exec(text)?.[1];
    return list?.split(',').map((field) => field.trim()).sort();
  };

  it('names every field of an entitlement, and no other', () => {
    expect(fieldsAfter('One item per entitlement:')).toEqual(Object.keys(entitlementSchema.shape).sort());
  });

  it('names every field of a source, and no other', () => {
    expect(fieldsAfter('each with')).toEqual(Object.keys(entitlementSourceSchema.shape).sort());
  });
});
