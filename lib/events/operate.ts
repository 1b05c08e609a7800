import { z } from 'zod';
import { DomainError, parseWithSchema } from '../errors.ts';
import { RFC3339_DATE_TIME } from '../rfc3339.ts';
import { formatUtc } from '../words.ts';
import type { EventEndpoint, SettingsRefused } from './endpoints.ts';
import { eventMessage } from './messages.ts';
import { readDeadLetters, readEventsSince, readOutboxStatus, replayEvents, type DeadLetter, type EndpointStatus, type OutboxStatus, type StoredEvent } from './outbox.ts';

/**
 * The outbox as an operator sees and steers it (the admin routes under /api/admin/events, the
 * `npm run events:*` commands, `npm run status`): each endpoint's backlog and failures, the dead
 * letters, a replay, and the events as they are written. Decisions here are pure functions over
 * what the outbox returns; the calls are ./outbox.ts's.
 */

/** Where an endpoint sends, as an operator may see it: origin and path, never a query or credentials (they may hold a token). */
export function shownUrl(url: URL): string {
  return `${url.origin}${url.pathname}`;
}

export interface EndpointOverview {
  id: string;
  /** Origin and path from the settings; null where the settings do not name it, or were not visible. */
  url: string | null;
  /** Which setting names it (`EVENTS_WEBHOOK_URL, entry 1`); null as for `url`. */
  setting: string | null;
  types: string[] | null;
  /**
   * active: the settings name it and it is registered; pending registration: the settings name it and no
   * delivery run has registered it yet; not named here: registered, and these settings do not name it
   * (another server sharing the database may: each event still gets a delivery for it, which that server
   * sends) until `retiresAt`; retired: no server named it for 3 days (no new deliveries; its pending ones
   * wait in case it comes back).
   */
  state: 'active' | 'pending registration' | 'not named here' | 'retired';
  registeredAt: string | null;
  retiredAt: string | null;
  /** When it is retired unless a server's settings name it again (3 days after one last did); null: retired, or not registered. */
  retiresAt: string | null;
  pending: number;
  oldestPendingAt: string | null;
  /** When the next attempt is due (the soonest of the users' queue heads not under way); null: nothing pending, or every head under way. */
  nextAttemptAt: string | null;
  dead: number;
  lastDeliveredAt: string | null;
  lastFailure: { eventId: string; at: string; error: string; attempts: number } | null;
}

export interface OutboxOverview {
  endpoints: EndpointOverview[];
  /**
   * Why the settings' receivers are refused (the setting and entry to fix, never a secret): nothing
   * is sent until they are fixed. Null: accepted, or not visible.
   */
  settingsRefused: string | null;
  /** Events stored (kept 30 days) and when the last was written. */
  events: number;
  lastEventAt: string | null;
  /** Told access whose end has passed and that no scan has told yet. */
  lapsesDue: number;
}

// (Not a time, 'infinity' say: shown as none rather than failing the whole status.)
const isoOrNull = (value: string | null) => {
  const time = value === null ? NaN : new Date(value).getTime();
  return Number.isFinite(time) ? new Date(time).toISOString() : null;
};

/**
 * Join what the database knows of each endpoint with the settings. `settings` null: not visible
 * (an operator's shell beside a deployment), or refused: the endpoints are the database's, retired
 * as it says.
 */
export function outboxOverview(status: OutboxStatus, settingsOrRefused: readonly EventEndpoint[] | SettingsRefused | null): OutboxOverview {
  const refused = settingsOrRefused !== null && 'refused' in settingsOrRefused ? settingsOrRefused.refused : null;
  const settings = refused === null ? (settingsOrRefused as readonly EventEndpoint[] | null) : null;
  const named = new Map((settings ?? []).map((endpoint) => [endpoint.id, endpoint]));
  const stored = new Set(status.endpoints.map((endpoint) => endpoint.id));
  const fromDatabase = status.endpoints.map((row): EndpointOverview => {
    const endpoint = named.get(row.id);
    return {
      ...counts(row),
      id: row.id,
      url: endpoint ? shownUrl(endpoint.url) : null,
      setting: endpoint?.setting ?? null,
      types: endpoint ? endpoint.types : row.types,
      state: row.retired_at !== null ? 'retired' : settings === null || endpoint ? 'active' : 'not named here',
    };
  });
  const unregistered = (settings ?? []).filter((endpoint) => !stored.has(endpoint.id)).map((endpoint): EndpointOverview => ({
    id: endpoint.id, url: shownUrl(endpoint.url), setting: endpoint.setting, types: endpoint.types, state: 'pending registration',
    registeredAt: null, retiredAt: null, retiresAt: null, pending: 0, oldestPendingAt: null, nextAttemptAt: null, dead: 0, lastDeliveredAt: null, lastFailure: null,
  }));
  const order = { active: 0, 'pending registration': 1, 'not named here': 2, retired: 3 } as const;
  return {
    endpoints: [...fromDatabase, ...unregistered].sort((a, b) => order[a.state] - order[b.state]),
    settingsRefused: refused,
    events: Number(status.events),
    lastEventAt: isoOrNull(status.last_event_at),
    lapsesDue: Number(status.lapses_due),
  };
}

