import { z } from 'zod';

/**
 * RevenueCat REST API v1, `GET /v1/subscribers/{app_user_id}`: the customer as RevenueCat records
 * it (the "Customer Info" model). Only what the sync reads is checked; every other field is kept
 * (loose objects), because RevenueCat adds fields without notice. A body without `subscriber` or
 * `request_date_ms` is not a subscriber, whatever its status.
 *
 * Times are ISO 8601 strings; `expires_date` null is a lifetime purchase. `entitlements` include
 * expired ones and show, per entitlement, the purchase with the furthest expiration. Google Play
 * products set up after February 2023 are keyed by subscription id with `product_plan_identifier`
 * beside it (webhooks name them `<subscription id>:<base plan id>`).
 */
/** The latest instant a JavaScript Date holds (and Postgres stores): beyond it a time is not one. */
const MAX_TIME_MS = 8.64e15;
const time = z.string().refine((value) => Number.isFinite(Date.parse(value)), 'must be an ISO 8601 time');
const optionalTime = time.nullable().optional();
const optionalText = z.string().nullable().optional();

export const subscriptionSchema = z.looseObject({
  expires_date: optionalTime,
  purchase_date: optionalTime,
  original_purchase_date: optionalTime,
  period_type: optionalText,
  store: optionalText,
  is_sandbox: z.boolean().nullable().optional(),
  unsubscribe_detected_at: optionalTime,
  billing_issues_detected_at: optionalTime,
  grace_period_expires_date: optionalTime,
  refunded_at: optionalTime,
  auto_resume_date: optionalTime,
  store_transaction_id: optionalText,
  product_plan_identifier: optionalText,
});

export const nonSubscriptionSchema = z.looseObject({
  id: optionalText,
  purchase_date: optionalTime,
  store: optionalText,
  is_sandbox: z.boolean().nullable().optional(),
  store_transaction_id: optionalText,
});

export const subscriberEntitlementSchema = z.looseObject({
  product_identifier: z.string().min(1),
  product_plan_identifier: optionalText,
  expires_date: optionalTime,
  grace_period_expires_date: optionalTime,
  purchase_date: optionalTime,
});

export const subscriberResponseSchema = z.looseObject({
  request_date_ms: z.number().int().nonnegative().max(MAX_TIME_MS),
  request_date: optionalText,
  subscriber: z.looseObject({
    original_app_user_id: optionalText,
    entitlements: z.record(z.string(), subscriberEntitlementSchema).nullable().optional().transform((value) => value ?? {}),
    subscriptions: z.record(z.string(), subscriptionSchema).nullable().optional().transform((value) => value ?? {}),
    non_subscriptions: z.record(z.string(), z.array(nonSubscriptionSchema)).nullable().optional().transform((value) => value ?? {}),
  }),
});

export type SubscriberResponse = z.output<typeof subscriberResponseSchema>;
export type RevenueCatSubscription = z.output<typeof subscriptionSchema>;
export type RevenueCatNonSubscription = z.output<typeof nonSubscriptionSchema>;
export type RevenueCatEntitlement = z.output<typeof subscriberEntitlementSchema>;
