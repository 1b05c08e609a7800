'use client';

import { createClient, type SupabaseClient } from '@supabase/supabase-js';

export interface SupabaseBrowserSettings {
  url: string;
  publishableKey: string;
}

let client: { key: string; supabase: SupabaseClient } | undefined;

/**
 * The page's one supabase-js client (one GoTrueClient per page, as supabase-js expects: two on
 * the same storage key race each other). It keeps the Auth session, refresh token included, in
 * localStorage; the server only ever holds the access token, in the httpOnly cookie.
 */
export function browserSupabase({ url, publishableKey }: SupabaseBrowserSettings): SupabaseClient {
  const key = `${url} ${publishableKey}`;
  if (client?.key !== key) client = { key, supabase: createClient(url, publishableKey) };
  return client.supabase;
}
