import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { SWEEP_BUDGET_MS, SYNC_BUDGET_MS } from '../../lib/billing/sync.ts';
import { DATABASE_WAITS } from '../../lib/db/postgres.ts';
import { MAINTENANCE_CALL_BUDGET_MS, MAINTENANCE_RUN_BUDGET_MS } from '../../lib/maintenance.ts';

/**
 * The deploy shape in vercel.json: every cron job calls a GET route that exists, on a schedule the
 * Hobby plan accepts (at most once a day), the sweep's and the maintenance job's work budgets fit
 * inside the function's time limit, and a webhook's worst case on a saturated database (a
 * connection wait plus a whole call) does too, well inside RevenueCat's 60 s.
 */
const vercel = JSON.parse(readFileSync('vercel.json', 'utf8')) as {
  crons?: { path: string; schedule: string }[];
  functions: Record<string, { maxDuration: number }>;
};

describe('vercel.json', () => {
  it('registers the billing sweep and the maintenance job as cron jobs', () => {
    expect(vercel.crons?.map((cron) => cron.path)).toEqual(['/api/cron/billing-sync', '/api/cron/maintenance']);
  });

  it.each(vercel.crons ?? [])('$path: a GET route that exists, run at most once a day', async ({ path: cronPath, schedule }) => {
    const file = path.join('app', cronPath, 'route.ts');
    expect(existsSync(file)).toBe(true);
    const route = (await import(/* @vite-ignore */ `../../${file}`)) as Record<string, unknown>;
    expect(typeof route.GET).toBe('function');
    const [minute, hour, ...rest] = schedule.split(' ');
    expect(rest).toEqual(['*', '*', '*']);
    expect(minute).toMatch(/^\d{1,2}$/);
    expect(hour).toMatch(/^\d{1,2}$/);
  });

  it('gives API routes more time than a sweep or a sync may take (each call to RevenueCat, retries and waits included, ends by their deadline)', () => {
    const maxDurationMs = vercel.functions['app/api/**/route.ts']!.maxDuration * 1000;
    // What is left is for the database calls around them (each bounded by lib/db/postgres.ts).
    expect(SWEEP_BUDGET_MS).toBeLessThanOrEqual(maxDurationMs - 5_000);
    expect(SYNC_BUDGET_MS).toBeLessThanOrEqual(maxDurationMs - 5_000);
  });

  it('gives API routes more time than one maintenance run, whose last call may start just before the end', () => {
    const maxDurationMs = vercel.functions['app/api/**/route.ts']!.maxDuration * 1000;
    expect(MAINTENANCE_RUN_BUDGET_MS + MAINTENANCE_CALL_BUDGET_MS).toBeLessThan(maxDurationMs - 5_000);
  });

  it('keeps a maintenance call (one transaction holding the rows it deletes) shorter than a request waits for a lock', () => {
    expect(MAINTENANCE_CALL_BUDGET_MS * 2).toBeLessThanOrEqual(DATABASE_WAITS.lockMs);
  });

  it("answers a webhook on a saturated database within the function's limit and well inside RevenueCat's 60 s", () => {
    const maxDurationMs = vercel.functions['app/api/**/route.ts']!.maxDuration * 1000;
    const worstCaseMs = DATABASE_WAITS.connectionMs + DATABASE_WAITS.callMs;
    expect(worstCaseMs).toBeLessThan(maxDurationMs);
    expect(maxDurationMs).toBeLessThanOrEqual(60_000 / 2);
    expect(DATABASE_WAITS.lockMs).toBeLessThan(DATABASE_WAITS.callMs);
  });
});
