import type { DatabaseMode } from '../config.ts';

/** What every database adapter offers: call one SQL function with named arguments, get JSON back. */
export interface DatabaseAdapter {
  readonly mode: DatabaseMode;
  call(fn: string, args: Record<string, unknown>): Promise<unknown>;
  /**
   * Where the adapter can: `call public.procedure(...)` (a procedure may commit as it goes), and the
   * row of its out parameters back. Postgres and the embedded database; Supabase's Data API calls
   * functions only, so there the caller makes one call per event instead (lib/db/gathered-calls.ts).
   */
  callProcedure?(procedure: string, args: Record<string, unknown>): Promise<Record<string, unknown>>;
  /** How many calls it runs at once: the pool's size, 1 for the embedded database. */
  readonly parallelCalls?: number;
  close(): Promise<void>;
}