function counts(row: EndpointStatus) {
  return {
    registeredAt: isoOrNull(row.registered_at),
    retiredAt: isoOrNull(row.retired_at),
    retiresAt: isoOrNull(row.retires_at),
    pending: Number(row.pending),
    oldestPendingAt: isoOrNull(row.oldest_pending_at),
    nextAttemptAt: isoOrNull(row.next_attempt_at),
    dead: Number(row.dead),
    lastDeliveredAt: isoOrNull(row.last_delivered_at),
    lastFailure: row.last_failure && {
      eventId: row.last_failure.event_id, at: new Date(row.last_failure.at).toISOString(), error: row.last_failure.error, attempts: Number(row.last_failure.attempts),
    },
  };
}

export async function readOutboxOverview(settings: readonly EventEndpoint[] | SettingsRefused | null): Promise<OutboxOverview> {
  return outboxOverview(await readOutboxStatus(), settings);
}

/** A backlog whose oldest event waits longer than this needs a look (a receiver down, or nothing moving the outbox). */
export const BACKLOG_LATE_MS = 3600_000;

/** What in the outbox deserves a look: each a sentence an operator acts on. */
export function outboxAttention(overview: OutboxOverview, now: Date): string[] {
  const notes: string[] = [];
  if (overview.settingsRefused !== null) {
    notes.push(`The outbound events' settings are refused, so no event is sent: ${overview.settingsRefused} `
      + 'Events written meanwhile wait for the receivers registered before; a receiver never registered gets them once the settings are fixed with `npm run events:replay -- --from <when they broke> --to <now>`.');
  }
  for (const endpoint of overview.endpoints) {
    const name = endpointName(endpoint);
    if (endpoint.dead > 0) {
      notes.push(`${endpoint.dead} event(s) to ${name} were dead-lettered (their retries ran out${endpoint.lastFailure ? `; the last error: ${endpoint.lastFailure.error}` : ''}): `
        + `list them with \`npm run events:dead-letters\`, and once the receiver is fixed send them again with \`npm run events:replay\`.`);
    }
    if (endpoint.oldestPendingAt && now.getTime() - Date.parse(endpoint.oldestPendingAt) > BACKLOG_LATE_MS) {
      notes.push(endpoint.state === 'retired'
        ? `${endpoint.pending} event(s) wait for ${name}, which no server's settings have named for 3 days: they are sent if it comes back, and leave with their events after 30 days.`
        : endpoint.state === 'not named here'
        ? `${endpoint.pending} event(s) wait for ${name}, which these settings do not name: another server sharing the database sends them if its settings name it; if none does, it is retired ${formatUtc(endpoint.retiresAt!)} and they wait in case it comes back.`
        : `${endpoint.pending} event(s) wait for ${name}, the oldest since ${formatUtc(endpoint.oldestPendingAt)}`
          + `${endpoint.lastFailure ? `; the last failure: ${endpoint.lastFailure.error}` : '; none failed: is anything moving the outbox (the events cron, `npm run events:deliver`)?'}.`);
    }
  }
  return notes;
}

function endpointName(endpoint: EndpointOverview): string {
  return `endpoint ${endpoint.id}${endpoint.url ? ` (${endpoint.url})` : ''}`;
}

