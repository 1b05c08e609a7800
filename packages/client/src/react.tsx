'use client';

import { createContext, useCallback, useContext, useEffect, useMemo, useRef, useState, type ReactNode } from 'react';
import type { AccountChannel } from './channel.ts';
import { expectData, type Account, type AccountLinkClient, type BillingSync } from './index.ts';

/**
 * React hooks for the signed-in user's account (React DOM and React Native alike):
 *
 *   <AccountProvider client={api} channel={channel}>   // channel: optional, made by ./live.ts
 *     ...
 *   const { data, loading, error, live, refresh, syncPurchases } = useAccount();
 *
 * `data` is GET /api/me. With a channel the account stays current by itself: it is read again on
 * each `account_changed` and each time the channel (re)connects, so a purchase, a refund or a
 * wallet linked anywhere shows without a reload. `syncPurchases()` is "the server has applied my
 * purchase": POST /api/me/billing/sync asks RevenueCat and answers the fresh entitlements, which
 * `data` takes at once.
 */
export interface AccountState {
  /** The account, once read (or as the server rendered it). */
  data: Account | undefined;
  /** Reading it for the first time. */
  loading: boolean;
  /** Why the last read failed (an ApiProblemError for an answer of the service); cleared by the next success. */
  error: Error | undefined;
  /** A channel is connected and the account was read since it connected: changes show by themselves. */
  live: boolean;
  /** Read the account again (reads asked for while one runs share one more read after it). */
  refresh(): Promise<Account | undefined>;
  /** POST /api/me/billing/sync: RevenueCat's record, applied; throws its ApiProblemError (429 within 5 s). */
  syncPurchases(): Promise<BillingSync>;
}

const AccountContext = createContext<AccountState | undefined>(undefined);

export interface AccountProviderProps {
  client: AccountLinkClient;
  /** Where changes are heard; keep it the same object between renders (useMemo). */
  channel?: AccountChannel;
  /** The account as the server rendered it, so the first paint needs no request. */
  initialAccount?: Account;
  children: ReactNode;
}

export function AccountProvider({ client, channel, initialAccount, children }: AccountProviderProps) {
  const [data, setData] = useState<Account | undefined>(initialAccount);
  const [loading, setLoading] = useState(initialAccount === undefined);
  const [error, setError] = useState<Error | undefined>(undefined);
  const [live, setLive] = useState(false);
  // One read at a time; a read asked for meanwhile runs once after it (it may have missed the change).
  const reading = useRef<Promise<Account | undefined> | undefined>(undefined);
  const again = useRef(false);

  const refresh = useCallback((): Promise<Account | undefined> => {
    if (reading.current) {
      again.current = true;
      return reading.current;
    }
    const read = async (): Promise<Account | undefined> => {
      let account: Account | undefined;
      do {
        again.current = false;
        try {
          account = await expectData(client.GET('/api/me'));
          setData(account);
          setError(undefined);
        } catch (failure) {
          setError(failure instanceof Error ? failure : new Error(String(failure)));
        }
      } while (again.current);
      setLoading(false);
      return account;
    };
    reading.current = read().finally(() => {
      reading.current = undefined;
    });
    return reading.current;
  }, [client]);

  useEffect(() => {
    if (initialAccount === undefined) void refresh();
    // Only on mount: a later initialAccount (the server rendering again) is older than what the channel brings.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, []);

  useEffect(() => {
    if (!channel) return;
    let connected = false;
    const stop = channel.subscribe({
      // Catch up on what changed while no channel was open; live once that read is in.
      onConnected: () => {
        connected = true;
        void refresh().then(() => setLive(connected));
      },
      onChange: () => void refresh(),
      onDisconnected: () => {
        connected = false;
        setLive(false);
      },
    });
    return () => {
      connected = false;
      stop();
      setLive(false);
    };
  }, [channel, refresh]);

  const syncPurchases = useCallback(async (): Promise<BillingSync> => {
    const synced = await expectData(client.POST('/api/me/billing/sync'));
    setData((current) => (current ? { ...current, entitlements: synced.entitlements } : current));
    return synced;
  }, [client]);

  const value = useMemo<AccountState>(() => ({ data, loading, error, live, refresh, syncPurchases }), [data, loading, error, live, refresh, syncPurchases]);
  return <AccountContext.Provider value={value}>{children}</AccountContext.Provider>;
}

/** The account of the nearest AccountProvider. */
export function useAccount(): AccountState {
  const state = useContext(AccountContext);
  if (!state) throw new Error('useAccount() needs an <AccountProvider client={...}> above it.');
  return state;
}
