import http from 'node:http';
import https from 'node:https';
import { isIPv6, type LookupFunction } from 'node:net';
import { signWebhook } from '#client/webhooks';
import { getConfig } from '../config.ts';
import { withinTime } from '../within-time.ts';
import { rangeInWords, resolveAndClassify, systemLookup, type Lookup } from './addresses.ts';
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
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > MAX_TIMEOUT_MS) throw new RangeError(`An attempt's timeout is whole milliseconds from 1 to ${MAX_TIMEOUT_MS}`);
  const local = options.local ?? getConfig().local;
  const url = endpoint.url;
  // The whole attempt, the address check included, ends within timeoutMs.
  const started = performance.now();
  let addresses: string[] | undefined;
  if (!local) {
    // Checked before every attempt, not only at startup: a name's DNS answer can change to a private
    // address after the receiver was configured. The connection goes to the addresses checked, not
    // to what a second lookup answers (a name that answers a public address, then a private one).
    const checked = await withinTime(publicAddresses(url.hostname, lookup), timeoutMs, () => undefined);
    if (checked === undefined) return { ok: false, error: `no answer within ${timeoutMs} ms: ${url.hostname} did not resolve in time` };
    if ('refused' in checked) return { ok: false, error: checked.refused };
    addresses = checked.addresses;
  }

  const timestamp = Math.floor(now.getTime() / 1000);
  const headers = {
    'content-type': 'application/json',
    'content-length': String(Buffer.byteLength(message.body)),
    'user-agent': EVENTS_USER_AGENT,
    'webhook-id': message.id,
    'webhook-timestamp': String(timestamp),
    'webhook-signature': await signWebhook({ id: message.id, timestamp, body: message.body, secrets: endpoint.secrets }),
  };
  const first = Math.max(1, Math.floor(timeoutMs - (performance.now() - started)));
  let answer = await post(url, headers, message.body, first, addresses);
  // A kept connection the receiver had closed as it was reused: once more on a new one (Node's
  // advice for keep-alive; a repeat is safe, receivers deduplicate by webhook-id), within what is
  // left of the attempt's timeout: the attempt as a whole never takes longer.
  const left = Math.floor(timeoutMs - (performance.now() - started));
  if ('failure' in answer && answer.staleConnection && left >= 1) answer = await post(url, headers, message.body, left, addresses);
  if ('failure' in answer) {
    const status = answer.status === undefined ? {} : { status: answer.status };
    if (answer.failure === 'timeout') {
      return { ok: false, ...status, error: answer.status === undefined ? `no answer within ${timeoutMs} ms` : `HTTP ${answer.status}, but the answer did not complete within ${timeoutMs} ms` };
    }
    return { ok: false, ...status, error: answer.status === undefined ? `could not connect: ${answer.detail}` : `HTTP ${answer.status}, but the connection closed before the answer completed` };
  }
  const { status } = answer;
  if (status >= 200 && status < 300) return { ok: true, status };
  if (status >= 300 && status < 400) return { ok: false, status, error: `redirected to ${redirectTarget(answer.location, url)} (HTTP ${status}); redirects are not followed: configure the final URL` };
  const snippet = oneLine(answer.start).slice(0, ERROR_SNIPPET_CHARS);
  return { ok: false, status, error: `HTTP ${status}${snippet ? `: ${snippet}` : ''}` };
}

/** setTimeout's largest delay. */
const MAX_TIMEOUT_MS = 2_147_483_647;

// Connections to receivers are kept open between attempts, and closed after 4 s idle (or sooner, as
// a receiver's Keep-Alive asks), as the global fetch did. (Node's own client: the global fetch is
// Next's, wrapped for its cache and tracing, and cost about four times the CPU an event.)
const KEEP_IDLE_MS = 4_000;
const agents = { 'http:': new http.Agent({ keepAlive: true, timeout: KEEP_IDLE_MS }), 'https:': new https.Agent({ keepAlive: true, timeout: KEEP_IDLE_MS }) };

