import { describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { toApplyLeaguesSyncArgs, toLeaguesSyncResult } from '../../lib/leagues/sync.ts';
import { createLeaguesSyncBodySchema, LEAGUES_SYNC_LIMITS } from '../../lib/leagues/sync-schema.ts';
import { fieldErrors } from '../../lib/http/problem.ts';
import { issueBody, issueLeague, members } from './fixtures.ts';

const NOW = new Date('2026-11-21T18:00:00Z');
const schema = createLeaguesSyncBodySchema({ now: () => NOW });

const validLeague = () => issueLeague();
const validBody = () => issueBody('delivery-1');

/** The error paths (sorted) of a body, or [] when it is valid. */
function errorPaths(body: unknown): string[] {
  const result = schema.safeParse(body);
  return result.success ? [] : fieldErrors(result.error.issues).map((e) => e.path).sort();
}

describe('leaguesSyncBodySchema', () => {
  it('accepts the body of the issue and normalises it', () => {
    const upper = randomUUID().toUpperCase();
    const body = validBody();
    body.leagues[0]!.members.push({ externalUserId: '2', displayName: 'Bo', role: 'member', appUserId: upper } as never);
    const parsed = schema.parse(body);
    expect(parsed.leagues[0]!.members).toEqual([
      { externalUserId: '73100543', displayName: 'Ana', role: 'commissioner', appUserId: null },
      { externalUserId: '2', displayName: 'Bo', role: 'member', appUserId: upper.toLowerCase() },
    ]);
    expect(toApplyLeaguesSyncArgs(parsed)).toEqual({
      p_source: 'sleeper', p_sent_at: '2026-11-21T18:00:00Z', p_leagues: parsed.leagues, p_deleted: parsed.deleted, p_delivery_id: 'delivery-1',
    });
  });

  it('takes `t` and `z` in lower case and hands them on in upper case, as the database gets them', () => {
    const body = issueBody('delivery-1');
    body.sentAt = '2026-11-21t18:00:00z';
    body.leagues[0]!.updatedAt = '2026-11-21t18:59:00.5+01:00';
    body.deleted[0]!.deletedAt = '2026-11-21t17:58:00Z';
    const parsed = schema.parse(body);
    expect([parsed.sentAt, parsed.leagues[0]!.updatedAt, parsed.deleted[0]!.deletedAt])
      .toEqual(['2026-11-21T18:00:00Z', '2026-11-21T18:59:00.5+01:00', '2026-11-21T17:58:00Z']);
    expect(toApplyLeaguesSyncArgs(parsed)).toMatchObject({ p_sent_at: '2026-11-21T18:00:00Z' });
  });

  it('documents the timestamps with patterns that take `t` and `z` in lower case too, and refuse what the service refuses', () => {
    const document = z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as unknown as { properties: { sentAt: { allOf: { pattern: string }[] } } };
    const patterns = document.properties.sentAt.allOf.map(({ pattern }) => new RegExp(pattern, 'u'));
    const documented = (value: string) => patterns.every((pattern) => pattern.test(value));
    for (const value of ['2026-11-21T17:59:00Z', '2026-11-21t17:59:00z', '2026-11-21t17:59:00.123456-08:00']) expect({ value, documented: documented(value) }).toEqual({ value, documented: true });
    for (const value of ['2026-11-21t17:59:00', '2026-02-30t00:00:00z', '2026-11-21x17:59:00z', '2026-11-21t17:59:00.1234567z', '1969-12-31t23:59:59z']) {
      expect({ value, documented: documented(value), parsed: schema.safeParse({ ...validBody(), sentAt: value }).success }).toEqual({ value, documented: false, parsed: false });
    }
  });

  const validCases = [
    { name: 'no id, leagues or deleted', body: { source: 'espn', sentAt: '2026-11-21T18:00:00Z' } },
    { name: 'settings left out (stored as {})', body: { ...validBody(), leagues: [{ ...validLeague(), settings: undefined }] } },
    { name: 'appUserId null', body: { ...validBody(), leagues: [{ ...validLeague(), members: [{ externalUserId: '1', displayName: 'A', role: 'member', appUserId: null }] }] } },
    { name: 'an offset and microseconds', body: { ...validBody(), sentAt: '2026-11-21T19:00:00.123456+01:00' } },
    { name: 'up to 5 minutes ahead of the clock', body: { ...validBody(), sentAt: '2026-11-21T18:05:00Z' } },
    // RFC 3339 §5.6: `T` and `Z` may be written in lower case.
    { name: 'a lower-case t and z', body: { ...validBody(), sentAt: '2026-11-21t17:59:00z' } },
    { name: 'a lower-case t with an offset', body: { ...validBody(), sentAt: '2026-11-21t19:00:00.123456+01:00' } },
    { name: 'source at its limits', body: { ...validBody(), source: 'a_b-9'.padEnd(32, 'x') } },
    { name: `${LEAGUES_SYNC_LIMITS.maxLeagues} leagues`, body: { ...validBody(), leagues: Array.from({ length: 500 }, (_, i) => ({ ...validLeague(), externalId: `l${i}` })) } },
    { name: `${LEAGUES_SYNC_LIMITS.maxMembersPerLeague} members`, body: { ...validBody(), leagues: [{ ...validLeague(), members: members(200) }] } },
    { name: 'settings of exactly 16 KB', body: { ...validBody(), leagues: [{ ...validLeague(), settings: { pad: 'x'.repeat(16 * 1024 - 10) } }] } },
    { name: 'nested settings of any JSON', body: { ...validBody(), leagues: [{ ...validLeague(), settings: { a: [1, { b: null }], c: true, d: 'é' } }] } },
    // Invisible characters beside a visible one are part of the name (a joined emoji, a Hangul syllable).
    { name: 'names with invisible characters beside visible ones', body: { ...validBody(), leagues: [{ ...validLeague(), name: '\u200BA\u2060', sport: '\u{1F469}\u200D\u{1F4BB}', season: '\u3164한', members: [{ externalUserId: '1', displayName: '\u00A0Bo\uFEFF', role: 'member' }] }] } },
    // Marks on a base letter, and the Braille blank beside a Braille letter, are a visible name.
    { name: 'names with marks on their letters and a Braille blank beside a letter', body: { ...validBody(), leagues: [{ ...validLeague(), name: 'Zoe\u0301', sport: '\u2800\u2801', season: 'नमस्ते' }] } },
    // Fields it does not know, at every level: accepted and ignored (as the billing webhook does).
    { name: 'an unknown top-level field', body: { ...validBody(), schemaVersion: 2 } },
    { name: 'an unknown league field', body: { ...validBody(), leagues: [{ ...validLeague(), colour: 'red' }] } },
    { name: 'an unknown member field', body: { ...validBody(), leagues: [{ ...validLeague(), members: [{ externalUserId: '1', displayName: 'A', role: 'member', email: 'a@b' }] }] } },
    { name: 'an unknown deletion field', body: { ...validBody(), deleted: [{ externalId: '1', deletedAt: '2026-11-21T17:00:00Z', why: 'x' }] } },
  ];
  it.each(validCases)('accepts $name', ({ body }) => {
    expect(errorPaths(body)).toEqual([]);
  });

  const league = (overrides: Record<string, unknown>) => ({ ...validBody(), leagues: [{ ...validLeague(), ...overrides }] });
  const invalidCases: { name: string; body: unknown; paths: string[] }[] = [
    { name: 'not an object', body: [], paths: ['(body)'] },
    { name: 'null', body: null, paths: ['(body)'] },
    { name: 'missing source and sentAt', body: {}, paths: ['sentAt', 'source'] },
    { name: 'source with upper case', body: { ...validBody(), source: 'Sleeper' }, paths: ['source'] },
    { name: 'source too long', body: { ...validBody(), source: 'a'.repeat(33) }, paths: ['source'] },
    { name: 'source empty', body: { ...validBody(), source: '' }, paths: ['source'] },
    { name: 'id with a space', body: { ...validBody(), id: 'a b' }, paths: ['id'] },
    { name: 'id not a string', body: { ...validBody(), id: 7 }, paths: ['id'] },
    { name: 'status unknown', body: league({ status: 'playoffs' }), paths: ['leagues.0.status'] },
    { name: 'role unknown', body: league({ members: [{ externalUserId: '1', displayName: 'A', role: 'owner' }] }), paths: ['leagues.0.members.0.role'] },
    { name: 'appUserId not a UUID', body: league({ members: [{ externalUserId: '1', displayName: 'A', role: 'member', appUserId: 'ana' }] }), paths: ['leagues.0.members.0.appUserId'] },
    { name: 'externalId a number', body: league({ externalId: 1249067741470539776 }), paths: ['leagues.0.externalId'] },
    { name: 'externalId with whitespace', body: league({ externalId: ' 1' }), paths: ['leagues.0.externalId'] },
    { name: 'name empty', body: league({ name: '' }), paths: ['leagues.0.name'] },
    { name: 'name blank', body: league({ name: '  \t ' }), paths: ['leagues.0.name'] },
    { name: 'sentAt offset beyond what Postgres stores', body: { ...validBody(), sentAt: '2026-11-20T10:00:00+16:00' }, paths: ['sentAt'] },
    { name: 'updatedAt offset -23:59', body: league({ updatedAt: '2026-11-20T10:00:00-23:59' }), paths: ['leagues.0.updatedAt'] },
    { name: 'displayName blank', body: league({ members: [{ externalUserId: '1', displayName: ' ', role: 'member' }] }), paths: ['leagues.0.members.0.displayName'] },
    // Only invisible characters: `\S` matches them, yet the app would show a blank row.
    { name: 'name a zero-width space', body: league({ name: '\u200B' }), paths: ['leagues.0.name'] },
    { name: 'name a word joiner and a byte order mark', body: league({ name: '\u2060\uFEFF' }), paths: ['leagues.0.name'] },
    { name: 'name a Hangul filler', body: league({ name: '\u3164' }), paths: ['leagues.0.name'] },
    // Blank as shown though neither white space nor ignorable: the Braille blank, marks with no base.
    { name: 'name a Braille blank', body: league({ name: '\u2800\u2800' }), paths: ['leagues.0.name'] },
    { name: 'displayName only combining marks', body: league({ members: [{ externalUserId: '1', displayName: '\u0301\u0308\u20DD', role: 'member' }] }), paths: ['leagues.0.members.0.displayName'] },
    { name: 'name a no-break space', body: league({ name: '\u00A0' }), paths: ['leagues.0.name'] },
    { name: 'name control characters', body: league({ name: '\u0001\u007F\u0085' }), paths: ['leagues.0.name'] },
    { name: 'sport and season invisible among spaces', body: league({ sport: ' \u200D ', season: '\u115F\u1160\uFFA0' }), paths: ['leagues.0.season', 'leagues.0.sport'] },
    { name: 'displayName invisible', body: league({ members: [{ externalUserId: '1', displayName: '\u200C\u{E0020}', role: 'member' }] }), paths: ['leagues.0.members.0.displayName'] },
    { name: 'name too long', body: league({ name: 'n'.repeat(201) }), paths: ['leagues.0.name'] },
    { name: 'members missing', body: league({ members: undefined }), paths: ['leagues.0.members'] },
    { name: 'settings an array', body: league({ settings: [] }), paths: ['leagues.0.settings'] },
    { name: 'settings a string', body: league({ settings: '{}' }), paths: ['leagues.0.settings'] },
    { name: 'settings over 16 KB', body: league({ settings: { pad: 'x'.repeat(16 * 1024) } }), paths: ['leagues.0.settings'] },
    { name: 'updatedAt without a zone', body: league({ updatedAt: '2026-11-21T17:59:00' }), paths: ['leagues.0.updatedAt'] },
    { name: 'updatedAt a date only', body: league({ updatedAt: '2026-11-21' }), paths: ['leagues.0.updatedAt'] },
    { name: 'updatedAt epoch millis', body: league({ updatedAt: 1763747940000 }), paths: ['leagues.0.updatedAt'] },
    { name: 'updatedAt with nanoseconds', body: league({ updatedAt: '2026-11-21T17:59:00.123456789Z' }), paths: ['leagues.0.updatedAt'] },
    { name: 'updatedAt before 1970', body: league({ updatedAt: '1969-12-31T23:59:59Z' }), paths: ['leagues.0.updatedAt'] },
    { name: 'updatedAt far in the future', body: league({ updatedAt: '2099-01-01T00:00:00Z' }), paths: ['leagues.0.updatedAt'] },
    { name: 'deletedAt just over 5 minutes ahead', body: { ...validBody(), deleted: [{ externalId: '1', deletedAt: '2026-11-21T18:05:01Z' }] }, paths: ['deleted.0.deletedAt'] },
    { name: 'impossible date', body: { ...validBody(), sentAt: '2026-02-30T00:00:00Z' }, paths: ['sentAt'] },
    { name: 'lower case without a zone', body: { ...validBody(), sentAt: '2026-11-21t17:59:00' }, paths: ['sentAt'] },
    { name: 'lower case, impossible date', body: { ...validBody(), sentAt: '2026-02-30t00:00:00z' }, paths: ['sentAt'] },
    { name: 'lower case, far in the future', body: league({ updatedAt: '2099-01-01t00:00:00z' }), paths: ['leagues.0.updatedAt'] },
    { name: 'lower case, before 1970', body: league({ updatedAt: '1969-12-31t23:59:59z' }), paths: ['leagues.0.updatedAt'] },
    { name: 'a league twice', body: { ...validBody(), leagues: [validLeague(), validLeague()] }, paths: ['leagues.1.externalId'] },
    { name: 'a league both updated and deleted', body: { ...validBody(), deleted: [{ externalId: validLeague().externalId, deletedAt: '2026-11-21T17:00:00Z' }] }, paths: ['deleted.0.externalId'] },
    { name: 'a member twice', body: league({ members: [...members(2), members(2)[1]] }), paths: ['leagues.0.members.2.externalUserId'] },
    { name: 'too many leagues', body: { ...validBody(), leagues: Array.from({ length: 501 }, (_, i) => ({ ...validLeague(), externalId: `l${i}` })) }, paths: ['leagues'] },
    { name: 'too many members', body: league({ members: members(201) }), paths: ['leagues.0.members'] },
    { name: 'too many deletions', body: { ...validBody(), deleted: Array.from({ length: 501 }, (_, i) => ({ externalId: `d${i}`, deletedAt: '2026-11-21T17:00:00Z' })) }, paths: ['deleted'] },
    {
      name: 'every failing path at once',
      body: {
        source: 'BAD',
        sentAt: 'yesterday',
        extra: 1, // (unknown: ignored, not a failure)
        leagues: [
          validLeague(),
          { ...validLeague(), externalId: 'two', status: 'x', members: [{ externalUserId: '1', displayName: '', role: 'member' }] },
          { ...validLeague(), externalId: 'three', updatedAt: 'soon', settings: null },
          { ...validLeague(), externalId: 'two' },
        ],
        deleted: [{ externalId: 'd' }],
      },
      paths: [
        'deleted.0.deletedAt', 'leagues.1.members.0.displayName', 'leagues.1.status', 'leagues.2.settings',
        'leagues.2.updatedAt', 'leagues.3.externalId', 'sentAt', 'source',
      ],
    },
  ];
  it.each(invalidCases)('refuses $name', ({ body, paths }) => {
    expect(errorPaths(body)).toEqual([...paths].sort());
  });

  it('says a name of only invisible characters is blank, once, as it says of spaces', () => {
    const result = schema.safeParse(league({ name: '\u200B', members: [{ externalUserId: '1', displayName: ' \u2060 ', role: 'member' }] }));
    expect(fieldErrors(result.error!.issues)).toEqual([
      { path: 'leagues.0.name', message: 'must not be empty or blank' },
      { path: 'leagues.0.members.0.displayName', message: 'must not be empty or blank' },
    ]);
  });

  it('says what is wrong in words a sender can act on', () => {
    const result = schema.safeParse(league({ status: 'playoffs', updatedAt: '2099-01-01T00:00:00Z' }));
    const messages = Object.fromEntries(fieldErrors(result.error!.issues).map((e) => [e.path, e.message]));
    expect(messages).toEqual({
      'leagues.0.status': 'must be one of pre_draft, drafting, in_season, complete',
      'leagues.0.updatedAt': 'is in the future (more than 5 minutes ahead of the server clock)',
    });
  });
});

describe('toLeaguesSyncResult', () => {
  it('answers the counts, and duplicate only on a replay', () => {
    expect(toLeaguesSyncResult({ upserted: 1, unchanged: 2, stale: 3, deleted: 4 })).toEqual({ received: true, upserted: 1, unchanged: 2, stale: 3, deleted: 4 });
    expect(toLeaguesSyncResult({ upserted: 1, unchanged: 0, stale: 0, deleted: 0, duplicate: true })).toEqual({ received: true, upserted: 1, unchanged: 0, stale: 0, deleted: 0, duplicate: true });
  });
});
