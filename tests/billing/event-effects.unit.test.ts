import { describe, expect, it } from 'vitest';
import { describeEventEffects, MAX_EVENT_AHEAD_MS, MAX_IDS_PER_EVENT, type BillingEventPlan, type EntitlementEffect, type Renewal } from '../../lib/billing/event-effects.ts';
import { billingWebhookBodySchema, CONTENT_DIGEST, type BillingEvent } from '../../lib/billing/webhook-body.ts';
import { CORPUS_ANON, CORPUS_ANON2, CORPUS_USER, FIXTURE_NAMES, loadFixture } from './fixtures.ts';

// What each event type means per entitlement: the issue's table, one row per case.
const NOW = new Date('2026-06-01T00:00:00Z');
const AT = Date.parse('2026-04-01T00:00:00Z');
const PURCHASED = Date.parse('2026-03-15T00:00:00Z');
const EXPIRES = Date.parse('2026-04-15T00:00:00Z');
const iso = (ms: number) => new Date(ms).toISOString();

function event(type: string, fields: Record<string, unknown> = {}): BillingEvent {
  return {
    id: `evt-${type}`,
    type,
    app_user_id: 'user-1',
    event_timestamp_ms: AT,
    purchased_at_ms: PURCHASED,
    expiration_at_ms: EXPIRES,
    entitlement_ids: ['pro'],
    product_id: 'pro_monthly',
    environment: 'PRODUCTION',
    ...fields,
  };
}

const NONE = { status: null, statusFrom: null, renewal: 'keep', expiry: null, expiresAt: null, graceExpiresAt: null, pendingProductId: null, autoResumeAt: null } as const;
const grant = (renewal: Renewal, expiresAt: string | null = iso(EXPIRES)): Partial<EntitlementEffect> =>
  ({ ...NONE, action: 'grant', status: 'active', renewal, expiry: 'max', expiresAt, createsRow: false });
// Flags carry the event's expiry: the stored one extends to the later of the two.
const flag: Partial<EntitlementEffect> = { ...NONE, action: 'flag', expiry: 'extend', expiresAt: iso(EXPIRES), createsRow: true };
const cancel: Partial<EntitlementEffect> = { ...flag, status: 'cancelled_active', statusFrom: ['active'], renewal: 'off' };

