import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';

/**
 * A receiver of the service's events over real HTTP on loopback, for tests and the bench. Each
 * request is verified with the `standardwebhooks` library (Standard Webhooks' reference code, not
 * this service's verifier, so a mistake in our signing cannot hide behind the same mistake in our
 * checking) against every secret it holds, and recorded in arrival order.
 *
 * How it answers is its behaviour, set per request:
 *   ok        204, the event is received
 *   fail500   500 with a short text body
 *   hang      reads the request and never answers (the sender's timeout ends it)
 *   redirect  307 to another path of the receiver
 *   slow2xx   sends the 200 status line and headers at once, then holds the body open and never
 *             finishes it: the status is a 2xx, but the answer does not complete within any
 *             timeout (deterministic, unlike a delay: no race with the sender's clock)
 */
export type ReceiverBehaviour = 'ok' | 'fail500' | 'hang' | 'redirect' | 'slow2xx';

export interface ReceivedEvent {
  /** `webhook-id`. */
  id: string | undefined;
  /** The body's `type` (undefined when it is not a JSON event). */
  type: string | undefined;
  data: unknown;
  headers: Record<string, string>;
  /** One of the receiver's secrets verified the signature within Standard Webhooks' 5-minute tolerance. */
  verified: boolean;
  /** The raw body. */
  body: string;
  /** What the receiver answered. */
  behaviour: ReceiverBehaviour;
}

export interface WebhookReceiver {
  /** Where to send events (`http://127.0.0.1:<port>/events`). */
  url: string;
  /** Every request so far, in arrival order. */
  received: ReceivedEvent[];
  /**
   * Resolves with `received` once `predicate` holds of it (checked now and on every arrival);
   * rejects after `timeoutMs` (default 10 s) naming what did arrive, so a test that waits for an
   * event that never comes fails with a reason rather than at the test's own timeout.
   */
  waitFor(predicate: (received: ReceivedEvent[]) => boolean, timeoutMs?: number): Promise<ReceivedEvent[]>;
  setBehaviour(behaviour: ReceiverBehaviour | ((req: IncomingMessage, body: string) => ReceiverBehaviour)): void;
  close(): Promise<void>;
}

/** `port`: listen there (a receiver back after an outage, at the address the sender knows); default a free one. */
export async function startWebhookReceiver(options: { secrets: string | string[]; behaviour?: (req: IncomingMessage, body: string) => ReceiverBehaviour; port?: number }): Promise<WebhookReceiver> {
  const verifiers = [options.secrets].flat().map((secret) => new Webhook(secret));
  let behaviourOf = options.behaviour ?? (() => 'ok' as const);
  const received: ReceivedEvent[] = [];
  const waiters = new Set<() => void>();
  const held = new Set<ServerResponse>();

  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks).toString('utf8');
    const headers = Object.fromEntries(Object.entries(req.headers).map(([name, value]) => [name, [value ?? ''].flat().join(', ')]));
    const behaviour = behaviourOf(req, body);
    let parsed: { type?: unknown; data?: unknown } | undefined;
    try {
      parsed = JSON.parse(body) as typeof parsed;
    } catch {
      parsed = undefined;
    }
    received.push({
      id: headers['webhook-id'],
      type: typeof parsed?.type === 'string' ? parsed.type : undefined,
      data: parsed?.data,
      headers,
      verified: verifiers.some((verifier) => {
        try {
          verifier.verify(body, headers);
          return true;
        } catch {
          return false;
        }
      }),
      body,
      behaviour,
    });
    for (const wake of [...waiters]) wake();

    switch (behaviour) {
      case 'ok':
        res.writeHead(204).end();
        return;
      case 'fail500':
        res.writeHead(500, { 'content-type': 'text/plain' }).end('receiver failed on purpose');
        return;
      case 'redirect':
        res.writeHead(307, { location: '/moved?token=not-for-logs' }).end();
        return;
      case 'slow2xx':
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.write('accepted, still writing');
        held.add(res);
        return;
      case 'hang':
        held.add(res);
        return;
    }
  });
  server.listen(options.port ?? 0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}/events`,
    received,
    waitFor(predicate, timeoutMs = 10_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          if (!predicate(received)) return;
          finish();
          resolve(received);
        };
        const timer = setTimeout(() => {
          finish();
          reject(new Error(`webhook receiver: not there after ${timeoutMs} ms; received ${JSON.stringify(received.map(({ id, type, verified, behaviour }) => ({ id, type, verified, behaviour })))}`));
        }, timeoutMs);
        const finish = () => {
          clearTimeout(timer);
          waiters.delete(check);
        };
        waiters.add(check);
        check();
      });
    },
    setBehaviour(behaviour) {
      behaviourOf = typeof behaviour === 'function' ? behaviour : () => behaviour;
    },
    async close() {
      for (const res of held) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
