import type { DatabaseMode } from '../config.ts';

/** What every database adapter offers: call one SQL function with named arguments, get JSON back. */
export interface DatabaseAdapter {
  readonly mode: DatabaseMode;
  call(fn: string, args: Record<string, unknown>): Promise<unknown>;
  /**
   * Where calls share a pool of connections (Postgres; the embedded database, as two calls on its
   * thread): whether a call made now would find a connection free, without waiting for one.
   */
  hasFreeConnection?(): boolean;
  /**
   * Where the adapter can run a procedure (Postgres, embedded): wait for a pooled connection as a call would,
   * then ask `take` what to send (nothing: the connection goes back unused) and `call
   * public.procedure(...)` with it, adding `p_lock_timeout_ms` and `p_time_budget_ms` where they bound
   * anything (the procedure takes both: each event it runs may wait that long for a lock, and it
   * starts no event past the budget). Answers the row of its out parameters, or undefined when
   * nothing was sent.
   */
  callProcedureWhenConnected?(procedure: string, take: () => Record<string, unknown> | undefined): Promise<Record<string, unknown> | undefined>;
  close(): Promise<void>;
}
