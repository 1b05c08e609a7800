import { z } from 'zod';
import { RFC3339_DATE_TIME } from '../rfc3339.ts';

/**
 * The body of `POST /api/webhooks/leagues-sync`: a batch of league snapshots and deletions from one
 * upstream source. A field this service does not know is accepted and ignored, at every level, as
 * for the billing webhook (a sync worker that starts sending a new field before the service reads it
 * keeps being applied, instead of every delivery refused until both change together); every field
 * it knows is checked. Validation decides without the database; what needs the stored rows (newest
 * wins, tombstones, replays) is decided by `public.apply_leagues_sync`.
 */

export const LEAGUES_SYNC_LIMITS = {
  maxBodyBytes: 1024 * 1024,
  maxLeagues: 500,
  maxDeleted: 500,
  maxMembersPerLeague: 200,
  maxSettingsBytes: 16 * 1024,
  /**
   * How far ahead of the server clock a timestamp may be. Newest wins, so a snapshot dated in the
   * far future (a sender bug) would freeze its league until that date; refuse it instead.
   */
  maxClockSkewMs: 5 * 60 * 1000,
} as const;

export const LEAGUE_STATUSES = ['pre_draft', 'drafting', 'in_season', 'complete'] as const;
export const MEMBER_ROLES = ['commissioner', 'member'] as const;

export type LeagueStatus = (typeof LEAGUE_STATUSES)[number];
export type MemberRole = (typeof MEMBER_ROLES)[number];

export interface SchemaClock {
  now: () => Date;
}

const systemClock: SchemaClock = { now: () => new Date() };

// Ids of upstream systems: printable ASCII without spaces, so a stray space or newline in a key is
// caught here rather than creating a second league that only differs by whitespace.
const externalKey = (what: string) =>
  z.string().regex(/^[\x21-\x7e]{1,128}$/, `${what} must be 1 to 128 printable ASCII characters without spaces`);

// A name of only spaces would show as a blank row in the app: at least one visible character.
// `\S` (the document's pattern) still lets through a name of only invisible characters (a zero-width
// space, a word joiner, a Hangul filler): the refinement refuses those too, with the same message,
// and only where `\S` passed, so a blank name is reported once. Also blank as shown: the Braille
// pattern blank (U+2800, drawn as an empty cell) and combining marks with no letter to sit on. The
// document says it in words: a Unicode-property pattern would need the validator's unicode mode.
const VISIBLE_CHARACTER = /[^\p{White_Space}\p{Cc}\p{Default_Ignorable_Code_Point}\p{M}\u2800]/u;
const BLANK = 'must not be empty or blank';
const text = (max: number) =>
  z
    .string()
    .max(max, `must be at most ${max} characters`)
    .regex(/\S/, BLANK)
    .refine((value) => !/\S/.test(value) || VISIBLE_CHARACTER.test(value), BLANK)
    .meta({
      description: `At most ${max} characters, with at least one visible character: not only white space, control characters, invisible ones (Unicode Default_Ignorable_Code_Point, such as U+200B), combining marks or the Braille blank (U+2800)`,
    });

const TIMESTAMP_FORMAT = 'must be an RFC 3339 timestamp with a time zone, e.g. 2026-11-21T17:59:00Z';

/**
 * An RFC 3339 timestamp with `Z` or an offset, kept with `T` and `Z` in upper case (as the database
 * gets it). At most 6 fractional digits: Postgres keeps microseconds, and two times that differ only
 * below that would compare equal ("unchanged").
 * The rules a pattern can say are patterns (so the OpenAPI document states them); each fails only on
 * its own excess, so a malformed timestamp gets the one format message.
 */
function timestampSchema(clock: SchemaClock) {
  return z
    .string({ error: TIMESTAMP_FORMAT })
    .toUpperCase()
    .regex(RFC3339_DATE_TIME, TIMESTAMP_FORMAT)
    .regex(/^(?!.*\.\d{7})/, 'must have at most 6 fractional second digits')
    // RFC 3339 allows offsets up to 23:59, Postgres stores at most 15:59 (no real zone is further).
    .regex(/^(?!.*[+-](?:1[6-9]|2\d):\d\d$)/, 'must have a time zone offset within ±15:59')
    .regex(/^(?!(?:0\d{3}|1[0-8]\d\d|19[0-6]\d)-)/, 'must not be before 1970-01-01T00:00:00Z')
    .superRefine((value, ctx) => {
      // A bad format is reported above; these checks only make sense on a well-formed timestamp.
      // (Not `abort: true`: an aborting issue would also stop the body-wide duplicate check.)
      if (!RFC3339_DATE_TIME.test(value)) return;
      const ms = Date.parse(value);
      // The year pattern cannot see an offset that puts 1970-01-01 before the epoch.
      if (!(ms >= 0) && !/^19[0-6]\d-/.test(value)) ctx.addIssue({ code: 'custom', message: 'must not be before 1970-01-01T00:00:00Z' });
      const limit = clock.now().getTime() + LEAGUES_SYNC_LIMITS.maxClockSkewMs;
      if (ms > limit) {
        ctx.addIssue({
          code: 'custom',
          message: `is in the future (more than ${LEAGUES_SYNC_LIMITS.maxClockSkewMs / 60_000} minutes ahead of the server clock)`,
        });
      }
    })
    .meta({
      description: `RFC 3339 with \`Z\` or an offset within ±15:59 (\`T\` and \`Z\` in either case), at most 6 fractional second digits; not before 1970-01-01T00:00:00Z and at most ${LEAGUES_SYNC_LIMITS.maxClockSkewMs / 60_000} minutes ahead of the server clock`,
    });
}

