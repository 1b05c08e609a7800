import { randomBytes, randomUUID } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { signWebhook, verifyWebhook, WebhookVerificationError, type AccountLinkEvent, type WebhookVerificationFailure } from '../../packages/client/src/webhooks.ts';

/**
 * The client's event verifier and signer against Standard Webhooks' own library (`standardwebhooks`),
 * both ways, with real random secrets and real HMACs: what we sign, the reference verifies; what the
 * reference signs, we verify; and what must be refused is.
 */
const newSecret = () => `whsec_${randomBytes(32).toString('base64')}`;
const event: AccountLinkEvent = {
  type: 'customer.deleted',
  timestamp: '2026-01-01T00:00:00.000Z',
  data: { userId: '6f1c2b9e-3d4a-4b5c-8d7e-9f0a1b2c3d4e', sequence: 7 },
};
const body = JSON.stringify(event);

async function signedHeaders(secrets: string | string[], at = new Date(), id = `evt_${randomUUID()}`) {
  const timestamp = Math.floor(at.getTime() / 1000);
  return { 'webhook-id': id, 'webhook-timestamp': String(timestamp), 'webhook-signature': await signWebhook({ id, timestamp, body, secrets }) };
}

const without = (headers: Record<string, string>, name: string) => Object.fromEntries(Object.entries(headers).filter(([key]) => key !== name));

async function refusal(promise: Promise<unknown>): Promise<WebhookVerificationFailure> {
  const error = await promise.then(() => undefined, (caught: unknown) => caught);
  expect(error).toBeInstanceOf(WebhookVerificationError);
  return (error as WebhookVerificationError).reason;
}

describe('signWebhook', () => {
  it('signs as Standard Webhooks does: the reference library verifies it', async () => {
    const secret = newSecret();
    const headers = await signedHeaders(secret);
    expect(headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/);
    expect(new Webhook(secret).verify(body, headers)).toEqual(event);
    // And the reference library refuses it under another secret: the check above can fail.
    expect(() => new Webhook(newSecret()).verify(body, headers)).toThrow('No matching signature found');
  });

  it('gives the same signature as the reference library for the same id, time and body', async () => {
    const secret = newSecret();
    const at = new Date('2026-03-01T12:00:00Z');
    expect(await signWebhook({ id: 'evt_1', timestamp: at, body, secrets: secret })).toBe(new Webhook(secret).sign('evt_1', at, body));
  });

  it('signs once per secret during a rotation; a receiver holding either secret verifies', async () => {
    const [next, current] = [newSecret(), newSecret()];
    const headers = await signedHeaders([next, current]);
    expect(headers['webhook-signature'].split(' ')).toHaveLength(2);
    expect(new Webhook(next).verify(body, headers)).toEqual(event);
    expect(new Webhook(current).verify(body, headers)).toEqual(event);
    expect(await verifyWebhook(body, headers, next)).toEqual(event);
    expect(await verifyWebhook(body, headers, current)).toEqual(event);
    expect(await refusal(verifyWebhook(body, headers, newSecret()))).toBe('no_matching_signature');
  });

  it('signs and verifies right with more secrets than it keeps imported, each in turn and again', async () => {
    const many = Array.from({ length: 20 }, newSecret);
    for (const round of [1, 2]) {
      for (const secret of many) {
        const at = new Date(Date.UTC(2026, 2, round));
        const signature = await signWebhook({ id: 'evt_1', timestamp: at, body, secrets: secret });
        expect(signature).toBe(new Webhook(secret).sign('evt_1', at, body));
        expect(await verifyWebhook(body, { 'webhook-id': 'evt_1', 'webhook-timestamp': String(at.getTime() / 1000), 'webhook-signature': signature }, secret, { now: at })).toEqual(event);
      }
    }
    await expect(signWebhook({ id: 'evt_1', timestamp: 1, body, secrets: 'whsec_not base64!' })).rejects.toThrow('A webhook secret is');
  });
});

