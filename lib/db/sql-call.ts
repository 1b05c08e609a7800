/** Build `select public.fn(a => $1, b => $2) as result` (and `call public.procedure(...)`) for the pg and PGlite adapters. */
import pg from 'pg';

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

export interface SqlCall {
  text: string;
  values: unknown[];
}

export function buildFunctionCall(fn: string, args: Record<string, unknown>, options: FunctionCallOptions = {}): SqlCall {
  const { list, values } = namedArguments(fn, args);
  let text = `select public.${fn}(${list}) as result`;
  if (options.lockTimeoutMs !== undefined) {
    // A function in FROM runs before the select list (a volatile one is never inlined), so the
    // setting is in place before the function is called: one statement, one round trip.
    values.push(lockTimeoutSetting(options.lockTimeoutMs));
    text += ` from set_config('lock_timeout', $${values.length}, true) as call_settings`;
  }
  return { text, values };
}

/**
 * Build `call public.procedure(a => $1, b => $2)`: its row holds the procedure's out parameters. A
 * procedure that commits must be the statement itself (not inside a select, nor a transaction
 * block), and a lock timeout ends with each commit, so bounds go to the procedure as arguments.
 */
export function buildProcedureCall(procedure: string, args: Record<string, unknown>): SqlCall {
  const { list, values } = namedArguments(procedure, args);
  return { text: `call public.${procedure}(${list})`, values };
}

function lockTimeoutSetting(ms: number): string {
  if (!Number.isSafeInteger(ms) || ms <= 0) throw new Error(`Not a lock timeout: ${ms}`);
  return String(ms);
}

function namedArguments(routine: string, args: Record<string, unknown>): { list: string; values: unknown[] } {
  assertIdentifier(routine);
  const names = Object.keys(args).filter((name) => args[name] !== undefined);
  names.forEach(assertIdentifier);
  return { list: names.map((name, i) => `${name} => $${i + 1}`).join(', '), values: names.map((name) => toSqlParameter(args[name])) };
}

/**
 * The same call with its values written into the text as SQL literals (pg's escapeLiteral), for
 * Postgres's simple query protocol. PGlite runs each protocol message through its WASM server in
 * turn: a call with parameters is six passes (parse, describe, bind, describe, execute, sync), this
 * one two (the statement, sync); the four saved are ~0.06 ms of a billing event's ~0.9 on the
 * embedded database's thread (scripts/bench/NOTES.md). Every literal is a quoted string, which Postgres
 * resolves against the function's parameter types as it does an untyped parameter (the calls name
 * their arguments). A lone UTF-16 surrogate becomes U+FFFD, as it would on its way to the database
 * anyway (PGlite sizes the statement's bytes by a count a lone surrogate can throw off, which would
 * cut the statement's end). Null when a value holds a NUL character: the simple protocol cannot
 * carry one, so the caller sends that call's values apart and Postgres refuses the value as it
 * always did (22021, the sender's 400).
 */
export function withLiteralValues({ text, values }: SqlCall): string | null {
  const literals = values.map((value) => (value === null ? 'NULL' : quoteLiteral(String(value).toWellFormed())));
  if (literals.some((literal) => literal.includes('\0'))) return null;
  // One pass over the template: a value that itself reads "$2" is never replaced again.
  return text.replace(/\$(\d+)/g, (_placeholder, index: string) => literals[Number(index) - 1]!);
}

/**
 * A string with no quote or backslash is its own literal; any other goes through pg's
 * escapeLiteral (a loop over every character).
 */
function quoteLiteral(value: string): string {
  return /['\\]/.test(value) ? pg.escapeLiteral(value) : `'${value}'`;
}

/** Objects and arrays travel as JSON text (the functions take jsonb); dates as ISO 8601. */
function toSqlParameter(value: unknown): unknown {
  if (value === null) return null;
  if (value instanceof Date) return value.toISOString();
  if (typeof value === 'object') return JSON.stringify(value);
  if (typeof value === 'bigint') return value.toString();
  return value;
}
