import { describe, expect, it } from 'vitest';
import { endpointSettings, parseEventEndpoints, type SettingsRefused } from '../../lib/events/endpoints.ts';
import { loadConfig } from '../../lib/config.ts';
import { BACKLOG_LATE_MS, describeOutbox, outboxAttention, outboxOverview, eventsQuerySchema, parseReplayRequest } from '../../lib/events/operate.ts';
import type { EndpointStatus, OutboxStatus } from '../../lib/events/outbox.ts';

/** The operator's view of the outbox, decided without the database: the join with the settings, what needs attention, what a replay names. */
const SECRET = `whsec_${Buffer.alloc(32, 7).toString('base64')}`;
const [named] = parseEventEndpoints({ EVENTS_WEBHOOK_URL: 'https://hooks.example.com/in?token=abc', EVENTS_WEBHOOK_SECRET: SECRET }, { local: false });
const row = (fields: Partial<EndpointStatus>): EndpointStatus => ({
  id: named!.id, types: null, registered_at: '2026-01-01T00:00:00Z', retired_at: null, named_at: '2026-01-01T00:00:00Z', retires_at: '2026-01-04T00:00:00Z', pending: 0, oldest_pending_at: null, next_attempt_at: null, dead: 0, last_delivered_at: null, last_failure: null, ...fields,
});
const status = (endpoints: EndpointStatus[]): OutboxStatus => ({ endpoints, events: 3, last_event_at: null, lapses_due: 2 });

describe('outboxOverview', () => {
  it('shows a named endpoint by origin and path, one these settings do not name as such until the database retires it, one not registered yet as such', () => {
    const elsewhere = row({ id: 'aaaaaaaaaaaaaaaa', pending: 4 });
    const retired = row({ id: 'cccccccccccccccc', retired_at: '2026-01-04T00:01:00Z', retires_at: null });
    const overview = outboxOverview(status([retired, elsewhere, row({})]), [named!]);
    expect(overview.endpoints.map((e) => [e.id, e.url, e.state, e.pending, e.retiresAt])).toEqual([
      [named!.id, 'https://hooks.example.com/in', 'active', 0, '2026-01-04T00:00:00.000Z'],
      ['aaaaaaaaaaaaaaaa', null, 'not named here', 4, '2026-01-04T00:00:00.000Z'],
      ['cccccccccccccccc', null, 'retired', 0, null],
    ]);
    expect(describeOutbox(overview).slice(1).map((line) => line.match(/\[([^\]]*)\]/)![1])).toEqual([
      'active', 'not named here: retired 2026-01-04 00:00 UTC unless a server names it again', 'retired',
    ]);
    expect(outboxOverview(status([]), [named!]).endpoints).toEqual([expect.objectContaining({ id: named!.id, state: 'pending registration', registeredAt: null })]);
  });

  it('without the settings (a shell beside a deployment): the database says which are retired, and no URL is known', () => {
    const overview = outboxOverview(status([row({}), row({ id: 'bbbbbbbbbbbbbbbb', retired_at: '2026-01-02T00:00:00Z' })]), null);
    expect(overview.endpoints.map((e) => [e.url, e.state])).toEqual([[null, 'active'], [null, 'retired']]);
    expect(overview.lapsesDue).toBe(2);
  });
});

describe('settings the service refuses', () => {
  const refused = endpointSettings(loadConfig({ LOCAL_DEV: '1', EVENTS_WEBHOOK_URL: 'http://localhost:3001/hook', EVENTS_WEBHOOK_SECRET: 'my-shared-secret' }));

  it('say why, naming the setting and never the secret', () => {
    expect(refused).toEqual({ refused: expect.stringContaining('EVENTS_WEBHOOK_SECRET') });
    expect(JSON.stringify(refused)).not.toContain('my-shared-secret');
    expect(endpointSettings(loadConfig({ LOCAL_DEV: '1', EVENTS_WEBHOOK_URL: 'http://localhost:3001/hook', EVENTS_WEBHOOK_SECRET: SECRET }))).toEqual([expect.objectContaining({ setting: 'EVENTS_WEBHOOK_URL, entry 1' })]);
  });

  it('show in the overview, its lines and what needs attention; the database\'s endpoints as it says', () => {
    const overview = outboxOverview(status([row({ retired_at: null })]), refused);
    const why = (refused as SettingsRefused).refused;
    expect(overview.settingsRefused).toBe(why);
    expect(overview.endpoints.map((e) => [e.url, e.state])).toEqual([[null, 'active']]);
    expect(describeOutbox(overview)[0]).toBe(`Events: the settings are refused, nothing is sent: ${why}`);
    // The endpoint's URL may well be in the refused settings: not said to be missing from them.
    expect(describeOutbox(overview)[2]).toMatch(/^ {2}[0-9a-f]{16} \(URL unread: the settings are refused\) \[active\]/);
    const waiting = describeOutbox(outboxOverview(status([row({ pending: 2, oldest_pending_at: '2026-01-01T10:00:00Z', next_attempt_at: '2026-01-01T10:01:30Z' })]), [named!]))[1];
    expect(waiting).toContain(': 2 pending (the oldest since 2026-01-01 10:00 UTC; the next attempt due 2026-01-01 10:01:30 UTC), 0 dead;');
    expect(describeOutbox(outboxOverview(status([row({})]), null))[1]).toMatch(/^ {2}[0-9a-f]{16} \(URL not in these settings\) \[active\]/);
    expect(describeOutbox(outboxOverview(status([]), refused))).toEqual([`Events: the settings are refused, nothing is sent: ${why}`, 'Events: no endpoint registered; 3 event(s) stored; 2 lapse(s) due']);
    // Without refused settings, what the database holds, not what this shell's settings say.
    expect(describeOutbox(outboxOverview(status([]), null))).toEqual(['Events: no endpoint registered (the service registers those its EVENTS_WEBHOOK_URL or EVENTS_WEBHOOK_ENDPOINTS name); 3 event(s) stored; 2 lapse(s) due']);
    const [note] = outboxAttention(overview, new Date());
    expect(note).toContain(`The outbound events' settings are refused, so no event is sent: ${why}`);
    expect(note).toContain('npm run events:replay');
    expect(outboxAttention(outboxOverview(status([row({})]), [named!]), new Date())).toEqual([]);
    expect(outboxOverview(status([]), [named!]).settingsRefused).toBeNull();
  });
});

