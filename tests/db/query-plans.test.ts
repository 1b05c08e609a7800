import { randomUUID } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { getAccount } from '../../lib/account.ts';
import { maintainBilling } from '../../lib/billing/maintenance.ts';
import { recordBillingEvent } from '../../lib/billing/record-event.ts';
import { describeSnapshot } from '../../lib/billing/snapshot.ts';
import { billingWebhookBodySchema } from '../../lib/billing/webhook-body.ts';
import { callDb, closeDatabase, replaceDatabase } from '../../lib/db/index.ts';
import { openPostgres } from '../../lib/db/postgres.ts';
import { leaguesSyncBodySchema } from '../../lib/leagues/sync-schema.ts';
import { applyLeaguesSync } from '../../lib/leagues/sync.ts';
import { MAINTENANCE_CALL_BUDGET_MS, runMaintenance } from '../../lib/maintenance.ts';
import { subscriberResponseSchema } from '../../lib/revenuecat/subscriber.ts';
import { parseChallengeRequest, parseLinkRequest } from '../../lib/wallets/schemas.ts';
import { issueChallenge, linkWallet, listWalletLinks, unlinkWallet } from '../../lib/wallets/service.ts';
import { seedScale, seededSubscribers, validateSeed, type ScaleSizes, type SeededSubscriber } from '../../scripts/bench/seed-scale.ts';
import { fixture } from '../billing/fixtures.ts';
import { describeOn, openTestDatabase, type TestDatabase } from '../support/databases.ts';
import { REALTIME_SQL } from '../../scripts/support/supabase-realtime.ts';
import { v1Entitlement, v1Subscription } from '../../scripts/support/fake-revenuecat.ts';
import {
  autoExplainOptions, distinctPlans, findSequentialScans, parseAutoExplainNotice, relationSizes, wholeReads,
  type CapturedPlan, type PlanNode, type RelationSize,
} from '../support/query-plans.ts';
import { evmWallet } from '../wallets/wallets.ts';

/**
 * Flat cost as the tables grow (issue 15): on the real Postgres server, a database seeded in SQL
 * with the bench's shape at a tenth of its volume (scripts/bench/seed-scale.ts: RevenueCat histories
 * over 13 months, wallets, leagues), then every statement that the service's SQL functions run
 * for a webhook, GET /api/me, the wallet routes, a leagues delivery, a sync from RevenueCat,
 * maintenance and a user's deletion, driven through the service's own code, with each statement's
 * plan captured by auto_explain: none may read a big table whole. Twice: with the plans Postgres
 * makes for each call's values, and with the generic plans a long-lived pooled connection may
 * switch to after five calls. The plans are printed and attached (test-results/query-plans.md).
 */

/** QUERY_PLANS_SCALE=10 checks at the bench's full volume (1M events; seeding takes a few minutes). */
const SCALE = Number(process.env.QUERY_PLANS_SCALE ?? 1);
const SIZES: ScaleSizes = {
  billingEvents: 100_000 * SCALE, subscribers: 30_000 * SCALE, walletLinks: 20_000 * SCALE, leagues: 2_000 * SCALE, membersPerLeague: 12,
  // Tables retention keeps short, seeded as a busier service's (a few thousand rows are read whole
  // at no cost, and the planner rightly does; the check is about the tables that grow).
  walletChallenges: 20_000 * SCALE, leagueDeliveries: 40_000 * SCALE,
};
/** Tables that grow with traffic (a partition counts as its table). */
const BIG_TABLES = [
  'billing_events', 'billing_event_ids', 'billing_subscribers', 'entitlements', 'billing_sync_queue',
  'wallet_links', 'wallet_challenges', 'leagues', 'league_members', 'league_sync_deliveries',
] as const;
/** Below this, reading a relation whole is as cheap as any lookup (and the planner says so). */
const MIN_ROWS = 1_000;
const DAY = 86_400_000;
const WALLET_CONFIG = { wallet: { evmChainIds: [1, 8453], solanaClusters: ['mainnet'], evmRpcUrls: new Map<number, string>() } };

