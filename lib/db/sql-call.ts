/** Build `select public.fn(a => $1, b => $2) as result` for the pg and PGlite adapters. */

const IDENTIFIER = /^[a-z_][a-z0-9_]{0,62}$/;

export function assertIdentifier(name: string): void {
  if (!IDENTIFIER.test(name)) throw new Error(`Not a safe SQL identifier: ${JSON.stringify(name)}`);
}

export function buildFunctionCall(fn: string, args: Record<string, unknown>): { text: string; values: unknown[] } {
  assertIdentifier(fn);
  const names = Object.keys(args).filter((name) => args[name] !== undefined);
  names.forEach(assertIdentifier);
  const placeholders = names.map((name, i) => `${name} => $${i + 1}`);
  return {
    text: `select public.${fn}(${placeholders.join(', ')}) as result`,
    values: names.map((name) => toSqlParameter(args[name])),
  };
}

/** Objects and arrays travel as JSON text (the functions take jsonb); dates as ISO 8601. */
function toSqlParameter(value: unknown): unknown {
  if (value === null) return null;
  if (value instanceof Date) return value.toISOString();
  if (typeof value === 'object') return JSON.stringify(value);
  if (typeof value === 'bigint') return value.toString();
  return value;
}