describe('outboxAttention', () => {
  const now = new Date('2026-01-01T12:00:00Z');
  const waitingSince = (ms: number) => row({ pending: 2, oldest_pending_at: new Date(now.getTime() - ms).toISOString(), last_failure: { event_id: 'e', at: now.toISOString(), error: 'HTTP 503', attempts: 3 } });

  it('asks about a backlog older than an hour, not one of an hour', () => {
    expect(outboxAttention(outboxOverview(status([waitingSince(BACKLOG_LATE_MS)]), [named!]), now)).toEqual([]);
    expect(outboxAttention(outboxOverview(status([waitingSince(BACKLOG_LATE_MS + 1000)]), [named!]), now)).toEqual([
      `2 event(s) wait for endpoint ${named!.id} (https://hooks.example.com/in), the oldest since 2026-01-01 10:59:59 UTC; the last failure: HTTP 503.`,
    ]);
  });

  it('a backlog for an endpoint these settings do not name: who sends it, and when it is retired', () => {
    const waiting = row({ id: 'aaaaaaaaaaaaaaaa', pending: 3, oldest_pending_at: new Date(now.getTime() - 2 * BACKLOG_LATE_MS).toISOString(), retires_at: '2026-01-03T09:00:00Z' });
    expect(outboxAttention(outboxOverview(status([waiting]), [named!]), now)).toEqual([
      '3 event(s) wait for endpoint aaaaaaaaaaaaaaaa, which these settings do not name: another server sharing the database sends them if its settings name it; if none does, it is retired 2026-01-03 09:00 UTC and they wait in case it comes back.',
    ]);
  });

  it('asks about any dead letter, saying how to list and replay them', () => {
    const [note] = outboxAttention(outboxOverview(status([row({ dead: 1 })]), [named!]), now);
    expect(note).toBe(`1 event(s) to endpoint ${named!.id} (https://hooks.example.com/in) were dead-lettered (their retries ran out): list them with \`npm run events:dead-letters\`, and once the receiver is fixed send them again with \`npm run events:replay\`.`);
  });
});

describe('parseReplayRequest', () => {
  const id = '0b8f2a6e-3c1d-4e5f-9a7b-1c2d3e4f5a6b';
  it('takes an event id bare or as its webhook-id, in either case', () => {
    expect(parseReplayRequest({ eventId: `evt_${id.toUpperCase()}` })).toEqual({ eventId: id });
    expect(parseReplayRequest({ eventId: id, endpoint: named!.id })).toEqual({ eventId: id, endpoint: named!.id });
  });

  it('takes a range with `t` and `z` in lower case (RFC 3339 §5.6), passed on upper-cased', () => {
    expect(parseReplayRequest({ from: '2026-01-01t00:00:00z', to: '2026-01-02T00:00:00.5+01:00' }))
      .toEqual({ from: '2026-01-01T00:00:00Z', to: '2026-01-02T00:00:00.5+01:00' });
    expect(eventsQuerySchema.parse({ since: '2026-01-01t10:00:00z' }).since).toBe('2026-01-01T10:00:00Z');
  });

  it.each([
    ['nothing', {}, '(body)'],
    ['a range the wrong way round', { from: '2026-01-02T00:00:00Z', to: '2026-01-01T00:00:00Z' }, 'to'],
    ['a range without a start', { to: '2026-01-01T00:00:00Z' }, 'from'],
    ['an event and a range', { eventId: id, from: '2026-01-01T00:00:00Z', to: '2026-01-02T00:00:00Z' }, 'eventId'],
    ['a malformed id', { eventId: 'evt_1234' }, 'eventId'],
    ['a time without its offset', { from: '2026-01-01T00:00:00', to: '2026-01-02T00:00:00Z' }, 'from'],
  ])('refuses %s, naming the field', (_name, body, path) => {
    expect(() => parseReplayRequest(body)).toThrow(expect.objectContaining({ code: 'invalid_request', errors: expect.arrayContaining([expect.objectContaining({ path })]) }));
  });

  it('says of a value that is no time only that it is none (not that it is out of bounds too)', () => {
    let errors: Array<{ path: string; message: string }> = [];
    try {
      parseReplayRequest({ from: 'yesterday', to: '2026-01-02T00:00:00Z' });
    } catch (error) {
      errors = (error as { errors: typeof errors }).errors;
    }
    expect(errors).toEqual([{ path: 'from', message: expect.stringContaining('an ISO 8601 time with its offset') }]);
  });
});
