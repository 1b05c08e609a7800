import fc from 'fast-check';
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { describeEventEffects } from '../../lib/billing/event-effects.ts';
import type { BillingWebhookBody } from '../../lib/billing/webhook-body.ts';
import { DATABASE_KINDS, suiteDatabase, type DatabaseKind, type TestDatabase } from '../support/databases.ts';
import { billingEvent, day, LIFETIME, MONTHLY, YEARLY } from './support.ts';

/**
 * The fold's in-order shortcut (public.billing_fold_in_order, supabase/schemas/03_billing_fold.sql)
 * must leave exactly what the fold itself leaves. Random histories of one customer (purchases,
 * renewals, cancellations, billing issues, product changes, provisional grants, refunds, an
 * anonymous id merged into one or two real ones, a transfer between them), delivered in order so
 * that the shortcut takes every event it can; then the customer's history is folded again from
 * nothing by the fold alone (public.billing_refold_group, what an out-of-order event or `npm run
 * billing:rebuild` runs) and every stored column of every row compared.
 */

/**
 * Random histories per engine. The shortcut is the same PL/pgSQL on every engine: 100 on Postgres
 * (here on 18, and on 15 and 17 by npm run test:postgres-majors), 40 on PGlite, where an
 * event costs several times the CPU. IN_ORDER_FOLD_RUNS sets both.
 */
const RUNS_ON: Record<DatabaseKind, number> = process.env.IN_ORDER_FOLD_RUNS
  ? { postgres: Number(process.env.IN_ORDER_FOLD_RUNS), pglite: Number(process.env.IN_ORDER_FOLD_RUNS) }
  : { postgres: 100, pglite: 40 };
/** The decision's clock: after every history (an event is ordered at most a little past it). */
const NOW = new Date(day(1000));

type Who = 'anon' | 'alice' | 'bob';
interface Step {
  kind: 'purchase' | 'renewal' | 'cancellation' | 'uncancellation' | 'billing_issue' | 'expiration' | 'product_change'
    | 'temporary' | 'lifetime' | 'extended' | 'refund' | 'refund_reversed' | 'transfer'
    // An App Store free trial (three days), a cancellation of it in its last 24 hours (Apple still
    // converts it: the RENEWAL after it keeps renewal off), and RevenueCat's sample TRANSFER stamped
    // in the year 4466 (ordered at its receive time, the decision's clock: the events after it are late).
    | 'trial' | 'late_trial_cancel' | 'far_transfer'
    // Not events: a month passes before the next delivery (the customer's oldest unfolded event
    // then dates from over 30 days ago: the next event checkpoints where they stand), and a tail
    // at the bound's edge (the next event or the one after checkpoints the tail).
    | 'month_passes' | 'long_tail';
  who: Who;
  /** The event names the anonymous id as an alias too (the app started anonymous). */
  withAnon: boolean;
  /** The event names this other id as an alias instead (RevenueCat merged the two customers). */
  aliasOf?: Who;
  product: 'monthly' | 'yearly';
  /**
   * Which purchase of the product (an entitlement's source is a purchase): the customer's first
   * subscription, a second one (a Stripe customer who subscribed twice), or one the event does not
   * name (no transaction ids: the product's row, which the next event naming its purchase claims).
   */
  purchase?: 'first' | 'second' | 'unnamed';
  entitlements: readonly string[];
  /** Days since the previous event. */
  gap: number;
}

const FIXTURE: Record<Exclude<Step['kind'], 'transfer' | 'far_transfer' | 'month_passes' | 'long_tail'>, string> = {
  purchase: 'initial-purchase', renewal: 'renewal', cancellation: 'cancellation-unsubscribe', uncancellation: 'uncancellation',
  billing_issue: 'billing-issue-grace', expiration: 'expiration', product_change: 'product-change', temporary: 'temporary-entitlement-grant',
  lifetime: 'non-renewing-purchase', extended: 'subscription-extended', refund: 'cancellation-customer-support', refund_reversed: 'refund-reversed',
  trial: 'initial-purchase-trial', late_trial_cancel: 'cancellation-unsubscribe',
};
/** RevenueCat's sample TRANSFER is stamped 78789789798798 (the year 4466). */
const YEAR_4466 = 78_789_789_798_798;

