import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

// GET /api/me's kept wallets and leagues (account_cache, supabase/schemas/07_account.sql) are the
// JSON these functions build: their triggers empty a row when the tables change, but nothing sees a
// migration that changes the functions themselves. Such a migration empties the kept rows.
const SHAPERS = ['wallet_link_api_json', 'wallet_link_json', 'account_wallets', 'account_leagues', 'member_leagues'];
const MIGRATIONS = path.join('supabase', 'migrations');
/** The migration that made account_cache (earlier ones kept no wallets, or nothing). */
const FIRST = '20261205164729_account_cache.sql';

/** The functions of SHAPERS a migration (re)defines, when it neither makes account_cache nor empties it. */
export function shapesWithoutEmptying(sql: string): string[] {
  const text = sql.toLowerCase().replaceAll('"', '');
  if (/create table public\.account_cache\b|delete from public\.account_cache\b|truncate (table )?public\.account_cache\b/.test(text)) return [];
  return SHAPERS.filter((name) => new RegExp(`function public\\.${name}\\s*\\(`).test(text));
}

describe('migrations and the kept account', () => {
  it('each migration that changes what GET /api/me keeps empties account_cache', () => {
    const files = readdirSync(MIGRATIONS).filter((file) => file.endsWith('.sql') && file >= FIRST).sort();
    expect(files[0]).toBe(FIRST);
    const offenders = files.map((file) => ({ file, shapes: shapesWithoutEmptying(readFileSync(path.join(MIGRATIONS, file), 'utf8')) }))
      .filter((entry) => entry.shapes.length > 0);
    expect(offenders).toEqual([]);
  });

  it('tells such a migration apart', () => {
    const change = 'CREATE OR REPLACE FUNCTION "public"."account_leagues"(p_user_id uuid) RETURNS jsonb AS $$ select 1 $$;';
    expect(shapesWithoutEmptying(change)).toEqual(['account_leagues']);
    expect(shapesWithoutEmptying(`${change}\ndelete from public.account_cache;`)).toEqual([]);
    expect(shapesWithoutEmptying('create or replace function public.wallet_link_json(l public.wallet_links) returns jsonb')).toEqual(['wallet_link_json']);
    expect(shapesWithoutEmptying('create or replace function public.account_entitlements(p text) returns jsonb')).toEqual([]);
  });
});
