import { callDb, pendingMigrationsIn, schemaBehindMessage } from './db/index.ts';
import { log } from './log.ts';

/**
 * 'ok' when the health_check() SQL function answers, else 'unavailable'. The reason goes to the log
 * only (the answer is public), in words that say what to do: a database that answers but lacks
 * migrations of this code is "schema behind, run `npm run migrate`", not "unavailable".
 */
export async function checkDatabase(): Promise<'ok' | 'unavailable'> {
  try {
    await callDb('health_check');
    return 'ok';
  } catch (error) {
    const pending = pendingMigrationsIn(error);
    if (pending) log.error({ pending }, `health check: ${schemaBehindMessage(pending)}`);
    else log.warn({ err: { message: (error as Error).message } }, 'health check: database unavailable');
    return 'unavailable';
  }
}
