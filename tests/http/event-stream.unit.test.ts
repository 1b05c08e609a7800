import { describe, expect, it } from 'vitest';
import { eventStreamResponse, KEEP_ALIVE_COMMENT } from '../../lib/http/event-stream.ts';

/**
 * The server-sent events answer on its own (lib/http/event-stream.ts): what it sends first, that a
 * quiet stream still sends comments, that it ends by itself after its lifetime, when the client
 * goes away (the request's signal, or the reader cancelling), and that a HEAD starts nothing.
 * Short intervals here; the account stream's own rhythm is ACCOUNT_EVENTS_TIMING.
 */
function source() {
  const calls = { started: 0, stopped: 0 };
  let send: ((event: string, data: unknown) => void) | undefined;
  return {
    calls,
    emit: (event: string, data: unknown) => send!(event, data),
    start(sender: (event: string, data: unknown) => void) {
      calls.started++;
      send = sender;
      return () => {
        calls.stopped++;
      };
    },
  };
}

async function readAll(response: Response): Promise<string> {
  return response.text();
}

describe('a server-sent events answer', () => {
  it('sends retry first, then events and keep-alive comments, and ends itself after its lifetime, stopping its source once', async () => {
    const events = source();
    const response = eventStreamResponse(new Request('http://localhost/api/me/events'), { start: events.start, keepAliveMs: 10, maxLifetimeMs: 200, retryMs: 1500 });
    expect(response.status).toBe(200);
    expect(Object.fromEntries(response.headers)).toMatchObject({ 'content-type': 'text/event-stream', 'cache-control': 'no-cache, no-transform', 'x-accel-buffering': 'no' });
    events.emit('account_changed', { what: 'wallets', at: '2026-01-01T00:00:00.000Z' });
    const text = await readAll(response); // ends: the lifetime is over
    expect(text.startsWith('retry: 1500\n\nevent: account_changed\ndata: {"what":"wallets","at":"2026-01-01T00:00:00.000Z"}\n\n')).toBe(true);
    expect(text).toContain(KEEP_ALIVE_COMMENT);
    expect(text.replaceAll(KEEP_ALIVE_COMMENT, '')).toBe('retry: 1500\n\nevent: account_changed\ndata: {"what":"wallets","at":"2026-01-01T00:00:00.000Z"}\n\n');
    expect(events.calls).toEqual({ started: 1, stopped: 1 });
  });

  it('puts data that holds line breaks on one line (JSON escapes them)', async () => {
    const events = source();
    const response = eventStreamResponse(new Request('http://localhost/'), { start: events.start, keepAliveMs: 60_000, maxLifetimeMs: 50, retryMs: 1 });
    events.emit('note', { text: 'two\nlines\r\nand: a colon' });
    expect(await readAll(response)).toBe('retry: 1\n\nevent: note\ndata: {"text":"two\\nlines\\r\\nand: a colon"}\n\n');
  });

  it('ends when the client goes away: the request is aborted, or the reader cancels', async () => {
    const aborted = source();
    const controller = new AbortController();
    const response = eventStreamResponse(new Request('http://localhost/', { signal: controller.signal }), { start: aborted.start, keepAliveMs: 60_000, maxLifetimeMs: 600_000, retryMs: 1 });
    const reading = readAll(response);
    controller.abort();
    expect(await reading).toBe('retry: 1\n\n');
    expect(aborted.calls).toEqual({ started: 1, stopped: 1 });

    const cancelled = source();
    const stream = eventStreamResponse(new Request('http://localhost/'), { start: cancelled.start, keepAliveMs: 60_000, maxLifetimeMs: 600_000, retryMs: 1 });
    const reader = stream.body!.getReader();
    await reader.read();
    await reader.cancel();
    expect(cancelled.calls).toEqual({ started: 1, stopped: 1 });
    expect(() => cancelled.emit('late', {})).not.toThrow(); // a source that fires after the end writes nothing
  });

  it('answers HEAD with the headers alone and starts nothing', async () => {
    const events = source();
    const response = eventStreamResponse(new Request('http://localhost/', { method: 'HEAD' }), { start: events.start, keepAliveMs: 10, maxLifetimeMs: 100, retryMs: 1 });
    expect(response.headers.get('content-type')).toBe('text/event-stream');
    expect(response.body).toBeNull();
    expect(events.calls).toEqual({ started: 0, stopped: 0 });
  });

  it('stops its source at once for a request already aborted', async () => {
    const events = source();
    const controller = new AbortController();
    controller.abort();
    const response = eventStreamResponse(new Request('http://localhost/', { signal: controller.signal }), { start: events.start, keepAliveMs: 10, maxLifetimeMs: 600_000, retryMs: 1 });
    expect(await readAll(response)).toBe('retry: 1\n\n');
    expect(events.calls).toEqual({ started: 0, stopped: 0 });
  });
});
