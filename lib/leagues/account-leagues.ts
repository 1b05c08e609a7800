import type { LeagueStatus, MemberRole } from './sync-schema.ts';

/** One of the caller's leagues, as GET /api/me shows it (`public.account_leagues` builds it). */
export interface AccountLeague {
  source: string;
  externalId: string;
  name: string;
  sport: string;
  season: string;
  status: LeagueStatus;
  /** The caller's role in the league. */
  role: MemberRole;
  /** The stored snapshot's updatedAt, UTC (RFC 3339), without trailing zero fractions. */
  updatedAt: string;
}
