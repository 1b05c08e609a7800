import { callDb } from '../db/index.ts';
import { DomainError } from '../errors.ts';
import { formatUtc } from '../words.ts';
import { isAnonymousId, type BillingEventPlan, type EntitlementEffect } from './event-effects.ts';
import { planOf, type StoredEntry } from './rebuild.ts';
import { getConfig } from '../config.ts';

/**
 * "Why does this user (not) have pro?", answered from the stored log in words a support person
 * reads (GET /api/admin/billing/subscribers/{appUserId}, `npm run billing:explain`): the customer's
 * ids (aliases, transfers), each event and snapshot in event order with what it did to which row,
 * and, per entitlement, why it grants or not now.
 *
 * ONE database call (public.billing_explain, supabase/schemas/09_operator.sql)
 * reads the ids, the log, the stored rows and the sync marks, and replays the customer's history
 * step by step as the fold does, inside a transaction it rolls back: what each step did is what
 * the fold decides, and nothing is written. Entries an older version stored without a plan get
 * theirs computed here (as a rebuild would) and the call is made again with them. Everything else
 * here is a pure function of that answer and the clock.
 */

/** A stored entitlement row, as public.billing_explain returns it (snake_case, times as JSON timestamps). */
export interface StoredRow {
  app_user_id: string;
  entitlement_id: string;
  product_id: string | null;
  source_key: string;
  status: string;
  will_renew: boolean;
  expires_at: string | null;
  grace_expires_at: string | null;
  pending_product_id: string | null;
  store: string | null;
  environment: string | null;
  period_type: string | null;
  original_transaction_id: string | null;
  transaction_id: string | null;
  period_purchased_at: string | null;
  auto_resume_at: string | null;
  last_event_id: string;
  last_event_at: string;
  granted_at: string | null;
  origin: string;
  synced_at: string | null;
  grants_until: string;
  /** Whether it grants at the time asked. */
  grants?: boolean;
}

export interface ExplainEntry {
  eventId: string;
  type: string;
  eventAt: string;
  receivedAt: string;
  outcome: string;
  ownerId: string | null;
  subjectId: string | null;
  appUserId: string | null;
  environment: string | null;
  movedIds: string[];
  confirmedAt: string | null;
  plan: (BillingEventPlan & { snapshot?: {
    sources: { productId: string; status: string; entitlementIds: string[] }[];
    entitlementExpiries?: Record<string, string | null>;
    leftOut?: { productId: string; entitlementIds: string[] }[];
  } }) | null;
  sortKey: string;
  fields: {
    cancelReason?: string; expirationReason?: string; transferredFrom?: string[]; transferredTo?: string[]; newProductId?: string;
    price?: number; currency?: string; aliases?: string[]; originalAppUserId?: string;
  };
}

interface StepChange {
  key: string;
  before: StoredRow | null;
  after: StoredRow | null;
}

interface ExplainStep {
  eventId: string;
  outcome: string;
  ownerId: string | null;
  changes: StepChange[];
}

/** The answer of public.billing_explain. */
export interface ExplainRecord {
  appUserId: string;
  known: boolean;
  /** When this id was erased (its user deleted), if it was and has not signed up again since. */
  erasedAt: string | null;
  groupId: string | null;
  ids: { appUserId: string; customerId: string | null; checkpointKey: string | null }[];
  entries: ExplainEntry[];
  steps: ExplainStep[];
  stored: StoredRow[];
  replayed: StoredRow[] | null;
  syncMarks: { appUserId: string; reason: string; requestedAt: string; attempts: number; nextAttemptAt: string; error: string | null }[];
}

/** A row's state, as the history shows it before and after a step. */
export interface RowState {
  status: string;
  expiresAt: string | null;
  graceExpiresAt: string | null;
  willRenew: boolean;
}

export interface SubscriberExplanation {
  appUserId: string;
  checkedAt: string;
  /** Every id of the customer (one RevenueCat customer, and the other side of its transfers), each with its part in words. */
  ids: { appUserId: string; role: string }[];
  /** What GET /api/me shows for this id (its rows, and those of the customer RevenueCat merged it into), and why. */
  entitlements: {
    id: string;
    grantsNow: boolean;
    /** The verdict, then one sentence per source (a product's row), the one that decides first. */
    why: string[];
  }[];
  /** The rows of the other ids of this history (the other side of a transfer, aliases), one sentence each. */
  elsewhere: string[];
  /** Every entry of the log, in event order: what it was (`outcome`: what was stored when it arrived) and what it did. */
  history: (Pick<ExplainEntry, 'eventId' | 'type' | 'eventAt' | 'receivedAt' | 'outcome' | 'ownerId'> & {
    /** The entry in one line: when, what, about which product. */
    title: string;
    /** What it did, in words. */
    did: string;
    changes: { appUserId: string; entitlementId: string; productId: string | null; before: RowState | null; after: RowState | null; words: string }[];
  })[];
  /** Marks for a sync from RevenueCat, in words (empty: none). */
  sync: string[];
  /** The stored rows are the fold of the stored log (false: the decision code changed since; `npm run billing:rebuild` shows it). */
  consistent: boolean;
  notes: string[];
}

