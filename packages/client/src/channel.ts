// What a channel of account changes is, without a transport: the hooks (./react.tsx) take one and
// ./live.ts makes them. Apart from ./live.ts so that the hooks need neither supabase-js nor its types.

/**
 * Where an app hears that the signed-in user's account changed, so it reads GET /api/me again
 * instead of asking over and over:
 *   - supabaseAccountChannel: Supabase Realtime, the private channel `user:<user id>`, on which
 *     the database broadcasts `account_changed` (a deployment; web and React Native / Expo alike);
 *   - serviceEventsChannel: the service's own stream, GET /api/me/events (local mode, a browser).
 * Both deliver the same payload, `{ what, at }`: what kind of thing changed and when, never what
 * it now is. On every (re)connection the app reads the account again, since what changed while no
 * channel was open is not replayed; useAccount (./react.tsx) does both for you.
 */
export const ACCOUNT_CHANGE_KINDS = ['entitlements', 'wallets', 'leagues'] as const;
export type AccountChangeKind = (typeof ACCOUNT_CHANGE_KINDS)[number];

export interface AccountChange {
  /** What changed. A kind this client does not know yet is passed on as it came. */
  what: AccountChangeKind | (string & {});
  at: string;
}

/** The event both channels send, and the Realtime topic of a user. */
export const ACCOUNT_CHANGED_EVENT = 'account_changed';
export const accountTopic = (userId: string) => `user:${userId}`;

export interface AccountChannelHandlers {
  /** The channel is listening (again): read the account now, to catch up. */
  onConnected(): void;
  onChange(change: AccountChange): void;
  /** The channel stopped listening (it may reconnect by itself and call onConnected again). */
  onDisconnected(reason?: unknown): void;
}

export interface AccountChannel {
  /** Start listening; the returned function stops. */
  subscribe(handlers: AccountChannelHandlers): () => void;
}

/** A change as sent; anything unreadable still counts as "something changed". */
export function readAccountChange(payload: unknown): AccountChange {
  const value = (typeof payload === 'string' ? safeParse(payload) : payload) as Partial<AccountChange> | undefined;
  return { what: typeof value?.what === 'string' ? value.what : 'unknown', at: typeof value?.at === 'string' ? value.at : new Date().toISOString() };
}

function safeParse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