type PlanMode = 'force_custom_plan' | 'force_generic_plan';

/** The SQL functions of the service the workload must call (directly, or from one another). */
const DRIVEN = [
  'record_billing_event', 'billing_log_and_fold', 'billing_lock_group', 'billing_apply_event', 'billing_group_state', 'billing_refold_group',
  'billing_take_checkpoint', 'billing_checkpoint_tail', 'billing_log_event', 'billing_mark_sync', 'record_billing_snapshot', 'billing_subscriber_known', 'billing_sync_begin', 'billing_sync_failed',
  'billing_sync_found_nothing', 'billing_sync_claim', 'wallet_issue_challenge', 'wallet_link', 'wallet_start_contract_check', 'wallet_refund_contract_check', 'account_wallets',
  'wallet_unlink', 'apply_leagues_sync', 'get_account_json', 'account_entitlements', 'account_leagues', 'run_maintenance', 'wallets_maintain',
  'leagues_maintain', 'billing_sync_maintain', 'billing_maintain', 'billing_ensure_partitions', 'forget_user', 'wallets_forget_user',
  'leagues_forget_user', 'billing_forget_user', 'billing_events_page', 'billing_events_by_id', 'billing_rebuild_group', 'billing_store_plans',
  'billing_group_rows', 'billing_events_without_plan', 'billing_subscribers_page', 'billing_subscribers_count', 'billing_sync_run_place',
  'can_broadcast', 'send_account_changed', 'account_rows_broadcast', 'leagues_broadcast',
];