export async function explainSubscriber(appUserId: string, now = new Date()): Promise<SubscriberExplanation> {
  if (appUserId.length < 1 || [...appUserId].length > 256) throw new DomainError('invalid_request', 'An app user id is 1 to 256 characters; an event naming a longer one is stored but holds no entitlement, so there is nothing to explain.');
  // (JSON bodies with U+0000 are refused, so no event can name such an id; the database could not hold it.)
  if (appUserId.includes('\u0000')) throw new DomainError('invalid_request', 'An app user id has no NUL character (U+0000): no event can name one.');
  let record = await callDb<ExplainRecord | { plansMissing: StoredEntry[] }>('billing_explain', { p_app_user_id: appUserId, p_now: now });
  if ('plansMissing' in record) {
    const ignoreSandbox = getConfig().billingIgnoreSandbox;
    const plans = Object.fromEntries(record.plansMissing.map((entry) => [entry.eventId, planOf(entry, { ignoreSandbox })]));
    record = await callDb<ExplainRecord>('billing_explain', { p_app_user_id: appUserId, p_now: now, p_plans: plans });
    if ('plansMissing' in record) throw new Error('billing_explain still found entries without plans');
  }
  if (!record.known) throw new DomainError('subscriber_unknown', record.erasedAt
    ? `This app user id was erased on ${formatUtc(record.erasedAt)} (its user was deleted): nothing is kept under it, and an event naming it since grants nothing.`
    : 'No RevenueCat event or sync has named this app user id.');
  return describeExplanation(record, now);
}

/** The words, from what the database returned: a pure function of it and the clock. */
export function describeExplanation(record: ExplainRecord, now: Date): SubscriberExplanation {
  const byId = new Map(record.entries.map((entry) => [entry.eventId, entry]));
  const steps = new Map(record.steps.map((step) => [step.eventId, step]));
  const checkpoints = record.ids.filter((id) => id.checkpointKey !== null).map((id) => id.checkpointKey!).sort();
  const checkpointKey = checkpoints.at(-1) ?? null;

  const history = record.entries.map((entry) => {
    const step = steps.get(entry.eventId);
    const changes = (step?.changes ?? []).map((change) => describeChange(change));
    return {
      eventId: entry.eventId,
      type: entry.type,
      eventAt: iso(entry.eventAt),
      receivedAt: iso(entry.receivedAt),
      outcome: entry.outcome,
      ownerId: entry.ownerId,
      title: titleOf(entry),
      did: whatItDid(entry, step, record, checkpointKey),
      changes,
    };
  });

  return {
    appUserId: record.appUserId,
    checkedAt: now.toISOString(),
    ids: describeIds(record, steps),
    ...describeEntitlements(record, byId, steps, now),
    history,
    sync: record.syncMarks.map((mark) => `${mark.appUserId} is marked for a sync from RevenueCat since ${formatUtc(mark.requestedAt)} (${REASON_WORDS[mark.reason] ?? mark.reason})`
      + `${mark.attempts > 0 ? `; ${mark.attempts} attempt(s) failed, the last with: ${mark.error ?? 'no message'}` : ''}; due ${formatUtc(mark.nextAttemptAt)}.`),
    consistent: record.replayed === null || sameRows(record.stored, record.replayed),
    notes: notesOf(record),
  };
}

// ---------------------------------------------------------------------------------------------
// Ids

