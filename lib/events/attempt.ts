import { signWebhook } from '#client/webhooks';
import { getConfig } from '../config.ts';
import { resolveAndClassify, systemLookup, type Lookup } from './addresses.ts';
import type { EventEndpoint } from './endpoints.ts';

/**
 * One delivery attempt of one event to one receiver: a signed POST (Standard Webhooks headers),
 * judged by its answer. Nothing here retries or stores: the drain records the result and asks
 * ./retry.ts when to try again.
 *
 * Delivered means a 2xx whose answer completed within the timeout. A redirect is not followed (a
 * receiver that moved must be reconfigured: following would send signed events wherever a
 * compromised or mistaken receiver points), and counts as a failure, as does a 2xx whose answer
 * is still arriving when the timeout ends (the receiver may not have finished; a repeat is safe,
 * since receivers deduplicate by `webhook-id`).
 */

export const DELIVERY_TIMEOUT_MS = 15_000;
/** At most this much of an answer is read (then the connection is cut): receivers' answers are ignored, bar a hint in errors. */
export const MAX_ANSWER_BYTES = 64 * 1024;
const ERROR_SNIPPET_CHARS = 200;
export const EVENTS_USER_AGENT = 'account-link-service-events/1 (Standard Webhooks)';

export interface EventMessage {
  /** `evt_<uuid>`, the same on every attempt. */
  id: string;
  type: string;
  /** When the change committed (ISO 8601), as in the body. */
  timestamp: string;
  /** The exact JSON sent and signed. */
  body: string;
}

export type AttemptResult = { ok: true; status: number } | { ok: false; status?: number; error: string };

export interface AttemptOptions {
  timeoutMs?: number;
  /** The attempt's time: `webhook-timestamp` (default: now). */
  now?: Date;
  /** Local mode: any address may receive (default: the configuration's). */
  local?: boolean;
  /** The resolver of the address check (tests). */
  lookup?: Lookup;
}

/**
 * @returns `{ ok: true, status }` for a 2xx in time; otherwise `{ ok: false, status?, error }`, the
 * error short and safe to store and show (no secret, at most 200 characters of the answer).
 */
export async function attemptDelivery(endpoint: Pick<EventEndpoint, 'url' | 'secrets'>, message: EventMessage, options: AttemptOptions = {}): Promise<AttemptResult> {
  const { timeoutMs = DELIVERY_TIMEOUT_MS, now = new Date(), lookup = systemLookup } = options;
  const local = options.local ?? getConfig().local;
  const url = endpoint.url;
  if (!local) {
    // Checked before every attempt, not only at startup: a name's DNS answer can change to a private
    // address after the receiver was configured.
    const refused = await publicAddressProblem(url.hostname, lookup);
    if (refused) return { ok: false, error: refused };
  }

  const timestamp = Math.floor(now.getTime() / 1000);
  const signal = AbortSignal.timeout(timeoutMs);
  let status: number | undefined;
  try {
    const response = await fetch(url, {
      method: 'POST',
      redirect: 'manual',
      signal,
      headers: {
        'content-type': 'application/json',
        'user-agent': EVENTS_USER_AGENT,
        'webhook-id': message.id,
        'webhook-timestamp': String(timestamp),
        'webhook-signature': await signWebhook({ id: message.id, timestamp, body: message.body, secrets: endpoint.secrets }),
      },
      body: message.body,
    });
    status = response.status;
    // The same signal covers the answer's body: a 2xx is counted only once the answer is complete.
    const snippet = await readCapped(response);
    if (status >= 200 && status < 300) return { ok: true, status };
    if (status >= 300 && status < 400) return { ok: false, status, error: `redirected to ${redirectTarget(response.headers.get('location'), url)} (HTTP ${status}); redirects are not followed: configure the final URL` };
    return { ok: false, status, error: `HTTP ${status}${snippet ? `: ${snippet}` : ''}` };
  } catch (error) {
    if (signal.aborted) {
      return { ok: false, ...(status === undefined ? {} : { status }), error: status === undefined ? `no answer within ${timeoutMs} ms` : `HTTP ${status}, but the answer did not complete within ${timeoutMs} ms` };
    }
    return { ok: false, ...(status === undefined ? {} : { status }), error: `could not connect: ${describeNetworkError(error)}` };
  }
}

async function publicAddressProblem(host: string, lookup: Lookup): Promise<string | undefined> {
  try {
    const refused = (await resolveAndClassify(host, lookup)).find((verdict) => verdict.refused);
    return refused ? `not sent: ${host} resolves to ${refused.address}, a ${refused.refused} address (events go to public receivers only)` : undefined;
  } catch (error) {
    return `not sent: ${host} does not resolve (${(error as NodeJS.ErrnoException).code ?? 'lookup failed'})`;
  }
}

/** Read at most MAX_ANSWER_BYTES of the answer (then cut it), and return its start as one short line. */
async function readCapped(response: Response): Promise<string> {
  if (!response.body) return '';
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  while (total < MAX_ANSWER_BYTES) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    total += value.byteLength;
  }
  if (total >= MAX_ANSWER_BYTES) await reader.cancel().catch(() => undefined);
  const text = new TextDecoder().decode(Buffer.concat(chunks).subarray(0, ERROR_SNIPPET_CHARS * 4));
  return oneLine(text).slice(0, ERROR_SNIPPET_CHARS);
}

/** Origin and path of a redirect's target (its query may hold a token), at most 200 characters. */
function redirectTarget(location: string | null, base: URL): string {
  if (!location) return '(no Location)';
  try {
    const target = new URL(location, base);
    return `${target.origin}${target.pathname}`.slice(0, ERROR_SNIPPET_CHARS);
  } catch {
    return '(an invalid Location)';
  }
}

function describeNetworkError(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } }).cause;
  return oneLine(cause?.code ?? cause?.message ?? (error as Error).message ?? String(error)).slice(0, ERROR_SNIPPET_CHARS);
}

function oneLine(text: string): string {
  return text.replace(/[\u0000-\u001f\u007f]+/g, ' ').trim();
}
