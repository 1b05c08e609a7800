import { randomUUID } from 'node:crypto';
import { createClient, type SupabaseClient } from '@supabase/supabase-js';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { supabaseAccountChannel, type AccountChange } from '../../packages/client/src/live.ts';
import { startFakeSupabaseAuth, type FakeSupabaseAuth } from '../support/fake-supabase-auth.ts';

/**
 * The Supabase Realtime channel of the typed client (packages/client/src/live.ts) with the real supabase-js
 * against a stand-in Realtime speaking its wire format (Phoenix over a WebSocket) that applies the
 * same policy as the database: a user receives their own private topic `user:<id>` and no other.
 * The channel joins that topic as a private channel with the user's token, hears `account_changed`
 * and nothing else, and is refused another user's topic.
 */
let supabase: FakeSupabaseAuth;
beforeAll(async () => {
  supabase = await startFakeSupabaseAuth();
});
afterAll(async () => {
  await supabase.close();
});

/** A supabase-js client for the stand-in, as an app makes one (publishable key, no stored session). */
function appClient(): SupabaseClient {
  const client = createClient(supabase.url, supabase.apiKey, { auth: { persistSession: false, autoRefreshToken: false } });
  onTestFinished(async () => {
    await client.removeAllChannels();
    client.realtime.disconnect();
  });
  return client;
}

function listen(client: SupabaseClient, userId: string, token: string) {
  const heard = { connected: 0, disconnected: [] as unknown[], changes: [] as AccountChange[] };
  const stop = supabaseAccountChannel(client, { userId, accessToken: async () => token }).subscribe({
    onConnected: () => heard.connected++,
    onChange: (change) => heard.changes.push(change),
    onDisconnected: (reason) => heard.disconnected.push(reason),
  });
  return { heard, stop };
}

describe('the Supabase Realtime account channel', () => {
  it("joins the user's private topic with their token and hears account_changed there, and nothing else", async () => {
    const ana = randomUUID();
    const bo = randomUUID();
    const { heard, stop } = listen(appClient(), ana, await supabase.mint({ userId: ana }));
    await expect.poll(() => heard.connected).toBe(1);
    expect(supabase.realtime.joins.filter((join) => join.userId === ana)).toEqual([{ topic: `user:${ana}`, private: true, userId: ana, allowed: true }]);
    expect(supabase.realtime.connections.at(-1)).toEqual({ apikey: supabase.apiKey, vsn: '2.0.0' });

    // What the database sends: realtime.send('{"what":…}', 'account_changed', 'user:<id>', true).
    expect(supabase.realtime.send(`user:${ana}`, 'account_changed', { what: 'entitlements', at: '2026-01-01T00:00:00.000Z' })).toBe(1);
    expect(supabase.realtime.send(`user:${ana}`, 'something_else', { what: 'wallets', at: '2026-01-01T00:00:01.000Z' })).toBe(1);
    expect(supabase.realtime.send(`user:${bo}`, 'account_changed', { what: 'wallets', at: '2026-01-01T00:00:02.000Z' })).toBe(0);
    expect(supabase.realtime.send(`user:${ana}`, 'account_changed', { what: 'leagues', at: '2026-01-01T00:00:03.000Z' })).toBe(1);
    await expect.poll(() => heard.changes.length).toBe(2);
    expect(heard.changes).toEqual([{ what: 'entitlements', at: '2026-01-01T00:00:00.000Z' }, { what: 'leagues', at: '2026-01-01T00:00:03.000Z' }]);

    stop();
    await expect.poll(() => supabase.realtime.subscribers(`user:${ana}`)).toBe(0);
    expect(heard.disconnected).toEqual([]); // its own leaving is not a failure to report
  });

  it("is refused another user's topic: never connected, told why", async () => {
    const ana = randomUUID();
    const mallory = randomUUID();
    const { heard } = listen(appClient(), ana, await supabase.mint({ userId: mallory }));
    await expect.poll(() => heard.disconnected.length).toBeGreaterThan(0);
    expect(heard.connected).toBe(0);
    expect(supabase.realtime.joins.filter((join) => join.topic === `user:${ana}`)).toEqual([{ topic: `user:${ana}`, private: true, userId: mallory, allowed: false }]);
    expect(supabase.realtime.send(`user:${ana}`, 'account_changed', { what: 'entitlements', at: '2026-01-01T00:00:00.000Z' })).toBe(0);
  });

  it('passes on a kind of change it does not know yet, and a payload it cannot read, as changes', async () => {
    const ana = randomUUID();
    const { heard } = listen(appClient(), ana, await supabase.mint({ userId: ana }));
    await expect.poll(() => heard.connected).toBe(1);
    supabase.realtime.send(`user:${ana}`, 'account_changed', { what: 'profile', at: '2026-01-01T00:00:00.000Z' });
    supabase.realtime.send(`user:${ana}`, 'account_changed', 'not an object');
    await expect.poll(() => heard.changes.length).toBe(2);
    expect(heard.changes[0]).toEqual({ what: 'profile', at: '2026-01-01T00:00:00.000Z' });
    expect(heard.changes[1]).toMatchObject({ what: 'unknown' });
  });
});
