import { randomBytes, randomUUID } from 'node:crypto';
import type { BillingWebhookBody } from './webhook-body.ts';

/**
 * Fresh sample events for trying the service (`npm run sample-event`): shaped as RevenueCat sends
 * them (https://www.revenuecat.com/docs/integrations/webhooks/sample-events and
 * .../event-types-and-fields: the same fields, App Store ids, prices, an `app_id`), dated now, and
 * consistent with each other for one user: each continues the user's current subscription period
 * (kept between runs by the caller), so a RENEWAL starts the next period of the subscription the
 * INITIAL_PURCHASE began, a CANCELLATION names that period's end, and so on.
 *
 * Each event is "now": an event that ends a period (RENEWAL, EXPIRATION, a refund) ends the current
 * one now, as a sandbox store does when its accelerated clock reaches the period's end.
 */

export const SAMPLE_EVENT_TYPES = [
  'INITIAL_PURCHASE', 'RENEWAL', 'CANCELLATION', 'UNCANCELLATION', 'BILLING_ISSUE', 'EXPIRATION', 'PRODUCT_CHANGE',
  'NON_RENEWING_PURCHASE', 'TRANSFER', 'TEST', 'SUBSCRIPTION_EXTENDED', 'SUBSCRIPTION_PAUSED', 'TEMPORARY_ENTITLEMENT_GRANT', 'REFUND_REVERSED',
] as const;
export type SampleEventType = (typeof SAMPLE_EVENT_TYPES)[number];

/** RevenueCat's cancellation reasons (CUSTOMER_SUPPORT: a refund). */
export const CANCEL_REASONS = ['UNSUBSCRIBE', 'BILLING_ERROR', 'DEVELOPER_INITIATED', 'PRICE_INCREASE', 'CUSTOMER_SUPPORT', 'UNKNOWN'] as const;
/** RevenueCat's expiration reasons (SUBSCRIPTION_PAUSED: a pause took effect). */
export const EXPIRATION_REASONS = ['UNSUBSCRIBE', 'BILLING_ERROR', 'DEVELOPER_INITIATED', 'PRICE_INCREASE', 'CUSTOMER_SUPPORT', 'UNKNOWN', 'SUBSCRIPTION_PAUSED'] as const;

export const SAMPLE_PRODUCTS = {
  monthly: 'com.example.pro.monthly',
  yearly: 'com.example.pro.yearly',
  lifetime: 'com.example.pro.lifetime',
} as const;
export const SAMPLE_ENTITLEMENT = 'pro';
const SAMPLE_APP_ID = 'app1a2b3c4d5e';
const DAY_MS = 86_400_000;
/** The App Store's billing grace period for a monthly subscription (16 days). */
const GRACE_MS = 16 * DAY_MS;

/** The subscription period a user's samples continue (the caller keeps it between runs). */
export interface SamplePeriod {
  productId: string;
  purchasedAtMs: number;
  /** null: a lifetime purchase. */
  expiresAtMs: number | null;
  originalTransactionId: string;
  transactionId: string;
}

export interface SampleOptions {
  type: SampleEventType;
  user: string;
  now: Date;
  /** CANCELLATION's cancel_reason (default UNSUBSCRIBE), EXPIRATION's expiration_reason (default UNSUBSCRIBE). */
  reason?: string;
  /** TRANSFER: who receives the purchases (transferred_to). */
  to?: string;
  environment: 'SANDBOX' | 'PRODUCTION';
  /** The user's current period, from earlier samples (null: none yet). */
  period: SamplePeriod | null;
}

export interface Sample {
  body: BillingWebhookBody;
  /** The user's period after this event (what the next sample continues). */
  period: SamplePeriod | null;
}

