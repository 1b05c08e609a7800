import { describe, expect, it } from 'vitest';
import { describeEventEffects, type BillingEventPlan, type EntitlementEffect } from '../../lib/billing/event-effects.ts';
import { billingWebhookBodySchema, type BillingEvent } from '../../lib/billing/webhook-body.ts';
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

const NONE = { status: null, statusFrom: null, willRenew: null, expiry: null, expiresAt: null, graceExpiresAt: null, pendingProductId: null, autoResumeAt: null };
const grant = (willRenew: boolean, expiresAt: string | null = iso(EXPIRES)): Partial<EntitlementEffect> =>
  ({ ...NONE, action: 'grant', status: 'active', willRenew, expiry: 'max', expiresAt, createsRow: false });
const cancel: Partial<EntitlementEffect> = { ...NONE, action: 'flag', status: 'cancelled_active', statusFrom: ['active'], willRenew: false, createsRow: true };

const cases: { name: string; event: BillingEvent; effects?: Partial<EntitlementEffect>[]; plan?: Partial<BillingEventPlan> }[] = [
  ...['INITIAL_PURCHASE', 'RENEWAL', 'UNCANCELLATION', 'SUBSCRIPTION_EXTENDED', 'REFUND_REVERSED'].map((type) => ({
    name: `${type}: active, will renew, until the max of expiries`, event: event(type), effects: [grant(true)],
  })),
  { name: 'a grant for two entitlements: one effect each', event: event('RENEWAL', { entitlement_ids: ['pro', 'ads_free'] }),
    effects: [{ ...grant(true), entitlementId: 'pro' }, { ...grant(true), entitlementId: 'ads_free' }] },
  { name: 'INITIAL_PURCHASE without expiry: lifetime', event: event('INITIAL_PURCHASE', { expiration_at_ms: null }), effects: [grant(true, null)] },
  { name: 'NON_RENEWING_PURCHASE: active, will not renew, until its expiry', event: event('NON_RENEWING_PURCHASE'), effects: [grant(false)] },
  { name: 'NON_RENEWING_PURCHASE with null expiry: lifetime', event: event('NON_RENEWING_PURCHASE', { expiration_at_ms: null }), effects: [grant(false, null)] },
  { name: 'NON_RENEWING_PURCHASE with null entitlement_ids: nothing', event: event('NON_RENEWING_PURCHASE', { entitlement_ids: null }),
    effects: [], plan: { ignoredReason: 'no_entitlements' } },
  { name: 'TEMPORARY_ENTITLEMENT_GRANT: temporary until its expiry', event: event('TEMPORARY_ENTITLEMENT_GRANT'),
    effects: [{ ...NONE, action: 'temporary_grant', status: 'temporary', willRenew: false, expiry: 'set', expiresAt: iso(EXPIRES) }] },
  ...['UNSUBSCRIBE', 'PRICE_INCREASE', 'DEVELOPER_INITIATED', 'UNKNOWN', undefined].map((reason) => ({
    name: `CANCELLATION ${reason ?? 'without a reason'}: will not renew, active -> cancelled_active`,
    event: event('CANCELLATION', { cancel_reason: reason }), effects: [cancel],
  })),
  { name: 'CANCELLATION BILLING_ERROR: will not renew, billing_issue unless in grace', event: event('CANCELLATION', { cancel_reason: 'BILLING_ERROR' }),
    effects: [{ ...NONE, action: 'flag', status: 'billing_issue', statusFrom: ['active', 'cancelled_active', 'billing_issue'], willRenew: false, createsRow: true }] },
  { name: 'CANCELLATION CUSTOMER_SUPPORT ending before the event: refunded', event: event('CANCELLATION', { cancel_reason: 'CUSTOMER_SUPPORT', expiration_at_ms: AT - 1000 }),
    effects: [{ ...NONE, action: 'refund', status: 'refunded', expiry: 'set', expiresAt: iso(AT - 1000), createsRow: true }] },
  { name: 'CANCELLATION CUSTOMER_SUPPORT ending at the event: refunded', event: event('CANCELLATION', { cancel_reason: 'CUSTOMER_SUPPORT', expiration_at_ms: AT }),
    effects: [{ action: 'refund', status: 'refunded', expiry: 'set', expiresAt: iso(AT), willRenew: null }] },
  { name: 'CANCELLATION CUSTOMER_SUPPORT ending later: new expiry, status and will_renew unchanged', event: event('CANCELLATION', { cancel_reason: 'CUSTOMER_SUPPORT' }),
    effects: [{ action: 'refund', status: null, expiry: 'set', expiresAt: iso(EXPIRES), willRenew: null }] },
  { name: 'CANCELLATION CUSTOMER_SUPPORT without expiry (one-time purchase): refunded at the event', event: event('CANCELLATION', { cancel_reason: 'CUSTOMER_SUPPORT', expiration_at_ms: null }),
    effects: [{ action: 'refund', status: 'refunded', expiry: 'set', expiresAt: iso(AT) }] },
  { name: 'BILLING_ISSUE with a grace period: grace until it ends', event: event('BILLING_ISSUE', { grace_period_expiration_at_ms: EXPIRES + 16 * 86_400_000 }),
    effects: [{ ...NONE, action: 'flag', status: 'grace', statusFrom: ['active', 'cancelled_active', 'billing_issue', 'grace'], graceExpiresAt: iso(EXPIRES + 16 * 86_400_000), createsRow: true }] },
  { name: 'BILLING_ISSUE without a grace period: billing_issue, never revoked', event: event('BILLING_ISSUE', { grace_period_expiration_at_ms: null }),
    effects: [{ action: 'flag', status: 'billing_issue', graceExpiresAt: null, willRenew: null, expiry: null }] },
  { name: 'SUBSCRIPTION_PAUSED: will not renew, auto-resume kept, access unchanged', event: event('SUBSCRIPTION_PAUSED', { auto_resume_at_ms: EXPIRES + 86_400_000 }),
    effects: [{ ...NONE, action: 'flag', willRenew: false, autoResumeAt: iso(EXPIRES + 86_400_000), createsRow: true }] },
  { name: 'EXPIRATION: expired', event: event('EXPIRATION', { expiration_reason: 'UNSUBSCRIBE' }),
    effects: [{ ...NONE, action: 'revoke', status: 'expired', willRenew: false, expiry: 'set', expiresAt: iso(EXPIRES), createsRow: true }] },
  { name: 'EXPIRATION SUBSCRIPTION_PAUSED: paused', event: event('EXPIRATION', { expiration_reason: 'SUBSCRIPTION_PAUSED' }),
    effects: [{ action: 'revoke', status: 'paused', willRenew: false }] },
  { name: 'PRODUCT_CHANGE: pending product, no access change', event: event('PRODUCT_CHANGE', { new_product_id: 'pro_yearly' }),
    effects: [{ ...NONE, action: 'flag', pendingProductId: 'pro_yearly', createsRow: false }] },
  { name: 'PRODUCT_CHANGE without new_product_id: nothing', event: event('PRODUCT_CHANGE'), effects: [], plan: { ignoredReason: 'no_effect' } },
  { name: 'TRANSFER: rows move to the first non-anonymous destination',
    event: { id: 't1', type: 'TRANSFER', event_timestamp_ms: AT, transferred_from: ['old-user', '$RCAnonymousID:a'], transferred_to: ['$RCAnonymousID:b', 'new-user', 'other'] },
    effects: [], plan: { ownerId: 'new-user', movedIds: ['old-user', '$RCAnonymousID:a'], move: 'transfer', appUserId: null, ignoredReason: null } },
  { name: 'TRANSFER to anonymous ids only: the first of them',
    event: { id: 't2', type: 'TRANSFER', event_timestamp_ms: AT, transferred_from: ['old-user'], transferred_to: ['$RCAnonymousID:b'] },
    plan: { ownerId: '$RCAnonymousID:b', movedIds: ['old-user'], move: 'transfer' } },
  { name: 'TRANSFER without destination: nothing', event: { id: 't3', type: 'TRANSFER', event_timestamp_ms: AT, transferred_from: ['old-user'] },
    plan: { ownerId: null, move: null, ignoredReason: 'nothing_to_transfer' } },
  ...['TEST', 'INVOICE_ISSUANCE', 'VIRTUAL_CURRENCY_TRANSACTION', 'EXPERIMENT_ENROLLMENT', 'SUBSCRIBER_ALIAS'].map((type) => ({
    name: `${type}: recorded, no change`, event: event(type, { aliases: ['user-1'] }), effects: [], plan: { ignoredReason: 'record_only_type', movedIds: [], move: null },
  })),
  ...['SUBSCRIBER_ALIAS', 'INVOICE_ISSUANCE', 'SUBSCRIPTION_TELEPORTED'].map((type) => ({
    name: `${type} naming an anonymous alias of a real id: no change, but the alias merges`,
    event: event(type, { aliases: ['$RCAnonymousID:a', 'user-1'] }), effects: [], plan: { ownerId: 'user-1', ignoredReason: null, movedIds: ['$RCAnonymousID:a'], move: 'merge' },
  })),
  { name: 'a record-only type with only anonymous ids: nothing moves', event: event('SUBSCRIBER_ALIAS', { app_user_id: '$RCAnonymousID:a', aliases: ['$RCAnonymousID:a', '$RCAnonymousID:b'] }),
    effects: [], plan: { ignoredReason: 'record_only_type', movedIds: [], move: null } },
  { name: 'an unknown type: recorded, no change', event: event('SUBSCRIPTION_TELEPORTED'), effects: [], plan: { ignoredReason: 'unknown_type' } },
  { name: 'anonymous aliases of a real app_user_id merge into it',
    event: event('RENEWAL', { app_user_id: 'user-1', aliases: ['$RCAnonymousID:a', 'user-1'], original_app_user_id: '$RCAnonymousID:b' }),
    plan: { ownerId: 'user-1', movedIds: ['$RCAnonymousID:b', '$RCAnonymousID:a'], move: 'merge' } },
  { name: 'an anonymous app_user_id with a real alias: the real id owns the effects',
    event: event('CANCELLATION', { app_user_id: '$RCAnonymousID:a', aliases: ['$RCAnonymousID:a', 'user_1234'] }),
    plan: { ownerId: 'user_1234', movedIds: ['$RCAnonymousID:a'], move: 'merge', appUserId: '$RCAnonymousID:a' } },
  { name: 'an anonymous app_user_id alone owns its effects', event: event('INITIAL_PURCHASE', { app_user_id: '$RCAnonymousID:a', aliases: ['$RCAnonymousID:a'] }),
    plan: { ownerId: '$RCAnonymousID:a', movedIds: [], move: null } },
  { name: 'no app_user_id: recorded, no change', event: event('RENEWAL', { app_user_id: undefined }), plan: { ownerId: null, ignoredReason: 'no_app_user_id' } },
  { name: 'an app_user_id over 256 characters is not a key', event: event('RENEWAL', { app_user_id: 'u'.repeat(257) }), plan: { appUserId: null, ignoredReason: 'no_app_user_id' } },
  { name: 'an app_user_id of 256 characters is', event: event('RENEWAL', { app_user_id: 'u'.repeat(256) }), plan: { ownerId: 'u'.repeat(256), ignoredReason: null } },
  { name: 'an entitlement id over 256 characters is dropped', event: event('RENEWAL', { entitlement_ids: ['e'.repeat(257), 'pro'] }), effects: [grant(true)] },
  { name: 'an unreadable expiry never becomes "forever": recorded, no change', event: event('INITIAL_PURCHASE', { expiration_at_ms: 'next month' }),
    effects: [], plan: { ignoredReason: 'invalid_expiration_at_ms', move: null } },
  { name: 'an expiry past year 9999: recorded, no change', event: event('INITIAL_PURCHASE', { expiration_at_ms: 1e20 }), plan: { ignoredReason: 'invalid_expiration_at_ms' } },
  { name: 'times as digit strings are read', event: event('RENEWAL', { event_timestamp_ms: String(AT), expiration_at_ms: String(EXPIRES) }),
    effects: [grant(true)], plan: { eventAt: iso(AT) } },
  { name: 'no event_timestamp_ms: ordered at the receive time', event: event('RENEWAL', { event_timestamp_ms: undefined }), plan: { eventAt: NOW.toISOString() } },
  { name: 'only the deprecated entitlement_id: used', event: event('RENEWAL', { entitlement_ids: undefined, entitlement_id: 'legacy_pro' }),
    effects: [{ ...grant(true), entitlementId: 'legacy_pro' }] },
  { name: 'duplicate and non-string entitlement ids are dropped', event: event('RENEWAL', { entitlement_ids: ['pro', 'pro', 7, '', null] }), effects: [grant(true)] },
];