const cases: { name: string; event: BillingEvent; effects?: Partial<EntitlementEffect>[]; plan?: Partial<BillingEventPlan> }[] = [
  { name: 'INITIAL_PURCHASE: active, renewing, until the max of expiries', event: event('INITIAL_PURCHASE'), effects: [grant('on')], plan: { rank: 0 } },
  // It re-enables renewal; a billing issue (grace) stands until a payment recovers it.
  { name: 'UNCANCELLATION: active, renewing, a billing issue kept', event: event('UNCANCELLATION'), effects: [{ ...grant('on'), keepsBillingIssue: true }], plan: { rank: 0 } },
  // A renewal keeps what the subscriber chose (the trial cancelled less than 24 h before it converts).
  ...['RENEWAL', 'SUBSCRIPTION_EXTENDED'].map((type) => ({
    name: `${type}: active, renewal as it was (on after a lapse), until the max of expiries`, event: event(type), effects: [grant('continue')], plan: { rank: 0 as const },
  })),
  { name: 'REFUND_REVERSED: active, renewal as it was, the period as first granted', event: event('REFUND_REVERSED'), effects: [{ ...grant('keep'), reinstates: true }], plan: { rank: 0 } },
  { name: 'REFUND_REVERSED of a lifetime purchase: active, never renewing', event: event('REFUND_REVERSED', { expiration_at_ms: null }), effects: [{ ...grant('off', null), reinstates: true }] },
  { name: 'a grant for two entitlements: one effect each', event: event('RENEWAL', { entitlement_ids: ['pro', 'ads_free'] }),
    effects: [{ ...grant('continue'), entitlementId: 'pro' }, { ...grant('continue'), entitlementId: 'ads_free' }] },
  { name: 'INITIAL_PURCHASE without expiry: lifetime', event: event('INITIAL_PURCHASE', { expiration_at_ms: null }), effects: [grant('on', null)] },
  { name: 'NON_RENEWING_PURCHASE: active, will not renew, until its expiry', event: event('NON_RENEWING_PURCHASE'), effects: [grant('off')] },
  { name: 'NON_RENEWING_PURCHASE with null expiry: lifetime', event: event('NON_RENEWING_PURCHASE', { expiration_at_ms: null }), effects: [grant('off', null)] },
  { name: 'NON_RENEWING_PURCHASE with null entitlement_ids: nothing', event: event('NON_RENEWING_PURCHASE', { entitlement_ids: null }),
    effects: [], plan: { ignoredReason: 'no_entitlements' } },
  { name: 'TEMPORARY_ENTITLEMENT_GRANT: temporary until its expiry', event: event('TEMPORARY_ENTITLEMENT_GRANT'),
    effects: [{ ...NONE, action: 'temporary_grant', status: 'temporary', renewal: 'off', expiry: 'set', expiresAt: iso(EXPIRES) }], plan: { rank: 0 } },
  ...['UNSUBSCRIBE', 'PRICE_INCREASE', 'DEVELOPER_INITIATED', 'UNKNOWN', undefined].map((reason) => ({
    name: `CANCELLATION ${reason ?? 'without a reason'}: will not renew, active -> cancelled_active`,
    event: event('CANCELLATION', { cancel_reason: reason }), effects: [cancel], plan: { rank: 1 as const },
  })),
  { name: 'CANCELLATION BILLING_ERROR: will not renew, billing_issue unless in grace', event: event('CANCELLATION', { cancel_reason: 'BILLING_ERROR' }),
    effects: [{ ...flag, status: 'billing_issue', statusFrom: ['active', 'cancelled_active', 'billing_issue'], renewal: 'off' }] },
  // One whose expiration is not after it says the period already ended: it may shorten it (period).
  ...(['BILLING_ERROR', 'DEVELOPER_INITIATED'] as const).map((reason) => ({
    name: `CANCELLATION ${reason} ending at the event: ends the current period there`, event: event('CANCELLATION', { cancel_reason: reason, expiration_at_ms: AT }),
    effects: [{ action: 'flag' as const, expiry: 'period' as const, expiresAt: iso(AT), renewal: 'off' as const }],
  })),
  { name: 'CANCELLATION CUSTOMER_SUPPORT ending before the event: refunded', event: event('CANCELLATION', { cancel_reason: 'CUSTOMER_SUPPORT', expiration_at_ms: AT - 1000 }),
    effects: [{ ...NONE, action: 'refund', status: 'refunded', expiry: 'set', expiresAt: iso(AT - 1000), createsRow: true }], plan: { rank: 2 } },
  { name: 'CANCELLATION CUSTOMER_SUPPORT ending at the event: refunded', event: event('CANCELLATION', { cancel_reason: 'CUSTOMER_SUPPORT', expiration_at_ms: AT }),
    effects: [{ action: 'refund', status: 'refunded', expiry: 'set', expiresAt: iso(AT), renewal: 'keep' }] },
  { name: 'CANCELLATION CUSTOMER_SUPPORT ending later: new expiry, status and will_renew unchanged', event: event('CANCELLATION', { cancel_reason: 'CUSTOMER_SUPPORT' }),
    effects: [{ action: 'refund', status: null, expiry: 'set', expiresAt: iso(EXPIRES), renewal: 'keep' }] },
  { name: 'CANCELLATION CUSTOMER_SUPPORT without expiry (one-time purchase): refunded at the event', event: event('CANCELLATION', { cancel_reason: 'CUSTOMER_SUPPORT', expiration_at_ms: null }),
    effects: [{ action: 'refund', status: 'refunded', expiry: 'set', expiresAt: iso(AT) }] },
  { name: 'BILLING_ISSUE with a grace period: grace until it ends (also out of a pause: the charge at its resume failed)', event: event('BILLING_ISSUE', { grace_period_expiration_at_ms: EXPIRES + 16 * 86_400_000 }),
    effects: [{ ...flag, status: 'grace', statusFrom: ['active', 'cancelled_active', 'billing_issue', 'grace', 'paused'], renewal: 'off', graceExpiresAt: iso(EXPIRES + 16 * 86_400_000) }] },
  // Stripe keeps retrying inside the new expiration it reports (grace null): the flag extends access to it.
  { name: 'BILLING_ISSUE carrying a later expiration (Stripe): extends to it', event: event('BILLING_ISSUE', { grace_period_expiration_at_ms: null, expiration_at_ms: EXPIRES + 7 * 86_400_000 }),
    effects: [{ action: 'flag', status: 'billing_issue', expiry: 'extend', expiresAt: iso(EXPIRES + 7 * 86_400_000) }] },
  { name: 'BILLING_ISSUE without a grace period: billing_issue, never revoked', event: event('BILLING_ISSUE', { grace_period_expiration_at_ms: null }),
    effects: [{ action: 'flag', status: 'billing_issue', graceExpiresAt: null, renewal: 'off', expiry: 'extend' }] },
  // A pause scheduled for the period's end is not an unsubscribe: renewal as it was.
  { name: 'SUBSCRIPTION_PAUSED: renewal as it was, auto-resume kept, access unchanged', event: event('SUBSCRIPTION_PAUSED', { auto_resume_at_ms: EXPIRES + 86_400_000 }),
    effects: [{ ...flag, renewal: 'keep', autoResumeAt: iso(EXPIRES + 86_400_000) }] },
  { name: 'EXPIRATION: expired', event: event('EXPIRATION', { expiration_reason: 'UNSUBSCRIBE' }),
    effects: [{ ...NONE, action: 'revoke', status: 'expired', renewal: 'off', expiry: 'set', expiresAt: iso(EXPIRES), createsRow: true }], plan: { rank: 2 } },
  { name: 'EXPIRATION SUBSCRIPTION_PAUSED: paused', event: event('EXPIRATION', { expiration_reason: 'SUBSCRIPTION_PAUSED' }),
    effects: [{ action: 'revoke', status: 'paused', renewal: 'off' }] },
  // entitlement_ids null (the dashboard mapping changed): still applied to the rows its product has.
  ...[['EXPIRATION', 'revoke'], ['CANCELLATION', 'flag']].map(([type, action]) => ({
    name: `${type} with entitlement_ids null: applies to every row of its product`, event: event(type!, { entitlement_ids: null }),
    effects: [{ entitlementId: null, action: action as EntitlementEffect['action'] }], plan: { ignoredReason: null },
  })),
  { name: 'a refund with entitlement_ids null: every row of its product', event: event('CANCELLATION', { cancel_reason: 'CUSTOMER_SUPPORT', entitlement_ids: null }),
    effects: [{ entitlementId: null, action: 'refund' }] },
  { name: 'a grant with entitlement_ids null: nothing', event: event('RENEWAL', { entitlement_ids: null }), effects: [], plan: { ignoredReason: 'no_entitlements' } },
  { name: 'PRODUCT_CHANGE: pending product, no access change', event: event('PRODUCT_CHANGE', { new_product_id: 'pro_yearly' }),
    effects: [{ ...flag, pendingProductId: 'pro_yearly', createsRow: false }] },
  { name: 'PRODUCT_CHANGE without new_product_id: nothing', event: event('PRODUCT_CHANGE'), effects: [], plan: { ignoredReason: 'no_effect' } },
  // Google Play names the new product only for a DEFERRED change: without it, replaced at once.
  { name: 'Play PRODUCT_CHANGE without new_product_id: cancelled, replaced by the next Play subscription', event: event('PRODUCT_CHANGE', { store: 'PLAY_STORE' }),
    effects: [{ ...flag, status: 'cancelled_active', statusFrom: ['active'], renewal: 'off', pendingProductId: '*', createsRow: false }] },
  { name: 'TRANSFER: rows move to the first non-anonymous destination; the other destinations are its ids (joined)',
    event: { id: 't1', type: 'TRANSFER', event_timestamp_ms: AT, transferred_from: ['old-user', '$RCAnonymousID:a'], transferred_to: ['$RCAnonymousID:b', 'new-user', 'other'] },
    effects: [], plan: { ownerCandidates: ['new-user'], subjectId: 'new-user', linkedIds: ['new-user', 'old-user', '$RCAnonymousID:a', '$RCAnonymousID:b', 'other'],
      movedIds: ['old-user', '$RCAnonymousID:a'], joinedIds: ['$RCAnonymousID:b', 'other'], move: 'transfer', appUserId: null, ignoredReason: null, rank: 1 } },
  { name: 'TRANSFER to anonymous ids only: the first of them',
    event: { id: 't2', type: 'TRANSFER', event_timestamp_ms: AT, transferred_from: ['old-user'], transferred_to: ['$RCAnonymousID:b'] },
    plan: { ownerCandidates: ['$RCAnonymousID:b'], movedIds: ['old-user'], move: 'transfer' } },
  { name: 'TRANSFER without destination: nothing', event: { id: 't3', type: 'TRANSFER', event_timestamp_ms: AT, transferred_from: ['old-user'] },
    plan: { ownerCandidates: [], subjectId: null, move: null, ignoredReason: 'nothing_to_transfer' } },
  ...['TEST', 'INVOICE_ISSUANCE', 'VIRTUAL_CURRENCY_TRANSACTION', 'EXPERIMENT_ENROLLMENT', 'SUBSCRIBER_ALIAS'].map((type) => ({
    name: `${type}: recorded, no change`, event: event(type, { aliases: ['user-1'] }), effects: [], plan: { ignoredReason: 'record_only_type', subjectId: null, movedIds: [], move: null },
  })),
  ...['SUBSCRIBER_ALIAS', 'INVOICE_ISSUANCE', 'SUBSCRIPTION_TELEPORTED'].map((type) => ({
    name: `${type} naming an anonymous alias of a real id: no change, but the alias merges`,
    event: event(type, { aliases: ['$RCAnonymousID:a', 'user-1'] }), effects: [],
    plan: { ownerCandidates: ['user-1'], subjectId: 'user-1', ignoredReason: null, movedIds: ['user-1', '$RCAnonymousID:a'], move: 'merge' },
  })),
  { name: 'a record-only type with only anonymous ids: nothing moves', event: event('SUBSCRIBER_ALIAS', { app_user_id: '$RCAnonymousID:a', aliases: ['$RCAnonymousID:a', '$RCAnonymousID:b'] }),
    effects: [], plan: { ignoredReason: 'record_only_type', movedIds: [], move: null } },
  { name: 'an unknown type: recorded, no change', event: event('SUBSCRIPTION_TELEPORTED'), effects: [], plan: { ignoredReason: 'unknown_type' } },
  { name: 'anonymous aliases of a real app_user_id merge into it',
    event: event('RENEWAL', { app_user_id: 'user-1', aliases: ['$RCAnonymousID:a', 'user-1'], original_app_user_id: '$RCAnonymousID:b' }),
    plan: { ownerCandidates: ['user-1'], linkedIds: ['user-1', '$RCAnonymousID:b', '$RCAnonymousID:a'], movedIds: ['user-1', '$RCAnonymousID:b', '$RCAnonymousID:a'], move: 'merge' } },
  // One customer seen under two real ids: both may own; the database takes the one holding rows.
  { name: 'a real original_app_user_id other than app_user_id: both are candidates, app_user_id first, and merge',
    event: event('RENEWAL', { app_user_id: 'user-2', original_app_user_id: 'user-1', aliases: ['user-1', 'user-2', '$RCAnonymousID:a'] }),
    plan: { ownerCandidates: ['user-2', 'user-1'], subjectId: 'user-2', movedIds: ['user-2', 'user-1', '$RCAnonymousID:a'], move: 'merge' } },
  { name: 'an anonymous app_user_id with a real alias: the real id owns the effects',
    event: event('CANCELLATION', { app_user_id: '$RCAnonymousID:a', aliases: ['$RCAnonymousID:a', 'user_1234'] }),
    plan: { ownerCandidates: ['user_1234'], subjectId: 'user_1234', movedIds: ['$RCAnonymousID:a', 'user_1234'], move: 'merge', appUserId: '$RCAnonymousID:a' } },
  { name: 'an anonymous app_user_id alone owns its effects', event: event('INITIAL_PURCHASE', { app_user_id: '$RCAnonymousID:a', aliases: ['$RCAnonymousID:a'] }),
    plan: { ownerCandidates: ['$RCAnonymousID:a'], movedIds: [], move: null } },
  { name: 'no app_user_id: recorded, no change', event: event('RENEWAL', { app_user_id: undefined }), plan: { ownerCandidates: [], subjectId: null, ignoredReason: 'no_app_user_id' } },
  { name: 'an app_user_id over 256 characters is not a key', event: event('RENEWAL', { app_user_id: 'u'.repeat(257) }), plan: { appUserId: null, ignoredReason: 'no_app_user_id' } },
  { name: 'an app_user_id of 256 characters is', event: event('RENEWAL', { app_user_id: 'u'.repeat(256) }), plan: { ownerCandidates: ['u'.repeat(256)], ignoredReason: null } },
  { name: 'an entitlement id over 256 characters is dropped', event: event('RENEWAL', { entitlement_ids: ['e'.repeat(257), 'pro'] }), effects: [grant('continue')] },
  { name: 'an unreadable expiry never becomes "forever": recorded, no change', event: event('INITIAL_PURCHASE', { expiration_at_ms: 'next month' }),
    effects: [], plan: { ignoredReason: 'invalid_expiration_at_ms', subjectId: null, move: null } },
  { name: 'an expiry past year 9999: recorded, no change', event: event('INITIAL_PURCHASE', { expiration_at_ms: 1e20 }), plan: { ignoredReason: 'invalid_expiration_at_ms' } },
  { name: 'times as digit strings are read', event: event('RENEWAL', { event_timestamp_ms: String(AT), expiration_at_ms: String(EXPIRES) }),
    effects: [grant('continue')], plan: { eventAt: iso(AT) } },
  { name: 'no event_timestamp_ms: ordered at the receive time', event: event('RENEWAL', { event_timestamp_ms: undefined }), plan: { eventAt: NOW.toISOString() } },
  { name: 'only the deprecated entitlement_id: used', event: event('RENEWAL', { entitlement_ids: undefined, entitlement_id: 'legacy_pro' }),
    effects: [{ ...grant('continue'), entitlementId: 'legacy_pro' }] },
  { name: 'duplicate and non-string entitlement ids are dropped', event: event('RENEWAL', { entitlement_ids: ['pro', 'pro', 7, '', null] }), effects: [grant('continue')] },
];