function describeIds(record: ExplainRecord, steps: Map<string, ExplainStep>): SubscriberExplanation['ids'] {
  const members = record.ids.length > 0 ? record.ids.map((id) => id.appUserId) : [record.appUserId];
  const transfers = record.entries.filter((entry) => entry.type === 'TRANSFER' && entry.plan?.move === 'transfer' && !entry.plan.ignoredReason)
    .map((entry) => ({ entry, moved: whatMoved(entry, steps.get(entry.eventId)) }));
  return members.map((id) => {
    const parts: string[] = [];
    if (id === record.appUserId) parts.push('the id asked about');
    if (isAnonymousId(id)) parts.push('anonymous (an app install before sign-in)');
    // An anonymous id's customer is where a TRANSFER naming it finds the purchases, not an id it reads
    // through: it is told as one customer with the others below.
    const customer = isAnonymousId(id) ? undefined : record.ids.find((candidate) => candidate.appUserId === id)?.customerId;
    if (customer) parts.push(`another id of customer ${customer} (RevenueCat named them together); its rows are kept under ${customer}`);
    const merged = record.ids.filter((candidate) => candidate.customerId === id).map((candidate) => candidate.appUserId);
    if (merged.length > 0) parts.push(`keeps the rows of its other id(s) ${merged.join(', ')}`);
    // Named together by RevenueCat (app_user_id, original_app_user_id, aliases): one customer.
    const together = [...new Set(record.entries.filter((entry) => entry.plan?.move === 'merge' && entry.plan.linkedIds.includes(id))
      .flatMap((entry) => entry.plan!.linkedIds))].filter((other) => other !== id && other !== customer && !merged.includes(other));
    if (together.length > 0) parts.push(`one customer with ${together.join(', ')} (RevenueCat's events name them together)`);
    // What each transfer did (the fold's outcome), not what it named.
    for (const { entry, moved } of transfers) {
      const when = `on ${formatUtc(entry.eventAt)} (TRANSFER ${entry.eventId})`;
      if (moved.from.includes(id)) parts.push(`its purchases were transferred to ${moved.to} ${when}`);
      else if (moved.named.includes(id)) parts.push(`named as the source of TRANSFER ${entry.eventId} to ${moved.to} on ${formatUtc(entry.eventAt)}, but it held no purchases to move`);
      if (moved.to === id) {
        parts.push(moved.from.length > 0 ? `received the purchases of ${moved.from.join(', ')} ${when}`
          : `named as the receiver of TRANSFER ${entry.eventId} from ${moved.named.join(', ')} on ${formatUtc(entry.eventAt)}, which moved nothing`);
      }
    }
    return { appUserId: id, role: parts.length > 0 ? parts.join('; ') : 'named together with the others by an event' };
  });
}

/**
 * What a TRANSFER did, from the fold's outcome: the ids whose rows it moved (the replay's changes:
 * rows left `transferred`; before a checkpoint, the stored outcome), to whom (the owner the fold
 * chose), and every id it named as a source.
 */
function whatMoved(entry: ExplainEntry, step: ExplainStep | undefined): { from: string[]; to: string; named: string[] } {
  const plan = entry.plan!;
  const to = step?.ownerId ?? entry.ownerId ?? plan.subjectId ?? '(no one)';
  const named = [...new Set(plan.movedIds)].filter((id) => id !== to);
  const from = step
    ? [...new Set(step.changes.filter((change) => change.before && change.before.status !== 'transferred' && change.after?.status === 'transferred')
      .map((change) => change.before!.app_user_id))]
    : entry.outcome === 'applied' ? [...new Set(entry.movedIds)].filter((id) => id !== to) : [];
  return { from, to, named };
}

// ---------------------------------------------------------------------------------------------
// Entitlements now

function describeEntitlements(record: ExplainRecord, entries: Map<string, ExplainEntry>, steps: Map<string, ExplainStep>, now: Date): Pick<SubscriberExplanation, 'entitlements' | 'elsewhere'> {
  // As GET /api/me reads them (public.account_entitlements): the id's rows and its customer's.
  const customer = record.ids.find((id) => id.appUserId === record.appUserId)?.customerId ?? null;
  const own = (row: StoredRow) => row.app_user_id === record.appUserId || row.app_user_id === customer;
  const grants = (row: StoredRow) => row.grants ?? untilMs(row) > now.getTime();
  const sentence = (row: StoredRow) => `${grants(row) ? 'grants' : 'does not grant'}: ${sourceName(row, record)}: ${stateSentence(row, now, record, steps)}${originSentence(row, rowHistory(keyOf(row), record, steps), entries)}`;
  const byEntitlement = new Map<string, StoredRow[]>();
  for (const row of record.stored.filter(own)) byEntitlement.set(row.entitlement_id, [...(byEntitlement.get(row.entitlement_id) ?? []), row]);
  const entitlements = [...byEntitlement.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([id, rows]) => {
    // The row that decides first: a granting one that lasts longest, then the latest.
    const ordered = [...rows].sort((a, b) => Number(grants(b)) - Number(grants(a)) || untilMs(b) - untilMs(a) || Date.parse(b.last_event_at) - Date.parse(a.last_event_at));
    const grantsNow = ordered.some(grants);
    return { id, grantsNow, why: [`${id}: ${grantsNow ? 'grants now' : 'does not grant now'}.`, ...ordered.map(sentence)] };
  });
  const elsewhere = record.stored.filter((row) => !own(row)).map((row) => `${row.entitlement_id}: ${sentence(row)}`);
  return { entitlements, elsewhere };
}