const step: fc.Arbitrary<Step> = fc.record({
  // Renewals weigh most, as in life (and they are what the shortcut is for).
  kind: fc.oneof(
    { weight: 12, arbitrary: fc.constant('renewal' as const) },
    { weight: 2, arbitrary: fc.constant('purchase' as const) },
    { weight: 5, arbitrary: fc.constantFrom('cancellation', 'uncancellation', 'billing_issue', 'expiration', 'product_change', 'temporary', 'lifetime', 'extended', 'refund', 'refund_reversed', 'transfer') as fc.Arbitrary<Step['kind']> },
    { weight: 2, arbitrary: fc.constantFrom('trial', 'late_trial_cancel', 'far_transfer') as fc.Arbitrary<Step['kind']> },
    { weight: 2, arbitrary: fc.constantFrom('month_passes', 'long_tail') as fc.Arbitrary<Step['kind']> },
  ),
  who: fc.oneof({ weight: 8, arbitrary: fc.constant('alice' as const) }, { weight: 1, arbitrary: fc.constant('anon' as const) }, { weight: 1, arbitrary: fc.constant('bob' as const) }),
  withAnon: fc.boolean(),
  product: fc.oneof({ weight: 8, arbitrary: fc.constant('monthly' as const) }, { weight: 1, arbitrary: fc.constant('yearly' as const) }),
  // (Rare per step, so about half the histories have one: after it, the customer's rows are of two
  // sources and every event takes the fold, which the shortcut's share below must leave room for.)
  purchase: fc.oneof({ weight: 28, arbitrary: fc.constant('first' as const) }, { weight: 1, arbitrary: fc.constant('second' as const) }, { weight: 1, arbitrary: fc.constant('unnamed' as const) }),
  entitlements: fc.oneof({ weight: 8, arbitrary: fc.constant(['pro']) }, { weight: 1, arbitrary: fc.constant(['pro', 'plus']) }),
  gap: fc.oneof(fc.integer({ min: 1, max: 40 }), fc.constantFrom(0.01, 0.5)),
});

/** The bodies of a history, in the order RevenueCat generated them (and what passes between them). */
function historyBodies(steps: Step[], ids: Record<Who, string>): (BillingWebhookBody | 'month_passes' | 'long_tail')[] {
  let at = 0;
  return steps.map((s, index) => {
    at += s.gap;
    const user = ids[s.who];
    if (s.kind === 'month_passes' || s.kind === 'long_tail') return s.kind;
    if (s.kind === 'transfer' || s.kind === 'far_transfer') {
      const [from, to] = s.who === 'bob' ? [ids.alice, ids.bob] : [ids.bob, ids.alice];
      return billingEvent('transfer', to, { at }, { app_user_id: undefined, aliases: undefined, original_app_user_id: undefined, transferred_from: [from], transferred_to: [to],
        ...(s.kind === 'far_transfer' ? { event_timestamp_ms: YEAR_4466 } : {}) });
    }
    const product = s.kind === 'lifetime' ? LIFETIME : s.product === 'yearly' ? YEARLY : MONTHLY;
    const length = s.kind === 'trial' ? 3 : s.kind === 'late_trial_cancel' ? 0.5 : s.product === 'yearly' ? 365 : 30;
    const expires = s.kind === 'lifetime' ? null : s.kind === 'refund' || s.kind === 'expiration' ? at : at + length;
    const aliases = s.aliasOf ? [ids[s.aliasOf], user] : s.withAnon && s.who !== 'anon' ? [ids.anon, user] : [user];
    return billingEvent(FIXTURE[s.kind], user, { at, purchased: at, expires }, {
      aliases, original_app_user_id: aliases[0], product_id: product, entitlement_ids: s.entitlements, store: 'APP_STORE',
      // Monthly and yearly are one subscription (an upgrade keeps its original transaction): lineage.
      // A second subscription is another purchase, of either product; a one-time purchase is its own.
      ...(s.purchase === 'unnamed'
        ? { transaction_id: null, original_transaction_id: null }
        : { transaction_id: `tx-${index}`, original_transaction_id: s.kind === 'lifetime' ? `otx-lifetime-${index}` : s.purchase === 'second' ? 'otx-second' : 'otx-subscription' }),
      ...(s.kind === 'product_change' ? { new_product_id: s.product === 'yearly' ? MONTHLY : YEARLY } : {}),
      ...(s.kind === 'billing_issue' ? { grace_period_expiration_at_ms: day(at + 6) } : {}),
      ...(s.kind === 'refund' ? { price: -9.99 } : {}),
      ...(s.kind === 'trial' || s.kind === 'late_trial_cancel' ? { period_type: 'TRIAL' } : {}),
    });
  });
}

