import { publishAccountChange } from '../account-changes.ts';
import { callDb } from '../db/index.ts';
import type { LeaguesSyncBody } from './sync-schema.ts';

/** What the webhook answers: the delivery's outcome per league (a deletion counts in `deleted`). */
export interface LeaguesSyncResult {
  received: true;
  /** Leagues created, updated or brought back by a newer snapshot. */
  upserted: number;
  /** Snapshots with the stored updatedAt, and deletions of an already deleted league at the same time. */
  unchanged: number;
  /** Snapshots and deletions older than what is stored (including a snapshot not newer than a tombstone). */
  stale: number;
  /** Deletions applied (tombstones recorded or moved later). */
  deleted: number;
  /** Present on a repeated delivery id: the counts are the first delivery's, nothing was applied. */
  duplicate?: true;
}

interface ApplyLeaguesSyncRow {
  upserted: number;
  unchanged: number;
  stale: number;
  deleted: number;
  duplicate?: boolean;
  /** App users who were members of the leagues it replaced or deleted (absent on a duplicate). */
  previousMemberUserIds?: string[];
}

/** The named arguments of `public.apply_leagues_sync` for a validated body. */
export function toApplyLeaguesSyncArgs(body: LeaguesSyncBody): Record<string, unknown> {
  return {
    p_source: body.source,
    p_sent_at: body.sentAt,
    p_leagues: body.leagues,
    p_deleted: body.deleted,
    p_delivery_id: body.id ?? null,
  };
}

export function toLeaguesSyncResult(row: ApplyLeaguesSyncRow): LeaguesSyncResult {
  return {
    received: true,
    upserted: row.upserted,
    unchanged: row.unchanged,
    stale: row.stale,
    deleted: row.deleted,
    ...(row.duplicate ? { duplicate: true as const } : {}),
  };
}

/**
 * Apply a validated delivery: ONE call of `public.apply_leagues_sync`, so the batch is all or
 * nothing. Safe to retry: a repeated delivery id is answered from the first delivery, and without
 * an id newest-wins makes a replay change nothing. A database failure is a DbError, which the route
 * answers with 503 + Retry-After (the sender retries; nothing was applied).
 */
export async function applyLeaguesSync(body: LeaguesSyncBody): Promise<LeaguesSyncResult> {
  const row = await callDb<ApplyLeaguesSyncRow>('apply_leagues_sync', toApplyLeaguesSyncArgs(body));
  const result = toLeaguesSyncResult(row);
  // Everyone whose leagues it changed reads them again: the members it names, and the members it
  // replaced or deleted (someone a snapshot leaves out, or of a deleted league, is not named in it).
  if (!result.duplicate && result.upserted + result.deleted > 0) {
    publishAccountChange([...memberUserIds(body), ...(row.previousMemberUserIds ?? [])], 'leagues');
  }
  return result;
}

/** The app user ids of the members a delivery names. */
export function memberUserIds(body: LeaguesSyncBody): string[] {
  return body.leagues.flatMap((league) => league.members.flatMap((member) => (member.appUserId ? [member.appUserId] : [])));
}
