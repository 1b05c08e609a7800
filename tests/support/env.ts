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