/**
 * Every stored column of the customer's rows (but when they were written), and of their ids'
 * subscriber rows (customers, watermark, checkpoint), with `rename` applied to the text.
 */
async function storedState(sql: TestDatabase['sql'], ids: string[], rename: (text: string) => string = (text) => text) {
  const members = `select s2.app_user_id from public.billing_subscribers s1 join public.billing_subscribers s2 on s2.group_id = s1.group_id where s1.app_user_id = any ($1)`;
  const rows = await sql<{ row: unknown }>(
    `select to_jsonb(e) - 'updated_at' as row from public.entitlements e where e.app_user_id in (${members})
     order by e.app_user_id collate "C", e.entitlement_id collate "C", e.source_key`, [ids]);
  const subscribers = await sql<{ row: Record<string, unknown> }>(
    `select to_jsonb(s) as row from public.billing_subscribers s where app_user_id in (${members}) order by app_user_id collate "C"`, [ids]);
  return JSON.parse(rename(JSON.stringify({ rows: rows.map((r) => r.row), subscribers: subscribers.map((r) => r.row) })));
}

type HistoryItem = ReturnType<typeof historyBodies>[number];

/** Deliver a history on one connection as recordBillingEvent would; for each event, whether it took the shortcut. */
async function deliverHistory(sql: TestDatabase['sql'], items: HistoryItem[], ids: string[]) {
  const shortcut: boolean[] = [];
  for (const item of items) {
    // (The database's clock is the real one: the time that passes is set on the stored state.)
    if (item === 'month_passes') {
      await sql(`update public.billing_subscribers set pending_since = pending_since - interval '40 days' where app_user_id = any ($1)`, [ids]);
    } else if (item === 'long_tail') {
      await sql(`update public.billing_subscribers set tail_events = 199 where app_user_id = any ($1) and app_user_id = group_id`, [ids]);
    } else {
      const plan = describeEventEffects(item.event, NOW);
      const [{ result }] = (await sql<{ result: { inOrder?: boolean } }>('select public.record_billing_event(p_body => $1, p_plan => $2, p_sync_after => $3) as result',
        [JSON.stringify(item), JSON.stringify(plan), 'none'])) as [{ result: { inOrder?: boolean } }];
      shortcut.push(result.inOrder ?? false);
    }
  }
  return shortcut;
}

/** The same history for other ids and event ids (`twin`), and the way back for what it stores. */
function twinOf(items: HistoryItem[], key: string, twinKey: string) {
  const pairs: [string, string][] = [[key, twinKey], [key.replace(/-/g, ''), twinKey.replace(/-/g, '')]];
  for (const item of items) if (typeof item !== 'string') pairs.push([item.event.id as string, `${item.event.id as string}-twin`]);
  const replaceAll = (text: string, from: number, to: number) => pairs.reduce((out, pair) => out.split(pair[from]!).join(pair[to]!), text);
  return {
    items: items.map((item) => (typeof item === 'string' ? item : JSON.parse(replaceAll(JSON.stringify(item), 0, 1)) as BillingWebhookBody)),
    back: (text: string) => replaceAll(text, 1, 0),
  };
}

const idsFor = (key: string): Record<Who, string> => ({ anon: `$RCAnonymousID:${key.replace(/-/g, '')}`, alice: `alice-${key}`, bob: `bob-${key}` });

/**
 * In one transaction, rolled back: the history through the shortcut; then the same history (other
 * ids) with the shortcut switched off, so that every event takes the fold's own step; both must
 * store the same; then the first folded again from its checkpoints by the fold alone must give the
 * same rows. For each event, whether it took the shortcut. `prepare` runs first in the transaction;
 * `look` reads the stored state before the rollback.
 */
