import { describe, expect, it } from 'vitest';
import { migrationFileName, returnTypeDrops } from '../../scripts/db-diff.ts';

describe('npm run db:diff', () => {
  it('drops a function first where its return type changed (CREATE OR REPLACE cannot), and no other', () => {
    const migrated = new Map([['public.get_account(p_user_id uuid)', 'jsonb'], ['public.same(p integer)', 'text'], ['public.gone()', 'void']]);
    const declared = new Map([['public.get_account(p_user_id uuid)', 'text'], ['public.same(p integer)', 'text'], ['public.added()', 'void']]);
    expect(returnTypeDrops(migrated, declared)).toEqual([
      '-- Returns text where it returned jsonb: Postgres changes that only by a drop.\ndrop function public.get_account(p_user_id uuid);',
    ]);
  });

  it('names a migration by the time in UTC, as supabase migration new does', () => {
    expect(migrationFileName('account_cache', new Date('2026-12-05T16:05:01Z'))).toBe('20261205160501_account_cache.sql');
  });
});
