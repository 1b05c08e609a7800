import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { recordRenewal, renewalBody, SUBSCRIBERS } from '../../scripts/bench/sql-profile.ts';
import { describeOn, suiteDatabase } from '../support/databases.ts';
import { autoExplainOptions, parseAutoExplainNotice } from '../support/query-plans.ts';

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

    // PL/pgSQL keeps a statement's plan for the session only once Postgres trusts its generic plan
    // (from the sixth call); a statement whose generic plan it judges dearer than planning for the
    // call's values is planned again on every call (an array of ids, typically: it guesses ten). A
    // plan made for the call's values shows them; a generic plan shows only parameters. So no plan
    // of a warm connection's webhook, account read or delivery may show the user's or endpoint's id.
    it('plan each statement once per connection: a warm renewal with events on, a first purchase, an account read and the events\' delivery show no call\'s values in their plans', async () => {
      const endpoint = 'endpoint-of-the-plans-test';
      await db.sql(`select public.outbound_set_endpoints($1::jsonb)`, [JSON.stringify([{ id: endpoint, types: null }])]);
      const OTHER_SUBSCRIBERS = Number(process.env.PLANS_SUBSCRIBERS ?? 300);
      const start = Date.now();
      // Subscriber 0 (a Supabase user's id): its purchase, then renewals in order, one connection.
      const bodies = [0, 1, 2, 3, 4, 5, 6, 7, 8].map((n) => renewalBody(n * SUBSCRIBERS, start, true));
      const userId = bodies[0]!.event.app_user_id;
      const newcomer = renewalBody(OTHER_SUBSCRIBERS, start, true);
      const client = new pg.Client({ connectionString: db.url, options: autoExplainOptions({ 'auto_explain.log_min_duration': '-1' }) });
      const plans: { query: string; plan: string }[] = [];
      client.on('notice', (notice) => {
        const parsed = parseAutoExplainNotice(notice.message ?? '');
        if (parsed) plans.push({ query: parsed.query, plan: JSON.stringify(parsed.plan) });
      });
      await client.connect();
      try {
        // (The account is read afresh each time: what it keeps would answer without the query.)
        const forgetAccount = () => client.query('delete from public.account_cache where user_id = $1', [userId]);
        for (const [index, body] of bodies.entries()) {
          await forgetAccount();
          if (index === bodies.length - 1) await client.query('set auto_explain.log_min_duration = 0');
          await recordRenewal(client, body);
          await client.query('select public.get_account_json($1, now())', [userId]);
          // The events' delivery: what is due claimed, and settled as delivered.
          const claimed = (await client.query<{ claimed: { event_id: string }[] }>('select public.outbound_claim($1, 50, 30) as claimed', [endpoint])).rows[0]!.claimed;
          await client.query('select public.outbound_settle($1, $2::jsonb)', [endpoint, JSON.stringify(claimed.map((event) => ({ event_id: event.event_id, outcome: 'delivered' })))]);
          if (index === bodies.length - 1) {
            // And a new customer's first purchase, which the whole fold takes.
            await recordRenewal(client, newcomer);
          }
          if (index === 0) {
            // Other subscribers, and the statistics autovacuum leaves: which plans Postgres distrusts
            // depends on them (sql-profile.ts found two statements with them, one without).
            for (let other = 1; other < OTHER_SUBSCRIBERS; other++) await recordRenewal(client, renewalBody(other, start, true));
            await client.query('analyze');
          }
        }
      } finally {
        await client.end();
      }
      // The workload ran what it is about: the outbox's reconcile read the user's entitlements.
      expect(plans.some((p) => p.query.includes('row_number() over (partition by e.entitlement_id'))).toBe(true);
      expect(plans.some((p) => p.query.includes('outbound_told_entitlements'))).toBe(true);
      expect(plans.some((p) => p.query.includes('outbound_deliveries'))).toBe(true);
      expect((await db.sql<{ delivered: number }>(`select count(*)::int as delivered from public.outbound_deliveries where state = 'delivered'`))[0]!.delivered).toBeGreaterThan(8);
      // The values the logged calls carry: the users', the endpoint's, and the events' own ids.
      const values = [userId, newcomer.event.app_user_id, endpoint, bodies.at(-1)!.event.id, newcomer.event.id, bodies.at(-1)!.event.transaction_id, newcomer.event.transaction_id];
      const planned = plans.filter((p) => values.some((value) => p.plan.includes(value))).map((p) => p.query.slice(0, 160));
      expect(planned).toEqual([]);
    });
  });
  describeOn('pglite')('on the embedded database', () => {
    const db = suiteDatabase('pglite');

    // PGlite never analyzes, and a connection keeps the plans its first calls made: made on empty
    // tables, they read them whole once they have grown. The embedded database drops its plans
    // after 1,000 requests, then 2,000 more, and so on (lib/db/pglite.ts), so they are made again
    // with the tables as they are. Seen in the table's scan counts, not in time.
    it('plan again as the tables grow: an account read uses the entitlements\' index once they hold many rows', async () => {
      const user = randomUUID();
      const readAccount = () => db.adapter.call('get_account_json', { p_user_id: user, p_now: new Date().toISOString() });
      for (let i = 0; i < 8; i++) await readAccount(); // the plans made, the table empty
      await db.sql(`insert into public.entitlements (app_user_id, entitlement_id, product_id, source_key, status, will_renew, expires_at, last_event_id, last_event_at)
        select 'grown-' || g, 'pro', 'pro_monthly', 'key-' || g, 'active', true, now() + interval '30 days', 'event-' || g, now() from generate_series(1, 20000) g`);
      const scans = async () => {
        await db.sql('select pg_stat_force_next_flush()');
        await db.sql('select 1'); // (the counts are written as a statement ends)
        const [row] = await db.sql<{ seq: number; idx: number }>("select seq_scan::int as seq, idx_scan::int as idx from pg_stat_user_tables where relname = 'entitlements'");
        return row!;
      };
      for (let i = 0; i < 1000; i++) await readAccount();
      const before = await scans();
      for (let i = 0; i < 20; i++) await readAccount();
      const after = await scans();
      expect({ wholeReads: after.seq - before.seq, indexReads: after.idx - before.idx > 0 }).toEqual({ wholeReads: 0, indexReads: true });
    }, 120_000);
  });
});
