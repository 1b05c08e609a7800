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

/**
 * The service's own stream, GET /api/me/events (served in local mode). A page of the service
 * itself is authenticated by its session cookie; EventSource reconnects by itself after the stream
 * ends (every 5 minutes) or breaks, and each reconnection is an onConnected.
 */
export function serviceEventsChannel(options: { url?: string; EventSource?: typeof EventSource } = {}): AccountChannel {
  const url = options.url ?? '/api/me/events';
  return {
    subscribe({ onConnected, onChange, onDisconnected }) {
      const Source = options.EventSource ?? globalThis.EventSource;
      if (!Source) {
        onDisconnected(new Error('This runtime has no EventSource: use Supabase Realtime (supabaseAccountChannel).'));
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
