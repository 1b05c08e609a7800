import { randomBytes, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { attemptDelivery, EVENTS_USER_AGENT, type EventMessage } from '../../lib/events/attempt.ts';
import { startWebhookReceiver, type WebhookReceiver } from '../../scripts/support/webhook-receiver.ts';

/**
 * One delivery attempt over real HTTP to a real local receiver (scripts/support/webhook-receiver.ts),
 * which verifies each request with the standardwebhooks library, for each way a receiver answers.
 * The short timeouts are the attempt's own (what is under test), not waits of the test.
 */
const secrets = [`whsec_${randomBytes(32).toString('base64')}`, `whsec_${randomBytes(32).toString('base64')}`];
let receiver: WebhookReceiver;

beforeAll(async () => {
  // The receiver holds only the second secret: a rotation, where the sender signs with both.
  receiver = await startWebhookReceiver({ secrets: secrets[1]! });
});
afterAll(() => receiver.close());

function message(): EventMessage {
  const timestamp = new Date().toISOString();
  const data = { userId: randomUUID(), sequence: 1 };
  return { id: `evt_${randomUUID()}`, type: 'customer.deleted', timestamp, body: JSON.stringify({ type: 'customer.deleted', timestamp, data }) };
}

const endpoint = () => ({ url: new URL(receiver.url), secrets });

describe('attemptDelivery', () => {
  it('delivers a signed event the reference library verifies, with the three headers', async () => {
    receiver.setBehaviour('ok');
    const sent = message();
    expect(await attemptDelivery(endpoint(), sent, { local: true })).toEqual({ ok: true, status: 204 });
    const [arrived] = (await receiver.waitFor((all) => all.some((r) => r.id === sent.id))).filter((r) => r.id === sent.id);
    expect(arrived).toMatchObject({ verified: true, type: 'customer.deleted', data: JSON.parse(sent.body).data });
    expect(arrived!.body).toBe(sent.body);
    expect(arrived!.headers).toMatchObject({ 'content-type': 'application/json', 'user-agent': EVENTS_USER_AGENT });
    expect(arrived!.headers['webhook-signature']!.split(' ')).toHaveLength(2);
    expect(Math.abs(Number(arrived!.headers['webhook-timestamp']) - Date.now() / 1000)).toBeLessThan(60);
  });

  it('signs with the time of the attempt: an attempt dated 10 minutes ago does not verify', async () => {
    receiver.setBehaviour('ok');
    const sent = message();
    await attemptDelivery(endpoint(), sent, { local: true, now: new Date(Date.now() - 10 * 60_000) });
    const arrived = (await receiver.waitFor((all) => all.some((r) => r.id === sent.id))).find((r) => r.id === sent.id);
    expect(arrived!.verified).toBe(false);
  });

  it('counts a 500 as a failure, with the start of its answer', async () => {
    receiver.setBehaviour('fail500');
    expect(await attemptDelivery(endpoint(), message(), { local: true })).toEqual({ ok: false, status: 500, error: 'HTTP 500: receiver failed on purpose' });
  });

  it('does not follow a redirect, and names where it pointed without its query', async () => {
    receiver.setBehaviour('redirect');
    const before = receiver.received.length;
    const result = await attemptDelivery(endpoint(), message(), { local: true });
    expect(result).toMatchObject({ ok: false, status: 307 });
    expect(!result.ok && result.error).toBe(`redirected to ${new URL(receiver.url).origin}/moved (HTTP 307); redirects are not followed: configure the final URL`);
    expect(receiver.received.length).toBe(before + 1); // the target was never asked
  });

  it('gives up on a receiver that never answers, at its own timeout', async () => {
    receiver.setBehaviour('hang');
    expect(await attemptDelivery(endpoint(), message(), { local: true, timeoutMs: 200 })).toEqual({ ok: false, error: 'no answer within 200 ms' });
  });

  it('counts a 2xx whose answer does not complete within the timeout as a failure', async () => {
    receiver.setBehaviour('slow2xx');
    expect(await attemptDelivery(endpoint(), message(), { local: true, timeoutMs: 200 })).toEqual({ ok: false, status: 200, error: 'HTTP 200, but the answer did not complete within 200 ms' });
  });

  it('reads at most 64 KiB of an answer: an endless error answer ends the attempt, not its timeout', async () => {
    let written = 0;
    const endless = createServer((req, res) => {
      req.resume();
      res.writeHead(500, { 'content-type': 'text/plain' });
      const chunk = Buffer.alloc(16 * 1024, 'x');
      const pump = () => {
        while (!res.destroyed && res.write(chunk)) written += chunk.length;
        if (!res.destroyed) res.once('drain', pump);
      };
      pump();
    });
    endless.listen(0, '127.0.0.1');
    await once(endless, 'listening');
    try {
      const url = new URL(`http://127.0.0.1:${(endless.address() as AddressInfo).port}/`);
      const result = await attemptDelivery({ url, secrets }, message(), { local: true, timeoutMs: 60_000 });
      expect(result).toEqual({ ok: false, status: 500, error: `HTTP 500: ${'x'.repeat(200)}` });
      expect(written).toBeGreaterThan(0);
    } finally {
      endless.closeAllConnections();
      await new Promise((resolve) => endless.close(resolve));
    }
  });

  it('sends again on a new connection when the receiver closed the kept one as it was reused, and only then', async () => {
    // The second request of each connection is cut without an answer: what a receiver that closes
    // idle connections does to a request that arrives just as it closes.
    const requestsOn = new Map<unknown, number>();
    let answered = 0;
    const closing = createServer((req, res) => {
      const seen = (requestsOn.get(req.socket) ?? 0) + 1;
      requestsOn.set(req.socket, seen);
      req.resume();
      if (seen === 2) {
        req.socket.destroy();
        return;
      }
      answered++;
      res.writeHead(204).end();
    });
    closing.listen(0, '127.0.0.1');
    await once(closing, 'listening');
    try {
      const url = new URL(`http://127.0.0.1:${(closing.address() as AddressInfo).port}/`);
      expect(await attemptDelivery({ url, secrets }, message(), { local: true })).toEqual({ ok: true, status: 204 });
      expect(await attemptDelivery({ url, secrets }, message(), { local: true })).toEqual({ ok: true, status: 204 });
      expect({ answered, connections: requestsOn.size }).toEqual({ answered: 2, connections: 2 });
    } finally {
      closing.closeAllConnections();
      await new Promise((resolve) => closing.close(resolve));
    }
  });

  it('answers a failure for a request Node will not make, and refuses a timeout that is not one', async () => {
    const result = await attemptDelivery({ url: new URL(receiver.url), secrets }, { ...message(), id: 'evt_bad\nheader' }, { local: true });
    expect(result).toMatchObject({ ok: false, error: expect.stringMatching(/^could not connect: /) });
    for (const timeoutMs of [0, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 31]) {
      await expect(attemptDelivery(endpoint(), message(), { local: true, timeoutMs })).rejects.toThrow(RangeError);
    }
  });

  it('says so when nothing listens', async () => {
    const closed = await startWebhookReceiver({ secrets });
    const url = new URL(closed.url);
    await closed.close();
    expect(await attemptDelivery({ url, secrets }, message(), { local: true })).toEqual({ ok: false, error: 'could not connect: ECONNREFUSED' });
  });

  it('outside local mode, sends nothing to a host that resolves to a non-public address', async () => {
    receiver.setBehaviour('ok');
    const before = receiver.received.length;
    // The receiver's own loopback URL, as a deployment would see it: refused before any request.
    expect(await attemptDelivery(endpoint(), message(), { local: false })).toEqual({ ok: false, error: 'not sent: 127.0.0.1 resolves to 127.0.0.1, a loopback address (events go to public receivers only)' });
    const named = { url: new URL('https://hooks.example/in'), secrets };
    const rebound = await attemptDelivery(named, message(), { local: false, lookup: async () => ['93.184.216.34', '::ffff:192.168.1.20'] });
    expect(rebound).toEqual({ ok: false, error: 'not sent: hooks.example resolves to ::ffff:192.168.1.20, a private address (events go to public receivers only)' });
    expect(await attemptDelivery(named, message(), { local: false, lookup: () => Promise.reject(Object.assign(new Error('nope'), { code: 'ENOTFOUND' })) }))
      .toEqual({ ok: false, error: 'not sent: hooks.example does not resolve (ENOTFOUND)' });
    // A lookup that never answers ends with the attempt's timeout, like a receiver that never does.
    expect(await attemptDelivery(named, message(), { local: false, timeoutMs: 50, lookup: () => new Promise(() => {}) }))
      .toEqual({ ok: false, error: 'no answer within 50 ms: hooks.example did not resolve in time' });
    expect(receiver.received.length).toBe(before);
  });

  it('outside local mode, connects only to the addresses it checked, not to what the name answers next', async () => {
    receiver.setBehaviour('ok');
    const before = receiver.received.length;
    // The check's lookup answers a public address (which this machine does not reach); the
    // system's lookup of the same name would answer the receiver's loopback address.
    const rebinding = { url: new URL(`http://localhost:${new URL(receiver.url).port}/`), secrets };
    const result = await attemptDelivery(rebinding, message(), { local: false, lookup: async () => ['93.184.216.34'], timeoutMs: 300 });
    // (Sent, not refused by the check; where that address answers, whatever it answered.)
    expect(result.ok || !result.error.startsWith('not sent')).toBe(true);
    expect(receiver.received.length).toBe(before);
    // In local mode (no check) the name reaches the receiver: the attempt above could have.
    expect(await attemptDelivery(rebinding, message(), { local: true })).toEqual({ ok: true, status: 204 });
  });
});