describe('describeEventEffects: what an event means per entitlement', () => {
  it.each(cases)('$name', ({ event: input, effects, plan: expectedPlan }) => {
    const plan = describeEventEffects(input, NOW);
    if (effects) {
      expect(plan.effects).toHaveLength(effects.length);
      effects.forEach((expected, i) => expect(plan.effects[i]).toMatchObject({ entitlementId: 'pro', ...expected }));
    }
    // Every id a plan files, merges or may give to an owner is one of the ids it links.
    for (const id of [plan.subjectId, ...plan.ownerCandidates.filter(() => plan.subjectId !== null), ...plan.movedIds]) {
      if (id !== null) expect(plan.linkedIds).toContain(id);
    }
    if (expectedPlan) expect(plan).toMatchObject(expectedPlan);
  });

  it('keeps a billing issue only on an UNCANCELLATION', () => {
    expect(describeEventEffects(event('INITIAL_PURCHASE'), NOW).effects[0]).not.toHaveProperty('keepsBillingIssue');
  });

  it('carries the period facts the guards compare', () => {
    const plan = describeEventEffects(event('RENEWAL', { transaction_id: 't-2', original_transaction_id: 't-1', store: 'PLAY_STORE', period_type: 'TRIAL' }), NOW);
    expect(plan.period).toEqual({
      productId: 'pro_monthly', purchasedAt: iso(PURCHASED), expiresAt: iso(EXPIRES), transactionId: 't-2', originalTransactionId: 't-1', store: 'PLAY_STORE', periodType: 'TRIAL',
    });
    expect(plan).toMatchObject({ eventId: 'evt-RENEWAL', type: 'RENEWAL', appUserId: 'user-1', environment: 'PRODUCTION', eventAt: iso(AT) });
  });

  it('uses at most MAX_IDS_PER_EVENT of a TRANSFER\'s ids, each once: thousands held the database until it gave up, on every retry', () => {
    const from = Array.from({ length: 20_000 }, (_, index) => `old-${index % 10_000}`);
    const plan = describeEventEffects({ id: 't-many', type: 'TRANSFER', event_timestamp_ms: AT, transferred_from: from, transferred_to: ['new-user', ...from] }, NOW);
    expect(plan.movedIds).toEqual(Array.from({ length: MAX_IDS_PER_EVENT }, (_, index) => `old-${index}`));
    expect(plan.linkedIds).toHaveLength(MAX_IDS_PER_EVENT + 1);
    expect(plan).toMatchObject({ subjectId: 'new-user', move: 'transfer' });
  });

  it('orders an event stamped more than MAX_EVENT_AHEAD_MS past its receive time at its receive time; a recorded one at its stored time', () => {
    // RevenueCat's own sample TRANSFER: event_timestamp_ms 78789789798798 (the year 4466). Its stamp
    // says nothing of when it happened: it is ordered when it arrived, the latest it can have been
    // generated, so an event generated after that (a transfer back a minute later) folds after it.
    const sample = { id: 't-4466', type: 'TRANSFER', event_timestamp_ms: 78_789_789_798_798, transferred_from: ['a'], transferred_to: ['b'] };
    const bounded = describeEventEffects(sample, NOW);
    expect(bounded.eventAt).toBe(iso(NOW.getTime()));
    expect(describeEventEffects({ ...sample, event_timestamp_ms: NOW.getTime() + MAX_EVENT_AHEAD_MS + 1 }, NOW).eventAt).toBe(iso(NOW.getTime()));
    // Within the bound (clock skew), and any past stamp: the stamp.
    expect(describeEventEffects({ ...sample, event_timestamp_ms: NOW.getTime() + 1000 }, NOW).eventAt).toBe(iso(NOW.getTime() + 1000));
    expect(describeEventEffects({ ...sample, event_timestamp_ms: NOW.getTime() + MAX_EVENT_AHEAD_MS }, NOW).eventAt).toBe(iso(NOW.getTime() + MAX_EVENT_AHEAD_MS));
    expect(describeEventEffects(event('RENEWAL'), NOW).eventAt).toBe(iso(AT));
    // Computed again from the stored body at its stored time: the same plan.
    expect(describeEventEffects(sample, new Date(bounded.eventAt), { recorded: true })).toEqual(bounded);
    expect(describeEventEffects(event('RENEWAL'), new Date(AT), { recorded: true }).eventAt).toBe(iso(AT));
  });

  it('ignores sandbox events when asked (deployed, unless BILLING_SANDBOX_GRANTS=true), and only them', () => {
    expect(describeEventEffects(event('RENEWAL', { environment: 'SANDBOX' }), NOW, { ignoreSandbox: true })).toMatchObject({ ignoredReason: 'sandbox_ignored', effects: [], subjectId: null });
    expect(describeEventEffects(event('RENEWAL', { environment: 'sandbox' }), NOW, { ignoreSandbox: true })).toMatchObject({ ignoredReason: 'sandbox_ignored', effects: [] });
    expect(describeEventEffects(event('RENEWAL', { environment: 'SANDBOX' }), NOW)).toMatchObject({ ignoredReason: null, subjectId: 'user-1' });
    expect(describeEventEffects(event('RENEWAL'), NOW, { ignoreSandbox: true })).toMatchObject({ ignoredReason: null, effects: [{ action: 'grant' }] });
    expect(describeEventEffects(event('RENEWAL', { environment: 'production' }), NOW, { ignoreSandbox: true })).toMatchObject({ ignoredReason: null, effects: [{ action: 'grant' }] });
  });

  it('grants nothing, where sandbox grants nothing, from an event that names no environment or another one', () => {
    for (const environment of [undefined, null, '', 'STAGING', 42]) {
      expect(describeEventEffects(event('INITIAL_PURCHASE', { environment }), NOW, { ignoreSandbox: true }), String(environment))
        .toMatchObject({ ignoredReason: 'environment_unknown', effects: [], subjectId: null });
      // Where sandbox grants, so does such an event (its rows named as the event names them).
      expect(describeEventEffects(event('INITIAL_PURCHASE', { environment }), NOW), String(environment)).toMatchObject({ ignoredReason: null, effects: [{ action: 'grant' }] });
    }
  });
});

