import fc from 'fast-check';
import { randomUUID } from 'node:crypto';
import * as billingRoute from '../../app/api/webhooks/subscription-billing/route.ts';
import { toEntitlementViews, type EntitlementRow, type EntitlementView } from '../../lib/billing/entitlement-view.ts';
import type { BillingWebhookBody } from '../../lib/billing/webhook-body.ts';
import { DEV_WEBHOOK_SECRETS } from '../../lib/config.ts';
import type { TestDatabase } from '../support/databases.ts';
import { callRoute, type RouteResponse } from '../support/http.ts';
import { DAY_MS, T0, fixture } from './fixtures.ts';

export { billingRoute };

/** The embedded-mode secret (the tests run without DATABASE_URL, like `npm run dev`). */
export const WEBHOOK_AUTHORIZATION = `Bearer ${DEV_WEBHOOK_SECRETS.subscription}`;

/** POST a body to the webhook over real HTTP, authenticated unless headers say otherwise. */
export function deliver(body: unknown, headers: Record<string, string> = {}): Promise<RouteResponse> {
  return callRoute(billingRoute, { method: 'POST', headers: { authorization: WEBHOOK_AUTHORIZATION, ...headers }, body });
}

/** T0 plus days (fractions allowed), in epoch milliseconds: the sequences' clock. */
export const day = (days: number) => T0 + Math.round(days * DAY_MS);
export const isoDay = (days: number) => new Date(day(days)).toISOString();

export interface EventTimes {
  /** event_timestamp_ms, in days after T0. */
  at: number;
  purchased?: number;
  /** null: no expiry (lifetime). */
  expires?: number | null;
}

/**
 * A corpus body for one subscriber, with a fresh event id and the times of a sequence step.
 * Other event fields can be replaced (undefined removes a field).
 */
export function billingEvent(name: string, user: string, times: EventTimes, fields: Record<string, unknown> = {}): BillingWebhookBody {
  return fixture(name, {
    id: `evt-${randomUUID()}`,
    app_user_id: user,
    aliases: [user],
    original_app_user_id: user,
    event_timestamp_ms: day(times.at),
    ...(times.purchased !== undefined ? { purchased_at_ms: day(times.purchased) } : {}),
    ...(times.expires !== undefined ? { expiration_at_ms: times.expires === null ? null : day(times.expires) } : {}),
    ...fields,
  });
}

/** What GET /api/me would show for the user at `now`. */
export async function entitlementsOf(db: TestDatabase, userId: string, now: Date): Promise<EntitlementView[]> {
  return toEntitlementViews((await db.adapter.call('account_entitlements', { p_user_id: userId, p_now: now })) as EntitlementRow[]);
}

export async function eventRow(db: TestDatabase, eventId: string) {
  const rows = await db.sql<{ outcome: string; type: string; app_user_id: string | null; owner_id: string | null; environment: string | null; count: string }>(
    'select outcome, type, app_user_id, owner_id, environment, count(*) over () as count from public.billing_events where event_id = $1', [eventId]);
  return rows[0] && { ...rows[0], count: Number(rows[0].count) };
}

/**
 * The delivery orders a flow is tried in: every order of n deliveries (n <= 4), or, for more, in
 * order, reversed and `sample` others drawn with `seed` (the same ones every run).
 */
export function deliveryOrders(n: number, { sample, seed }: { sample: number; seed: number }): number[][] {
  const identity = Array.from({ length: n }, (_, i) => i);
  if (n <= 4) {
    const all: number[][] = [];
    const permute = (rest: number[], prefix: number[]) => {
      if (rest.length === 0) all.push(prefix);
      rest.forEach((value, i) => permute([...rest.slice(0, i), ...rest.slice(i + 1)], [...prefix, value]));
    };
    permute(identity, []);
    return all;
  }
  return [identity, [...identity].reverse(), ...fc.sample(fc.shuffledSubarray(identity, { minLength: n, maxLength: n }), { numRuns: sample, seed })];
}
