import type { LeagueStatus, MemberRole } from './sync-schema.ts';

/** One of the caller's leagues, as GET /api/me shows it. */
export interface AccountLeague {
  source: string;
  externalId: string;
  name: string;
  sport: string;
  season: string;
  status: LeagueStatus;
  /** The caller's role in the league. */
  role: MemberRole;
  /** The stored snapshot's updatedAt, UTC (RFC 3339). */
  updatedAt: string;
}

/**
 * Map the result of `public.account_leagues(p_user_id)` (a JSON array, newest first) to the API
 * shape. The SQL already uses the API's keys; this keeps only them and writes updatedAt without
 * trailing zero fractions ("2026-11-21T17:59:00.000000Z" -> "2026-11-21T17:59:00Z").
 */
export function toAccountLeagues(rows: unknown): AccountLeague[] {
  if (!Array.isArray(rows)) return [];
  return rows.map((row: AccountLeague) => ({
    source: row.source,
    externalId: row.externalId,
    name: row.name,
    sport: row.sport,
    season: row.season,
    status: row.status,
    role: row.role,
    updatedAt: trimFraction(row.updatedAt),
  }));
}

function trimFraction(timestamp: string): string {
  return timestamp.replace(/\.(\d*?)0*Z$/, (_, digits: string) => (digits ? `.${digits}Z` : 'Z'));
}