describe('verifyWebhook', () => {
  it("verifies what the reference library signs, from a Headers or a plain record, and returns the event", async () => {
    const secret = newSecret();
    const now = new Date();
    const id = `evt_${randomUUID()}`;
    const headers = { 'Webhook-Id': id, 'Webhook-Timestamp': String(Math.floor(now.getTime() / 1000)), 'Webhook-Signature': new Webhook(secret).sign(id, now, body) };
    expect(await verifyWebhook(body, headers, secret)).toEqual(event);
    expect(await verifyWebhook(body, new Headers(headers), secret)).toEqual(event);
    // A receiver in the middle of its own rotation holds two secrets: either may match.
    expect(await verifyWebhook(body, headers, [newSecret(), secret])).toEqual(event);
  });

  const cases: { name: string; change: (headers: Record<string, string>) => { body?: string; headers?: Record<string, string>; secret?: string; now?: Date }; reason: WebhookVerificationFailure }[] = [
    { name: 'a tampered body', change: () => ({ body: body.replace('"sequence":7', '"sequence":8') }), reason: 'no_matching_signature' },
    { name: 'a body re-serialised with other spacing', change: () => ({ body: JSON.stringify(event, null, 1) }), reason: 'no_matching_signature' },
    { name: 'the wrong secret', change: () => ({ secret: newSecret() }), reason: 'no_matching_signature' },
    { name: 'another webhook-id (the id is signed)', change: (h) => ({ headers: { ...h, 'webhook-id': `evt_${randomUUID()}` } }), reason: 'no_matching_signature' },
    { name: 'a timestamp moved (it is signed)', change: (h) => ({ headers: { ...h, 'webhook-timestamp': String(Number(h['webhook-timestamp']) + 1) } }), reason: 'no_matching_signature' },
    { name: 'a signature of another version only', change: (h) => ({ headers: { ...h, 'webhook-signature': h['webhook-signature']!.replace('v1,', 'v1a,') } }), reason: 'no_matching_signature' },
    { name: 'a signature that is not base64', change: (h) => ({ headers: { ...h, 'webhook-signature': 'v1,not*base64' } }), reason: 'no_matching_signature' },
    { name: 'a stale timestamp (6 minutes old)', change: () => ({ now: new Date(Date.now() + 6 * 60_000) }), reason: 'timestamp_too_old' },
    { name: 'a timestamp 6 minutes in the future', change: () => ({ now: new Date(Date.now() - 6 * 60_000) }), reason: 'timestamp_too_new' },
    { name: 'a timestamp that is not Unix seconds', change: (h) => ({ headers: { ...h, 'webhook-timestamp': '2026-01-01T00:00:00Z' } }), reason: 'invalid_timestamp' },
    { name: 'no webhook-signature', change: (h) => ({ headers: without(h, 'webhook-signature') }), reason: 'missing_header' },
    { name: 'no webhook-id', change: (h) => ({ headers: without(h, 'webhook-id') }), reason: 'missing_header' },
    { name: 'no webhook-timestamp', change: (h) => ({ headers: without(h, 'webhook-timestamp') }), reason: 'missing_header' },
    { name: 'an empty webhook-signature', change: (h) => ({ headers: { ...h, 'webhook-signature': ' ' } }), reason: 'missing_header' },
  ];
  for (const { name, change, reason } of cases) {
    it(`refuses ${name}`, async () => {
      const secret = newSecret();
      const headers = await signedHeaders(secret);
      const changed = change(headers);
      expect(await refusal(verifyWebhook(changed.body ?? body, changed.headers ?? headers, changed.secret ?? secret, { now: changed.now ?? new Date() }))).toBe(reason);
    });
  }

  it('takes the tolerance from its options, and the reference library agrees at its own 5 minutes', async () => {
    const secret = newSecret();
    const fourMinutesAgo = await signedHeaders(secret, new Date(Date.now() - 4 * 60_000));
    expect(await verifyWebhook(body, fourMinutesAgo, secret)).toEqual(event);
    expect(new Webhook(secret).verify(body, fourMinutesAgo)).toEqual(event);
    expect(await refusal(verifyWebhook(body, fourMinutesAgo, secret, { toleranceSeconds: 60 }))).toBe('timestamp_too_old');
    const sixMinutesAgo = await signedHeaders(secret, new Date(Date.now() - 6 * 60_000));
    expect(() => new Webhook(secret).verify(body, sixMinutesAgo)).toThrow('Message timestamp too old');
    expect(await refusal(verifyWebhook(body, sixMinutesAgo, secret))).toBe('timestamp_too_old');
  });

  it('refuses a genuine signature over a body that is not an event', async () => {
    const secret = newSecret();
    const id = 'evt_x';
    const now = new Date();
    for (const text of ['not json', '[1,2]', '{"type":"customer.deleted"}']) {
      const headers = { 'webhook-id': id, 'webhook-timestamp': String(Math.floor(now.getTime() / 1000)), 'webhook-signature': new Webhook(secret).sign(id, now, text) };
      expect(await refusal(verifyWebhook(text, headers, secret))).toBe('invalid_body');
    }
  });

  it('says what failed without repeating a secret', async () => {
    const secret = newSecret();
    const error = await verifyWebhook(body, await signedHeaders(newSecret()), secret).then(() => new Error('verified: not expected'), (caught: unknown) => caught as Error);
    expect(error.message).toMatch(/No signature/);
    expect(error.message).not.toContain(secret.slice(6, 20));
    await expect(verifyWebhook(body, await signedHeaders(secret), 'whsec_***')).rejects.toThrow(TypeError);
  });
});
