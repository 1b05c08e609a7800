import { createClient } from '@supabase/supabase-js';
import type { DatabaseAdapter } from './adapter.ts';
import { DbError, kindOfSqlState } from './errors.ts';

/**
 * Supabase through its Data API: `rpc()` calls `POST /rest/v1/rpc/<fn>` with the secret key, so
 * this runs on the server only. There is no multi-statement transaction here, which is why every
 * atomic write is one SQL function. Migrations are applied with `supabase db push`.
 */
export function openSupabase(options: { url: string; secretKey: string }): DatabaseAdapter {
  const client = createClient(options.url, options.secretKey, {
    auth: { persistSession: false, autoRefreshToken: false, detectSessionInUrl: false },
  });
  return {
    mode: 'supabase',
    async call(fn, args) {
      const { data, error, status } = await client.rpc(fn, args);
      if (!error) return data ?? null;
      const code = error.code ?? '';
      const kind = /^[0-9A-Z]{5}$/.test(code) ? kindOfSqlState(code) : undefined;
      if (kind) throw new DbError(kind, error.message, { detail: error.details ?? undefined, sqlState: code });
      // status 0 is a network failure; 5xx is PostgREST or the database in trouble: retryable.
      if (status === 0 || status >= 500) throw new DbError('unavailable', error.message, { sqlState: code || undefined });
      throw new Error(`Supabase rpc ${fn} failed (${status} ${code}): ${error.message}`);
    },
    async close() {},
  };
}
