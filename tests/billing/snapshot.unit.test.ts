import { describe, expect, it } from 'vitest';
import { describeSnapshot, trimSnapshot } from '../../lib/billing/snapshot.ts';
import { subscriberResponseSchema } from '../../lib/revenuecat/subscriber.ts';

// What a snapshot of RevenueCat's record means, per product, at its request time: the table in
// lib/billing/snapshot.ts, one row per case, from v1 bodies as RevenueCat shows them.
const AT = Date.parse('2026-04-01T00:00:00Z');
const iso = (ms: number) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
const DAY = 86_400_000;

function subscription(fields: Record<string, unknown> = {}) {
  return {
    auto_resume_date: null, billing_issues_detected_at: null, expires_date: iso(AT + 10 * DAY), grace_period_expires_date: null, is_sandbox: false,
    original_purchase_date: iso(AT - 50 * DAY), ownership_type: 'PURCHASED', period_type: 'normal', purchase_date: iso(AT - 20 * DAY), refunded_at: null,
    store: 'app_store', store_transaction_id: '2000000111', unsubscribe_detected_at: null, ...fields,
  };
}

function snapshot(subscriber: Record<string, unknown>) {
  const response = subscriberResponseSchema.parse({ request_date: iso(AT), request_date_ms: AT, subscriber: { entitlements: {}, subscriptions: {}, non_subscriptions: {}, ...subscriber } });
  return describeSnapshot(response, 'user-1', { eventId: 'sync:1' });
}

const cases: { name: string; fields: Record<string, unknown>; expected: Record<string, unknown> }[] = [
  { name: 'active and renewing', fields: {}, expected: { status: 'active', willRenew: true, expiresAt: new Date(AT + 10 * DAY).toISOString() } },
  { name: 'auto-renewal turned off', fields: { unsubscribe_detected_at: iso(AT - DAY) }, expected: { status: 'cancelled_active', willRenew: false } },
  { name: 'a billing issue without grace', fields: { billing_issues_detected_at: iso(AT - DAY) }, expected: { status: 'billing_issue', willRenew: false } },
  { name: 'lapsed, in grace', fields: { expires_date: iso(AT - DAY), billing_issues_detected_at: iso(AT - DAY), grace_period_expires_date: iso(AT + 5 * DAY) },
    expected: { status: 'grace', graceExpiresAt: new Date(AT + 5 * DAY).toISOString() } },
  { name: 'lapsed, grace over', fields: { expires_date: iso(AT - 9 * DAY), grace_period_expires_date: iso(AT - DAY) }, expected: { status: 'expired', graceExpiresAt: null } },
  { name: 'paused until it resumes', fields: { expires_date: iso(AT - DAY), auto_resume_date: iso(AT + 20 * DAY), store: 'play_store' }, expected: { status: 'paused', store: 'PLAY_STORE' } },
  // A refund need not cancel the subscription: renewal stays as the record says (a REFUND_REVERSED then renews).
  { name: 'refunded: access ends at the refund, renewal as it was', fields: { refunded_at: iso(AT - 2 * DAY) }, expected: { status: 'refunded', willRenew: true, expiresAt: new Date(AT - 2 * DAY).toISOString() } },
  { name: 'refunded and unsubscribed', fields: { refunded_at: iso(AT - 2 * DAY), unsubscribe_detected_at: iso(AT - 2 * DAY) }, expected: { status: 'refunded', willRenew: false } },
  { name: 'refunded, a prepaid plan', fields: { refunded_at: iso(AT - 2 * DAY), period_type: 'prepaid', store: 'play_store' }, expected: { status: 'refunded', willRenew: false } },
  { name: 'sandbox', fields: { is_sandbox: true }, expected: { environment: 'SANDBOX' } },
  { name: 'a trial', fields: { period_type: 'trial' }, expected: { periodType: 'TRIAL' } },
];

