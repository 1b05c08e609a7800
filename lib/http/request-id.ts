import { randomUUID } from 'node:crypto';

/** Keep a caller's request id when it is sane (so logs correlate across services); else make one. */
export function acceptRequestId(value: string | null): string {
  return value && /^[A-Za-z0-9._:-]{1,128}$/.test(value) ? value : randomUUID();
}
