import type { z } from 'zod';
import { DomainError, parseWithSchema } from '../errors.ts';

/**
 * A request's query string read by one schema: each name at most once (a repeated name is refused,
 * not silently cut to its first or last value), every failing parameter listed (400 invalid_request).
 */
export function readQueryWith<S extends z.ZodType>(request: Request, schema: S): z.output<S> {
  // No prototype: `__proto__` is a name like any other here (on a plain object, assigning it sets
  // the prototype, and the name would vanish instead of being refused as unknown).
  const values: Record<string, string> = Object.create(null) as Record<string, string>;
  for (const [name, value] of new URL(request.url).searchParams) {
    if (Object.hasOwn(values, name)) throw new DomainError('invalid_request', `The query names \`${name}\` more than once.`, { errors: [{ path: name, message: 'given more than once' }] });
    values[name] = value;
  }
  return parseWithSchema(schema, values, 'The query is invalid.');
}
