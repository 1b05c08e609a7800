import { setTimeout as sleep } from 'node:timers/promises';
import { DomainError } from '../errors.ts';
import { findUnstorableJson, MAX_JSON_DEPTH, nestsDeeperThan, readBoundedBytes } from '../json-limits.ts';
import { subscriberResponseSchema, type SubscriberResponse } from './subscriber.ts';

/**
 * The client of RevenueCat's REST API, v1 (what RevenueCat's webhook guidance names): one call,
 * `GET {apiUrl}/v1/subscribers/{app_user_id}` with the secret API key. v1 creates the customer when
 * it does not exist (201): callers only ask for ids RevenueCat told us about, or the signed-in user.
 *
 * Bounded, and it never changes anything here: a timeout per attempt (the body included); a 429
 * waited out in the request when its Retry-After is short, else `upstream_unavailable` with that
 * Retry-After; 5xx and network failures retried a bounded number of times with jitter, then
 * `upstream_unavailable`; 401/403 (a bad key) and other 4xx `upstream_rejected`; a body over
 * MAX_SUBSCRIBER_BYTES, or one that is not a subscriber, not UTF-8 or not storable (NUL, lone
 * surrogates), `upstream_invalid`. What RevenueCat said goes to the error's operatorDetail (the
 * log), never to its detail (the answer). The key travels only in the Authorization header and is
 * never logged.
 */
export interface RevenueCatClientOptions {
  apiUrl: string;
  apiKey: string;
  /** Per attempt. */
  timeoutMs: number;
  /** The longest 429 Retry-After waited out in the request (default 3 s). */
  maxWaitMs?: number;
  /** Retries after a 5xx, a timeout or a network failure (default 2). */
  retries?: number;
  /**
   * Epoch ms by which the call must be over, whatever happens (the caller's own time limit): each
   * attempt's timeout is cut to it, and no retry or 429 wait starts that could not end before it.
   */
  deadline?: number;
}

export interface FetchedSubscriber {
  response: SubscriberResponse;
  /** v1 answered 201: RevenueCat had no such customer and created it. */
  created: boolean;
}

/** An attempt shorter than this is not worth starting. */
const MIN_ATTEMPT_MS = 100;

/** When RevenueCat says nothing about how long to wait after a 429 (v1 may send no header). */
const UNKNOWN_RETRY_AFTER_SECONDS = 60;

export async function fetchSubscriber(appUserId: string, options: RevenueCatClientOptions): Promise<FetchedSubscriber> {
  const url = `${options.apiUrl}/v1/subscribers/${encodeURIComponent(appUserId)}`;
  const maxWaitMs = options.maxWaitMs ?? 3000;
  const retries = options.retries ?? 2;
  let waitedMs = 0;
  const timeLeft = () => (options.deadline === undefined ? Infinity : options.deadline - Date.now());
  /** Whether a pause of `ms` and then an attempt still fit before the deadline. */
  const fits = (ms: number) => ms + MIN_ATTEMPT_MS <= timeLeft();
  for (let attempt = 0; ; attempt++) {
    if (!fits(0)) throw unavailable('RevenueCat did not answer in time; nothing was changed.', 'no time was left before the deadline for another attempt', 30);
    const attemptMs = Math.min(options.timeoutMs, timeLeft());
    let response: Response;
    let body: unknown;
    try {
      response = await fetch(url, {
        headers: { authorization: `Bearer ${options.apiKey}`, accept: 'application/json' },
        signal: AbortSignal.timeout(attemptMs),
        redirect: 'error',
      });
      // The timeout covers the body too; anything else than a 200 or a 201 is not read.
      body = response.status === 200 || response.status === 201 ? await readRevenueCatJson(response) : undefined;
    } catch (error) {
      if (error instanceof DomainError) throw error; // an answer read and refused: asking again gets the same
      const timedOut = (error as Error).name === 'TimeoutError';
      const backoff = backoffMs(attempt);
      if (attempt < retries && fits(backoff)) {
        await sleep(backoff);
        continue;
      }
      throw timedOut
        ? unavailable('RevenueCat did not answer in time; nothing was changed.', `no answer within ${attemptMs} ms (${attempt + 1} attempts)`, 30)
        : unavailable('RevenueCat could not be reached; nothing was changed.', `unreachable (${attempt + 1} attempts): ${(error as Error).message}`, 30);
    }

    if (response.status === 429) {
      const retryAfterMs = retryAfterOf(response) ?? UNKNOWN_RETRY_AFTER_SECONDS * 1000;
      await response.body?.cancel();
      if (waitedMs + retryAfterMs <= maxWaitMs && fits(retryAfterMs)) {
        waitedMs += retryAfterMs;
        await sleep(retryAfterMs);
        continue;
      }
      throw unavailable('RevenueCat is rate limiting this service; nothing was changed.', `429 with a wait of ${retryAfterMs} ms`, Math.max(1, Math.ceil(retryAfterMs / 1000)));
    }
    if (response.status >= 500) {
      await response.body?.cancel();
      const backoff = backoffMs(attempt);
      if (attempt < retries && fits(backoff)) {
        await sleep(backoff);
        continue;
      }
      throw unavailable('RevenueCat is failing right now; nothing was changed.', `answered ${response.status} (${attempt + 1} attempts)`, 30);
    }
    if (body === undefined) {
      await response.body?.cancel();
      throw new DomainError('upstream_rejected', REJECTED_DETAIL, {
        operatorDetail: response.status === 401 || response.status === 403
          ? `RevenueCat refused the secret API key (${response.status}): check REVENUECAT_SECRET_API_KEY.`
          : `RevenueCat answered ${response.status} to GET /v1/subscribers: check REVENUECAT_API_URL.`,
      });
    }
    return { response: asSubscriber(body), created: response.status === 201 };
  }
}

