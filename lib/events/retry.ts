/**
 * When a failed delivery is tried again, and when it is given up. Pure: the drain asks with the
 * attempt count and the times it stored, so the schedule is the same on every instance and after a
 * restart.
 *
 * The schedule: the first retry after about 30 s (a receiver that was restarting is back), each
 * next one four times later (2 min, 8 min, 32 min, about 2 h), then every 6 h, until the first
 * attempt is three days old: a receiver down over a long weekend still gets every event. Each delay
 * is jittered by ±20 % so that the events queued behind one outage do not all return at once.
 */

export const FIRST_RETRY_DELAY_MS = 30_000;
export const RETRY_BACKOFF_FACTOR = 4;
export const MAX_RETRY_DELAY_MS = 6 * 60 * 60_000;
export const RETRY_JITTER = 0.2;
/** How long a delivery is retried, counted from its first attempt, before it is dead-lettered. */
export const DEAD_LETTER_AFTER_MS = 3 * 24 * 60 * 60_000;

/**
 * The wait before the next attempt, after `attempt` attempts failed (1: the first one did).
 * @param random a number in [0, 1), for the jitter (injected in tests)
 */
export function retryDelayMs(attempt: number, random: () => number = Math.random): number {
  if (!Number.isInteger(attempt) || attempt < 1) throw new RangeError(`retryDelayMs: attempt must be a positive integer, got ${attempt}`);
  // Exponent bounded first: 4^attempt overflows to Infinity long after it passed the cap.
  const base = Math.min(MAX_RETRY_DELAY_MS, FIRST_RETRY_DELAY_MS * RETRY_BACKOFF_FACTOR ** Math.min(attempt - 1, 20));
  const jittered = base * (1 - RETRY_JITTER + 2 * RETRY_JITTER * random());
  return Math.round(Math.min(MAX_RETRY_DELAY_MS, jittered));
}

/** Whether a delivery first attempted at `firstAttemptAt` is past retrying at `now` (dead-lettered; an operator can replay it). */
export function shouldDeadLetter(firstAttemptAt: Date, now: Date): boolean {
  return now.getTime() - firstAttemptAt.getTime() >= DEAD_LETTER_AFTER_MS;
}
