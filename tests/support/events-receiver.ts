import { expect } from 'vitest';
import { toEntitlementViews, type EntitlementRow, type EntitlementView } from '../../lib/billing/entitlement-view.ts';
import { eventMessage, TOLD_FIELDS } from '../../lib/events/messages.ts';
import type { StoredEvent } from '../../lib/events/outbox.ts';
import type { TestDatabase } from './databases.ts';

/**
 * A receiver of the outbound events, as docs/events.md tells one to act: it applies a user's events
 * in sequence order (granted and updated set the entitlement as the event says, revoked removes
 * it, customer.deleted forgets everything). What it then holds must be what GET /api/me shows.
 *
 * Events are derived at the database's clock, the real one. The billing flow suites date their
 * events from a fixed day in the past (tests/billing/fixtures.ts T0), so in most of their flows
 * nothing grants by now and a receiver holds nothing, as GET /api/me shows nothing: the check there
 * catches what is told for lifetime and long purchases, and the order and form of every event. The
 * outbox's own tests (tests/events/) tell changes at the real clock, lapses by time included.
 */

/** The bodies receivers were sent for the user, in sequence order. */
export async function receivedBodies(db: TestDatabase, userId: string): Promise<ReceivedBody[]> {
  const rows = await db.sql<StoredEvent>(
    'select id as event_id, type, user_id, sequence, data, created_at from public.outbound_events where user_id = $1 order by sequence', [userId]);
  return rows.map((row) => JSON.parse(eventMessage(row).body) as ReceivedBody);
}

export interface ReceivedBody {
  type: string;
  data: { sequence: number; entitlement?: EntitlementView; previous?: EntitlementView; changed?: string[] };
}

/** What a receiver holds after applying the bodies, per entitlement (the fields it acts on), and what looked wrong on the way. */
export function applyReceived(bodies: ReceivedBody[]): { held: Record<string, Told>; faults: string[] } {
  const held: Record<string, Told> = {};
  const faults: string[] = [];
  let expected = bodies[0]?.data.sequence ?? 1;
  for (const { type, data } of bodies) {
    if (data.sequence !== expected) faults.push(`sequence ${data.sequence} where ${expected} was next`);
    expected = data.sequence + 1;
    const id = data.entitlement?.id;
    if (type === 'customer.deleted') for (const key of Object.keys(held)) delete held[key];
    if (!id) continue;
    if (type === 'entitlement.granted' && held[id]) faults.push(`#${data.sequence} granted ${id}, granted already`);
    if (type !== 'entitlement.granted' && !held[id]) faults.push(`#${data.sequence} ${type} of ${id}, never granted`);
    if (type === 'entitlement.updated') {
      if (held[id] && JSON.stringify(told(data.previous!)) !== JSON.stringify(held[id])) faults.push(`#${data.sequence} updated ${id}: its previous is not what was told`);
      if (data.changed?.length === 0) faults.push(`#${data.sequence} updated ${id} with nothing changed`);
    }
    if (type === 'entitlement.revoked') delete held[id];
    else held[id] = told(data.entitlement!);
  }
  return { held, faults };
}

type Told = Record<(typeof TOLD_FIELDS)[number], unknown>;
const told = (view: EntitlementView): Told => Object.fromEntries(TOLD_FIELDS.map((field) => [field, view[field] ?? null])) as Told;

/**
 * Once the scan of lapses has run (as the cron runs it), what a receiver of the user's events holds
 * is what GET /api/me shows now: the same entitlements granting, with the same fields.
 */
export async function expectEventsTellTheAccount(db: TestDatabase, userId: string, label: string): Promise<void> {
  for (let more = true; more;) {
    [{ more }] = await db.sql<{ more: boolean }>("select (public.outbound_tell_lapses(10000)->>'more')::boolean as more");
  }
  const { held, faults } = applyReceived(await receivedBodies(db, userId));
  const [{ rows }] = await db.sql<{ rows: EntitlementRow[] }>('select public.account_entitlements($1, now()) as rows', [userId]);
  const shown = Object.fromEntries(toEntitlementViews(rows).filter((view) => view.active).map((view) => [view.id, told(view)]));
  expect({ label, faults, held }).toEqual({ label, faults: [], held: shown });
}