describe('describeEventEffects: what an event means per entitlement', () => {
  it.each(cases)('$name', ({ event: input, effects, plan: expectedPlan }) => {
    const plan = describeEventEffects(input, NOW);
    if (effects) {
      expect(plan.effects).toHaveLength(effects.length);
      effects.forEach((expected, i) => expect(plan.effects[i]).toMatchObject({ entitlementId: 'pro', ...expected }));
    }
    if (expectedPlan) expect(plan).toMatchObject(expectedPlan);
  });

  it('carries the period facts the guards compare', () => {
    const plan = describeEventEffects(event('RENEWAL', { transaction_id: 't-2', original_transaction_id: 't-1', store: 'PLAY_STORE', period_type: 'TRIAL' }), NOW);
    expect(plan.period).toEqual({
      productId: 'pro_monthly', purchasedAt: iso(PURCHASED), expiresAt: iso(EXPIRES), transactionId: 't-2', originalTransactionId: 't-1', store: 'PLAY_STORE', periodType: 'TRIAL',
    });
    expect(plan).toMatchObject({ eventId: 'evt-RENEWAL', type: 'RENEWAL', appUserId: 'user-1', environment: 'PRODUCTION', eventAt: iso(AT) });
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
      ...('ownerId' in expected ? { ownerId: plan.ownerId } : {}),
      ...('move' in expected ? { move: plan.move } : {}),
    }).toEqual({ effects: [], ...expected });
  });
});

