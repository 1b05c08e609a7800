import { after } from 'next/server';
import { log } from '../log.ts';

/**
 * Run `task` after the response is sent (Next's `after()`: on Vercel the function stays alive for
 * it; under `next start` it runs once the response is done). Where the request was not served by a
 * Next server that supports it (a route module called by a test harness), the task runs detached
 * instead: the response never fails because work meant for later could not be scheduled, and that
 * work must be safe to lose anyway (the billing sync leaves its mark for the sweep).
 */
export function afterResponse(task: () => Promise<void>, { detachedOutsideNext = true }: { detachedOutsideNext?: boolean } = {}): void {
  try {
    after(task);
  } catch (error) {
    // Work another path also does (the outbox, moved by the crons too) is not worth a task a test
    // harness would leave running against its database.
    if (!detachedOutsideNext) return;
    log.debug({ err: { message: (error as Error).message } }, 'after() unavailable here; running the task detached');
    void task().catch((taskError: unknown) => log.warn({ err: { message: (taskError as Error).message } }, 'detached task failed'));
  }
}
