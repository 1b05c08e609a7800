import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as eventsRoute from '../../app/api/me/events/route.ts';
import { accountChangeListenerCount } from '../../lib/account-changes.ts';
import { serviceEventsChannel, type AccountChange } from '../../packages/client/src/live.ts';
import { linkWallet, unlinkWallet } from '../support/account-actions.ts';
import { suiteDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { startRouteServer, type RouteServer } from '../support/route-server.ts';
import { testUser } from '../support/tokens.ts';
import { evmWallet } from '../wallets/wallets.ts';

/**
 * The local stream for an app that is not a page of the service (another origin, Node, a test):
 * `serviceEventsChannel({ accessToken })` reads GET /api/me/events with fetch and a Bearer token,
 * which EventSource cannot send, and reconnects as EventSource would. Node has no EventSource.
 */

/** Waits until `check` holds, polling: the stream's events arrive when the server writes them. */
async function until(check: () => boolean, what: string): Promise<void> {
  for (let waited = 0; !check(); waited += 20) {
    if (waited > 30_000) throw new Error(`Timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

function recorder() {
  const seen = { connected: 0, changes: [] as AccountChange[], disconnected: [] as unknown[] };
  const handlers = {
    onConnected: () => { seen.connected += 1; },
    onChange: (change: AccountChange) => { seen.changes.push(change); },
    onDisconnected: (reason?: unknown) => { seen.disconnected.push(reason); },
  };
  return { seen, handlers };
}

describe('serviceEventsChannel with an access token, against the real route', () => {
  suiteDatabase('pglite');
  let server: RouteServer;
  let restoreEnv: () => void;
  beforeAll(async () => {
    restoreEnv = setEnv({ LOCAL_DEV: '1' });
    server = await startRouteServer([[/^\/api\/me\/events$/, eventsRoute]]);
  });
  afterAll(async () => {
    await server.close();
    restoreEnv();
  });

  it('hears the signed-in user\'s wallet changes, each as it happens, and closes its stream when stopped', async () => {
    const user = await testUser();
    const { seen, handlers } = recorder();
    const stop = serviceEventsChannel({ url: `${server.url}/api/me/events`, accessToken: () => user.token }).subscribe(handlers);
    try {
      await until(() => seen.connected === 1, 'the stream to open');
      const link = await linkWallet(user, evmWallet());
      await until(() => seen.changes.length === 1, 'the link\'s change');
      await unlinkWallet(user, link.id);
      await until(() => seen.changes.length === 2, 'the unlink\'s change');
      expect(seen.changes.map((change) => change.what)).toEqual(['wallets', 'wallets']);
      expect(seen.disconnected).toEqual([]);
    } finally {
      stop();
    }
    await until(() => accountChangeListenerCount(user.userId) === 0, 'the server to let the stream go');
  });

  it('gives up on a refused token (a 401 a reconnection would repeat), saying why', async () => {
    let requests = 0;
    const counting: typeof fetch = (input, init) => {
      requests += 1;
      return fetch(input, init);
    };
    const { seen, handlers } = recorder();
    const stop = serviceEventsChannel({ url: `${server.url}/api/me/events`, accessToken: () => 'not-a-token', fetch: counting }).subscribe(handlers);
    await until(() => seen.disconnected.length === 1, 'the refusal');
    await new Promise((resolve) => setTimeout(resolve, 100));
    stop();
    expect({ requests, connected: seen.connected, reason: String(seen.disconnected[0]) }).toEqual({ requests: 1, connected: 0, reason: expect.stringContaining('answered 401') });
  });
});

describe('serviceEventsChannel reconnecting', () => {
  let stream: Server;
  let url: string;
  let connections = 0;
  const authorizations: (string | undefined)[] = [];
  beforeAll(async () => {
    // A stream that sends its retry, one change in two chunks, then ends.
    stream = createServer((request, response) => {
      connections += 1;
      authorizations.push(request.headers.authorization);
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      // (CRLF line ends, one split between its CR and LF: still one line end.)
      response.write(`retry: 30\r\n\r\n: keep-alive\n\nevent: account_changed\r`);
      setTimeout(() => response.end(`\ndata: {"what":"entitlements","at":"2026-12-06T00:00:0${connections}Z"}\r\n\r\n`), 10);
    });
    await new Promise<void>((resolve) => stream.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(stream.address() as { port: number }).port}/api/me/events`;
  });
  afterAll(async () => {
    await new Promise<void>((resolve) => stream.close(() => resolve()));
  });

  it('reconnects after the stream ends, waiting its retry, asking for the token again each time', async () => {
    let tokens = 0;
    const { seen, handlers } = recorder();
    const stop = serviceEventsChannel({ url, accessToken: () => `token-${++tokens}` }).subscribe(handlers);
    await until(() => seen.changes.length >= 3, 'three connections\' changes');
    stop();
    expect(seen.changes.slice(0, 3)).toEqual([
      { what: 'entitlements', at: '2026-12-06T00:00:01Z' }, { what: 'entitlements', at: '2026-12-06T00:00:02Z' }, { what: 'entitlements', at: '2026-12-06T00:00:03Z' },
    ]);
    expect(seen.connected).toBeGreaterThanOrEqual(3);
    expect(authorizations.slice(0, 3)).toEqual(['Bearer token-1', 'Bearer token-2', 'Bearer token-3']);
    expect(String(seen.disconnected[0])).toContain('The stream ended');
  });

  it('gives up on an answer that is not an event stream (a wrong URL), saying so', async () => {
    const page = createServer((_request, response) => response.writeHead(200, { 'content-type': 'text/html' }).end('<html></html>'));
    await new Promise<void>((resolve) => page.listen(0, '127.0.0.1', resolve));
    try {
      const { seen, handlers } = recorder();
      const stop = serviceEventsChannel({ url: `http://127.0.0.1:${(page.address() as { port: number }).port}/`, accessToken: () => 'token' }).subscribe(handlers);
      await until(() => seen.disconnected.length === 1, 'the refusal');
      await new Promise((resolve) => setTimeout(resolve, 100));
      stop();
      expect({ connected: seen.connected, disconnected: seen.disconnected.length, reason: String(seen.disconnected[0]) })
        .toEqual({ connected: 0, disconnected: 1, reason: expect.stringContaining('not an event stream') });
    } finally {
      await new Promise<void>((resolve) => page.close(() => resolve()));
    }
  });
});
