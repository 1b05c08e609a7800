import type { Server } from 'node:http';
import { WebSocketServer, type WebSocket } from 'ws';

/**
 * A stand-in for Supabase Realtime on the fake Supabase server (tests/support/fake-supabase-auth.ts),
 * speaking its wire format: a WebSocket at /realtime/v1/websocket (`apikey`, `vsn=2.0.0`) carrying
 * Phoenix channel messages as JSON arrays `[join_ref, ref, topic, event, payload]`:
 *   phoenix/heartbeat            -> phx_reply ok
 *   realtime:<topic>/phx_join    -> phx_reply ok, or error "Unauthorized" when the channel is
 *                                   private and the policy refuses the user of `access_token`
 *   realtime:<topic>/access_token -> the channel's user becomes the new token's
 *   realtime:<topic>/phx_leave   -> phx_reply ok, then phx_close
 * and, like the database's `realtime.send(payload, event, topic, true)`, `send()` broadcasts to
 * every private subscriber of a topic: `[null, null, "realtime:<topic>", "broadcast",
 * { type: "broadcast", event, payload }]`.
 *
 * The policy is the one the account's migrations put on realtime.messages: a signed-in user may
 * receive the private topic `user:<their id>` and no other. Tokens are checked with `verify`
 * (the fake Auth server's keys), so an expired or forged token joins nothing.
 */
export interface FakeRealtime {
  /** Every join attempt: the topic (without `realtime:`), private or not, whose token, and the answer. */
  joins: { topic: string; private: boolean; userId: string | null; allowed: boolean }[];
  /** The apikey each socket connected with. */
  connections: { apikey: string | null; vsn: string | null }[];
  /** Broadcast as realtime.send(payload, event, topic, true) does; how many subscribers got it. */
  send(topic: string, event: string, payload: unknown): number;
  /** Subscribers of a private topic right now. */
  subscribers(topic: string): number;
}

type Message = [string | null, string | null, string, string, Record<string, unknown>];

export function attachFakeRealtime(server: Server, verify: (token: string) => Promise<string | null>): FakeRealtime {
  const wss = new WebSocketServer({ noServer: true });
  const channels = new Map<WebSocket, Map<string, { joinRef: string | null; private: boolean; userId: string | null }>>();
  const joins: FakeRealtime['joins'] = [];
  const connections: FakeRealtime['connections'] = [];

  server.on('upgrade', (request, socket, head) => {
    const url = new URL(request.url ?? '/', 'http://realtime.invalid');
    if (url.pathname !== '/realtime/v1/websocket') return socket.destroy();
    connections.push({ apikey: url.searchParams.get('apikey'), vsn: url.searchParams.get('vsn') });
    wss.handleUpgrade(request, socket, head, (ws) => {
      channels.set(ws, new Map());
      ws.on('close', () => channels.delete(ws));
      ws.on('message', (data) => void receive(ws, data.toString()));
    });
  });
  server.on('close', () => wss.close());

  const reply = (ws: WebSocket, [joinRef, ref, topic]: Message, status: 'ok' | 'error', response: Record<string, unknown>) =>
    ws.send(JSON.stringify([joinRef, ref, topic, 'phx_reply', { status, response }]));

  async function receive(ws: WebSocket, text: string) {
    const message = JSON.parse(text) as Message;
    const [joinRef, , topic, event, payload] = message;
    const joined = channels.get(ws);
    if (!joined) return;
    if (topic === 'phoenix' && event === 'heartbeat') return reply(ws, message, 'ok', {});
    const name = topic.replace(/^realtime:/, '');
    if (event === 'phx_join') {
      const config = (payload.config ?? {}) as { private?: boolean };
      const isPrivate = config.private === true;
      const userId = typeof payload.access_token === 'string' ? await verify(payload.access_token) : null;
      const allowed = !isPrivate || (userId !== null && name === `user:${userId}`);
      joins.push({ topic: name, private: isPrivate, userId, allowed });
      if (!allowed) return reply(ws, message, 'error', { reason: `Unauthorized: You do not have permissions to read from this Channel topic: ${name}` });
      joined.set(topic, { joinRef, private: isPrivate, userId });
      return reply(ws, message, 'ok', { postgres_changes: [] });
    }
    if (event === 'access_token') {
      const channel = joined.get(topic);
      if (channel && typeof payload.access_token === 'string') channel.userId = await verify(payload.access_token);
      return;
    }
    if (event === 'phx_leave') {
      const channel = joined.get(topic);
      joined.delete(topic);
      reply(ws, message, 'ok', {});
      return ws.send(JSON.stringify([channel?.joinRef ?? joinRef, null, topic, 'phx_close', {}]));
    }
  }

  const subscribed = (topic: string) =>
    [...channels.entries()].filter(([, joined]) => {
      const channel = joined.get(`realtime:${topic}`);
      // The policy is checked again for the token the channel holds now (it may have been refreshed).
      return channel?.private && channel.userId !== null && topic === `user:${channel.userId}`;
    });

  return {
    joins,
    connections,
    send(topic, event, payload) {
      const targets = subscribed(topic);
      for (const [ws, joined] of targets) {
        ws.send(JSON.stringify([joined.get(`realtime:${topic}`)!.joinRef, null, `realtime:${topic}`, 'broadcast', { type: 'broadcast', event, payload }]));
      }
      return targets.length;
    },
    subscribers: (topic) => subscribed(topic).length,
  };
}