// Every body of the corpus, classified: adding a fixture means saying here what it does.
const corpus: Record<string, { effects?: string[]; ignoredReason?: string; ownerId?: string | null; move?: string | null }> = {
  'aliased-renewal': { effects: ['grant:active'], ownerId: CORPUS_USER, move: 'merge' },
  'anonymous-initial-purchase': { effects: ['grant:active'], ownerId: CORPUS_ANON2, move: null },
  'billing-issue-grace': { effects: ['flag:grace'] },
  'billing-issue-no-grace': { effects: ['flag:billing_issue'] },
  'cancellation-billing-error': { effects: ['flag:billing_issue'] },
  'cancellation-customer-support': { effects: ['refund:refunded'] },
  'cancellation-developer-initiated': { effects: ['flag:cancelled_active'] },
  'cancellation-price-increase': { effects: ['flag:cancelled_active'] },
  'cancellation-unknown': { effects: ['flag:cancelled_active'] },
  'cancellation-unsubscribe': { effects: ['flag:cancelled_active'] },
  'experiment-enrollment': { ignoredReason: 'record_only_type', ownerId: CORPUS_ANON },
  'expiration-billing-error': { effects: ['revoke:expired'] },
  'expiration-paused': { effects: ['revoke:paused'] },
  expiration: { effects: ['revoke:expired'] },
  'future-unknown-type': { ignoredReason: 'unknown_type' },
  'initial-purchase-trial': { effects: ['grant:active'] },
  'initial-purchase': { effects: ['grant:active'], ownerId: CORPUS_USER, move: 'merge' },
  'invoice-issuance': { ignoredReason: undefined, ownerId: CORPUS_USER, move: 'merge' },
  'large-subscriber-attributes': { effects: ['grant:active'] },
  'non-renewing-no-entitlements': { effects: [], ignoredReason: undefined, move: 'merge' },
  'non-renewing-purchase': { effects: ['grant:active'] },
  'product-change': { effects: ['flag:null'] },
  'refund-reversed': { effects: ['grant:active'] },
  'renewal-trial-conversion': { effects: ['grant:active'] },
  renewal: { effects: ['grant:active'] },
  'sandbox-initial-purchase': { effects: ['grant:active'] },
  'subscriber-alias': { ignoredReason: undefined, ownerId: CORPUS_USER, move: 'merge' },
  'subscription-extended': { effects: ['grant:active'] },
  'subscription-paused': { effects: ['flag:null'] },
  'temporary-entitlement-grant': { effects: ['temporary_grant:temporary'], move: null },
  test: { ignoredReason: 'record_only_type' },
  transfer: { effects: [], ownerId: CORPUS_USER, move: 'transfer' },
  'unknown-fields': { effects: ['grant:active'] },
  'uncancellation': { effects: ['grant:active'] },
  'virtual-currency-transaction': { ignoredReason: undefined, ownerId: CORPUS_USER, move: 'merge' },
};