/**
 * The steps that changed the row with this key, in event order; a row a move made (a TRANSFER, ids
 * merged) continues the history of the row it came from, under the id it was moved from.
 */
function rowHistory(key: string, record: ExplainRecord, steps: Map<string, ExplainStep>, before = Infinity): { entry: ExplainEntry; change: StepChange }[] {
  const found: { entry: ExplainEntry; change: StepChange }[] = [];
  record.entries.forEach((entry, index) => {
    if (index >= before) return;
    const change = steps.get(entry.eventId)?.changes.find((candidate) => candidate.key === key);
    if (change) found.push({ entry, change });
  });
  const first = found[0];
  if (first && !first.change.before && first.entry.plan?.move) {
    const made = first.change.after!;
    const origin = steps.get(first.entry.eventId)!.changes.find((candidate) => candidate.before && candidate.key !== key
      && candidate.before.entitlement_id === made.entitlement_id && candidate.before.source_key === made.source_key
      && (candidate.after === null || candidate.after.status === 'transferred'));
    if (origin) return [...rowHistory(origin.key, record, steps, record.entries.indexOf(first.entry)), ...found];
  }
  return found;
}

const untilMs = (row: StoredRow) => (row.grants_until === 'infinity' ? Infinity : row.grants_until === '-infinity' ? -Infinity : Date.parse(row.grants_until));

function sourceName(row: StoredRow, record: ExplainRecord): string {
  const where = [row.store, row.environment === 'SANDBOX' ? 'sandbox' : null].filter(Boolean).join(', ');
  const owner = record.ids.length > 1 || row.app_user_id !== record.appUserId ? ` held by ${row.app_user_id}` : '';
  return `${row.product_id ?? `purchase ${row.original_transaction_id ?? row.transaction_id ?? '(no product)'}`}${where ? ` (${where})` : ''}${owner}`;
}

/** Where the row stands now, and why that grants or not. */
function stateSentence(row: StoredRow, now: Date, record: ExplainRecord, steps: Map<string, ExplainStep>): string {
  const period = periodWords(row);
  const until = row.expires_at === null ? 'with no end' : `until ${formatUtc(row.expires_at)}`;
  const ended = row.expires_at !== null && Date.parse(row.expires_at) <= now.getTime();
  switch (row.status) {
    case 'active':
    case 'cancelled_active':
    case 'temporary':
    case 'billing_issue': {
      if (untilMs(row) <= now.getTime()) {
        return `its period (${period}) ended ${formatUtc(row.expires_at)} and no renewal came (nor an EXPIRATION), so it lapsed on time`;
      }
      const what = row.status === 'active'
        ? `active ${until} (${period}${row.will_renew ? ', renews' : ', will not renew'})`
        : row.status === 'cancelled_active'
          ? `cancelled: active ${until}, then ends (${period}, will not renew)`
          : row.status === 'temporary'
            ? `a temporary grant ${until} while the store confirms the purchase`
            : `active ${until} while the store fails to charge (${period}, will not renew unless a payment succeeds)`;
      return what;
    }
    case 'grace':
      return untilMs(row) <= now.getTime()
        ? `the store could not charge, and its grace period ended ${formatUtc(row.grace_expires_at ?? row.expires_at)}`
        : `the store could not charge; in its grace period until ${formatUtc(row.grace_expires_at ?? row.expires_at)} (${period}, will not renew unless a payment succeeds)`;
    case 'paused':
      return `paused${row.auto_resume_at ? ` until ${formatUtc(row.auto_resume_at)}` : ''} (${period})`;
    case 'expired':
      return `expired ${ended || row.expires_at === null ? formatUtc(row.expires_at ?? row.last_event_at) : `(it was to run until ${formatUtc(row.expires_at)})`}`;
    case 'refunded':
      return `refunded ${formatUtc(row.expires_at ?? row.last_event_at)}`;
    case 'transferred': {
      // The last transfer that moved it: a purchase transferred away, back and away again names the last.
      const moved = rowHistory(keyOf(row), record, steps).findLast(({ change }) => change.after?.status === 'transferred');
      return moved ? `its purchase was transferred to ${moved.entry.plan?.subjectId ?? 'another id'} on ${formatUtc(moved.entry.eventAt)} by ${eventName(moved.entry)}` : 'its purchase was transferred to another id';
    }
    default:
      return `${row.status} ${until}`;
  }
}

