import { randomUUID } from 'node:crypto';

/** Keep a caller's request id when it is sane (so logs correlate across services); else make one. */
export function acceptRequestId(value: string | null): string {
  return value && /^[A-Za-z0-9._:-]{1,128}$/.test(value) ? value : randomUUID();
}

/**
 * Vercel's id of the request (`x-vercel-id`, e.g. `iad1::fra1::abcde-1700000000000-0123456789ab`),
 * logged beside ours so a line in Vercel's log view leads to ours and back. Absent off Vercel; kept
 * only when it has that shape (a client can send the header too, and it goes into the log).
 */
export function vercelRequestId(value: string | null): string | undefined {
  return value && /^[A-Za-z0-9:_-]{1,128}$/.test(value) ? value : undefined;
}
