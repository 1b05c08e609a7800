/**
 * A plain HTTP client for the reliability suite (Node's fetch over loopback) that counts what it
 * sends: every request and every 5xx go into the scenario's tally, which feeds the summary table.
 */

export interface Tally {
  requests: number;
  fiveXx: number;
  /** Requests that got no HTTP answer at all (connection refused or reset). */
  noResponse: number;
  statuses: Record<string, number>;
}

export const newTally = (): Tally => ({ requests: 0, fiveXx: 0, noResponse: 0, statuses: {} });

export interface Answer {
  /** 0 when there was no HTTP answer (see `error`). */
  status: number;
  headers: Headers;
  text: string;
  body: any; // eslint-disable-line @typescript-eslint/no-explicit-any
  error?: string;
  startedAt: number;
  endedAt: number;
}

export interface SendOptions {
  method?: string;
  headers?: Record<string, string>;
  /** An object is sent as JSON (with Content-Type: application/json unless given); strings and bytes as they are. */
  body?: unknown;
  timeoutMs?: number;
}

export async function send(tally: Tally, url: string, options: SendOptions = {}): Promise<Answer> {
  const headers: Record<string, string> = { ...options.headers };
  let body: BodyInit | undefined;
  if (typeof options.body === 'string' || options.body instanceof Uint8Array || options.body instanceof ReadableStream) {
    body = options.body as BodyInit;
  } else if (options.body !== undefined) {
    body = JSON.stringify(options.body);
    if (!Object.keys(headers).some((key) => key.toLowerCase() === 'content-type')) headers['content-type'] = 'application/json';
  }
  tally.requests++;
  const startedAt = performance.now();
  try {
    const response = await fetch(url, {
      method: options.method ?? (body === undefined ? 'GET' : 'POST'),
      headers,
      body,
      signal: AbortSignal.timeout(options.timeoutMs ?? 30_000),
      ...(body instanceof ReadableStream ? { duplex: 'half' } : {}),
    } as RequestInit);
    // An event stream stays open for minutes: its status and headers are the answer; its body is
    // what the stream tests read.
    const streaming = response.headers.get('content-type')?.startsWith('text/event-stream') ?? false;
    const text = streaming ? (await response.body?.cancel(), '') : await response.text();
    const endedAt = performance.now();
    tally.statuses[response.status] = (tally.statuses[response.status] ?? 0) + 1;
    if (response.status >= 500) tally.fiveXx++;
    let parsed: unknown;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = undefined;
    }
    return { status: response.status, headers: response.headers, text, body: parsed, startedAt, endedAt };
  } catch (error) {
    tally.noResponse++;
    tally.statuses['none'] = (tally.statuses['none'] ?? 0) + 1;
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    return {
      status: 0,
      headers: new Headers(),
      text: '',
      body: undefined,
      error: `${(error as Error).message}${cause ? ` (${cause.code ?? cause.message})` : ''}`,
      startedAt,
      endedAt: performance.now(),
    };
  }
}

/** Run `work` on `concurrency` workers until `more()` says stop (checked before each unit of work). */
export async function runWorkers(concurrency: number, more: () => boolean, work: () => Promise<void>): Promise<void> {
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (more()) await work();
  }));
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A small seeded PRNG (mulberry32), so a run's request mix can be replayed from its printed seed. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
