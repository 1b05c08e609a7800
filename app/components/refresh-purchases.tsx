'use client';

import { useState } from 'react';
import { useAccount } from '#client/react';
import { walletErrorMessage } from './api-client.ts';

/**
 * "Refresh purchases" (POST /api/me/billing/sync, useAccount's syncPurchases): right after buying
 * in the app, or when the page disagrees with the store, fetch the caller's record from RevenueCat
 * and show it. Shown only when the service has a RevenueCat secret key.
 */
export function RefreshPurchasesButton() {
  const { syncPurchases } = useAccount();
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);

  async function refresh() {
    setBusy(true);
    setError(null);
    setNotice(null);
    try {
      const { entitlements } = await syncPurchases();
      const active = entitlements.filter((entitlement) => entitlement.active).length;
      setNotice(`Purchases refreshed from the store: ${active === 0 ? 'no active subscription' : active === 1 ? '1 active subscription' : `${active} active subscriptions`}.`);
    } catch (e) {
      setError(walletErrorMessage(e));
    } finally {
      setBusy(false);
    }
  }

  return (
    <div>
      <div className="row">
        <button type="button" onClick={refresh} disabled={busy}>Refresh purchases</button>
      </div>
      {busy && <p className="muted" aria-live="polite">Asking the store…</p>}
      {error && <p role="alert">{error}</p>}
      {notice && <p role="status">{notice}</p>}
    </div>
  );
}
