import { AsyncLocalStorage } from 'node:async_hooks';
import { processWide } from '../process-wide.ts';

/**
 * When the request the running code serves arrived (performance.now()), for work after its response
 * that must end within the function's time, which began with the request (vercel.json's
 * maxDuration): a route that works 20 s before it answers leaves its after() 10 s, not 30.
 * One per process (processWide): every bundle of this module must read one clock.
 */
const requestStarts = processWide('request-starts', () => new AsyncLocalStorage<number>());

/** Run a request's handling with the time it arrived. */
export function withRequestStart<T>(startedAt: number, work: () => Promise<T>): Promise<T> {
  return requestStarts.run(startedAt, work);
}

/** When the request this code runs for arrived; undefined outside one. */
export function requestStartedAt(): number | undefined {
  return requestStarts.getStore();
}
