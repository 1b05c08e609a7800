import { describe, expect, it } from 'vitest';
import { MAX_SUBSCRIBER_BYTES, readRevenueCatJson } from '../../lib/revenuecat/client.ts';

/**
 * How an answer of RevenueCat's REST API (v1, and v2 through the same reader) is read: never more
 * than MAX_SUBSCRIBER_BYTES, and held to what any JSON this service stores must hold. Each refusal
 * is RevenueCat's failure (upstream_invalid), never the caller's; over HTTP with the stand-in in
 * tests/billing/sync.test.ts.
 */
const encoder = new TextEncoder();

/** A Response whose body arrives in chunks, with or without a Content-Length. */
function answer(chunks: (string | Uint8Array)[], headers: Record<string, string> = {}): Response {
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(typeof chunk === 'string' ? encoder.encode(chunk) : chunk);
      controller.close();
    },
  });
  return new Response(stream, { status: 200, headers: { 'content-type': 'application/json', ...headers } });
}

const refusal = async (response: Response) => {
  try {
    await readRevenueCatJson(response);
    return 'read';
  } catch (error) {
    return `${(error as { code?: string }).code}: ${(error as { operatorDetail?: string }).operatorDetail}`;
  }
};

describe('reading an answer of RevenueCat', () => {
  it('reads JSON within the limits', async () => {
    expect(await readRevenueCatJson(answer(['{"request_date_ms":1,', '"subscriber":{"a":"ü"}}']))).toEqual({ request_date_ms: 1, subscriber: { a: 'ü' } });
  });

  it.each([
    { name: 'a Content-Length over the cap', response: () => answer(['{}'], { 'content-length': String(MAX_SUBSCRIBER_BYTES + 1) }), says: 'declares' },
    { name: 'a stream that goes over the cap', response: () => answer(['{"x":"', 'y'.repeat(MAX_SUBSCRIBER_BYTES), '"}']), says: 'over the' },
    { name: 'bytes that are not UTF-8', response: () => answer([new Uint8Array([0x7b, 0x22, 0xff, 0x22, 0x7d])]), says: 'not UTF-8' },
    { name: 'nesting deeper than 64', response: () => answer(['['.repeat(65), ']'.repeat(65)]), says: 'nests deeper' },
    { name: 'text that is not JSON', response: () => answer(['<html>maintenance</html>']), says: 'not JSON' },
    { name: 'a NUL in a value', response: () => answer(['{"a":"x\\u0000"}']), says: 'cannot be stored' },
    { name: 'a NUL in a key', response: () => answer(['{"a\\u0000":1}']), says: 'cannot be stored' },
    { name: 'a lone surrogate', response: () => answer(['{"a":"\\ud800"}']), says: 'cannot be stored' },
    { name: 'a number JSON cannot round-trip', response: () => answer(['{"a":1e400}']), says: 'cannot be stored' },
  ])('refuses $name as upstream_invalid, saying why to the operator only', async ({ response, says }) => {
    const refused = await refusal(response());
    expect(refused).toMatch(/^upstream_invalid: RevenueCat's answer /);
    expect(refused).toContain(says);
    // The offending key is quoted with its escapes: the reason itself is storable text.
    expect(refused).not.toContain('\u0000');
  });
});
