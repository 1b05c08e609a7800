import type { DatabaseMode } from '../config.ts';

/** What every database adapter offers: call one SQL function with named arguments, get JSON back. */
export interface DatabaseAdapter {
  readonly mode: DatabaseMode;
  call(fn: string, args: Record<string, unknown>): Promise<unknown>;
  close(): Promise<void>;
}