export function buildSampleEvent(options: SampleOptions): Sample {
  const now = options.now.getTime();
  const current = options.period;
  // The subscription period the event speaks of; before any, a monthly one beginning now.
  const period: SamplePeriod = current && current.expiresAtMs !== null ? current : newPeriod(SAMPLE_PRODUCTS.monthly, now, monthLater(now));
  const base = {
    id: randomUUID().toUpperCase(),
    app_id: SAMPLE_APP_ID,
    type: options.type,
    event_timestamp_ms: now,
    app_user_id: options.user,
    original_app_user_id: options.user,
    aliases: [options.user],
    environment: options.environment,
    store: 'APP_STORE',
    entitlement_id: null,
    entitlement_ids: [SAMPLE_ENTITLEMENT],
    period_type: 'NORMAL',
    presented_offering_id: 'default',
    country_code: 'US',
    currency: 'USD',
    subscriber_attributes: {},
    takehome_percentage: 0.85,
    commission_percentage: 0.15,
    tax_percentage: 0,
    is_family_share: false,
  };
  const ofPeriod = (p: SamplePeriod, price: number) => ({
    product_id: p.productId,
    purchased_at_ms: p.purchasedAtMs,
    expiration_at_ms: p.expiresAtMs,
    transaction_id: p.transactionId,
    original_transaction_id: p.originalTransactionId,
    price,
    price_in_purchased_currency: price,
  });
  const event = (fields: Record<string, unknown>, next: SamplePeriod | null): Sample => ({ body: { api_version: '1.0', event: { ...base, ...fields } } as BillingWebhookBody, period: next });

  switch (options.type) {
    case 'INITIAL_PURCHASE': {
      const next = newPeriod(SAMPLE_PRODUCTS.monthly, now, monthLater(now));
      return event(ofPeriod(next, 9.99), next);
    }
    case 'RENEWAL': {
      // The store renewed now: the next period of the same subscription (a lapsed one resumes).
      const next: SamplePeriod = { ...period, purchasedAtMs: now, expiresAtMs: monthLater(now), transactionId: transactionId() };
      return event({ ...ofPeriod(next, 9.99), is_trial_conversion: false }, next);
    }
    case 'SUBSCRIPTION_EXTENDED': {
      const next: SamplePeriod = { ...period, expiresAtMs: period.expiresAtMs! + 7 * DAY_MS };
      return event(ofPeriod(next, 0), next);
    }
    case 'CANCELLATION': {
      const reason = (options.reason ?? 'UNSUBSCRIBE').toUpperCase();
      if (reason === 'CUSTOMER_SUPPORT') {
        // A refund: access ends now (its expiration is the refund time), with a negative price.
        const next: SamplePeriod = { ...period, expiresAtMs: now };
        return event({ ...ofPeriod(next, -9.99), cancel_reason: reason }, next);
      }
      return event({ ...ofPeriod(period, 9.99), cancel_reason: reason }, period);
    }
    case 'UNCANCELLATION':
      return event(ofPeriod(period, 9.99), period);
    case 'REFUND_REVERSED': {
      // The refund is undone: the period runs to its end again (a month after it began).
      const next: SamplePeriod = { ...period, expiresAtMs: Math.max(period.expiresAtMs!, monthLater(period.purchasedAtMs)) };
      return event(ofPeriod(next, 9.99), next);
    }
    case 'BILLING_ISSUE':
      // The renewal at the period's end could not be charged: grace for the store's grace period after it.
      return event({ ...ofPeriod(period, 0), grace_period_expiration_at_ms: period.expiresAtMs! + GRACE_MS }, period);
    case 'SUBSCRIPTION_PAUSED':
      return event({ ...ofPeriod(period, 0), auto_resume_at_ms: monthLater(period.expiresAtMs!) }, period);
    case 'EXPIRATION': {
      // The period ends now.
      const next: SamplePeriod = { ...period, expiresAtMs: Math.min(period.expiresAtMs!, now) };
      return event({ ...ofPeriod(next, 0), expiration_reason: (options.reason ?? 'UNSUBSCRIBE').toUpperCase() }, next);
    }
    case 'PRODUCT_CHANGE':
      // Upgrading at the period's end (the App Store's deferred change): the new product is named.
      return event({ ...ofPeriod(period, 9.99), new_product_id: SAMPLE_PRODUCTS.yearly }, period);
    case 'TEMPORARY_ENTITLEMENT_GRANT':
      return event({ ...ofPeriod({ ...period, purchasedAtMs: now, expiresAtMs: now + DAY_MS }, 0), store: 'APP_STORE', transaction_id: null, original_transaction_id: null }, current);
    case 'NON_RENEWING_PURCHASE': {
      const lifetime = newPeriod(SAMPLE_PRODUCTS.lifetime, now, null);
      return event({ ...ofPeriod(lifetime, 99.99), original_transaction_id: lifetime.transactionId }, current);
    }
    case 'TRANSFER': {
      // As RevenueCat sends one: no app_user_id, the two sides, the store and environment.
      const to = options.to ?? randomUUID();
      const { app_user_id: _a, original_app_user_id: _o, aliases: _l, entitlement_ids: _e, entitlement_id: _d, ...rest } = base;
      void _a; void _o; void _l; void _e; void _d;
      return { body: { api_version: '1.0', event: { ...rest, transferred_from: [options.user], transferred_to: [to] } } as unknown as BillingWebhookBody, period: null };
    }
    case 'TEST':
      // What the dashboard's "Send test event" sends: a TEST for a made-up product and user.
      return event({ product_id: 'test_product', purchased_at_ms: now, expiration_at_ms: now + 7 * DAY_MS, transaction_id: null, original_transaction_id: null, price: 0, price_in_purchased_currency: 0, presented_offering_id: null }, current);
  }
}

function newPeriod(productId: string, now: number, expiresAtMs: number | null): SamplePeriod {
  const id = transactionId();
  return { productId, purchasedAtMs: now, expiresAtMs, originalTransactionId: id, transactionId: id };
}

/** An App Store transaction id: 16 digits. */
function transactionId(): string {
  return `2000000${BigInt(`0x${randomBytes(5).toString('hex')}`).toString().padStart(9, '0').slice(-9)}`;
}

/** The same time a month later (a monthly period). */
function monthLater(ms: number): number {
  const date = new Date(ms);
  date.setUTCMonth(date.getUTCMonth() + 1);
  return date.getTime();
}