/** The endpoints in lines a person reads (`npm run events:status`, `npm run status`). */
export function describeOutbox(overview: OutboxOverview): string[] {
  const refused = overview.settingsRefused === null ? [] : [`Events: the settings are refused, nothing is sent: ${overview.settingsRefused}`];
  if (overview.endpoints.length === 0) {
    // What the database holds: the service registers the receivers its own settings name when it
    // opens the database (this shell's settings may be another's, or none).
    const none = refused.length ? 'no endpoint registered' : 'no endpoint registered (the service registers those its EVENTS_WEBHOOK_URL or EVENTS_WEBHOOK_ENDPOINTS name)';
    return [...refused, `Events: ${none}; ${overview.events} event(s) stored; ${overview.lapsesDue} lapse(s) due`];
  }
  // (Refused settings name no URL at all: the endpoint's own may well be in them.)
  const noUrl = refused.length ? '(URL unread: the settings are refused)' : '(URL not in these settings)';
  return [
    ...refused,
    `Events: ${overview.events} stored${overview.lastEventAt ? `, the last at ${formatUtc(overview.lastEventAt)}` : ''}; ${overview.lapsesDue} lapse(s) due`,
    ...overview.endpoints.map((endpoint) => `  ${endpoint.id} ${endpoint.url ?? noUrl} [${stateWords(endpoint)}${endpoint.types ? `; ${endpoint.types.join(', ')}` : ''}]: `
      + `${endpoint.pending} pending${endpoint.oldestPendingAt ? ` (the oldest since ${formatUtc(endpoint.oldestPendingAt)}${endpoint.nextAttemptAt ? `; the next attempt due ${formatUtc(endpoint.nextAttemptAt)}` : ''})` : ''}, ${endpoint.dead} dead; `
      + `last delivered ${endpoint.lastDeliveredAt ? formatUtc(endpoint.lastDeliveredAt) : 'never'}`
      + `${endpoint.lastFailure ? `; last failure ${formatUtc(endpoint.lastFailure.at)} (attempt ${endpoint.lastFailure.attempts}): ${endpoint.lastFailure.error}` : ''}`),
  ];
}

function stateWords(endpoint: EndpointOverview): string {
  return endpoint.state === 'not named here' && endpoint.retiresAt ? `not named here: retired ${formatUtc(endpoint.retiresAt)} unless a server names it again` : endpoint.state;
}

// ---- Dead letters ----

export interface DeadLetterView {
  endpointId: string;
  eventId: string;
  /** The `webhook-id` it was sent with. */
  webhookId: string;
  type: string;
  userId: string;
  sequence: number;
  createdAt: string;
  attempts: number;
  firstAttemptAt: string | null;
  lastAttemptAt: string | null;
  lastError: string | null;
}

const endpointIdSchema = z.string().regex(/^[0-9a-f]{16}$/, 'an endpoint id: 16 hexadecimal digits, as `npm run events:status` lists them');
const limitSchema = z.coerce.number().int('a whole number').min(1).max(1000);

export const deadLettersQuerySchema = z.strictObject({
  endpoint: endpointIdSchema.optional().meta({ description: 'Only this endpoint\'s (its id, as GET /api/admin/events/endpoints lists it)' }),
  limit: limitSchema.default(100).meta({ description: 'At most this many (1 to 1000; default 100)' }),
});

/** Dead-lettered deliveries, newest first; 404 `endpoint_not_found` for an id the database does not know. */
export async function listDeadLetters(query: z.output<typeof deadLettersQuerySchema>): Promise<{ deadLetters: DeadLetterView[] }> {
  const rows = await readDeadLetters(query.endpoint ?? null, query.limit);
  if (rows === null) throw new DomainError('endpoint_not_found', 'No endpoint has this id: list them with GET /api/admin/events/endpoints.');
  return { deadLetters: rows.map(deadLetterView) };
}

function deadLetterView(row: DeadLetter): DeadLetterView {
  return {
    endpointId: row.endpoint_id, eventId: row.event_id, webhookId: `evt_${row.event_id}`, type: row.type, userId: row.user_id, sequence: Number(row.sequence),
    createdAt: new Date(row.created_at).toISOString(), attempts: Number(row.attempts),
    firstAttemptAt: isoOrNull(row.first_attempt_at), lastAttemptAt: isoOrNull(row.last_attempt_at), lastError: row.last_error,
  };
}

// ---- Replay ----

const HEX = '[0-9a-fA-F]';
const EVENT_ID = new RegExp(`^(evt_)?${HEX}{8}-${HEX}{4}-${HEX}{4}-${HEX}{4}-${HEX}{12}$`);
// Within what the database stores (it has no year 0, and events began long after 1970): a time
// outside is the caller's 400 saying so, not the database's refusal.
// (A value that is no time at all fails the format alone: the bounds hold for it, so they are not listed too.)
const unreadableOrWithin = (value: string, inBounds: (ms: number) => boolean) => Number.isNaN(Date.parse(value)) || inBounds(Date.parse(value));
// (`T` and `Z` in either case, as RFC 3339 allows; passed on upper-cased.)
const isoInstant = z.string().toUpperCase().regex(RFC3339_DATE_TIME, 'an ISO 8601 time with its offset, such as 2026-01-01T00:00:00Z')
  .refine((value) => unreadableOrWithin(value, (ms) => ms >= 0), 'must not be before 1970-01-01T00:00:00Z')
  .refine((value) => unreadableOrWithin(value, (ms) => ms <= Date.parse('9999-12-31T23:59:59.999Z')), 'must not be after 9999-12-31T23:59:59Z')
  .meta({ format: 'date-time' });

