import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { SWEEP_BUDGET_MS } from '../../lib/billing/sync.ts';
import { envSchema } from '../../lib/config.ts';

/**
 * The deploy shape in vercel.json: every cron job calls a GET route that exists, on a schedule the
 * Hobby plan accepts (at most once a day), and the sweep's work budget fits inside the function's
 * time limit with room for one more call to RevenueCat.
 */
const vercel = JSON.parse(readFileSync('vercel.json', 'utf8')) as {
  crons?: { path: string; schedule: string }[];
  functions: Record<string, { maxDuration: number }>;
};

describe('vercel.json', () => {
  it('registers the billing sweep as a cron job', () => {
    expect(vercel.crons?.map((cron) => cron.path)).toEqual(['/api/cron/billing-sync']);
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

  it('gives API routes more time than one sweep works, plus one call to RevenueCat', () => {
    const maxDurationMs = vercel.functions['app/api/**/route.ts']!.maxDuration * 1000;
    const revenuecatTimeoutMs = envSchema.parse({}).REVENUECAT_TIMEOUT_MS;
    expect(SWEEP_BUDGET_MS + revenuecatTimeoutMs).toBeLessThan(maxDurationMs);
  });
});
