import type { DatabaseMode } from '../config.ts';

/** What every database adapter offers: call one SQL function with named arguments, get JSON back. */
export interface DatabaseAdapter {
  readonly mode: DatabaseMode;
  call(fn: string, args: Record<string, unknown>): Promise<unknown>;
  /**
   * Where the adapter can: `call public.procedure(...)` (a procedure may commit as it goes), and the
   * row of its out parameters back. The adapter adds `p_lock_timeout_ms` and `p_time_budget_ms`
   * where it bounds its calls (sql-call.ts, buildProcedureCall), so such a procedure takes both.
   * Postgres and the embedded database; Supabase's Data API calls functions only, so there the
   * caller makes one call per event instead (lib/db/gathered-calls.ts).
   */
  callProcedure?(procedure: string, args: Record<string, unknown>): Promise<Record<string, unknown>>;
  /**
   * How many calls it runs at once (the pool's size; 1 for the embedded database), and how long a
   * call may wait for one of them before it fails as unavailable (the pool's wait for a connection;
   * none: no limit).
   */
  readonly capacity?: { parallelCalls: number; waitMs?: number };
  close(): Promise<void>;
}
