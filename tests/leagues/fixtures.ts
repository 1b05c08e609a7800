import { randomUUID } from 'node:crypto';
import type { TestDatabase } from '../support/databases.ts';

/** A fixed past instant plus `minutes`, as RFC 3339 (always before the real clock, so routes accept it). */
export function at(minutes: number): string {
  return new Date(Date.parse('2025-06-01T12:00:00Z') + minutes * 60_000).toISOString().replace('.000Z', 'Z');
}

export interface MemberInput {
  externalUserId: string;
  displayName: string;
  role: 'commissioner' | 'member';
  appUserId?: string | null;
}

export function member(n: number, overrides: Partial<MemberInput> = {}): MemberInput {
  return { externalUserId: `u${n}`, displayName: `Member ${n}`, role: n === 1 ? 'commissioner' : 'member', ...overrides };
}

export function members(count: number): MemberInput[] {
  return Array.from({ length: count }, (_, i) => member(i + 1));
}

export function league(externalId: string, updatedAt: string, overrides: Record<string, unknown> = {}) {
  return {
    externalId,
    name: `League ${externalId}`,
    sport: 'nfl',
    season: '2025',
    status: 'in_season',
    updatedAt,
    settings: { teams: 12 },
    members: members(3),
    ...overrides,
  };
}

export function delivery(source: string, parts: { id?: string; leagues?: unknown[]; deleted?: unknown[] } = {}) {
  return { ...(parts.id ? { id: parts.id } : {}), source, sentAt: at(1000), leagues: parts.leagues ?? [], deleted: parts.deleted ?? [] };
}

/** A source name no other test uses, so tests can share one database. */
export function freshSource(prefix = 't'): string {
  return `${prefix}-${randomUUID().slice(0, 8)}`;
}

export interface StoredLeague {
  external_id: string;
  name: string | null;
  status: string | null;
  updated_at: string | null;
  deleted_at: string | null;
  members: string[];
}

/** The stored leagues of a source with their members (as "externalUserId:role"), for assertions. */
export async function storedLeagues(db: TestDatabase, source: string): Promise<StoredLeague[]> {
  return db.sql<StoredLeague>(
    `select l.external_id, l.name, l.status,
            to_char(l.updated_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') as updated_at,
            to_char(l.deleted_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') as deleted_at,
            coalesce((select array_agg(m.external_user_id || ':' || m.role order by m.external_user_id collate "C")
                      from public.league_members m where m.league_id = l.id), '{}') as members
     from public.leagues l where l.source = $1 order by l.external_id collate "C"`,
    [source],
  );
}

/** Row counts of every leagues table (to show that a refused request changed nothing). */
export async function tableCounts(db: TestDatabase): Promise<Record<string, number>> {
  const [row] = await db.sql<Record<string, number>>(
    `select (select count(*)::int from public.leagues) as leagues,
            (select count(*)::int from public.league_members) as members,
            (select count(*)::int from public.league_sync_deliveries) as deliveries`,
  );
  return row!;
}

/** The league of the issue's example body (issue 5). */
export function issueLeague(memberOverrides: Record<string, unknown> = {}) {
  return {
    externalId: '1249067741470539776',
    name: 'Sunday Funday',
    sport: 'nfl',
    season: '2026',
    status: 'in_season',
    updatedAt: '2026-11-21T17:59:00Z',
    settings: {},
    members: [{ externalUserId: '73100543', displayName: 'Ana', role: 'commissioner', ...memberOverrides }],
  };
}

/** The issue's example body: one league snapshot and one deletion. */
export function issueBody(id: string, memberOverrides: Record<string, unknown> = {}) {
  return {
    id,
    source: 'sleeper',
    sentAt: '2026-11-21T18:00:00Z',
    leagues: [issueLeague(memberOverrides)],
    deleted: [{ externalId: '1180000000000000000', deletedAt: '2026-11-21T17:58:00Z' }],
  };
}
