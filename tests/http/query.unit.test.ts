import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import { DomainError, MAX_FIELD_ERRORS, MORE_FIELD_ERRORS_PATH } from '../../lib/errors.ts';
import { readQueryWith } from '../../lib/http/query.ts';

/** A query read by one strict schema: every name known, each once, each failure at its own name. */
const schema = z.strictObject({ limit: z.coerce.number().int().min(1).optional() });
const read = (query: string) => readQueryWith(new Request(`http://localhost/api/admin/events/dead-letters?${query}`), schema);
const refusal = (query: string) => {
  try {
    read(query);
  } catch (error) {
    expect(error).toBeInstanceOf(DomainError);
    return (error as DomainError).errors;
  }
  return 'accepted';
};

describe('reading a query string', () => {
  it('reads the names it knows', () => {
    expect(read('limit=5')).toEqual({ limit: 5 });
    expect(read('')).toEqual({});
  });

  it('names an unknown parameter at its own name, `__proto__` and `constructor` too (a plain object dropped `__proto__` silently)', () => {
    expect(refusal('colour=red')).toEqual([{ path: 'colour', message: 'is not a known member' }]);
    expect(refusal('__proto__=x')).toEqual([{ path: '__proto__', message: 'is not a known member' }]);
    expect(refusal('constructor=x&limit=2')).toEqual([{ path: 'constructor', message: 'is not a known member' }]);
  });

  it('lists at most MAX_FIELD_ERRORS errors, then says how many more', () => {
    const errors = refusal(Array.from({ length: 150 }, (_, index) => `unknown${index}=1`).join('&'));
    expect(errors).toHaveLength(MAX_FIELD_ERRORS + 1);
    expect(Array.isArray(errors) && errors.at(-1)).toEqual({ path: MORE_FIELD_ERRORS_PATH, message: 'and 50 more errors' });
  });

  it('refuses a name given twice, `__proto__` included', () => {
    expect(refusal('limit=1&limit=2')).toEqual([{ path: 'limit', message: 'given more than once' }]);
    expect(refusal('__proto__=x&__proto__=y')).toEqual([{ path: '__proto__', message: 'given more than once' }]);
  });
});
