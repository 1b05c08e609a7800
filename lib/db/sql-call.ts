/** Build `select public.fn(a => $1, b => $2) as result` for the pg and PGlite adapters. */

const IDENTIFIER = /^[a-z_][a-z0-9_]{0,62}$/;

export function assertIdentifier(name: string): void {
  if (!IDENTIFIER.test(name)) throw new Error(`Not a safe SQL identifier: ${JSON.stringify(name)}`);
}

export interface FunctionCallOptions {
  /**
   * Give up waiting for a row or advisory lock after this long (SQLSTATE 55P03, which the port
   * reports as unavailable: a 503 with Retry-After). Set with `set_config(..., true)`, the function
   * form of SET LOCAL: it holds for this call's transaction only, so nothing stays on a pooled
   * server connection that the next client would inherit (Supabase's transaction-mode pooler).
   */
  lockTimeoutMs?: number;
}

export function buildFunctionCall(fn: string, args: Record<string, unknown>, options: FunctionCallOptions = {}): { text: string; values: unknown[] } {
  assertIdentifier(fn);
  const names = Object.keys(args).filter((name) => args[name] !== undefined);
  names.forEach(assertIdentifier);
  const placeholders = names.map((name, i) => `${name} => $${i + 1}`);
  const values = names.map((name) => toSqlParameter(args[name]));
  let text = `select public.${fn}(${placeholders.join(', ')}) as result`;
  if (options.lockTimeoutMs !== undefined) {
    if (!Number.isSafeInteger(options.lockTimeoutMs) || options.lockTimeoutMs <= 0) throw new Error(`Not a lock timeout: ${options.lockTimeoutMs}`);
    // A function in FROM runs before the select list (a volatile one is never inlined), so the
    // setting is in place before the function is called: one statement, one round trip.
    values.push(String(options.lockTimeoutMs));
    text += ` from set_config('lock_timeout', $${values.length}, true) as call_settings`;
  }
  return { text, values };
}

/** Objects and arrays travel as JSON text (the functions take jsonb); dates as ISO 8601. */
function toSqlParameter(value: unknown): unknown {
  if (value === null) return null;
  if (value instanceof Date) return value.toISOString();
  if (typeof value === 'object') return JSON.stringify(value);
  if (typeof value === 'bigint') return value.toString();
  return value;
}
