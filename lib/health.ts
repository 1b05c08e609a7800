import { callDb, pendingMigrationsIn, schemaBehindMessage } from './db/index.ts';
import { log } from './log.ts';

/**
 * 'ok' when the health_check() SQL function answers; 'schema_behind' when the database answers but
 * lacks migrations of this code (the log says which, and to run `npm run migrate`); else
 * 'unavailable' (the reason goes to the log only: the answer is public).
 */
export async function checkDatabase(): Promise<'ok' | 'schema_behind' | 'unavailable'> {
  try {
    await callDb('health_check');
    return 'ok';
  } catch (error) {
    const pending = pendingMigrationsIn(error);
    if (pending) {
      log.error({ pending }, `health check: ${schemaBehindMessage(pending)}`);
      return 'schema_behind';
    }
    log.warn({ err: { message: (error as Error).message } }, 'health check: database unavailable');
    return 'unavailable';
  }
}
