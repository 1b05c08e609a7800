import { isDeployed } from './config.ts';

/**
 * Fault injection for the reliability suite (tests/reliability), and nothing else. Inert unless a
 * test asks for it on a server it started itself: it does something only when the environment
 * variable is set AND the service is not deployed (isDeployed(), the rule lib/config.ts uses), so a
 * stray variable on Vercel cannot take production down.
 *
 * FAULT_CRASH_AFTER_COMMIT=<event id>: the billing webhook SIGKILLs its own process right after the
 * database call for that event id returned (the transaction is committed) and before any response
 * is written. It models a crash or a lost connection at the worst moment: the sender sees no 200
 * and redelivers, and the redelivery must be a duplicate that changes nothing.
 */
export function crashAfterCommitIfAsked(eventId: string): void {
  const target = process.env.FAULT_CRASH_AFTER_COMMIT;
  if (!target || target !== eventId || isDeployed()) return;
  // SIGKILL, not exit(): no handler, no flush, no graceful close, like a real crash.
  process.kill(process.pid, 'SIGKILL');
}
