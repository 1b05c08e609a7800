import { describe, expect, it } from 'vitest';
import { readJsonBody } from '../../lib/http/body.ts';
import { defineRoute, json } from '../../lib/http/route.ts';
import { callRoute } from '../support/http.ts';

const MAX_BYTES = 1024 * 1024; // the default cap

// A route that does nothing but read its JSON body, so the reader is tested through real HTTP.
const echoRoute = defineRoute({
  POST: async (request) => {
    const body = await readJsonBody(request, { maxBytes: MAX_BYTES });
    return json({ ok: true, keys: body && typeof body === 'object' ? Object.keys(body).length : 0 });
  },
});

const post = (body: string | Uint8Array | ReadableStream, headers: Record<string, string> = { 'content-type': 'application/json' }) =>
  callRoute(echoRoute, { method: 'POST', headers, body });

const bytes = (...values: number[]) => new Uint8Array(values);

const hostileBodies: { name: string; body: string | Uint8Array; status?: number; code?: string }[] = [
  { name: 'empty body', body: '' },
  { name: 'only whitespace', body: '   \n ' },
  { name: 'truncated', body: '{"event": {"id": "a"' },
  { name: 'trailing garbage', body: '{"a": 1} trailing' },
  { name: 'two documents', body: '{"a": 1}{"b": 2}' },
  { name: 'single quotes', body: "{'a': 1}" },
  { name: 'invalid UTF-8 (lone continuation byte)', body: bytes(0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0x80, 0x22, 0x7d) },
  { name: 'invalid UTF-8 (overlong encoding)', body: bytes(0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xc0, 0xaf, 0x22, 0x7d) },
  { name: 'NUL escaped in a string', body: '{"a": "x\\u0000y"}' },
  { name: 'NUL escaped in a key', body: '{"a\\u0000": 1}' },
  { name: 'lone high surrogate', body: '{"a": "\\ud800"}' },
  { name: 'lone low surrogate in a key', body: '{"\\udc00": 1}' },
  { name: 'number too large (1e400)', body: '{"a": 1e400}' },
  { name: 'negative number too large', body: '{"a": -1e400}' },
  { name: '20 000-deep arrays', body: '['.repeat(20_000) + ']'.repeat(20_000) },
  { name: '20 000-deep objects', body: '{"a":'.repeat(20_000) + '1' + '}'.repeat(20_000) },
  { name: '__proto__ key', body: '{"__proto__": {"polluted": true}}' },
  { name: 'nested __proto__ key', body: '{"event": {"__proto__": {"isAdmin": true}}}' },
];