async function deliveredBothWays(sql: TestDatabase['sql'], steps: Step[], options: { prepare?: () => Promise<void>; look?: (ids: string[]) => Promise<void> } = {}) {
  const [key, twinKey] = [randomUUID(), randomUUID()];
  const ids = Object.values(idsFor(key));
  const items = historyBodies(steps, idsFor(key));
  const twin = twinOf(items, key, twinKey);
  await sql('begin');
  try {
    await options.prepare?.();
    const shortcut = await deliverHistory(sql, items, ids);
    await sql(`create or replace function public.billing_fold_in_order(p_body jsonb, p_plan jsonb, p_received timestamptz, p_linked text[])
               returns jsonb language sql as 'select null::jsonb'`);
    expect((await deliverHistory(sql, twin.items, Object.values(idsFor(twinKey)))).some(Boolean)).toBe(false);
    const delivered = await storedState(sql, ids);
    await options.look?.(ids);
    // Every column, the watermark and the checkpoints included (the same transaction: the same now()).
    expect(delivered).toEqual(await storedState(sql, Object.values(idsFor(twinKey)), twin.back));
    const groups = await sql<{ group_id: string }>('select distinct group_id from public.billing_subscribers where app_user_id = any ($1)', [ids]);
    for (const { group_id: group } of groups) await sql(`select public.billing_refold_group($1, '')`, [group]);
    expect((await storedState(sql, ids)).rows).toEqual(delivered.rows);
    return shortcut;
  } finally {
    await sql('rollback');
  }
}