describe('the corpus', () => {
  it('has every event type RevenueCat documents, and each body is classified below', () => {
    const types = new Set(FIXTURE_NAMES.map((name) => loadFixture(name).event.type));
    for (const type of ['TEST', 'INITIAL_PURCHASE', 'RENEWAL', 'CANCELLATION', 'UNCANCELLATION', 'NON_RENEWING_PURCHASE', 'SUBSCRIPTION_PAUSED',
      'EXPIRATION', 'BILLING_ISSUE', 'PRODUCT_CHANGE', 'TRANSFER', 'SUBSCRIPTION_EXTENDED', 'TEMPORARY_ENTITLEMENT_GRANT', 'REFUND_REVERSED',
      'INVOICE_ISSUANCE', 'VIRTUAL_CURRENCY_TRANSACTION', 'EXPERIMENT_ENROLLMENT', 'SUBSCRIBER_ALIAS']) expect(types).toContain(type);
    expect(Object.keys(corpus).sort()).toEqual(FIXTURE_NAMES);
  });

  it('has a body of about 40 KB and a TRANSFER without app_user_id', () => {
    expect(JSON.stringify(loadFixture('large-subscriber-attributes')).length).toBeGreaterThanOrEqual(40 * 1024);
    expect(loadFixture('transfer').event).not.toHaveProperty('app_user_id');
  });

  it.each(FIXTURE_NAMES)('%s passes the envelope check with every field kept, and means what it should', (name) => {
    const body = loadFixture(name);
    expect(billingWebhookBodySchema.parse(body)).toEqual(body);
    const plan = describeEventEffects(body.event, NOW);
    const expected = corpus[name]!;
    expect({
      effects: plan.effects.map((effect) => `${effect.action}:${effect.status}`),
      ...('ignoredReason' in expected ? { ignoredReason: plan.ignoredReason ?? undefined } : {}),
      ...('ownerId' in expected ? { ownerId: plan.ownerCandidates[0] ?? null } : {}),
      ...('move' in expected ? { move: plan.move } : {}),
    }).toEqual({ effects: [], ...expected });
  });
});

