'use client';

import { useMemo, type ReactNode } from 'react';
import type { Account, Entitlement } from '#client';
import { refreshAtTokenExpiry, serviceEventsChannel, supabaseAccountChannel, type AccountChannel } from '#client/live';
import { AccountProvider, useAccount } from '#client/react';
import { pageApi } from './api-client.ts';
import { describeEvmChain } from '#lib/wallets/chains.ts';
import { describeEntitlementStatus } from './entitlement-status.ts';
import { PROOF_KIND_LABELS } from './proof-kinds.ts';
import { RefreshPurchasesButton } from './refresh-purchases.tsx';
import { browserSupabase, type SupabaseBrowserSettings } from './supabase-browser.ts';
import { UnlinkButton, WalletLinker } from './wallet-linker.tsx';

/** How the page hears of changes: Supabase Realtime where the page signs in with Supabase, else the service's own stream (local mode). */
export type LiveChannelSettings = { kind: 'supabase'; supabase: SupabaseBrowserSettings } | { kind: 'service' };

/**
 * The signed-in account, kept current: the server renders it (so it shows without JavaScript),
 * then useAccount reads it again on every change the channel reports, so a purchase, a refund or a
 * wallet linked elsewhere shows without a reload.
 */
export function LiveAccount({ initialAccount, live, children }: { initialAccount: Account; live?: LiveChannelSettings; children: ReactNode }) {
  const { userId } = initialAccount;
  // One channel for the same settings, even when the server renders the page again (a new object).
  const settings = JSON.stringify(live ?? null);
  const channel = useMemo(() => {
    const parsed = JSON.parse(settings) as LiveChannelSettings | null;
    return parsed ? pageChannel(parsed, userId) : undefined;
  }, [settings, userId]);
  return <AccountProvider client={pageApi} channel={channel} initialAccount={initialAccount}>{children}</AccountProvider>;
}