describe('reading JSON bodies over real HTTP', () => {
  it('reads a valid object', async () => {
    const response = await post('{"a": 1, "b": [true, null, "x"]}');
    expect(response.status).toBe(200);
    expect(response.body).toEqual({ ok: true, keys: 2 });
  });

  it('accepts a leading UTF-8 byte order mark', async () => {
    const response = await post(new Uint8Array([0xef, 0xbb, 0xbf, ...new TextEncoder().encode('{"a": 1}')]));
    expect(response.status).toBe(200);
  });

  it('accepts a charset parameter and +json media types', async () => {
    expect((await post('{}', { 'content-type': 'application/json; charset=utf-8' })).status).toBe(200);
    expect((await post('{}', { 'content-type': 'application/vnd.api+json' })).status).toBe(200);
    expect((await post('{}', { 'content-type': 'application/json;charset="UTF-8"' })).status).toBe(200);
    expect((await post('{}', { 'content-type': 'application/json; charset=US-ASCII' })).status).toBe(200); // UTF-8's first 128
  });

  it.each(hostileBodies)('answers 400 invalid_json, never a 5xx: $name', async ({ body }) => {
    const response = await post(body);
    expect(response.status).toBe(400);
    expect(response.headers.get('content-type')).toBe('application/problem+json');
    expect(response.body).toMatchObject({ status: 400, code: 'invalid_json' });
    expect(response.body.detail).toEqual(expect.any(String));
  });

  it('leaves Object.prototype untouched after __proto__ bodies', async () => {
    await post('{"__proto__": {"polluted": true}}');
    await post('{"constructor": {"prototype": {"polluted": true}}}');
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(Object.prototype).not.toHaveProperty('polluted');
  });

  it('takes 100 000 keys without a 5xx (413 here, where they exceed the cap)', async () => {
    const body = `{${Array.from({ length: 100_000 }, (_, i) => `"key-${i}":${i}`).join(',')}}`;
    expect(body.length).toBeGreaterThan(MAX_BYTES);
    const response = await post(body);
    expect(response.status).toBe(413);
  });

  it('parses 100 000 keys that fit the cap', async () => {
    const body = `{${Array.from({ length: 100_000 }, (_, i) => `"${i.toString(36)}":0`).join(',')}}`;
    const response = await post(body);
    expect(response.status).toBe(200);
    expect(response.body).toEqual({ ok: true, keys: 100_000 });
  });

  it('answers 413 from Content-Length before reading the body', async () => {
    const body = JSON.stringify({ pad: 'x'.repeat(MAX_BYTES) });
    const response = await post(body);
    expect(response.status).toBe(413);
    expect(response.body).toMatchObject({ code: 'payload_too_large' });
  });

  it('answers 413 while streaming a chunked body with no Content-Length', async () => {
    const chunk = new TextEncoder().encode('x'.repeat(8 * 1024));
    let sent = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (sent === 0) controller.enqueue(new TextEncoder().encode('{"pad":"'));
        if (sent > MAX_BYTES * 2) return controller.close();
        sent += chunk.byteLength;
        controller.enqueue(chunk);
      },
    });
    const response = await post(stream);
    expect(response.status).toBe(413);
    expect(response.body).toMatchObject({ code: 'payload_too_large' });
  });

  const contentTypes: { name: string; headers: Record<string, string> }[] = [
    { name: 'no content type', headers: {} },
    { name: 'text/plain', headers: { 'content-type': 'text/plain' } },
    { name: 'form data', headers: { 'content-type': 'application/x-www-form-urlencoded' } },
    { name: 'application/jsonx', headers: { 'content-type': 'application/jsonx' } },
    { name: 'JSON said to be UTF-16', headers: { 'content-type': 'application/json; charset=utf-16' } },
    { name: 'JSON said to be Latin-1', headers: { 'content-type': 'application/json; Charset="ISO-8859-1"' } },
    { name: 'JSON said to be UTF-8 and Latin-1', headers: { 'content-type': 'application/json; charset=utf-8; charset=latin1' } },
    { name: 'a gzip body', headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' } },
    { name: 'a body in two codings', headers: { 'content-type': 'application/json', 'content-encoding': 'identity, br' } },
  ];
  it.each(contentTypes)('answers 415 for $name', async ({ headers }) => {
    const response = await post('{"a":1}', headers);
    expect(response.status).toBe(415);
    expect(response.body).toMatchObject({ code: 'unsupported_media_type' });
  });

  it('reads a body said to be in the identity coding (none) as it is', async () => {
    expect((await post('{"a":1}', { 'content-type': 'application/json', 'content-encoding': 'identity' })).status).toBe(200);
  });

  it('answers 400 to a body whose stream breaks before its end (a client gone, a broken chunk), never a 500', async () => {
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('{"event":'));
        controller.error(Object.assign(new Error('aborted'), { code: 'ECONNRESET' }));
      },
    });
    // (Handed to the route as the server hands it a request: an HTTP client would fail on its own stream first.)
    const request = new Request('http://localhost/echo', { method: 'POST', headers: { 'content-type': 'application/json' }, body: stream, duplex: 'half' } as RequestInit);
    const response = await echoRoute.POST(request, { params: Promise.resolve({}) });
    expect(response.status).toBe(400);
    expect(await response.json()).toMatchObject({ code: 'invalid_request', detail: expect.stringContaining('could not be read to its end') });
  });
});
