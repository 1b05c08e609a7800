import { moveOutboxAfterWrite, outboxWorkAfterWrite } from '../events/delivery.ts';
import { afterResponse } from './after-response.ts';
import { requestStartedAt } from './request-clock.ts';

/**
 * After a request that wrote: send the events it caused and tell lapses that came due, once the
 * response is out (lib/events/delivery.ts). `usersNoted: false` says the write changed nothing a
 * Supabase user reads (so it wrote no outbound event): then only a lapse scan that is due runs, and
 * when none is, nothing is scheduled at all. Served outside Next (a test harness calling a route
 * module), nothing runs: the crons and `npm run events:deliver` move the outbox too.
 */
export function moveOutboxAfterResponse({ usersNoted = true }: { usersNoted?: boolean } = {}): void {
  if (!outboxWorkAfterWrite(usersNoted)) return;
  const startedAt = requestStartedAt(); // its work ends within the time counted from the request's start
  afterResponse(() => moveOutboxAfterWrite({ usersNoted, startedAt }), { detachedOutsideNext: false });
}