/**
 * The largest answer read from RevenueCat: far above any real customer (tens of kilobytes with
 * years of purchases), so only a broken or hostile upstream reaches it. Beyond it nothing is read
 * further, parsed or stored (502 upstream_invalid).
 */
export const MAX_SUBSCRIBER_BYTES = 1024 * 1024;

const REJECTED_DETAIL = 'RevenueCat refused this service\'s request; nothing was changed. The operator can see why in the server log.';
const INVALID_DETAIL = 'RevenueCat answered with something this service cannot use; nothing was changed.';

function unavailable(detail: string, operatorDetail: string, retryAfterSeconds: number): DomainError {
  return new DomainError('upstream_unavailable', detail, { retryAfterSeconds, operatorDetail: `RevenueCat: ${operatorDetail}` });
}

function invalid(operatorDetail: string): DomainError {
  return new DomainError('upstream_invalid', INVALID_DETAIL, { operatorDetail: `RevenueCat's answer ${operatorDetail}` });
}

/** The answer's bytes, at most MAX_SUBSCRIBER_BYTES (by Content-Length before reading, then while reading). */
async function readAnswer(response: Response): Promise<Uint8Array> {
  const declared = response.headers.get('content-length');
  if (declared !== null && /^\d+$/.test(declared) && Number(declared) > MAX_SUBSCRIBER_BYTES) {
    await response.body?.cancel();
    throw invalid(`declares ${declared} bytes, over the ${MAX_SUBSCRIBER_BYTES}-byte cap`);
  }
  const bytes = await readBoundedBytes(response.body, MAX_SUBSCRIBER_BYTES, 'cancel');
  if (!bytes) throw invalid(`is over the ${MAX_SUBSCRIBER_BYTES}-byte cap`);
  return bytes;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * An answer of RevenueCat's REST API (v1 here, v2 in lib/revenuecat/v2.ts) as JSON, held to what
 * every JSON this service stores must hold (lib/json-limits.ts): at most MAX_SUBSCRIBER_BYTES,
 * UTF-8, nesting at most MAX_JSON_DEPTH, no NUL or lone surrogate, no `__proto__`. What RevenueCat
 * sends is not trusted more than what a client sends, and anything it cannot be is this service's
 * upstream failing (502 upstream_invalid, the subscriber marked for the sweep with a backoff), never
 * the caller's mistake and never a database error.
 */
export async function readRevenueCatJson(response: Response): Promise<unknown> {
  const bytes = await readAnswer(response);
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw invalid('is not UTF-8');
  }
  if (nestsDeeperThan(text, MAX_JSON_DEPTH)) throw invalid(`nests deeper than ${MAX_JSON_DEPTH} levels`);
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw invalid(`(${response.status}) is not JSON (${response.headers.get('content-type')?.slice(0, 100) ?? 'no content type'})`);
  }
  const unstorable = findUnstorableJson(body);
  // The path is RevenueCat's keys, the offending one among them: quoted with its escapes.
  if (unstorable) throw invalid(`holds what cannot be stored, at ${JSON.stringify(unstorable.path.slice(0, 200))}: ${unstorable.message}`);
  return body;
}

function asSubscriber(body: unknown): SubscriberResponse {
  const parsed = subscriberResponseSchema.safeParse(body);
  if (!parsed.success) {
    const where = parsed.error.issues.slice(0, 3).map((issue) => issue.path.join('.').slice(0, 200) || '(body)').join(', ');
    throw invalid(`is not a subscriber (at ${where})`);
  }
  return parsed.data;
}

/** Retry-After as seconds or an HTTP date (absent on some v1 429s). */
function retryAfterOf(response: Response): number | undefined {
  const value = response.headers.get('retry-after');
  if (!value) return undefined;
  if (/^\d+(\.\d+)?$/.test(value.trim())) return Math.round(Number(value) * 1000);
  const at = Date.parse(value);
  return Number.isFinite(at) ? Math.max(0, at - Date.now()) : undefined;
}

/** 200-400 ms, then 400-800 ms: a short jittered backoff that stays inside a request. */
function backoffMs(attempt: number): number {
  const base = 200 * 2 ** attempt;
  return base + Math.floor(Math.random() * base);
}