export const replayBodySchema = z
  .strictObject({
    eventId: z.string().regex(EVENT_ID, 'an event id: a UUID, or evt_<UUID> as in webhook-id').transform((value) => value.toLowerCase().replace(/^evt_/, ''))
      .optional().meta({ description: 'One event: its id, or the `webhook-id` it was sent with (`evt_<id>`)' }),
    from: isoInstant.optional().meta({ description: 'Events written at or after this time (with `to`)' }),
    to: isoInstant.optional().meta({ description: 'Events written before this time (with `from`)' }),
    endpoint: endpointIdSchema.optional().meta({ description: 'Only to this active endpoint (default: every active endpoint that takes the event\'s type)' }),
  })
  .superRefine((body, context) => {
    const range = body.from !== undefined || body.to !== undefined;
    if (body.eventId !== undefined && range) context.addIssue({ code: 'custom', path: ['eventId'], message: 'name one event or a time range, not both' });
    else if (body.eventId === undefined && !range) context.addIssue({ code: 'custom', path: [], message: 'name an event (`eventId`) or a time range (`from` and `to`)' });
    else if (range && body.from === undefined) context.addIssue({ code: 'custom', path: ['from'], message: 'a range needs its start' });
    else if (range && body.to === undefined) context.addIssue({ code: 'custom', path: ['to'], message: 'a range needs its end' });
    else if (range && Date.parse(body.to!) <= Date.parse(body.from!)) context.addIssue({ code: 'custom', path: ['to'], message: 'the end of the range must be after its start' });
  })
  .meta({ description: 'One event (`eventId`), or the events written in [`from`, `to`); optionally to one endpoint' });

export type ReplayRequest = z.output<typeof replayBodySchema>;

/**
 * Send again: every delivery of the event (or of the range) becomes pending with no attempt, the
 * `webhook-id` unchanged. 404 `event_not_found` for an event id that sends nothing again: no such
 * event is stored (they are kept 30 days), no active endpoint takes its type, or its user was erased
 * since (what they had before their customer.deleted is never sent again).
 */
export async function replay(request: ReplayRequest): Promise<{ replayed: number }> {
  const replayed = await replayEvents({
    eventId: request.eventId,
    from: request.from === undefined ? undefined : new Date(request.from),
    to: request.to === undefined ? undefined : new Date(request.to),
    endpointId: request.endpoint,
  });
  if (request.eventId !== undefined && replayed === 0) {
    throw new DomainError('event_not_found', 'No stored event has this id that an active endpoint takes (events are kept 30 days, and none a user had before their erasure is sent again): check the id, or list recent ones with GET /api/admin/events.');
  }
  return { replayed };
}

/** Parse a replay request given as values (the command line's). Throws DomainError invalid_request as the route does. */
export function parseReplayRequest(value: unknown): ReplayRequest {
  return parseWithSchema(replayBodySchema, value, 'Name an event, or a time range whose end is after its start.');
}

// ---- Events as written ----

export interface WrittenEvent {
  id: string;
  webhookId: string;
  type: string;
  userId: string;
  sequence: number;
  createdAt: string;
  /** The exact JSON a receiver gets (and that is signed), as lib/events/messages.ts makes it. */
  body: string;
}

export const eventsQuerySchema = z.strictObject({
  since: isoInstant.meta({ description: 'Events written at or after this time' }),
  limit: limitSchema.default(100).meta({ description: 'At most this many, oldest first (1 to 1000; default 100)' }),
  after: z.uuid().optional().meta({
    description: 'The next page: the `id` of the last event of a full page. Events that follow it in the order listed (many may share one `createdAt`); if it is gone (retention), from `since`',
  }),
});

export async function listEventsSince(query: z.output<typeof eventsQuerySchema>): Promise<{ events: WrittenEvent[] }> {
  const rows = await readEventsSince(new Date(query.since), query.limit, query.after);
  return { events: rows.map(writtenEvent) };
}

export function writtenEvent(event: StoredEvent): WrittenEvent {
  const message = eventMessage(event);
  return {
    id: event.event_id, webhookId: message.id, type: event.type, userId: event.user_id, sequence: Number(event.sequence),
    createdAt: new Date(event.created_at).toISOString(), body: message.body,
  };
}