describe('describeSnapshot: a product of RevenueCat\'s record at the snapshot\'s time', () => {
  it.each(cases)('$name', ({ fields, expected }) => {
    const plan = snapshot({ subscriptions: { pro_monthly: subscription(fields) }, entitlements: { pro: { product_identifier: 'pro_monthly', expires_date: fields.expires_date ?? iso(AT + 10 * DAY), purchase_date: iso(AT - 20 * DAY), grace_period_expires_date: null } } });
    expect(plan.snapshot.sources).toEqual([expect.objectContaining({ productId: 'pro_monthly', entitlementIds: ['pro'], ...expected })]);
  });

  it('is one entry of the log: filed under the id, after the events of its instant, naming the customer\'s ids', () => {
    const plan = snapshot({ original_app_user_id: '$RCAnonymousID:abc' });
    expect(plan).toMatchObject({
      eventId: 'sync:1', type: 'SYNC', appUserId: 'user-1', eventAt: new Date(AT).toISOString(), rank: 3, subjectId: 'user-1',
      linkedIds: ['user-1', '$RCAnonymousID:abc'], ownerCandidates: ['user-1'], movedIds: ['user-1', '$RCAnonymousID:abc'], move: 'merge', effects: [], ignoredReason: null,
    });
  });

  it('names a Google Play base plan as webhooks do (<subscription id>:<base plan id>)', () => {
    const plan = snapshot({
      subscriptions: { premium: subscription({ store: 'play_store', product_plan_identifier: 'monthly' }) },
      entitlements: { pro: { product_identifier: 'premium', product_plan_identifier: 'monthly', expires_date: iso(AT + 10 * DAY), purchase_date: null, grace_period_expires_date: null } },
    });
    expect(plan.snapshot.sources.map((source) => [source.productId, source.entitlementIds])).toEqual([['premium:monthly', ['pro']]]);
  });

  it('keeps products that grant no entitlement, one-time purchases (lifetime), and grants with no purchase (promotional)', () => {
    const plan = snapshot({
      subscriptions: { old_monthly: subscription({ expires_date: iso(AT - 30 * DAY) }) },
      non_subscriptions: { lifetime: [{ id: 'a1', is_sandbox: false, purchase_date: iso(AT - 60 * DAY), store: 'app_store' }] },
      entitlements: {
        pro: { product_identifier: 'lifetime', expires_date: null, purchase_date: iso(AT - 60 * DAY), grace_period_expires_date: null },
        support: { product_identifier: 'rc_promo_support_yearly', expires_date: iso(AT + 100 * DAY), purchase_date: iso(AT - DAY), grace_period_expires_date: null },
      },
    });
    const byProduct = Object.fromEntries(plan.snapshot.sources.map((source) => [source.productId, source]));
    expect(byProduct.old_monthly).toMatchObject({ status: 'expired', entitlementIds: [] });
    expect(byProduct.lifetime).toMatchObject({ status: 'active', willRenew: false, expiresAt: null, entitlementIds: ['pro'], transactionId: 'a1' });
    expect(byProduct.rc_promo_support_yearly).toMatchObject({ status: 'active', entitlementIds: ['support'], store: null });
  });

  it('leaves a one-time purchase no entitlement points to as the events said (v1 shows one purchase per entitlement; a refunded one stays listed)', () => {
    const plan = snapshot({
      non_subscriptions: {
        lifetime: [{ id: 'a1', is_sandbox: false, purchase_date: iso(AT - 60 * DAY), store: 'app_store' }],
        lifetime_play: [{ id: 'a2', is_sandbox: false, purchase_date: iso(AT - 50 * DAY), store: 'play_store' }],
      },
      entitlements: { pro: { product_identifier: 'lifetime_play', expires_date: null, purchase_date: iso(AT - 50 * DAY) } },
    });
    expect(plan.snapshot.sources).toEqual([
      expect.objectContaining({ productId: 'lifetime', asEventsSaid: true, entitlementIds: [], mapping: 'partial' }),
      expect.objectContaining({ productId: 'lifetime_play', asEventsSaid: false, status: 'active', entitlementIds: ['pro'] }),
    ]);
    // What the entitlement shows lasts forever: nothing proves the other lifetime does not grant it.
    expect(plan.snapshot.entitlementExpiries).toEqual({ pro: null });
  });

  it('says until when each entitlement\'s shown purchase grants (the later of its expiry and grace end)', () => {
    const plan = snapshot({ entitlements: {
      pro: { product_identifier: 'm', expires_date: iso(AT - DAY), grace_period_expires_date: iso(AT + 5 * DAY), purchase_date: iso(AT - 31 * DAY) },
      extras: { product_identifier: 'y', expires_date: iso(AT + 300 * DAY), purchase_date: iso(AT - 65 * DAY) },
    } });
    expect(plan.snapshot.entitlementExpiries).toEqual({ pro: new Date(AT + 5 * DAY).toISOString(), extras: new Date(AT + 300 * DAY).toISOString() });
  });

  it('takes every entitlement of each purchase from REST v2, and a one-time purchase\'s refund', () => {
    const response = subscriberResponseSchema.parse({ request_date_ms: AT, subscriber: {
      entitlements: { pro: { product_identifier: 'lifetime', expires_date: null, purchase_date: iso(AT - 5 * DAY) } },
      subscriptions: { pro_monthly: subscription(), pro_yearly: { ...subscription({ store: 'play_store' }), product_plan_identifier: 'yearly' } },
      non_subscriptions: {
        lifetime: [{ id: 'a1', is_sandbox: false, purchase_date: iso(AT - 5 * DAY), store: 'app_store' }],
        coins: [{ id: 'a2', is_sandbox: false, purchase_date: iso(AT - 4 * DAY), store: 'app_store' }],
      },
    } });
    const item = (productId: string, store: string, entitlementIds: string[], status: string) => ({
      productId, store, environment: 'PRODUCTION' as const, entitlementIds, entitlementsComplete: true, status,
      givesAccess: null, autoRenewalStatus: null, endsAt: null, startsAt: null, storeIdentifier: null,
    });
    const plan = describeSnapshot(response, 'u', { eventId: 'sync:4', v2: {
      // v2 may name a Play base plan by its subscription id alone.
      subscriptions: [item('pro_monthly', 'APP_STORE', ['pro'], 'active'), item('pro_yearly', 'PLAY_STORE', ['pro', 'extras'], 'active')],
      purchases: [item('lifetime', 'APP_STORE', ['pro'], 'owned'), item('coins', 'APP_STORE', [], 'refunded')],
    } });
    const byProduct = Object.fromEntries(plan.snapshot.sources.map((source) => [source.productId, source]));
    expect(byProduct.pro_monthly).toMatchObject({ entitlementIds: ['pro'], mapping: 'complete', status: 'active' });
    expect(byProduct['pro_yearly:yearly']).toMatchObject({ entitlementIds: ['pro', 'extras'], mapping: 'complete' });
    expect(byProduct.lifetime).toMatchObject({ entitlementIds: ['pro'], mapping: 'complete', status: 'active', asEventsSaid: false });
    expect(byProduct.coins).toMatchObject({ status: 'refunded', asEventsSaid: false, entitlementIds: [] });
  });

  it('with REST v2 listing two subscriptions of one product, the one v1 shows (else the one that grants) stands for it; the other goes only to its own row', () => {
    const subscriptionItem = (storeIdentifier: string, givesAccess: boolean, endsAt: number) => ({
      productId: 'pro_monthly', store: 'PLAY_STORE', environment: 'PRODUCTION' as const, entitlementIds: ['pro'], entitlementsComplete: true,
      status: givesAccess ? 'active' : 'expired', givesAccess, autoRenewalStatus: 'will_renew', endsAt, startsAt: AT - 10 * DAY, storeIdentifier,
    });
    // The ended one (refunded) listed first: v2's order does not decide.
    const items = [subscriptionItem('GPA.B', false, AT - DAY), subscriptionItem('GPA.A', true, AT + 20 * DAY)];
    const sourcesOf = (subscriptions: Record<string, unknown>) => describeSnapshot(subscriberResponseSchema.parse({ request_date_ms: AT, subscriber: { subscriptions } }), 'u',
      { eventId: 'sync:5', v2: { subscriptions: items, purchases: [] } }).snapshot.sources.map((source) => [source.transactionId, source.status, source.matchOnly ?? false]);
    // v1 shows B (its latest transaction): B's record is written as v2 says of B; A only to A's own row.
    expect(sourcesOf({ pro_monthly: subscription({ store: 'play_store', store_transaction_id: 'GPA.B' }) })).toEqual([['GPA.B', 'expired', false], ['GPA.A', 'active', true]]);
    // v1 shows neither (it keyed the product otherwise): the one that grants stands for it.
    expect(sourcesOf({})).toEqual([['GPA.A', 'active', false], ['GPA.B', 'expired', true]]);
  });

  it('lists every entitlement RevenueCat shows, expired or sandbox ones too (a row of one it does not list stops granting)', () => {
    const response = subscriberResponseSchema.parse({ request_date_ms: AT, subscriber: {
      subscriptions: { a: subscription({ is_sandbox: true }), b: subscription({ expires_date: iso(AT - DAY) }) },
      entitlements: { sandboxed: { product_identifier: 'a', expires_date: iso(AT + DAY) }, lapsed: { product_identifier: 'b', expires_date: iso(AT - DAY) } },
    } });
    expect(describeSnapshot(response, 'u', { eventId: 'sync:3', ignoreSandbox: true }).snapshot.entitlementIds).toEqual(['sandboxed', 'lapsed']);
  });

  it('leaves sandbox purchases out when sandbox grants nothing (deployed, unless BILLING_SANDBOX_GRANTS=true)', () => {
    const response = subscriberResponseSchema.parse({ request_date_ms: AT, subscriber: { subscriptions: { a: subscription({ is_sandbox: true }), b: subscription() } } });
    expect(describeSnapshot(response, 'u', { eventId: 'sync:2', ignoreSandbox: true }).snapshot.sources.map((source) => source.productId)).toEqual(['b']);
  });

  it('is stored without the customer\'s attributes', () => {
    const response = subscriberResponseSchema.parse({ request_date_ms: AT, subscriber: { subscriber_attributes: { $email: { value: 'a@b.c' } }, first_seen: iso(AT) } });
    expect(trimSnapshot(response, 'u')).toEqual({ app_user_id: 'u', request_date: null, request_date_ms: AT, subscriber: expect.not.objectContaining({ subscriber_attributes: expect.anything() }) });
  });
});

describe('the v1 subscriber schema', () => {
  const refused = [
    { name: 'no subscriber', body: { request_date_ms: AT } },
    { name: 'no request time', body: { subscriber: {} } },
    { name: 'an entitlement without a product', body: { request_date_ms: AT, subscriber: { entitlements: { pro: { expires_date: null } } } } },
    { name: 'a time that is not one', body: { request_date_ms: AT, subscriber: { subscriptions: { a: { expires_date: 'next week' } } } } },
    { name: 'an error body', body: { code: 7225, message: 'Invalid API key.' } },
  ];
  it.each(refused)('refuses $name', ({ body }) => expect(subscriberResponseSchema.safeParse(body).success).toBe(false));

  it('keeps fields it does not know', () => {
    const parsed = subscriberResponseSchema.parse({ request_date_ms: AT, new_top_level: 1, subscriber: { other_purchases: {}, subscriptions: { a: { ...subscription(), new_field: true } } } });
    expect(parsed).toMatchObject({ new_top_level: 1, subscriber: { other_purchases: {}, subscriptions: { a: { new_field: true } } } });
  });
});
