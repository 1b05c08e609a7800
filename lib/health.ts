import { callDb } from './db/index.ts';
import { log } from './log.ts';

/** 'ok' when the health_check() SQL function answers, else 'unavailable' (the reason goes to the log). */
export async function checkDatabase(): Promise<'ok' | 'unavailable'> {
  try {
    await callDb('health_check');
    return 'ok';
  } catch (error) {
    log.warn({ err: { message: (error as Error).message } }, 'health check: database unavailable');
    return 'unavailable';
  }
}