describe('the envelope', () => {
  const cases = [
    { name: 'no event', body: { api_version: '1.0' }, path: 'event' },
    { name: 'event not an object', body: { event: 'INITIAL_PURCHASE' }, path: 'event' },
    { name: 'no id', body: { event: { type: 'RENEWAL' } }, path: 'event.id' },
    { name: 'empty id', body: { event: { id: '', type: 'RENEWAL' } }, path: 'event.id' },
    { name: 'id over 256 characters', body: { event: { id: 'x'.repeat(257), type: 'RENEWAL' } }, path: 'event.id' },
    { name: 'numeric id', body: { event: { id: 42, type: 'RENEWAL' } }, path: 'event.id' },
    { name: 'no type', body: { event: { id: 'e1' } }, path: 'event.type' },
    { name: 'type not a string', body: { event: { id: 'e1', type: ['RENEWAL'] } }, path: 'event.type' },
  ];
  it.each(cases)('refuses $name', ({ body, path }) => {
    const result = billingWebhookBodySchema.safeParse(body);
    expect(result.success).toBe(false);
    expect(result.error!.issues.map((issue) => issue.path.join('.'))).toContain(path);
  });

  it('accepts an id of 256 characters, any type string, and nulls everywhere else', () => {
    const body = { event: { id: 'x'.repeat(256), type: '', app_user_id: null, entitlement_ids: null, expiration_at_ms: null } };
    expect(billingWebhookBodySchema.parse(body)).toEqual(body);
  });
});