describe('the envelope', () => {
  const cases = [
    { name: 'no event', body: { api_version: '1.0' }, path: 'event' },
    { name: 'event not an object', body: { event: 'INITIAL_PURCHASE' }, path: 'event' },
    { name: 'empty id', body: { event: { id: '', type: 'RENEWAL' } }, path: 'event.id' },
    { name: 'id over 256 characters', body: { event: { id: 'x'.repeat(257), type: 'RENEWAL' } }, path: 'event.id' },
    { name: 'numeric id', body: { event: { id: 42, type: 'RENEWAL' } }, path: 'event.id' },
    { name: 'app_user_id not a string', body: { event: { id: 'e1', type: 'RENEWAL', app_user_id: 42 } }, path: 'event.app_user_id' },
    { name: 'product_id not a string', body: { event: { id: 'e1', type: 'RENEWAL', product_id: ['pro'] } }, path: 'event.product_id' },
    { name: 'type not a string', body: { event: { id: 'e1', type: ['RENEWAL'] } }, path: 'event.type' },
  ];
  it.each(cases)('refuses $name', ({ body, path }) => {
    const result = billingWebhookBodySchema.safeParse(body);
    expect(result.success).toBe(false);
    expect(result.error!.issues.map((issue) => issue.path.join('.'))).toContain(path);
  });

  it('recognises an event without id (the contract shows none) by a digest of its content, gives each its own id, and takes no type as an unknown one', () => {
    const parse = (event: Record<string, unknown>) => billingWebhookBodySchema.parse({ event });
    const parsed = parse({ app_user_id: 'u1', product_id: 'pro', type: 'RENEWAL', purchased_at_ms: 1 });
    const digest = parsed[CONTENT_DIGEST]!;
    expect(digest).toMatch(/^[0-9a-f]{64}$/);
    expect(parsed.event.id).toMatch(new RegExp(`^sha256:${digest}:[0-9a-f-]{36}$`));
    // The same content in another key order has the same digest (a redelivery), yet every parse its
    // own id: whether it is a redelivery or a new event is the database's call (its retry window).
    const again = parse({ purchased_at_ms: 1, type: 'RENEWAL', product_id: 'pro', app_user_id: 'u1' });
    expect(again[CONTENT_DIGEST]).toBe(digest);
    expect(again.event.id).not.toBe(parsed.event.id);
    expect(parse({ id: null, app_user_id: 'u1', product_id: 'pro', type: 'RENEWAL', purchased_at_ms: 1 })[CONTENT_DIGEST]).toBe(digest);
    expect(parse({ app_user_id: 'u1', product_id: 'pro', type: 'RENEWAL', purchased_at_ms: 2 })[CONTENT_DIGEST]).not.toBe(digest);
    // An explicit id is only an id, whatever its shape: it has no digest, and is kept as sent.
    const shaped = parse({ id: `sha256:${digest}`, app_user_id: 'u1', product_id: 'pro', type: 'RENEWAL', purchased_at_ms: 1 });
    expect(shaped[CONTENT_DIGEST]).toBeUndefined();
    expect(shaped.event.id).toBe(`sha256:${digest}`);
    // The digest never reaches the stored body (a symbol: JSON has none).
    expect(JSON.parse(JSON.stringify(parsed))).toEqual({ event: { ...parsed.event } });
    expect(parse({ id: 'e1' }).event.type).toBe('');
    expect(describeEventEffects(parse({ id: 'e1', app_user_id: 'u1' }).event, NOW)).toMatchObject({ effects: [], ignoredReason: expect.any(String) });
  });

  it('accepts an id of 256 characters, any type string, and nulls everywhere else', () => {
    const body = { event: { id: 'x'.repeat(256), type: '', app_user_id: null, entitlement_ids: null, expiration_at_ms: null } };
    expect(billingWebhookBodySchema.parse(body)).toEqual(body);
  });
});
