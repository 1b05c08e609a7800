import { describe, expect, it } from 'vitest';
import { DbError, toDbError } from '../../lib/db/errors.ts';

/**
 * Under `next dev` a reload evaluates lib/db/errors.ts again, while the database connection kept on
 * globalThis goes on throwing errors made by the first evaluation. A route's `instanceof DbError`
 * must still know them, or a refusal of the database (404, 409) answers 500 after the first edit.
 */
describe('a DbError made by another instance of its module', () => {
  it('is a DbError to this one, and toDbError keeps it as it is', async () => {
    // The query makes Vite evaluate the module again: a second class, as a reloaded route sees it.
    const reloaded = new URL('../../lib/db/errors.ts?reloaded', import.meta.url).href;
    const other = (await import(/* @vite-ignore */ reloaded)) as typeof import('../../lib/db/errors.ts');
    expect(other.DbError).not.toBe(DbError);
    const thrown = new other.DbError('not_found', 'link_not_found', { sqlState: 'PT404' });
    expect(thrown instanceof DbError).toBe(true);
    expect(toDbError(thrown)).toBe(thrown);
    expect(new DbError('conflict', 'x') instanceof other.DbError).toBe(true);
    // Nothing else is taken for one.
    for (const value of [new Error('not_found: link_not_found'), { kind: 'not_found', reason: 'link_not_found' }, null, 'DbError']) {
      expect(value instanceof DbError).toBe(false);
    }
  });
});