function pageChannel(live: LiveChannelSettings, userId: string): AccountChannel {
  if (live.kind === 'service') return serviceEventsChannel();
  // The Supabase client is made when the channel starts (in an effect), never while rendering on the server.
  return {
    subscribe(handlers) {
      const supabase = browserSupabase(live.supabase);
      const accessToken = async () => (await supabase.auth.getSession()).data.session?.access_token;
      // The access token hook may end a token before the session says it ends.
      const stopRefreshing = refreshAtTokenExpiry(supabase);
      const stopListening = supabaseAccountChannel(supabase, { userId, accessToken }).subscribe(handlers);
      return () => {
        stopListening();
        stopRefreshing();
      };
    },
  };
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const pad = (n: number) => String(n).padStart(2, '0');

/** "26 Nov 2026, 13:36 UTC": the same text on the server and in any browser (no locale data involved). */
function formatTime(iso: string | null | undefined, empty = '—'): string {
  if (!iso) return empty;
  const d = new Date(iso);
  return `${d.getUTCDate()} ${MONTHS[d.getUTCMonth()]} ${d.getUTCFullYear()}, ${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())} UTC`;
}

/** Until when access lasts, as a person reads it: in grace, the grace end; no expiry, lifetime. */
function accessUntil(entitlement: Entitlement): string {
  if (!entitlement.active) return entitlement.expiresAt ? `ended ${formatTime(entitlement.expiresAt)}` : '—';
  if (entitlement.status === 'grace' && entitlement.graceExpiresAt) return `${formatTime(entitlement.graceExpiresAt)} (grace period)`;
  return entitlement.expiresAt ? formatTime(entitlement.expiresAt) : 'lifetime';
}

export function AccountView({ evmChainIds, solanaClusters, canRefreshPurchases }: { evmChainIds: number[]; solanaClusters: string[]; canRefreshPurchases: boolean }) {
  const { data: account, live } = useAccount();
  if (!account) return null;
  return (
    <>
      <section className="panel" aria-labelledby="who">
        <h2 id="who">Signed in</h2>
        <dl>
          <dt className="muted">E-mail</dt>
          <dd data-testid="email">{account.email ?? '(none)'}</dd>
          <dt className="muted">User id</dt>
          <dd className="mono" data-testid="user-id">{account.userId}</dd>
          <dt className="muted">Updates</dt>
          <dd data-testid="live-updates" data-live={live}>{live ? 'Live: changes show as they happen' : 'Reload to see changes'}</dd>
        </dl>
      </section>

      <section className="panel" aria-labelledby="wallets">
        <h2 id="wallets">Wallets</h2>
        {account.wallets.length === 0 ? (
          <p className="muted">No wallet linked yet.</p>
        ) : (
          <div className="table-scroll"><table>
            <thead><tr><th scope="col">Chain</th><th scope="col">Address</th><th scope="col">Proof</th><th scope="col">Linked</th><th scope="col"><span className="muted">Action</span></th></tr></thead>
            <tbody>
              {account.wallets.map((wallet) => (
                <tr key={wallet.id}>
                  <td data-testid="wallet-chain">{wallet.chain === 'evm' ? describeEvmChain(wallet.chainId) : `Solana (${wallet.cluster})`}</td>
                  <td className="mono" data-testid="wallet-address">{wallet.address}</td>
                  <td data-testid="wallet-kind">{PROOF_KIND_LABELS[wallet.kind]}</td>
                  <td>{formatTime(wallet.createdAt)}</td>
                  <td><UnlinkButton linkId={wallet.id} address={wallet.address} /></td>
                </tr>
              ))}
            </tbody>
          </table></div>
        )}
        <WalletLinker evmChainIds={evmChainIds} solanaClusters={solanaClusters} />
      </section>

      <section className="panel" aria-labelledby="entitlements">
        <h2 id="entitlements">Subscriptions</h2>
        {account.entitlements.length === 0 ? (
          <p className="muted">No subscription yet.</p>
        ) : (
          <div className="table-scroll"><table>
            <thead><tr><th scope="col">Entitlement</th><th scope="col">Access</th><th scope="col">Until</th><th scope="col">Renews</th></tr></thead>
            <tbody>
              {account.entitlements.map((entitlement) => {
                const status = describeEntitlementStatus(entitlement.status);
                return (
                <tr key={entitlement.id}>
                  <td>{entitlement.id}<div className="muted">{entitlement.productId}</div></td>
                  <td data-testid="entitlement-access">
                    <span className={entitlement.active ? 'badge ok' : 'badge warn'}>{entitlement.active ? 'active' : 'inactive'}</span>
                    {status && <>{' '}<span className="muted">{status}</span></>}
                  </td>
                  <td>{accessUntil(entitlement)}</td>
                  <td>{entitlement.active && entitlement.willRenew ? 'yes' : 'no'}</td>
                </tr>
                );
              })}
            </tbody>
          </table></div>
        )}
        {canRefreshPurchases && <RefreshPurchasesButton />}
      </section>

      <section className="panel" aria-labelledby="leagues">
        <h2 id="leagues">Leagues</h2>
        {account.leagues.length === 0 ? (
          <p className="muted">No league yet.</p>
        ) : (
          <div className="table-scroll"><table>
            <thead><tr><th scope="col">League</th><th scope="col">Season</th><th scope="col">Status</th><th scope="col">Role</th></tr></thead>
            <tbody>
              {account.leagues.map((league) => (
                <tr key={`${league.source}:${league.externalId}`}>
                  <td>{league.name}<div className="muted">{league.source}</div></td>
                  <td>{league.sport.toUpperCase()} {league.season}</td>
                  <td>{league.status.replace(/_/g, ' ')}</td>
                  <td>{league.role}</td>
                </tr>
              ))}
            </tbody>
          </table></div>
        )}
      </section>
    </>
  );
}
