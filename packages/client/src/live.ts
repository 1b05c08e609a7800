import { ACCOUNT_CHANGED_EVENT, accountTopic, readAccountChange, type AccountChannel } from './channel.ts';

export * from './channel.ts';

// What these functions use of a supabase-js client, by its shape: a SupabaseClient has it, and an
// app that does not install supabase-js (an optional peer) still type-checks this module.

/** A Realtime channel, as supabase-js's `RealtimeChannel` is one. */
export interface RealtimeChannelLike {
  on(type: 'broadcast', filter: { event: string }, callback: (message: { payload?: unknown }) => void): RealtimeChannelLike;
  subscribe(callback: (status: string, error?: Error) => void): RealtimeChannelLike;
}

/** The Realtime part of a supabase-js client (`createClient(...)`). */
export interface SupabaseRealtimeLike {
  realtime: { setAuth(token?: string | null): Promise<unknown> };
  channel(name: string, options: { config: { private: boolean } }): RealtimeChannelLike;
  removeChannel(channel: RealtimeChannelLike): Promise<unknown>;
}

/** The Auth part of a supabase-js client. */
export interface SupabaseAuthLike {
  auth: {
    refreshSession(): Promise<unknown>;
    onAuthStateChange(callback: (event: string, session: { access_token: string; expires_at?: number } | null) => void): { data: { subscription: { unsubscribe(): void } } };
  };
}

export interface ServiceEventsChannelOptions {
  /** The stream's URL: by default `/api/me/events`, for a page of the service itself. */
  url?: string;
  /**
   * The signed-in user's access token, for an app elsewhere (another origin, Node, a server, a
   * test): sent as `Authorization: Bearer`, which EventSource cannot send, so the stream is then
   * read with `fetch`. Asked again before every reconnection.
   */
  accessToken?: () => string | null | undefined | Promise<string | null | undefined>;
  EventSource?: typeof EventSource;
  fetch?: typeof fetch;
}

/**
 * The service's own stream, GET /api/me/events (served in local mode). A page of the service
 * itself is authenticated by its session cookie through EventSource, which reconnects by itself
 * after the stream ends (every 5 minutes) or breaks; each reconnection is an onConnected. With
 * `accessToken`, the stream is read with fetch and a Bearer token, reconnecting the same way.
 */
export function serviceEventsChannel(options: ServiceEventsChannelOptions = {}): AccountChannel {
  const url = options.url ?? '/api/me/events';
  if (options.accessToken) return fetchedEventsChannel(url, options.accessToken, options.fetch ?? globalThis.fetch);
  return {
    subscribe({ onConnected, onChange, onDisconnected }) {
      const Source = options.EventSource ?? globalThis.EventSource;
      if (!Source) {
        onDisconnected(new Error('This runtime has no EventSource: pass accessToken (the stream is then read with fetch), or use Supabase Realtime (supabaseAccountChannel).'));
        return () => undefined;
      }
      const source = new Source(url);
      source.addEventListener('open', () => onConnected());
      source.addEventListener(ACCOUNT_CHANGED_EVENT, (event) => onChange(readAccountChange((event as MessageEvent).data)));
      // An error while open means "reconnecting" (readyState CONNECTING) or "given up" (CLOSED: a
      // 401 after the session ended, a 404 outside local mode): offline either way, until `open`.
      source.addEventListener('error', (event) => onDisconnected(event));
      return () => source.close();
    },
  };
}

/** Until the stream's own `retry:` says otherwise (the service sends one), as EventSource waits. */
const DEFAULT_RETRY_MS = 3_000;

/**
 * The stream read with fetch, as EventSource would read it (WHATWG HTML, "Server-sent events"):
 * reconnect after it ends or breaks, waiting `retry:`; give up on an answer that a retry cannot
 * change (a 4xx: the session ended, not served outside local mode), but a 429 (too many streams,
 * which frees up) or a 408.
 */
function fetchedEventsChannel(url: string, accessToken: NonNullable<ServiceEventsChannelOptions['accessToken']>, fetchStream: typeof fetch): AccountChannel {
  return {
    subscribe({ onConnected, onChange, onDisconnected }) {
      const stop = new AbortController();
      let retryMs = DEFAULT_RETRY_MS;
      void (async () => {
        while (!stop.signal.aborted) {
          // One signal a connection, so that nothing a connection hangs on the subscription's stays.
          const connection = new AbortController();
          const hangUp = () => connection.abort();
          stop.signal.addEventListener('abort', hangUp, { once: true });
          try {
            const token = await accessToken();
            const response = await fetchStream(url, {
              headers: { accept: 'text/event-stream', ...(token ? { authorization: `Bearer ${token}` } : {}) },
              signal: connection.signal,
            });
            const isStream = /^text\/event-stream\b/i.test(response.headers.get('content-type') ?? '');
            if (!response.ok || !response.body || !isStream) {
              await response.body?.cancel();
              if (response.ok && !isStream) throw new GivenUp(`GET ${url} answered ${response.headers.get('content-type') ?? 'no content type'}, not an event stream: is the URL the service's /api/me/events?`);
              if (response.ok) throw new GivenUp('This runtime\'s fetch cannot read a response as a stream: use Supabase Realtime (supabaseAccountChannel).');
              const error = new Error(`GET ${url} answered ${response.status}`);
              if (response.status >= 400 && response.status < 500 && response.status !== 408 && response.status !== 429) throw new GivenUp(error.message);
              throw error;
            }
            onConnected();
            await readEventStream(response.body, {
              onEvent: (event, data) => {
                if (event === ACCOUNT_CHANGED_EVENT) onChange(readAccountChange(data));
              },
              onRetry: (ms) => { retryMs = ms; },
            });
            if (!stop.signal.aborted) onDisconnected(new Error('The stream ended; reconnecting.'));
          } catch (error) {
            if (stop.signal.aborted) return;
            onDisconnected(error);
            if (error instanceof GivenUp) return;
          } finally {
            stop.signal.removeEventListener('abort', hangUp);
          }
          await pause(retryMs, stop.signal);
        }
      })();
      return () => stop.abort();
    },
  };
}