describe.each(DATABASE_KINDS)('the in-order shortcut of the fold on %s', (kind) => {
  const db = suiteDatabase(kind);

  it('leaves exactly what the fold leaves, over random histories delivered in order', async () => {
    const RUNS = RUNS_ON[kind];
    const taken = { shortcut: 0, fold: 0 };
    await fc.assert(fc.asyncProperty(fc.array(step, { minLength: 2, maxLength: 14 }), async (steps) => {
      const shortcut = await db.connection((sql) => deliveredBothWays(sql, steps));
      taken.shortcut += shortcut.filter(Boolean).length;
      taken.fold += shortcut.filter((took) => !took).length;
    }), { numRuns: RUNS });
    // Both paths were exercised: the property says something about the shortcut. How many events
    // take each path varies with the random histories (98-178 shortcut events, ~500 fold events in
    // runs of 100 histories; 10 in one of 25 on PGlite), so the bound sits well below the fewest seen: a
    // shortcut that stopped taking events (or most of them) fails it, a run of unlucky histories
    // does not.
    console.log(`${kind}: ${taken.shortcut} events took the shortcut, ${taken.fold} the fold`);
    expect(taken.shortcut).toBeGreaterThan(kind === 'postgres' ? Math.max(10, RUNS / 4) : RUNS / 8);
    expect(taken.fold).toBeGreaterThan(RUNS);
  }, 300_000);

  /** A step of a fixed history: a monthly subscription to pro, with no anonymous id. */
  const fixedStep = (kind: Step['kind'], who: Who, gap: number, aliasOf?: Who): Step => ({ kind, who, withAnon: false, aliasOf, product: 'monthly', entitlements: ['pro'], gap });
  /** deliveredBothWays for a fixed history, `prepare` first; with the ids' subscriber rows (by id) as the shortcut left them. */
  const withCheckpoints = (steps: Step[], prepare?: (sql: TestDatabase['sql']) => Promise<unknown>) => db.connection(async (sql) => {
    let subscribers: { app_user_id: string; customer_id: string | null; base_customer: string | null; base_key: string | null }[] = [];
    const shortcut = await deliveredBothWays(sql, steps, {
      prepare: async () => void await prepare?.(sql),
      look: async (ids) => {
        subscribers = await sql('select app_user_id, customer_id, base_customer, base_key from public.billing_subscribers where app_user_id = any ($1) order by app_user_id', [ids]);
      },
    });
    return { shortcut, subscribers };
  });

  it('checkpoints where a group stands as the fold does, with an id merged into another', async () => {
    // Bob buys; then an event of alice's names bob too (RevenueCat merged them: alice's id points at
    // bob, who holds the rows); bob's renewals in order; then a month without events: the next
    // renewal checkpoints both ids in the shortcut, alice's with the customer it points at.
    const { shortcut, subscribers: [alice, bob] } = await withCheckpoints([fixedStep('purchase', 'bob', 1), fixedStep('renewal', 'alice', 30, 'bob'),
      fixedStep('renewal', 'bob', 30), fixedStep('month_passes', 'bob', 0), fixedStep('renewal', 'bob', 30)]);
    expect(shortcut).toEqual([false, false, true, true]);
    expect(alice).toMatchObject({ customer_id: bob!.app_user_id, base_customer: bob!.app_user_id });
    expect(bob!.base_key).toBeTruthy();
    expect(alice!.base_key).toBe(bob!.base_key);
  });

  // An upgraded database whose older events the fold may still need (billing_legacy_horizon,
  // 20261126000500_flat_cost_at_scale.sql): no checkpoint may cover events received before its
  // horizon; events received after it are checkpointed as anywhere else.
  const underHorizon = (horizon: string, steps: Step[]) =>
    withCheckpoints(steps, (sql) => sql(`update public.billing_legacy_horizon set received_before = ${horizon}`));
  const alice = (kind: Step['kind'], gap: number) => fixedStep(kind, 'alice', gap);

  it('takes no checkpoint while the unfolded events are from before the legacy horizon', async () => {
    // (Every event of the history is received in one transaction, at now(): before a horizon of now().)
    const { shortcut, subscribers } = await underHorizon('now()', [alice('purchase', 1), alice('renewal', 30), alice('month_passes', 0), alice('renewal', 30)]);
    expect(shortcut).toEqual([false, true, true]);
    expect(subscribers.map((row) => row.base_key)).toEqual([null]);
  });

  it('checkpoints as anywhere else once the unfolded events are from after the legacy horizon', async () => {
    // (A month passing makes them 40 days old: after a horizon of 100 days ago.)
    const { shortcut, subscribers } = await underHorizon(`now() - interval '100 days'`, [alice('purchase', 1), alice('renewal', 30), alice('month_passes', 0), alice('renewal', 30)]);
    expect(shortcut).toEqual([false, true, true]);
    expect(subscribers.map((row) => row.base_key)).toEqual([expect.any(String)]);
  });

  it('leaves to the fold an event whose tail is full when the legacy horizon forbids its checkpoint', async () => {
    // 199 events after the last checkpoint and none allowed: the fold folds the tail past the bound.
    const { shortcut } = await underHorizon('now()', [alice('purchase', 1), alice('renewal', 30), alice('long_tail', 0), alice('month_passes', 0), alice('renewal', 30)]);
    expect(shortcut).toEqual([false, true, false]);
  });

  it('takes an in-order renewal of an aliased customer, and leaves a late or merging event to the fold', async () => {
    const key = randomUUID();
    const [anon, alice] = [`$RCAnonymousID:${key.replace(/-/g, '')}`, `alice-${key}`];
    const aliased = { aliases: [anon, alice], original_app_user_id: anon, product_id: MONTHLY, store: 'APP_STORE', original_transaction_id: 'otx' };
    const record = async (body: BillingWebhookBody) =>
      (await db.adapter.call('record_billing_event', { p_body: body, p_plan: describeEventEffects(body.event, NOW), p_sync_after: 'none' })) as { inOrder?: boolean; outcome: string };
    const paths = [];
    // Bought anonymously: the first event with both ids merges the anonymous id's row (the fold).
    paths.push((await record(billingEvent('initial-purchase', anon, { at: 0, purchased: 0, expires: 30 }, { ...aliased, aliases: [anon], original_app_user_id: anon, transaction_id: 't0' }))).inOrder ?? false);
    paths.push((await record(billingEvent('renewal', alice, { at: 30, purchased: 30, expires: 60 }, { ...aliased, transaction_id: 't1' }))).inOrder ?? false);
    // Then renewals in order: the shortcut.
    paths.push((await record(billingEvent('renewal', alice, { at: 60, purchased: 60, expires: 90 }, { ...aliased, transaction_id: 't2' }))).inOrder ?? false);
    paths.push((await record(billingEvent('renewal', alice, { at: 90, purchased: 90, expires: 120 }, { ...aliased, transaction_id: 't3' }))).inOrder ?? false);
    // A late cancellation: the fold.
    paths.push((await record(billingEvent('cancellation-unsubscribe', alice, { at: 70, purchased: 60, expires: 90 }, { ...aliased, transaction_id: 't2' }))).inOrder ?? false);
    expect(paths).toEqual([false, false, true, true, false]);
  });
});
