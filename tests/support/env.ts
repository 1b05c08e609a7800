import { resetConfig } from '../../lib/config.ts';

/**
 * Set environment variables for a test (undefined deletes), re-read the configuration, and return
 * a function that restores what was there.
 */
export function setEnv(vars: Record<string, string | undefined>): () => void {
  const saved = Object.fromEntries(Object.keys(vars).map((key) => [key, process.env[key]]));
  apply(vars);
  return () => apply(saved);
}

function apply(vars: Record<string, string | undefined>) {
  for (const [key, value] of Object.entries(vars)) {
    if (value === undefined) delete process.env[key];
    else process.env[key] = value;
  }
  resetConfig();
}

/**
 * What a deployment off Vercel sets at least (outside local mode, accepted by the configuration):
 * for a test of what holds outside local mode, over a suite that runs in it. The database named here
 * is never opened (the suites replace the configured database with theirs).
 */
export const DEPLOYMENT_SETTINGS = {
  LOCAL_DEV: undefined, DATABASE_URL: 'postgres://db.example.com/app', SUPABASE_JWT_SECRET: 'x'.repeat(40),
  SUBSCRIPTION_WEBHOOK_SECRET: 'deployed-secret-0123456789abcdef', APP_ORIGIN: 'https://app.example.com',
} as const;