describeOn('postgres')('query plans at scale on postgres', () => {
  let db: TestDatabase;
  let sizes: Map<string, RelationSize>;
  let seeded: SeededSubscriber[];
  let checkpointed: SeededSubscriber[];
  const captured: CapturedPlan[] = [];

  beforeAll(async () => {
    db = await openTestDatabase('postgres');
    await seedScale(db.url!, SIZES, { parallel: 2 });
    sizes = await relationSizes((text) => db.sql(text));
    seeded = await seededSubscribers((text, values) => db.sql(text, values), 40, 's.base_key is null');
    checkpointed = await seededSubscribers((text, values) => db.sql(text, values), 4, 's.base_key is not null');
    // Supabase Realtime's schema, as on Supabase (made after the seed, which is not a workload): the
    // broadcasts' statements run in every write below and are checked like the rest.
    await db.sql(REALTIME_SQL);
  }, 180_000 * SCALE);
  afterAll(async () => {
    await closeDatabase();
    await db?.close();
  });

  it('seeds histories the service would have written: stored plans are what it computes, and folding them again gives the stored rows', async () => {
    const validation = await validateSeed(db.url!, { plansPerType: 10, groups: 60 });
    expect(validation.mismatches).toEqual([]);
    expect(validation.plansChecked).toBeGreaterThanOrEqual(60);
    // Every table the check speaks of is big enough for the planner to choose.
    const big = [...sizes.values()].filter((size) => BIG_TABLES.includes(size.table as never) && size.rows >= MIN_ROWS);
    // (The sync queue holds 2% of the subscribers: big only at the bench's volume.)
    const bigTables = new Set(big.map((size) => size.table));
    expect(BIG_TABLES.filter((table) => table !== 'billing_sync_queue' && !bigTables.has(table))).toEqual([]);
  });

  it.for<PlanMode>(['force_custom_plan', 'force_generic_plan'])('every statement of the SQL functions reads big tables through an index (%s)', { timeout: 120_000 }, async (mode, { annotate }) => {
    const { plans, calls } = await captureWorkload(db, mode, mode === 'force_custom_plan' ? 0 : 1);
    captured.push(...plans);
    await annotate(`${distinctPlans(plans).length} distinct statements (${plans.length} run)`, { contentType: 'text/markdown', body: planReport(plans, `${mode}`) });
    const violations = findSequentialScans(plans, sizes, { bigTables: BIG_TABLES, minRows: MIN_ROWS, allowed: onPurpose });
    expect(violations.map((v) => `${v.step}: reads ${v.relations.join(', ')} whole\n  ${v.query}\n${v.outline.split('\n').slice(0, 12).join('\n')}`)).toEqual([]);
    // Every function was driven (pg_stat_user_functions): a step that ran nothing would prove nothing.
    expect(DRIVEN.filter((fn) => !calls.get(fn))).toEqual([]);
  });

  it('fails a plan that reads a big table whole: without its index, GET /api/me scans league_members', async () => {
    const [user] = await db.sql<{ app_user_id: string }>('select app_user_id from public.league_members where app_user_id is not null limit 1');
    const client = new pg.Client({ connectionString: db.url, options: autoExplainOptions() });
    await client.connect();
    const plans: CapturedPlan[] = [];
    client.on('notice', (notice) => {
      const parsed = parseAutoExplainNotice(notice.message ?? '');
      if (parsed) plans.push({ step: 'get_account_json without league_members_app_user_id_idx', ...parsed });
    });
    try {
      await client.query('begin');
      await client.query('drop index public.league_members_app_user_id_idx');
      // (Built afresh: the workload above read this user's leagues into the cache.)
      await client.query('delete from public.account_cache where user_id = $1', [user!.app_user_id]);
      await client.query('select public.get_account_json($1, now())', [user!.app_user_id]);
      await client.query('rollback');
    } finally {
      await client.end();
    }
    const violations = findSequentialScans(plans, sizes, { bigTables: BIG_TABLES, minRows: MIN_ROWS });
    expect(violations.map((v) => v.relations.join())).toEqual([expect.stringContaining('league_members')]);
    // And the checker itself, on a hand-written plan: reading a small or unlisted table whole is
    // fine, and so is walking a whole index when a Limit stops it, or when the index is partial
    // and covers few rows.
    const plan: PlanNode = { 'Node Type': 'Nested Loop', Plans: [
      { 'Node Type': 'Seq Scan', 'Relation Name': 'billing_sync_rate' },
      { 'Node Type': 'Index Scan', 'Relation Name': 'entitlements', 'Index Name': 'entitlements_pkey', 'Index Cond': '(app_user_id = $1)' },
      { 'Node Type': 'Limit', Plans: [{ 'Node Type': 'Index Scan', 'Relation Name': 'wallet_challenges', 'Index Name': 'wallet_challenges_expires' }] },
      { 'Node Type': 'Index Scan', 'Relation Name': 'billing_subscribers', 'Index Name': 'billing_subscribers_customer_idx' },
      { 'Node Type': 'Index Only Scan', 'Relation Name': 'billing_subscribers', 'Index Name': 'billing_subscribers_pkey' },
      { 'Node Type': 'Seq Scan', 'Relation Name': 'wallet_links' },
    ] };
    expect(wholeReads(plan).map((read) => read.index ?? read.relation)).toEqual(['billing_sync_rate', 'billing_subscribers_customer_idx', 'billing_subscribers_pkey', 'wallet_links']);
    expect(findSequentialScans([{ step: 'hand-made', query: 'q', plan }], sizes, { bigTables: BIG_TABLES, minRows: MIN_ROWS }).map((v) => v.relations))
      .toEqual([[expect.stringMatching(/^billing_subscribers \(every entry of billing_subscribers_pkey\)/), expect.stringMatching(/^wallet_links /)]]);
  });

  afterAll(() => {
    // The report: every distinct statement and its plan (both modes), for reading and for CI.
    if (captured.length === 0) return;
    mkdirSync('test-results', { recursive: true });
    writeFileSync('test-results/query-plans.md', planReport(captured, 'custom and generic plans'));
    console.log(`query plans: ${captured.length} statements run, ${distinctPlans(captured).length} distinct (statement, plan); report: test-results/query-plans.md`);
  });

  /** Every distinct statement with its plan, as Markdown. */
  function planReport(plans: CapturedPlan[], title: string): string {
    const big = [...sizes.entries()].filter(([, size]) => BIG_TABLES.includes(size.table as never) && size.rows >= MIN_ROWS)
      .map(([name, size]) => `${name} (${size.rows})`);
    const lines = [`# Plans of the SQL functions at ${SIZES.billingEvents} billing events (${title})`, '', `Big relations and indexes: ${big.join(', ')}`, ''];
    for (const plan of distinctPlans(plans)) {
      lines.push(`## ${plan.step}${plan.times > 1 ? ` (x${plan.times})` : ''}`, '', '```sql', plan.query, '```', '```', plan.outline, '```', '');
    }
    return lines.join('\n');
  }

  /**
   * Drive every SQL function through the service's code on one pooled connection that reports each
   * statement's plan. `pass` picks other seeded customers, so the two passes start from alike states.
   */
  async function captureWorkload(database: TestDatabase, mode: PlanMode, pass: number): Promise<{ plans: CapturedPlan[]; calls: Map<string, number> }> {
    const plans: CapturedPlan[] = [];
    let step = '';
    const settings = autoExplainOptions({ plan_cache_mode: mode, track_functions: 'all' });
    const adapter = await openPostgres({ connectionString: `${database.url!}?options=${encodeURIComponent(settings)}`, max: 1, migrate: false });
    adapter.pool.on('connect', (client) => {
      client.on('notice', (notice) => {
        const parsed = parseAutoExplainNotice(notice.message ?? '');
        if (parsed && step) plans.push({ step, ...parsed });
      });
    });
    replaceDatabase(adapter);
    const run = async <T>(label: string, work: () => Promise<T>): Promise<T> => {
      step = label;
      return work();
    };
    try {
      const now = new Date();
      const [inOrder, outOfOrder, transferred, legacy, snapshot, forgotten] = seeded.slice(pass * 6, pass * 6 + 6) as SeededSubscriber[];
      const old = checkpointed[pass]!;
      const options = { now, ignoreSandbox: false, syncAfter: 'gaps' as const };
      const event = (name: string, who: SeededSubscriber, at: number, fields: Record<string, unknown> = {}) => fixture(name, {
        id: randomUUID(), app_user_id: who.appUserId, original_app_user_id: who.anonymousId ?? who.appUserId,
        aliases: who.anonymousId ? [who.anonymousId, who.appUserId] : [who.appUserId],
        product_id: who.productId, store: who.store, entitlement_ids: who.entitlementIds, original_transaction_id: who.originalTransactionId,
        transaction_id: `${who.originalTransactionId}-${at}`, purchased_at_ms: at - 60_000, expiration_at_ms: at + 30 * DAY, event_timestamp_ms: at, ...fields,
      });

      // POST /api/webhooks/subscription-billing
      const newUser = randomUUID();
      const newAnonymous = `$RCAnonymousID:${randomUUID().replace(/-/g, '')}`;
      await run('billing: a new customer (with an anonymous id) buys', () => recordBillingEvent(fixture('initial-purchase', {
        id: randomUUID(), app_user_id: newUser, original_app_user_id: newAnonymous, aliases: [newAnonymous, newUser],
        purchased_at_ms: now.getTime() - 60_000, expiration_at_ms: now.getTime() + 30 * DAY, event_timestamp_ms: now.getTime(),
      }), options));
      const renewal = event('renewal', inOrder, now.getTime());
      await run('billing: a seeded customer renews (in order)', () => recordBillingEvent(renewal, options));
      await run('billing: the same renewal again (duplicate)', () => recordBillingEvent(renewal, options));
      await run('billing: an event older than the customer\'s last (folds the history again)', () =>
        recordBillingEvent(event('cancellation-unsubscribe', outOfOrder, Date.parse(outOfOrder.lastEventAt) - DAY), options));
      await run('billing: an out-of-order event after a checkpoint (folds again from it)', () =>
        recordBillingEvent(event('cancellation-unsubscribe', old, Date.parse(old.lastEventAt) - DAY), options));
      await run('billing: an event older than the kept history (marks a sync)', () =>
        recordBillingEvent(event('renewal', old, now.getTime() - 500 * DAY), options));
      await run('billing: a transfer to a new user (marks both sides)', () => recordBillingEvent(fixture('transfer', {
        id: randomUUID(), transferred_from: [transferred.appUserId], transferred_to: [randomUUID()], event_timestamp_ms: now.getTime(), store: transferred.store,
      }), options));
      const legacyId = randomUUID();
      await run('billing: a second real id of a customer (legacy aliasing: merges into it)', () =>
        recordBillingEvent(event('renewal', legacy, now.getTime(), { app_user_id: legacyId, original_app_user_id: legacy.appUserId, aliases: [legacy.appUserId, legacyId] }), options));
      await run('billing: a TEST event (recorded, ignored)', () => recordBillingEvent(fixture('test', { id: randomUUID() }), options));
      const contractShaped = { event: { type: 'INITIAL_PURCHASE', app_user_id: randomUUID(), product_id: inOrder.productId, entitlement_ids: inOrder.entitlementIds } };
      await run('billing: an event without an id (recognised by its content)', () => recordBillingEvent(billingWebhookBodySchema.parse(contractShaped), options));
      await run('billing: the same event without an id again (a redelivery)', () => recordBillingEvent(billingWebhookBodySchema.parse(contractShaped), options));
      // A customer whose tail reaches the bound: checkpointed on it, then a late event replays less.
      const busy = { ...inOrder, appUserId: randomUUID(), anonymousId: null, originalTransactionId: `busy-${randomUUID()}` };
      const bound = (await database.sql<{ n: number }>('select public.billing_tail_bound() as n'))[0]!.n;
      for (let i = 0; i < bound; i++) {
        await run('billing: a customer\'s events up to the tail bound (checkpointed on it)', () => recordBillingEvent(event('renewal', busy, now.getTime() - (bound - i) * 60_000), options));
      }
      await run('billing: a late event of a customer checkpointed on the tail bound', () =>
        recordBillingEvent(event('cancellation-unsubscribe', busy, now.getTime() - 30 * 60_000 - 1), options));

      // A sync from RevenueCat (lib/billing/sync.ts) and the sweep.
      await run('sync: known subscriber?', () => callDb('billing_subscriber_known', { p_app_user_id: snapshot.appUserId }));
      await run('sync: a user\'s refresh takes a slot', () => callDb('billing_sync_begin', { p_user_id: snapshot.appUserId, p_user_interval_seconds: 5, p_slot_ms: 100, p_max_wait_ms: 10_000 }));
      await run('sync: the sweep takes a slot', () => callDb('billing_sync_begin', { p_user_id: null, p_user_interval_seconds: 5, p_slot_ms: 100, p_max_wait_ms: 10_000 }));
      const response = subscriberResponseSchema.parse({
        request_date: now.toISOString(), request_date_ms: now.getTime(),
        subscriber: {
          entitlements: Object.fromEntries(snapshot.entitlementIds.map((id) => [id, v1Entitlement(snapshot.productId, { purchased: now.getTime() - DAY, expires: now.getTime() + 29 * DAY })])),
          subscriptions: { [snapshot.productId]: v1Subscription({ purchased: now.getTime() - DAY, expires: now.getTime() + 29 * DAY, store: snapshot.store.toLowerCase() }) },
          non_subscriptions: {}, original_app_user_id: snapshot.appUserId, first_seen: '2025-10-01T00:00:00Z', subscriber_attributes: {},
        },
      });
      await run('sync: a snapshot of RevenueCat\'s record folds in', () => callDb('record_billing_snapshot', {
        p_body: response, p_plan: describeSnapshot(response, snapshot.appUserId, { eventId: `sync:${randomUUID()}` }), p_fetch_started_at: now,
      }));
      const later = { ...response, request_date: new Date(now.getTime() + 1000).toISOString(), request_date_ms: now.getTime() + 1000 };
      await run('sync: the same record again (confirms the last snapshot)', () => callDb('record_billing_snapshot', {
        p_body: later, p_plan: describeSnapshot(later, snapshot.appUserId, { eventId: `sync:${randomUUID()}` }), p_fetch_started_at: now,
      }));
      await run('sync: RevenueCat had nothing', () => callDb('billing_sync_found_nothing', { p_app_user_id: newUser, p_fetch_started_at: now }));
      await run('sync: a failed sync backs off', () => callDb('billing_sync_failed', { p_app_user_id: transferred.appUserId, p_reason: 'sweep', p_error: 'RevenueCat answered 500', p_retry_after_seconds: null }));
      await run('sync: the sweep claims due marks', () => callDb('billing_sync_claim', { p_limit: 50, p_lease_seconds: 80 }));

      // The wallet routes, for a seeded user who plays in leagues and subscribes.
      const [member] = await database.sql<{ user_id: string }>(`
        select m.app_user_id::text as user_id from public.league_members m
        where exists (select 1 from public.entitlements e where e.app_user_id = m.app_user_id::text)
        order by m.league_id desc offset $1 limit 1`, [pass]);
      const user = { userId: member!.user_id, email: 'member@example.test' };
      const wallet = evmWallet();
      const challenge = await run('wallets: a challenge', () => issueChallenge(user, parseChallengeRequest({ chain: 'evm', address: wallet.address, chainId: 1 }, WALLET_CONFIG)));
      const link = await run('wallets: a signed link', async () => linkWallet(user, parseLinkRequest({
        payload: { chain: 'evm', address: wallet.address, chainId: 1, message: challenge.message, signature: await wallet.sign(challenge.message) },
      }, WALLET_CONFIG)));
      const contract = evmWallet();
      const contractChallenge = await run('wallets: a challenge for a contract wallet', () => issueChallenge(user, parseChallengeRequest({ chain: 'evm', address: contract.address, chainId: 1 }, WALLET_CONFIG)));
      await run('wallets: a contract wallet\'s check is counted', () => callDb('wallet_start_contract_check', {
        p_user_id: user.userId, p_challenge_id: contractChallenge.challengeId, p_message: contractChallenge.message, p_chain: 'evm', p_address_key: contract.address.toLowerCase(),
      }));
      await run('wallets: a check the chain did not answer is given back', () => callDb('wallet_refund_contract_check', {
        p_user_id: user.userId, p_challenge_id: contractChallenge.challengeId,
      }));
      await run('wallets: the list', () => listWalletLinks(user));

      // GET /api/me
      await run('account: GET /api/me', () => getAccount(user, now));
      await run('account: GET /api/me of a merged second id', () => getAccount({ userId: legacyId, email: null }, now));
      await run('wallets: unlink', () => unlinkWallet(user, link.link.id));

      // POST /api/webhooks/leagues-sync: 50 seeded leagues updated, one new, one deleted.
      const leagues = await database.sql<{ external_id: string }>(`select external_id from public.leagues where source = 'sleeper' and deleted_at is null order by id desc offset $1 limit 51`, [pass * 51]);
      const updatedAt = new Date(now.getTime() + pass).toISOString();
      const delivery = leaguesSyncBodySchema.parse({
        id: `plans-${randomUUID()}`, source: 'sleeper', sentAt: updatedAt,
        leagues: [...leagues.slice(0, 50).map((league) => league.external_id), `new-${randomUUID()}`].map((externalId) => ({
          externalId, name: 'League', sport: 'nfl', season: '2026', status: 'in_season', updatedAt, settings: { scoring: 'ppr', teams: 12 },
          members: Array.from({ length: 12 }, (_, m) => ({ externalUserId: `m-${m}`, displayName: `Member ${m}`, role: m === 0 ? 'commissioner' : 'member', ...(m === 0 ? { appUserId: user.userId } : {}) })),
        })),
        deleted: [{ externalId: leagues[50]!.external_id, deletedAt: updatedAt }],
      });
      await run('leagues: a delivery (50 updated, 1 new, 1 deleted)', () => applyLeaguesSync(delivery));
      await run('leagues: the same delivery again (duplicate)', () => applyLeaguesSync(delivery));

      // Maintenance: today (nothing old to drop), and a month on, when the oldest month leaves.
      await run('maintenance: today', () => runMaintenance({ budgetMs: 2_000, now }));
      // (One call with the service's budget per call: enough for a few hundred checkpoints at any size.)
      await run(RETIRING, () => maintainBilling({ budgetMs: MAINTENANCE_CALL_BUDGET_MS, callBudgetMs: MAINTENANCE_CALL_BUDGET_MS, now: new Date(now.getTime() + 31 * DAY) }));

      // Deleting a user.
      await run('forget a user (account deletion)', () => callDb('forget_user', { p_user_id: forgotten.appUserId }));

      // The operator scripts: npm run billing:rebuild (lib/billing/rebuild.ts) and billing:sync -- --all.
      const page = await run('operator: billing:rebuild walks the log', () => callDb<{ eventId: string }[]>('billing_events_page', { p_after_event_id: null, p_limit: 1000 }));
      await run('operator: billing:rebuild walks the log', () => callDb('billing_events_page', { p_after_event_id: page.at(-1)!.eventId, p_limit: 1000 }));
      const [history] = await database.sql<{ ids: string[]; plans: { eventId: string }[] }>(`
        select array_agg(distinct s.app_user_id) as ids, jsonb_agg(jsonb_build_object('eventId', e.event_id, 'plan', e.plan)) as plans
        from public.billing_subscribers s join public.billing_events e on e.subject_id = s.app_user_id
        where s.group_id = (select group_id from public.billing_subscribers where app_user_id = $1)`, [inOrder.appUserId]);
      await run('operator: billing:rebuild reads a customer\'s entries', () => callDb('billing_events_by_id', { p_event_ids: history!.plans.map((plan) => plan.eventId) }));
      await run('operator: billing:rebuild folds a customer again (dry run)', () => callDb('billing_rebuild_group', { p_ids: history!.ids, p_plans: history!.plans, p_apply: false }));
      await run('operator: events stored without a plan', () => callDb('billing_events_without_plan', { p_ids: history!.ids }));
      await run('operator: billing:sync --all resumes', () => callDb('billing_sync_run_place', { p_name: 'plans-test', p_last_id: null, p_save: false }));
      await run(COUNTING, () => callDb('billing_subscribers_count', {}));
      const subscribers = await run('operator: billing:sync --all pages subscribers', () => callDb<string[]>('billing_subscribers_page', { p_after: null, p_limit: 100 }));
      await run('operator: billing:sync --all pages subscribers', () => callDb('billing_subscribers_page', { p_after: subscribers.at(-1), p_limit: 100 }));
      await run('operator: billing:sync --all saves its place', () => callDb('billing_sync_run_place', { p_name: 'plans-test', p_last_id: subscribers.at(-1), p_save: true }));

      step = '';
      await adapter.pool.query('select pg_stat_force_next_flush()');
      const { rows } = await adapter.pool.query(`select funcname, calls from pg_stat_user_functions where schemaname = 'public'`);
      return { plans, calls: new Map(rows.map((row) => [String(row.funcname), Number(row.calls)])) };
    } finally {
      await closeDatabase();
    }
  }
});

const RETIRING = 'maintenance: a month on, the oldest month leaves the retention';
const COUNTING = 'operator: billing:sync --all counts the subscribers (once a run)';

/**
 * The whole reads on purpose: `billing:sync -- --all` counts every subscriber once, for its progress
 * line. And the sync sweep reports how many marks are due by counting them: a few index entries when
 * the sweeps keep up, the whole queue when nearly all of it is due (a backlog, as seeded), which is
 * what a count of them costs either way. (Retention reads no month whole: the groups a month waits
 * for are found by their pending receive time, and only the events of groups whose checkpoint
 * failed are read from it, by subject.)
 */
function onPurpose(plan: CapturedPlan, relation: string): boolean {
  if (plan.step === COUNTING) return true;
  return relation === 'billing_sync_queue' && plan.query.includes("'due', (select count(*) from public.billing_sync_queue where next_attempt_at <= now())");
}
