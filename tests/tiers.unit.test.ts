import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { tierOf, type Tier } from './setup/tiers.ts';

/**
 * Every test file's name says its tier (tests/setup/tiers.ts), and the tier is what the file needs,
 * found from what it imports (following the test helpers, type-only imports aside): the unit tier
 * must stay fast and start nothing, and a file that needs more than its tier starts fails there.
 */
type Need = 'database' | 'build' | 'browser or chain';

const MARKERS: Record<string, Need> = {
  'tests/support/databases.ts': 'database',
  'scripts/support/postgres-server.ts': 'database',
  'lib/db/pglite.ts': 'database',
  'tests/support/production-build.ts': 'build',
  'scripts/support/next-server.ts': 'build',
  'tests/support/browser.ts': 'browser or chain',
  'scripts/support/local-chain.ts': 'browser or chain',
};

/** What each tier may need; what it must need to belong there rather than to a lighter one. */
const TIERS: Record<Exclude<Tier, 'reliability'>, { may: Need[]; must?: Need }> = {
  unit: { may: [] },
  db: { may: ['database'], must: 'database' },
  server: { may: ['database', 'build'], must: 'build' },
  slow: { may: ['database', 'build', 'browser or chain'], must: 'browser or chain' },
};

const relative = (file: string) => path.relative(process.cwd(), file).split(path.sep).join('/');

function testFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return testFiles(full);
    return entry.name.endsWith('.test.ts') ? [relative(full)] : [];
  });
}

/** The project files a module imports for their values (relative specifiers). */
function valueImports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  return [...text.matchAll(/(?:^|\n)\s*(?:import|export)(?!\s+type\b)\b[^'"]*?from\s+['"](\.[^'"]+)['"]|import\(\s*['"](\.[^'"]+)['"]\s*\)|(?:^|\n)\s*import\s+['"](\.[^'"]+)['"]/g)]
    .map((match) => relative(path.resolve(path.dirname(file), (match[1] ?? match[2] ?? match[3])!)));
}

function needsOf(file: string, seen = new Set<string>()): Set<Need> {
  const needs = new Set<Need>();
  if (seen.has(file)) return needs;
  seen.add(file);
  if (MARKERS[file]) needs.add(MARKERS[file]);
  // A file may reach the prepared databases directly, without the helpers.
  if (/inject\(\s*'(postgresServerUrl|pgliteTemplateDir|pgliteRealtimeTemplateDir)'/.test(readFileSync(file, 'utf8'))) needs.add('database');
  for (const target of valueImports(file)) {
    if (MARKERS[target]) needs.add(MARKERS[target]);
    // Follow the test helpers and shared support, not the service itself.
    else if ((target.startsWith('tests/') || target.startsWith('scripts/support/')) && existsSync(target)) for (const need of needsOf(target, seen)) needs.add(need);
  }
  return needs;
}

describe('test tiers', () => {
  const files = testFiles('tests');

  it('names the tier of a file the way the projects pick it', () => {
    expect(tierOf('tests/db/schemas.test.ts')).toBe('db');
    expect(tierOf('tests/db/supabase-cli.test.ts')).toBe('db');
    expect(tierOf('tests/http/layers.unit.test.ts')).toBe('unit');
    expect(tierOf('tests/http/logs.server.test.ts')).toBe('server');
    expect(tierOf('tests/browser/account-page.slow.test.ts')).toBe('slow');
    expect(tierOf('tests/reliability/load.test.ts')).toBe('reliability');
  });

  it('finds what a file needs through the helpers it imports', () => {
    expect([...needsOf('tests/conformance/conformance.server.test.ts')]).toContain('build');
    expect([...needsOf('tests/routes/me.test.ts')]).toEqual(['database']);
    // Type-only imports of a helper are no need.
    expect([...needsOf('tests/leagues/sync-schema.unit.test.ts')]).toEqual([]);
  });

  it('puts every file in the tier of what it needs', () => {
    expect(files.length).toBeGreaterThan(80);
    const wrong = files.filter((file) => tierOf(file) !== 'reliability').flatMap((file) => {
      const tier = TIERS[tierOf(file) as keyof typeof TIERS];
      const needs = [...needsOf(file)];
      const beyond = needs.filter((need) => !tier.may.includes(need));
      if (beyond.length > 0) return [`${file} (${tierOf(file)}) needs ${beyond.join(', ')}: rename it (CONTRIBUTING.md, "Test tiers")`];
      if (tier.must && !needs.includes(tier.must)) return [`${file} (${tierOf(file)}) needs no ${tier.must}: it belongs to a lighter tier`];
      return [];
    });
    expect(wrong).toEqual([]);
  });
});