/** The length of the row's period, as a person names it: "monthly", "yearly", "a 3-day trial", "lifetime". */
export function periodWords(row: Pick<StoredRow, 'period_purchased_at' | 'expires_at' | 'period_type' | 'environment'>): string {
  const kind = row.period_type?.toUpperCase();
  const prefix = kind === 'TRIAL' ? 'trial, ' : kind === 'INTRO' ? 'intro offer, ' : kind === 'PREPAID' ? 'prepaid, ' : '';
  const sandbox = row.environment === 'SANDBOX' ? ', sandbox' : '';
  if (row.expires_at === null) return `${prefix}lifetime${sandbox}`;
  if (!row.period_purchased_at) return `${prefix.replace(/, $/, '') || 'a period'}${sandbox}`;
  const hours = (Date.parse(row.expires_at) - Date.parse(row.period_purchased_at)) / 3600_000;
  const days = Math.round(hours / 24);
  const named = hours < 24 ? `a ${Math.max(1, Math.round(hours * 60))}-minute period`
    : days >= 6 && days <= 8 ? 'weekly'
      : days >= 28 && days <= 31 ? 'monthly'
        : days >= 59 && days <= 62 ? 'every 2 months'
          : days >= 89 && days <= 92 ? 'quarterly'
            : days >= 180 && days <= 184 ? 'every 6 months'
              : days >= 364 && days <= 366 ? 'yearly'
                : `a ${days}-day period`;
  return `${prefix}${named}${sandbox}`;
}

/** Which events made the row what it is: the one that began its period, and each change since. */
function originSentence(row: StoredRow, changes: { entry: ExplainEntry; change: StepChange }[], entries: Map<string, ExplainEntry>): string {
  const parts: string[] = [];
  if (changes.length > 0) {
    // The period began where the row was made or its transaction or purchase time last changed.
    let start = 0;
    changes.forEach(({ entry, change }, index) => {
      const { before, after } = change;
      if (after && !entry.plan?.move && (!before || before.transaction_id !== after.transaction_id || before.period_purchased_at !== after.period_purchased_at)) start = index;
    });
    const first = changes[start]!;
    parts.push(`; period from ${eventName(first.entry)} on ${formatUtc(first.entry.eventAt)}${first.change.after!.app_user_id !== row.app_user_id ? ` (of ${first.change.after!.app_user_id})` : ''}`);
    for (const { entry, change } of changes.slice(start + 1)) {
      if (entry.plan?.move && change.after?.status === 'transferred') continue; // the move shows as the row it made
      const words = entry.plan?.move && !change.before
        ? `moved to ${change.after!.app_user_id}`
        : entry.type === 'SYNC' && sameState(change.before, change.after) ? '' : changeWords(change.before, change.after);
      if (words) parts.push(`; ${words} on ${formatUtc(entry.eventAt)} by ${eventName(entry)}`);
    }
  } else {
    const last = entries.get(row.last_event_id);
    parts.push(last ? `; set by ${eventName(last)} on ${formatUtc(last.eventAt)}, before the checkpoint kept its rows`
      : `; set by ${row.last_event_id} on ${formatUtc(row.last_event_at)} (no longer in the log: retention dropped it after a checkpoint kept its rows)`);
  }
  if (row.synced_at) parts.push(`; RevenueCat's record confirmed it at ${formatUtc(row.synced_at)}`);
  return `${parts.join('')}.`;
}

const sameState = (a: StoredRow | null, b: StoredRow | null) => a !== null && b !== null && a.status === b.status && a.expires_at === b.expires_at
  && a.grace_expires_at === b.grace_expires_at && a.will_renew === b.will_renew;

/** "renewal turned off", "refunded", "now expired until ..." between two states of a row. */
function changeWords(before: StoredRow | null, after: StoredRow | null): string {
  if (!after) return 'removed';
  if (!before) return `made ${stateWords(after)}`;
  const parts: string[] = [];
  if (before.status !== after.status) parts.push(STATUS_CHANGE[after.status] ?? `status ${after.status}`);
  const ended = ['refunded', 'expired', 'transferred'].includes(after.status);
  if (before.expires_at !== after.expires_at && !(ended && before.status !== after.status)) parts.push(after.expires_at === null ? 'no end' : `ends ${formatUtc(after.expires_at)}`);
  if (before.grace_expires_at !== after.grace_expires_at && after.grace_expires_at) parts.push(`grace until ${formatUtc(after.grace_expires_at)}`);
  if (before.will_renew !== after.will_renew) parts.push(after.will_renew ? 'renewal on' : 'renewal off');
  if (before.pending_product_id !== after.pending_product_id && after.pending_product_id) parts.push(`changing to ${after.pending_product_id === '*' ? 'another product or offer' : after.pending_product_id}`);
  return parts.join(', ');
}

