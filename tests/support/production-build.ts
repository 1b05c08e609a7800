import { existsSync, readFileSync } from 'node:fs';
import { inject } from 'vitest';

/**
 * For a file that starts the production server (`next start`): the build its tier's global setup
 * made (tests/setup/production-build.ts), checked to still be the one in .next. A file of another
 * tier fails here, saying how to name it; no file builds on its own.
 */
export function requireProductionBuild(): void {
  const buildId = inject('productionBuildId');
  if (!buildId) {
    throw new Error('This file starts the production server, but its tier does not build it: name it *.server.test.ts (or *.slow.test.ts for Chromium or anvil), see CONTRIBUTING.md');
  }
  const current = existsSync('.next/BUILD_ID') ? readFileSync('.next/BUILD_ID', 'utf8').trim() : undefined;
  if (current !== buildId) throw new Error(`.next holds build ${current ?? 'none'}, not ${buildId} which this run made: did something rebuild it meanwhile?`);
}
