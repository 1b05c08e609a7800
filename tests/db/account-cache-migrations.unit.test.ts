import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

// What GET /api/me keeps between reads (supabase/schemas/07_account.sql) is what these functions
// build: account_cache's wallets and leagues (its triggers empty a row when the tables change) and
// account_entitlements_cache's entitlements (a read checks the rows they were built from). Neither
// sees a migration that changes the functions themselves: such a migration empties account_cache,
// and gives account_entitlements_format() a new number (a read then uses nothing kept before it).
const KEPT = [
  {
    table: 'account_cache',
    shapers: ['wallet_link_api_json', 'wallet_link_json', 'account_wallets', 'account_leagues', 'member_leagues'],
    /** What such a migration does: the table made, or emptied. */
    resets: /create table public\.account_cache\b|delete from public\.account_cache\b|truncate (table )?public\.account_cache\b/,
    /** The migration that made the table (earlier ones kept nothing of it). */
    first: '20261205164729_account_cache.sql',
  },
  {
    table: 'account_entitlements_cache',
    // (entitlement_owner_ids too is read by account_entitlements, but a read compares its answer.)
    shapers: ['account_entitlements', 'entitlement_sources', 'account_entitlements_keep'],
    resets: /create table public\.account_entitlements_cache\b|function public\.account_entitlements_format\s*\(/,
    first: '20261206111438_account_entitlements_kept.sql',
  },
];
const MIGRATIONS = path.join('supabase', 'migrations');

/** The functions a migration (re)defines that shape what `kept.table` holds, when it does not reset it. */
export function shapesWithoutEmptying(sql: string, kept: (typeof KEPT)[number] = KEPT[0]!): string[] {
  const text = sql.toLowerCase().replaceAll('"', '')
    // How a function's statements are planned never changes what it answers.
    .replace(/alter function [^;]*\bset plan_cache_mode\s*(=|to)\s*\w+\s*;/g, '');
  if (kept.resets.test(text)) return [];
  return kept.shapers.filter((name) => new RegExp(`function public\\.${name}\\s*\\(`).test(text));
}

describe('migrations and the kept account', () => {
  it.each(KEPT)('each migration that changes what GET /api/me keeps in $table resets it', (kept) => {
    const files = readdirSync(MIGRATIONS).filter((file) => file.endsWith('.sql') && file >= kept.first).sort();
    expect(files[0]).toBe(kept.first);
    const offenders = files.map((file) => ({ file, shapes: shapesWithoutEmptying(readFileSync(path.join(MIGRATIONS, file), 'utf8'), kept) }))
      .filter((entry) => entry.shapes.length > 0);
    expect(offenders).toEqual([]);
  });

  it('tells such a migration apart', () => {
    const change = 'CREATE OR REPLACE FUNCTION "public"."account_leagues"(p_user_id uuid) RETURNS jsonb AS $$ select 1 $$;';
    expect(shapesWithoutEmptying(change)).toEqual(['account_leagues']);
    expect(shapesWithoutEmptying(`${change}\ndelete from public.account_cache;`)).toEqual([]);
    expect(shapesWithoutEmptying('create or replace function public.wallet_link_json(l public.wallet_links) returns jsonb')).toEqual(['wallet_link_json']);
    expect(shapesWithoutEmptying('create or replace function public.account_entitlements(p text) returns jsonb')).toEqual([]);
    const entitlements = KEPT[1]!;
    expect(shapesWithoutEmptying('create or replace function public.account_entitlements(p text) returns jsonb', entitlements)).toEqual(['account_entitlements']);
    const sources = 'create or replace function public.entitlement_sources(p text[]) returns jsonb;';
    expect(shapesWithoutEmptying(`${sources}\ncreate or replace function public.account_entitlements_format() returns integer as $$ select 2 $$;`, entitlements)).toEqual([]);
    expect(shapesWithoutEmptying('alter function public.entitlement_sources(text[], timestamptz) set plan_cache_mode = force_generic_plan;', entitlements)).toEqual([]);
    expect(shapesWithoutEmptying('alter function public.entitlement_sources(text[], timestamptz) set datestyle = \'SQL\';', entitlements)).toEqual(['entitlement_sources']);
    // Emptying the table is not enough: a read under way while the migration runs would keep what it built before.
    expect(shapesWithoutEmptying(`${sources}\ndelete from public.account_entitlements_cache;`, entitlements)).toEqual(['entitlement_sources']);
  });
});