const STATUS_CHANGE: Record<string, string> = {
  active: 'active', cancelled_active: 'cancelled (will not renew)', temporary: 'temporary grant', grace: 'in grace (billing issue)',
  billing_issue: 'billing issue', paused: 'paused', expired: 'expired', refunded: 'refunded', transferred: 'transferred away',
};

function stateWords(row: StoredRow): string {
  if (row.status === 'transferred') return 'transferred';
  if (row.status === 'expired' || row.status === 'refunded') return `${row.status} ${formatUtc(row.expires_at ?? row.last_event_at)}`;
  const until = row.expires_at === null ? 'with no end' : `until ${formatUtc(row.expires_at)}`;
  const grace = row.grace_expires_at ? `, grace until ${formatUtc(row.grace_expires_at)}` : '';
  return `${row.status} ${until}${grace}${row.will_renew ? ', renews' : ''}`;
}

function describeChange(change: StepChange): SubscriberExplanation['history'][number]['changes'][number] {
  const row = (change.after ?? change.before)!;
  const state = (value: StoredRow | null): RowState | null => value && { status: value.status, expiresAt: isoOrNull(value.expires_at), graceExpiresAt: isoOrNull(value.grace_expires_at), willRenew: value.will_renew };
  const words = !change.before
    ? `new row: ${stateWords(change.after!)}`
    : !change.after
      ? `row moved away (was ${stateWords(change.before)})`
      : `${stateWords(change.before)} -> ${stateWords(change.after)}`;
  return {
    appUserId: row.app_user_id, entitlementId: row.entitlement_id, productId: row.product_id, before: state(change.before), after: state(change.after),
    words: `${row.entitlement_id} (${row.product_id ?? 'no product'}) of ${row.app_user_id}: ${words}`,
  };
}

// ---------------------------------------------------------------------------------------------
// History

function eventName(entry: ExplainEntry): string {
  if (entry.type === 'SYNC') return `a sync (RevenueCat's record, ${entry.eventId})`;
  const reason = entry.fields.cancelReason ?? entry.fields.expirationReason;
  return `${entry.type}${reason ? ` ${reason}` : ''} ${entry.eventId}`;
}

function titleOf(entry: ExplainEntry): string {
  const late = Date.parse(entry.receivedAt) - Date.parse(entry.eventAt) > 60_000 ? `, received ${formatUtc(entry.receivedAt)}` : '';
  if (entry.type === 'SYNC') {
    const confirmed = entry.confirmedAt ? `; later syncs found it unchanged, the last at ${formatUtc(entry.confirmedAt)}` : '';
    return `${formatUtc(entry.eventAt)}  SYNC ${entry.eventId}: RevenueCat's record of ${entry.appUserId ?? entry.subjectId}${confirmed}`;
  }
  const period = entry.plan?.period;
  const about = entry.type === 'TRANSFER'
    ? ` from ${(entry.fields.transferredFrom ?? []).join(', ')} to ${(entry.fields.transferredTo ?? []).join(', ')}`
    : period?.productId ? ` (${[period.productId, period.store, entry.environment].filter(Boolean).join(', ')}${entry.fields.price !== undefined && entry.fields.price < 0 ? ', a refund' : ''})` : '';
  return `${formatUtc(entry.eventAt)}  ${eventName(entry)}${about}${late}`;
}

