/**
 * A server-sent events answer (WHATWG HTML, "Server-sent events"): `text/event-stream`, one
 * `event:`/`data:` block per message, a comment now and then so proxies and browsers do not take a
 * quiet stream for a dead one, and a bounded life: the stream ends after `maxLifetimeMs` and the
 * browser's EventSource reconnects after `retryMs` (a client that reconnects reads what it may
 * have missed, so nothing is lost in between). Ends early when the client goes away.
 */
export interface EventStreamOptions {
  /** Starts the source of events; returns what stops it (called once, however the stream ends). */
  start(send: (event: string, data: unknown) => void): () => void;
  keepAliveMs: number;
  maxLifetimeMs: number;
  /** How long the browser waits before reconnecting (the `retry:` field). */
  retryMs: number;
}

export const EVENT_STREAM_HEADERS = {
  'content-type': 'text/event-stream',
  // no-transform: a compressing proxy, or `next start`'s own compression, would hold events back.
  'cache-control': 'no-cache, no-transform',
  // nginx and others buffer a proxied answer unless told not to.
  'x-accel-buffering': 'no',
} as const;

/** A message as the stream carries it. JSON never holds a raw line break, so `data` is one line. */
export function eventStreamMessage(event: string, data: unknown): string {
  return `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

export const KEEP_ALIVE_COMMENT = ': keep-alive\n\n';

/**
 * The stream, for `request`: it ends when the client disconnects (the request's signal, or the
 * reader cancelling). A HEAD request gets the headers alone, and starts nothing.
 */
export function eventStreamResponse(request: Request, options: EventStreamOptions): Response {
  if (request.method === 'HEAD') return new Response(null, { status: 200, headers: EVENT_STREAM_HEADERS });
  const { signal } = request;
  const encoder = new TextEncoder();
  let end: () => void = () => undefined;
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      let open = true;
      const write = (text: string) => {
        if (!open) return;
        try {
          controller.enqueue(encoder.encode(text));
        } catch {
          end(); // the reader is gone
        }
      };
      // The first bytes go out at once, so the client sees the answer (EventSource `open`) now.
      write(`retry: ${options.retryMs}\n\n`);
      // What stops the source, once it started (it may end the stream before it returns).
      const source: { stop?: () => void } = {};
      const keepAlive = setInterval(() => write(KEEP_ALIVE_COMMENT), options.keepAliveMs);
      const lifetime = setTimeout(() => end(), options.maxLifetimeMs);
      end = () => {
        if (!open) return;
        open = false;
        clearInterval(keepAlive);
        clearTimeout(lifetime);
        signal.removeEventListener('abort', end);
        source.stop?.();
        try {
          controller.close();
        } catch {
          // already closed or errored by the reader's side
        }
      };
      signal.addEventListener('abort', end);
      if (signal.aborted) return end();
      source.stop = options.start((event, data) => write(eventStreamMessage(event, data)));
      if (!open) source.stop(); // ended while starting
    },
    cancel() {
      end();
    },
  });
  return new Response(body, { status: 200, headers: EVENT_STREAM_HEADERS });
}
