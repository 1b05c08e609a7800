import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { accountParts } from '../../lib/account.ts';

// GET /api/me copies the wallets' and leagues' JSON text from get_account_json's answer into its body
// (lib/account.ts): the three parts must be found exactly, whatever the strings inside them hold.

/** get_account_json's answer, as 07_account.sql concatenates it (each part as Postgres writes it: compact, or jsonb's spacing). */
function answer(wallets: unknown, entitlements: unknown, leagues: unknown, spaced: boolean): string {
  // (A string never holds a raw line break: dropping the indented layout's line breaks leaves `"key": value`.)
  const text = (value: unknown) => (spaced ? JSON.stringify(value, null, 1).replace(/\n */g, '') : JSON.stringify(value));
  return `{"wallets":${text(wallets)},"entitlements":${text(entitlements)},"leagues":${text(leagues)}}`;
}

// Strings made of the separators' own characters, and the separators themselves.
const tricky = fc.oneof(
  fc.string({ unit: fc.constantFrom(',', '"', ':', '\\', '{', '}', '[', ']', 'e', 'l', ' ') }),
  fc.constantFrom(',"entitlements":', ',"leagues":', '{"wallets":', '","leagues":[', '\\', '"}'),
);
const items = fc.array(fc.dictionary(fc.constantFrom('id', 'name', 'address', 'entitlement_id', 'status'), tricky), { maxLength: 4 });

describe('the account answer split into its parts', () => {
  it('finds each part whole, whatever its strings hold', () => {
    fc.assert(fc.property(items, items, items, fc.boolean(), (wallets, entitlements, leagues, spaced) => {
      const parts = accountParts(answer(wallets, entitlements, leagues, spaced));
      expect([JSON.parse(parts.wallets), JSON.parse(parts.entitlements), JSON.parse(parts.leagues)]).toEqual([wallets, entitlements, leagues]);
    }));
  });

  it('refuses an answer of another shape', () => {
    for (const text of ['{"entitlements":[],"wallets":[],"leagues":[]}', '{"wallets":[],"leagues":[]}', '{"wallets":[],"entitlements":[]}', '']) {
      expect(() => accountParts(text)).toThrow('unknown shape');
    }
  });
});
