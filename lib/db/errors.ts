/**
 * Typed database errors. The SQL functions raise domain errors with a PostgREST-style SQLSTATE
 * `PT<http status>` and the problem code as the message, e.g.
 *   raise exception 'wallet_already_linked' using errcode = 'PT409';
 * PostgREST turns that into HTTP 409 for the Supabase adapter, and the pg/PGlite adapters read the
 * same SQLSTATE, so all three report the same DbError.
 */
export type DbErrorKind = 'conflict' | 'not_found' | 'invalid' | 'unavailable';

// Under `next dev` a reload makes a new instance of this module while the database connection, kept
// on globalThis (lib/db/index.ts), goes on throwing the first instance's DbError: `instanceof` asks
// for a mark every instance gives its errors, not for one instance's class (else a refusal by the
// database, a 404 or 409, answered 500 after the first edit).
const DB_ERROR_MARK = Symbol.for('account-link-service.DbError');

export class DbError extends Error {
  static override [Symbol.hasInstance](value: unknown): boolean {
    return typeof value === 'object' && value !== null && DB_ERROR_MARK in value;
  }

  override name = 'DbError';
  readonly kind: DbErrorKind;
  /** The message the SQL function raised (a problem code for domain errors), or the driver's. */
  readonly reason: string;
  readonly detail?: string;
  readonly sqlState?: string;

  constructor(kind: DbErrorKind, reason: string, options: { detail?: string; sqlState?: string; cause?: unknown } = {}) {
    super(`${kind}: ${reason}`, { cause: options.cause });
    Object.defineProperty(this, DB_ERROR_MARK, { value: true });
    this.kind = kind;
    this.reason = reason;
    this.detail = options.detail;
    this.sqlState = options.sqlState;
  }
}

/** Map a SQLSTATE to a kind; undefined means "a bug, not a condition the caller can handle". */
export function kindOfSqlState(sqlState: string): DbErrorKind | undefined {
  const custom = /^PT(\d{3})$/.exec(sqlState);
  if (custom) {
    const status = Number(custom[1]);
    if (status === 404) return 'not_found';
    if (status === 409 || status === 429) return 'conflict';
    if (status >= 500) return 'unavailable';
    return 'invalid';
  }
  if (sqlState === '23505' || sqlState === '23P01') return 'conflict'; // unique / exclusion violation
  if (sqlState === '40001' || sqlState === '40P01') return 'unavailable'; // serialization failure, deadlock: retry
  if (sqlState.startsWith('22') || sqlState.startsWith('23')) return 'invalid'; // data exception, constraint
  if (/^(08|53|57|58|55P03|XX)/.test(sqlState)) return 'unavailable'; // connection, resources, shutdown
  return undefined;
}

const NETWORK_ERROR_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH',
]);

/** Turn whatever a driver threw into a DbError where we can classify it; rethrow bugs as they are. */
export function toDbError(error: unknown): unknown {
  if (error instanceof DbError) return error;
  const e = error as { code?: unknown; message?: unknown; detail?: unknown };
  const code = typeof e?.code === 'string' ? e.code : undefined;
  const message = typeof e?.message === 'string' ? e.message : String(error);
  if (code && NETWORK_ERROR_CODES.has(code)) return new DbError('unavailable', message, { cause: error });
  if (code && /^[0-9A-Z]{5}$/.test(code)) {
    const kind = kindOfSqlState(code);
    if (kind) return new DbError(kind, message, { detail: typeof e.detail === 'string' ? e.detail : undefined, sqlState: code, cause: error });
  }
  if (/connect|terminat|timeout|Connection ended|closed|pool after calling end/i.test(message)) return new DbError('unavailable', message, { cause: error });
  return error;
}
