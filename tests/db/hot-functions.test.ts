import { describe, expect, it } from 'vitest';
import { describeOn, suiteDatabase } from '../support/databases.ts';

/**
 * The convention of supabase/schemas/01_foundation.sql, held: every function a billing webhook or
 * GET /api/me reaches is PL/pgSQL. Postgres 17 and 15, which Supabase runs (and PGlite, which is
 * 17), plan a LANGUAGE sql function's query on every call, where PL/pgSQL keeps its plans for the
 * session; the bench runs 18, which keeps both, so a SQL function slipped into the hot path would
 * not show there. (Fifteen had: among them the erased-id check of every billing event, 18% of a
 * renewal's Postgres CPU on 17.)
 *
 * What is reached: the functions the service calls for those requests and every trigger function
 * (the writes fire them: the outbox's reconcile, the live updates), then every `public.<name>(`
 * their bodies call, and so on.
 */
const HOT_ROOTS = ['record_billing_event', 'record_billing_events', 'get_account_json'];

describe('the functions a webhook or an account read reaches', () => {
  describeOn('postgres')('on postgres', () => {
    const db = suiteDatabase('postgres');

    it('are PL/pgSQL, all of them', async () => {
      const rows = await db.sql<{ name: string; language: string; body: string; trigger: boolean; constant: boolean }>(`
        select p.proname as name, l.lanname as language, p.prosrc as body, p.prorettype = 'trigger'::regtype as trigger,
          p.provolatile = 'i' and p.pronargs = 0 as constant
        from pg_proc p join pg_namespace n on n.oid = p.pronamespace join pg_language l on l.oid = p.prolang
        where n.nspname = 'public'`);
      const byName = new Map<string, typeof rows>();
      for (const row of rows) byName.set(row.name, [...(byName.get(row.name) ?? []), row]);
      expect(HOT_ROOTS.filter((root) => !byName.has(root))).toEqual([]);

      const reached = new Set<string>();
      const next = [...HOT_ROOTS, ...rows.filter((row) => row.trigger).map((row) => row.name)];
      while (next.length > 0) {
        const name = next.pop()!;
        if (reached.has(name) || !byName.has(name)) continue;
        reached.add(name);
        for (const { body } of byName.get(name)!) {
          for (const [, called] of body.matchAll(/\bpublic\.(\w+)\s*\(/g)) next.push(called!);
        }
      }
      // A sanity check that the walk follows calls: the fold and the outbox's reconcile are reached.
      expect([...reached]).toEqual(expect.arrayContaining(['billing_fold_in_order', 'billing_event_names_erased', 'account_entitlements', 'outbound_emit']));
      // An immutable function without arguments (a constant: user_id_pattern()) is evaluated once,
      // as its caller's plan is made, and never again: SQL is fine there.
      const notPlpgsql = [...reached].filter((name) => byName.get(name)!.some((fn) => fn.language !== 'plpgsql' && !fn.constant));
      expect(notPlpgsql).toEqual([]);
    });
  });
});
