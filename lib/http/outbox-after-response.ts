import { moveOutboxAfterWrite } from '../events/delivery.ts';
import { afterResponse } from './after-response.ts';

/**
 * After a request that wrote: send the events it caused and tell lapses that came due, once the
 * response is out (lib/events/delivery.ts). Served outside Next (a test harness calling a route
 * module), nothing runs: the crons and `npm run events:deliver` move the outbox too.
 */
export function moveOutboxAfterResponse(): void {
  afterResponse(moveOutboxAfterWrite, { detachedOutsideNext: false });
}