type Answer =
  | { status: number; location: string | null; start: string }
  | { failure: 'timeout' | 'network'; detail?: string; status?: number; staleConnection?: boolean };

/**
 * POST the body; the answer's status, Location and first characters once the answer is complete (at
 * most MAX_ANSWER_BYTES are read, then the connection is cut). `timeoutMs` covers the whole
 * exchange, the answer's body included. Never follows a redirect; never throws.
 */
function post(url: URL, headers: Record<string, string>, body: string, timeoutMs: number, addresses?: string[]): Promise<Answer> {
  return new Promise((resolve) => {
    let status: number | undefined;
    let settled = false;
    let request: http.ClientRequest | undefined;
    const timer = setTimeout(() => {
      finish({ failure: 'timeout', status });
      request?.destroy();
    }, timeoutMs);
    const finish = (answer: Answer) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(answer);
    };
    const onResponse = (response: http.IncomingMessage) => {
      status = response.statusCode ?? 0;
      const chunks: Buffer[] = [];
      let total = 0;
      const complete = () => finish({ status: status!, location: response.headers.location ?? null, start: Buffer.concat(chunks).subarray(0, ERROR_SNIPPET_CHARS * 4).toString('utf8') });
      response.on('data', (chunk: Buffer) => {
        chunks.push(chunk);
        total += chunk.length;
        if (total >= MAX_ANSWER_BYTES) {
          complete();
          response.destroy();
        }
      });
      response.on('end', complete);
      response.on('close', () => finish({ failure: 'network', status }));
    };
    const protocol = url.protocol === 'https:' ? 'https:' : 'http:';
    try {
      const pinned = addresses ? { lookup: lookupAmong(addresses) } : {};
      request = (protocol === 'https:' ? https : http).request(url, { method: 'POST', headers, agent: agents[protocol], ...pinned }, onResponse);
    } catch (error) {
      // (A request Node refuses to make, a header it will not send: an answer like the others.)
      finish({ failure: 'network', detail: describeNetworkError(error as NodeJS.ErrnoException) });
      return;
    }
    const sent = request;
    sent.on('error', (error: NodeJS.ErrnoException) => finish({
      failure: 'network',
      detail: describeNetworkError(error),
      status,
      staleConnection: status === undefined && sent.reusedSocket && (error.code === 'ECONNRESET' || error.code === 'EPIPE'),
    }));
    sent.end(body);
  });
}

/** The addresses `host` is or resolves to, when every one is public; else why it is refused. */
async function publicAddresses(host: string, lookup: Lookup): Promise<{ addresses: string[] } | { refused: string }> {
  try {
    const verdicts = await resolveAndClassify(host, lookup);
    const refused = verdicts.find((verdict) => verdict.refused);
    if (refused) return { refused: `not sent: ${host} resolves to ${refused.address}, ${rangeInWords(refused.refused!)} (events go to public receivers only)` };
    return { addresses: verdicts.map((verdict) => verdict.address) };
  } catch (error) {
    return { refused: `not sent: ${host} does not resolve (${(error as NodeJS.ErrnoException).code ?? 'lookup failed'})` };
  }
}

/** A `lookup` for Node's connection that answers only these addresses (a literal IP is never looked up). */
function lookupAmong(addresses: string[]): LookupFunction {
  const entries = addresses.map((address) => ({ address, family: isIPv6(address) ? 6 : 4 }));
  return ((_host: string, options: { all?: boolean }, callback: (error: Error | null, address: string | typeof entries, family?: number) => void) => {
    if (options.all) callback(null, entries);
    else callback(null, entries[0]!.address, entries[0]!.family);
  }) as LookupFunction;
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

function describeNetworkError(error: NodeJS.ErrnoException): string {
  return oneLine(error.code ?? error.message ?? String(error)).slice(0, ERROR_SNIPPET_CHARS);
}

function oneLine(text: string): string {
  return text.replace(/[\u0000-\u001f\u007f]+/g, ' ').trim();
}
