import { setTimeout as sleep } from 'node:timers/promises';
import { DomainError } from '../errors.ts';
import { subscriberResponseSchema, type SubscriberResponse } from './subscriber.ts';

/**
 * The client of RevenueCat's REST API, v1 (what RevenueCat's webhook guidance names): one call,
 * `GET {apiUrl}/v1/subscribers/{app_user_id}` with the secret API key. v1 creates the customer when
 * it does not exist (201): callers only ask for ids RevenueCat told us about, or the signed-in user.
 *
 * Bounded, and it never changes anything here: a timeout per attempt; a 429 waited out in the
 * request when its Retry-After is short, else `upstream_unavailable` with that Retry-After; 5xx and
 * network failures retried a bounded number of times with jitter, then `upstream_unavailable`;
 * 401/403 (a bad key) and other 4xx `upstream_rejected`; a body that is not a subscriber
 * `upstream_invalid`. The key travels only in the Authorization header and is never logged.
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
    if (!fits(0)) throw new DomainError('upstream_unavailable', 'No time was left to ask RevenueCat; nothing was changed.', { retryAfterSeconds: 30 });
    const attemptMs = Math.min(options.timeoutMs, timeLeft());
    let response: Response;
    try {
      response = await fetch(url, {
        headers: { authorization: `Bearer ${options.apiKey}`, accept: 'application/json' },
        signal: AbortSignal.timeout(attemptMs),
        redirect: 'error',
      });
    } catch (error) {
      const timedOut = (error as Error).name === 'TimeoutError';
      const backoff = backoffMs(attempt);
      if (attempt < retries && fits(backoff)) {
        await sleep(backoff);
        continue;
      }
      throw new DomainError('upstream_unavailable', timedOut
        ? `RevenueCat did not answer within ${attemptMs} ms (${attempt + 1} attempts); nothing was changed.`
        : 'RevenueCat could not be reached; nothing was changed.', { retryAfterSeconds: 30 });
    }

    if (response.status === 429) {
      const retryAfterMs = retryAfterOf(response) ?? UNKNOWN_RETRY_AFTER_SECONDS * 1000;
      await response.body?.cancel();
      if (waitedMs + retryAfterMs <= maxWaitMs && fits(retryAfterMs)) {
        waitedMs += retryAfterMs;
        await sleep(retryAfterMs);
        continue;
      }
      throw new DomainError('upstream_unavailable', 'RevenueCat is rate limiting this service; nothing was changed.', {
        retryAfterSeconds: Math.max(1, Math.ceil(retryAfterMs / 1000)),
      });
    }
    if (response.status >= 500) {
      await response.body?.cancel();
      const backoff = backoffMs(attempt);
      if (attempt < retries && fits(backoff)) {
        await sleep(backoff);
        continue;
      }
      throw new DomainError('upstream_unavailable', `RevenueCat answered ${response.status} (${attempt + 1} attempts); nothing was changed.`, { retryAfterSeconds: 30 });
    }
    if (response.status === 401 || response.status === 403) {
      await response.body?.cancel();
      throw new DomainError('upstream_rejected', `RevenueCat refused the secret API key (${response.status}): check REVENUECAT_SECRET_API_KEY.`);
    }
    if (response.status !== 200 && response.status !== 201) {
      await response.body?.cancel();
      throw new DomainError('upstream_rejected', `RevenueCat answered ${response.status} to GET /v1/subscribers: check REVENUECAT_API_URL.`);
    }

    const text = await response.text();
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      throw new DomainError('upstream_invalid', `RevenueCat answered ${response.status} with a body that is not JSON (${response.headers.get('content-type') ?? 'no content type'}).`);
    }
    const parsed = subscriberResponseSchema.safeParse(body);
    if (!parsed.success) {
      const where = parsed.error.issues.slice(0, 3).map((issue) => issue.path.join('.') || '(body)').join(', ');
      throw new DomainError('upstream_invalid', `RevenueCat answered with a body that is not a subscriber (at ${where}).`);
    }
    return { response: parsed.data, created: response.status === 201 };
  }
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