function whatItDid(entry: ExplainEntry, step: ExplainStep | undefined, record: ExplainRecord, checkpointKey: string | null): string {
  const reason = entry.plan?.ignoredReason;
  const effects = describeEffects(entry, step);
  // Ignored when it arrived, and still nothing in the fold of today's history (the replay's outcome decides when it has one).
  if (reason || (entry.outcome === 'ignored' && (!step || (step.outcome === 'ignored' && step.changes.length === 0)))) {
    return `recorded; changes nothing: ${reason ? IGNORED_WORDS[reason] ?? reason : entry.type === 'TRANSFER' && effects ? effects : 'nothing to apply'}.`;
  }
  if (!step) {
    if (checkpointKey && entry.sortKey <= checkpointKey) {
      return entry.outcome === 'stale' && !record.stored.some((row) => row.last_event_id === entry.eventId)
        ? `changed nothing: it is older than the checkpoint of ${formatUtc(keyTime(checkpointKey))} (it came too late to take its place in the history; a sync from RevenueCat was asked for instead).`
        : `before the checkpoint of ${formatUtc(keyTime(checkpointKey))}: what it did is in the rows kept then (stored outcome: ${entry.outcome}).`;
    }
    return `not replayed (stored outcome: ${entry.outcome}).`;
  }
  // Arrived after an entry that comes later in the history: the fold took it in its place.
  const late = record.entries.find((other) => other.sortKey > entry.sortKey && Date.parse(other.receivedAt) < Date.parse(entry.receivedAt));
  const refold = late ? `arrived after later events (${late.type} ${late.eventId} among them): the history was folded again with it in its place; ` : '';
  const owner = step.ownerId && step.ownerId !== (entry.appUserId ?? entry.subjectId) ? `; rows kept under ${step.ownerId}` : '';
  if (step.changes.length === 0) {
    const movedNothing = entry.plan?.move === 'transfer' && whatMoved(entry, step).from.length === 0;
    return `${refold}${effects ? `${effects}: ` : ''}changed nothing${movedNothing ? '' : ' (what it says, later or stronger entries already said)'}${owner}.`;
  }
  const confirmed = step.changes.filter((change) => sameState(change.before, change.after)).length;
  const changed = step.changes.length - confirmed;
  const counts = [changed > 0 ? `changed ${changed} row(s)` : '', confirmed > 0 ? `confirmed ${confirmed} as it was` : ''].filter(Boolean).join(', ');
  return `${refold}${effects ? `${effects}: ` : ''}${counts}${owner}.`;
}

/**
 * What an entry did, in words: a transfer by what the fold moved; a snapshot by what RevenueCat's
 * record showed (the purchases it placed, every entitlement it showed active, and what was left out).
 */
function describeEffects(entry: ExplainEntry, step: ExplainStep | undefined): string {
  const plan = entry.plan;
  if (!plan) return '';
  if (plan.type === 'SYNC') return describeSnapshotSeen(plan);
  if (plan.move === 'transfer') {
    const moved = whatMoved(entry, step);
    // (The receiving customer's other ids, its anonymous one: merged into it, as an alias.)
    const joined = plan.joinedIds?.length ? `; ids ${plan.joinedIds.join(', ')} joined to ${moved.to}` : '';
    return (moved.from.length > 0 ? `moved the purchases of ${moved.from.join(', ')} to ${moved.to}`
      : `a transfer that found no purchases of ${moved.named.join(', ') || 'anyone'} to move to ${moved.to}`) + joined;
  }
  const actions = [...new Set(plan.effects.map((effect: EntitlementEffect) => ACTION_WORDS[effect.action]))];
  const entitlements = [...new Set(plan.effects.map((effect) => effect.entitlementId ?? 'every entitlement of the product'))];
  const merge = plan.move === 'merge' && plan.movedIds.length > 1 ? `; ids ${plan.movedIds.join(', ')} named together` : '';
  return actions.length === 0 ? merge.slice(2) : `${actions.join(', ')} ${entitlements.join(', ')}${merge}`;
}

function describeSnapshotSeen(plan: NonNullable<ExplainEntry['plan']>): string {
  const sources = plan.snapshot?.sources ?? [];
  const placed = new Set(sources.flatMap((source) => source.entitlementIds));
  // Entitlements the record showed active that no purchase placed here grants (v1: its shown purchase was left out).
  const unplaced = Object.entries(plan.snapshot?.entitlementExpiries ?? {})
    .filter(([id, until]) => !placed.has(id) && (until === null || Date.parse(until) > Date.parse(plan.eventAt)))
    .map(([id, until]) => `${id} active ${until === null ? 'with no end' : `until ${formatUtc(until)}`}`);
  const leftOut = plan.snapshot?.leftOut ?? [];
  const seen = [
    ...sources.map((source) => `${source.productId} ${source.status}${source.entitlementIds.length ? ` (${source.entitlementIds.join(', ')})` : ''}`),
    ...unplaced,
  ];
  const left = leftOut.length > 0 ? `; ${leftOut.map((source) => `${source.productId} (sandbox)`).join(', ')} left out: sandbox purchases grant nothing here` : '';
  return seen.length === 0 ? `RevenueCat showed no purchase${left}` : `RevenueCat showed ${seen.join('; ')}${left}`;
}

const ACTION_WORDS: Record<EntitlementEffect['action'], string> = {
  grant: 'grants', temporary_grant: 'grants for a while', flag: 'updates', refund: 'refunds', revoke: 'ends',
};