const utf8Length = (value: string) => Buffer.byteLength(value, 'utf8');

const settingsSchema = z
  .record(z.string(), z.unknown(), { error: 'must be a JSON object' })
  .superRefine((value, ctx) => {
    const bytes = utf8Length(JSON.stringify(value));
    if (bytes > LEAGUES_SYNC_LIMITS.maxSettingsBytes) {
      ctx.addIssue({ code: 'custom', message: `must be at most ${LEAGUES_SYNC_LIMITS.maxSettingsBytes} bytes as JSON (got ${bytes})` });
    }
  })
  .meta({ description: `Free-form league settings, kept as sent: at most ${LEAGUES_SYNC_LIMITS.maxSettingsBytes} bytes as JSON (UTF-8)` });

const memberSchema = z.looseObject({
  externalUserId: externalKey('externalUserId'),
  displayName: text(100),
  role: z.enum(MEMBER_ROLES, { error: `must be one of ${MEMBER_ROLES.join(', ')}` }),
  // Null and absent mean the same: this member has no account in the app (yet).
  appUserId: z
    .guid({ error: 'must be a UUID' })
    .transform((value) => value.toLowerCase())
    .nullish()
    .transform((value) => value ?? null),
});

function leagueSchema(clock: SchemaClock) {
  return z.looseObject({
    externalId: externalKey('externalId'),
    name: text(200),
    sport: text(32),
    season: text(16),
    status: z.enum(LEAGUE_STATUSES, { error: `must be one of ${LEAGUE_STATUSES.join(', ')}` }),
    updatedAt: timestampSchema(clock),
    settings: settingsSchema.optional().transform((value) => value ?? {}),
    members: z
      .array(memberSchema)
      .max(LEAGUES_SYNC_LIMITS.maxMembersPerLeague, `at most ${LEAGUES_SYNC_LIMITS.maxMembersPerLeague} members per league`)
      .superRefine((members, ctx) => reportDuplicates(Array.isArray(members) ? members : [], 'externalUserId', [], ctx, 'this league'), {
        when: () => true,
      })
      .meta({ description: 'The whole membership (members not listed are removed); each `externalUserId` at most once' }),
  });
}

function deletionSchema(clock: SchemaClock) {
  return z.looseObject({
    externalId: externalKey('externalId'),
    deletedAt: timestampSchema(clock),
  });
}

/** Build the body schema with a clock (tests inject one; the route uses the system clock). */
export function createLeaguesSyncBodySchema(clock: SchemaClock = systemClock) {
  return z
    .looseObject({
      id: externalKey('id').optional(),
      source: z.string().regex(/^[a-z0-9_-]{1,32}$/, 'must match [a-z0-9_-]{1,32}'),
      sentAt: timestampSchema(clock),
      leagues: z
        .array(leagueSchema(clock))
        .max(LEAGUES_SYNC_LIMITS.maxLeagues, `at most ${LEAGUES_SYNC_LIMITS.maxLeagues} leagues per delivery`)
        .default([])
        .meta({ description: 'Snapshots to apply; each `externalId` at most once in the delivery (in `leagues` or `deleted`)' }),
      deleted: z
        .array(deletionSchema(clock))
        .max(LEAGUES_SYNC_LIMITS.maxDeleted, `at most ${LEAGUES_SYNC_LIMITS.maxDeleted} deletions per delivery`)
        .default([])
        .meta({ description: 'Leagues to delete (tombstones); each `externalId` at most once in the delivery (in `leagues` or `deleted`)' }),
    })
    .superRefine(
      // A league appears once per delivery (in `leagues` or in `deleted`): with two entries the
      // outcome would depend on their order, which a sender cannot see.
      (body, ctx) => {
        const items = [
          ...listAt(body, 'leagues').map((item, index) => ({ item, path: ['leagues', index] })),
          ...listAt(body, 'deleted').map((item, index) => ({ item, path: ['deleted', index] })),
        ];
        reportDuplicates(items.map(({ item }) => item), 'externalId', items.map(({ path }) => path), ctx, 'this delivery');
      },
      // Run even when other fields failed, so one answer lists every problem.
      { when: () => true },
    );
}

export const leaguesSyncBodySchema = createLeaguesSyncBodySchema();

export type LeaguesSyncBody = z.output<typeof leaguesSyncBodySchema>;
export type LeagueSnapshot = LeaguesSyncBody['leagues'][number];
export type LeagueDeletion = LeaguesSyncBody['deleted'][number];

// The refinements above may run on partly invalid input, so they read it defensively.
function listAt(value: unknown, key: string): unknown[] {
  const list = value !== null && typeof value === 'object' ? (value as Record<string, unknown>)[key] : undefined;
  return Array.isArray(list) ? list : [];
}

function reportDuplicates(
  items: readonly unknown[],
  key: string,
  paths: readonly (readonly PropertyKey[])[],
  ctx: { addIssue: (issue: { code: 'custom'; message: string; path: PropertyKey[] }) => void },
  scope: string,
): void {
  const seen = new Set<string>();
  items.forEach((item, index) => {
    const value = item !== null && typeof item === 'object' ? (item as Record<string, unknown>)[key] : undefined;
    if (typeof value !== 'string') return;
    if (seen.has(value)) {
      ctx.addIssue({ code: 'custom', message: `duplicate ${key} "${value}" in ${scope}`, path: [...(paths[index] ?? [index]), key] });
    }
    seen.add(value);
  });
}