/** A failure a reconnection would only repeat. */
class GivenUp extends Error {}

/** Read server-sent events: each `event`/`data` block as it completes, and the `retry:` field. */
async function readEventStream(body: ReadableStream<Uint8Array>, handlers: { onEvent(event: string, data: string): void; onRetry(ms: number): void }): Promise<void> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffered = '';
  let event = '';
  let data: string[] = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffered += decoder.decode(value, { stream: true });
    // (A trailing CR waits for the next chunk: it may be the first half of a CRLF.)
    const complete = buffered.endsWith('\r') ? buffered.slice(0, -1) : buffered;
    const lines = complete.split(/\r\n|\r|\n/);
    buffered = (lines.pop() ?? '') + buffered.slice(complete.length);
    for (const line of lines) {
      if (line === '') {
        if (data.length > 0) handlers.onEvent(event || 'message', data.join('\n'));
        event = '';
        data = [];
        continue;
      }
      if (line.startsWith(':')) continue; // a comment (the keep-alive)
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      const fieldValue = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
      if (field === 'event') event = fieldValue;
      else if (field === 'data') data.push(fieldValue);
      else if (field === 'retry' && /^\d+$/.test(fieldValue)) handlers.onRetry(Number(fieldValue));
    }
  }
}

function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}

export interface SupabaseAccountChannelOptions {
  /** The signed-in user's id (`session.user.id`): their topic is `user:<id>`. */
  userId: string;
  /**
   * Their access token, given to Realtime before joining: the channel is private, and Realtime
   * lets a user join only the topic the database's policy allows them (their own).
   */
  accessToken: () => string | null | undefined | Promise<string | null | undefined>;
}

/**
 * Supabase Realtime: the private channel `user:<id>`, event `account_changed`, which the database
 * sends (realtime.send) in the same transaction as every change to the user's entitlements,
 * wallet links and leagues. supabase-js keeps the socket's token fresh after sign-in.
 */
export function supabaseAccountChannel(supabase: SupabaseRealtimeLike, { userId, accessToken }: SupabaseAccountChannelOptions): AccountChannel {
  return {
    subscribe({ onConnected, onChange, onDisconnected }) {
      let stopped = false;
      let channel: RealtimeChannelLike | undefined;
      void (async () => {
        try {
          await supabase.realtime.setAuth((await accessToken()) ?? null);
        } catch (error) {
          onDisconnected(error);
          return;
        }
        if (stopped) return;
        channel = supabase
          .channel(accountTopic(userId), { config: { private: true } })
          .on('broadcast', { event: ACCOUNT_CHANGED_EVENT }, (message) => {
            if (!stopped) onChange(readAccountChange(message.payload));
          })
          .subscribe((status, error) => {
            if (stopped) return; // removeChannel's own CLOSED
            if (status === 'SUBSCRIBED') onConnected();
            else onDisconnected(error ?? new Error(`Realtime channel ${status.toLowerCase()}`));
          });
      })();
      return () => {
        stopped = true;
        if (channel) void supabase.removeChannel(channel);
      };
    },
  };
}

/**
 * Keep a Supabase session's access token usable when the service's access token hook lowered its
 * `exp` (to the earliest end of the user's entitlements, so a token never claims access past it).
 * Supabase Auth tells the client when the session expires from the project's JWT expiry, computed
 * before the hook ran, and supabase-js schedules its refresh by that: between the token's own `exp`
 * and that time, every call with the token would be refused as expired. This refreshes the session
 * `leadSeconds` before the token's own `exp` whenever that comes first. Returns a function that stops.
 */
export function refreshAtTokenExpiry(supabase: SupabaseAuthLike, { leadSeconds = 10 }: { leadSeconds?: number } = {}): () => void {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const schedule = (session: { access_token: string; expires_at?: number } | null) => {
    clearTimeout(timer);
    const exp = session ? tokenExpiry(session.access_token) : undefined;
    if (!session?.expires_at || exp === undefined || exp >= session.expires_at - 60) return;
    timer = setTimeout(() => void supabase.auth.refreshSession(), Math.max(0, (exp - leadSeconds) * 1000 - Date.now()));
  };
  const { data } = supabase.auth.onAuthStateChange((_event, session) => schedule(session));
  return () => {
    clearTimeout(timer);
    data.subscription.unsubscribe();
  };
}

/** A JWT's `exp` (seconds), read without verifying it: only to schedule a refresh. */
function tokenExpiry(token: string): number | undefined {
  try {
    const payload = token.split('.')[1]!.replace(/-/g, '+').replace(/_/g, '/');
    const { exp } = JSON.parse(atob(payload.padEnd(payload.length + ((4 - (payload.length % 4)) % 4), '='))) as { exp?: unknown };
    return typeof exp === 'number' ? exp : undefined;
  } catch {
    return undefined;
  }
}