const IGNORED_WORDS: Record<string, string> = {
  record_only_type: 'this type of event changes no entitlement (RevenueCat\'s TEST, which its dashboard\'s "Send test event" sends; an invoice, an alias, ...)',
  unknown_type: 'an event type this service does not know',
  sandbox_ignored: 'an event of the store\'s sandbox (test purchases), and sandbox purchases grant nothing on this service',
  environment_unknown: 'a subscription event that names no store environment (but a TEMPORARY_ENTITLEMENT_GRANT, or an EXPIRATION naming a transaction), or one other than PRODUCTION and SANDBOX: where sandbox purchases grant nothing, it grants nothing either',
  nothing_to_transfer: 'a transfer that names no one to move from or to',
  no_app_user_id: 'it names no app user',
  no_entitlements: 'it names no entitlement',
  no_effect: 'nothing in it changes an entitlement',
  invalid_event_timestamp_ms: 'its event time is not a time',
  invalid_purchased_at_ms: 'its purchase time is not a time',
  invalid_expiration_at_ms: 'its expiration time is not a time',
  invalid_grace_period_expiration_at_ms: 'its grace period end is not a time',
  invalid_auto_resume_at_ms: 'its auto-resume time is not a time',
};

const REASON_WORDS: Record<string, string> = {
  transfer: 'a transfer names ids but no products',
  refund: 'a refund may end more than one period',
  new_source: 'a product not seen before for this customer',
  mapping: 'the event names other entitlements than its purchase grants here (the product\'s entitlements changed in the dashboard)',
  event: 'every event is followed by a sync here',
  before_history: 'an event older than the customer\'s checkpoint',
  after_snapshot: 'an event RevenueCat\'s record had already moved past',
  user: 'the user refreshed their purchases',
  admin: 'an operator asked for it',
  sweep: 'the daily sweep',
  cli: 'an operator asked for it',
  webhook: 'after a webhook',
};

function notesOf(record: ExplainRecord): string[] {
  const notes: string[] = [];
  if (record.replayed !== null && !sameRows(record.stored, record.replayed)) {
    notes.push('The stored rows differ from the fold of the stored log (rules changed since they were written): `npm run billing:rebuild` shows the difference and `-- --apply` writes the fold.');
  }
  if (record.erasedAt) {
    notes.push(`This id was erased on ${formatUtc(record.erasedAt)} (its user was deleted): the log before that keeps nothing under it, and the events since were stored without personal data and grant nothing, until a user with this id signs up again.`);
  }
  if (record.ids.some((id) => id.checkpointKey !== null)) {
    notes.push('Entries before a checkpoint are summed up in the rows it kept; months past the retention are no longer in the log.');
  }
  return notes;
}

/** The key public.billing_explain_rows gives a row. */
const keyOf = (row: StoredRow) => `${row.app_user_id} ${row.entitlement_id} ${row.source_key}`;

function sameRows(a: StoredRow[], b: StoredRow[]): boolean {
  const canonical = (rows: StoredRow[]) => JSON.stringify(rows.map(({ grants: _grants, ...row }) => (void _grants, row)).sort((x, y) => keyOf(x).localeCompare(keyOf(y))));
  return canonical(a) === canonical(b);
}

const keyTime = (key: string) => `${key.slice(0, 26)}Z`;
const iso = (value: string) => new Date(value).toISOString();
const isoOrNull = (value: string | null) => (value === null ? null : iso(value));

/** The explanation in lines a person reads (`npm run billing:explain`). */
export function explanationLines(explanation: SubscriberExplanation): string[] {
  return [
    `Subscriber ${explanation.appUserId}, as of ${formatUtc(explanation.checkedAt)}`,
    '',
    'Ids:',
    ...explanation.ids.map((id) => `  ${id.appUserId}: ${id.role}`),
    '',
    'Entitlements now (as GET /api/me shows them for this id):',
    ...(explanation.entitlements.length === 0 ? ['  none: no event gave this id an entitlement.'] : explanation.entitlements.flatMap((entitlement) => [
      `  ${entitlement.why[0]}`, ...entitlement.why.slice(1).map((line) => `    ${line}`),
    ])),
    ...(explanation.elsewhere.length === 0 ? [] : ['', 'Rows of the other ids of this history:', ...explanation.elsewhere.map((line) => `  ${line}`)]),
    '',
    'History, in event order:',
    ...explanation.history.flatMap((entry) => [`  ${entry.title}`, `      ${entry.did}`, ...entry.changes.map((change) => `      ${change.words}`)]),
    '',
    ...(explanation.sync.length === 0 ? ['Sync: not marked for a sync from RevenueCat.'] : explanation.sync.map((line) => `Sync: ${line}`)),
    ...explanation.notes.map((note) => `Note: ${note}`),
  ];
}
