import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * The arrows point one way: routes -> http -> domain -> db. A domain module raises DomainError
 * (lib/errors.ts) and never imports lib/http; only lib/http (and the OpenAPI document it serves)
 * knows statuses and problem+json. lib/config.ts is the ground floor (it imports nothing of the
 * project); the operator layer (lib/operations) reads the domains, never the reverse; lib never
 * reaches up into app/ or scripts/; scripts use lib/ and scripts/support, never tests/.
 */
const ROOT = path.resolve('.');
const LIB = path.resolve('lib');
const MAY_IMPORT_HTTP = ['http', 'openapi'];

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(full);
    return /\.tsx?$/.test(entry.name) ? [full] : [];
  });
}

function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  return [...text.matchAll(/(?:^|\n)\s*(?:import|export)\b[^'"]*?from\s+['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)|(?:^|\n)\s*import\s+['"]([^'"]+)['"]/g)].map((m) => (m[1] ?? m[2] ?? m[3])!);
}

/** The project file an import names (relative or #lib/), or undefined for a package. */
function projectTarget(file: string, specifier: string): string | undefined {
  if (specifier.startsWith('#lib/')) return path.join(LIB, specifier.slice(5));
  return specifier.startsWith('.') ? path.resolve(path.dirname(file), specifier) : undefined;
}

/** The top folder of the project an import lands in (`lib`, `app`, `tests`, `scripts`), or undefined for a package. */
function topFolder(file: string, specifier: string): string | undefined {
  const target = projectTarget(file, specifier);
  return target === undefined ? undefined : path.relative(ROOT, target).split(path.sep)[0];
}

/** "file imports specifier" for each import of the files that `offends`. */
function offending(files: string[], offends: (file: string, specifier: string) => boolean): string[] {
  return files.flatMap((file) => importsOf(file).filter((specifier) => offends(file, specifier)).map((specifier) => `${path.relative(ROOT, file)} imports ${specifier}`));
}

/** The lib folder an import lands in (`http`, `wallets`, `errors.ts`), or undefined outside lib. */
function libTarget(file: string, specifier: string): string | undefined {
  const resolved = projectTarget(file, specifier);
  if (!resolved || !resolved.startsWith(`${LIB}${path.sep}`)) return undefined;
  return path.relative(LIB, resolved).split(path.sep)[0];
}

describe('module layers', () => {
  const files = sourceFiles(LIB);

  it('finds the modules it checks', () => {
    expect(files.length).toBeGreaterThan(20);
    expect(importsOf(path.join(LIB, 'http', 'route.ts'))).toContain('../errors.ts');
  });

  it('has no domain module importing lib/http', () => {
    const offending = files
      .filter((file) => !MAY_IMPORT_HTTP.includes(path.relative(LIB, file).split(path.sep)[0]!))
      .flatMap((file) => importsOf(file).filter((specifier) => libTarget(file, specifier) === 'http').map((specifier) => `${path.relative(LIB, file)} imports ${specifier}`));
    expect(offending).toEqual([]);
  });

  it('keeps the client package free of the server: it runs in browsers and apps, importing only itself and its packages', () => {
    const CLIENT = path.resolve('packages', 'client', 'src');
    const client = sourceFiles(CLIENT);
    expect(client.length).toBeGreaterThanOrEqual(5);
    const outside = client.flatMap((file) => importsOf(file)
      .filter((specifier) => specifier.startsWith('.') ? !path.resolve(path.dirname(file), specifier).startsWith(`${CLIENT}${path.sep}`) : !['openapi-fetch', 'react', '@supabase/supabase-js'].includes(specifier))
      .map((specifier) => `${path.relative(CLIENT, file)} imports ${specifier}`));
    expect(outside).toEqual([]);
  });

  it('keeps lib/errors.ts free of the service (it is the bottom of the stack)', () => {
    const file = path.join(LIB, 'errors.ts');
    expect(importsOf(file).filter((specifier) => libTarget(file, specifier) !== undefined)).toEqual([]);
  });

  it('keeps lib/config.ts the ground floor: it imports nothing of the project', () => {
    const config = path.join(LIB, 'config.ts');
    expect(importsOf(config)).toContain('zod');
    expect(offending([config], (file, specifier) => projectTarget(file, specifier) !== undefined)).toEqual([]);
  });

  it('lets only the operator layer import lib/operations: it reads the domains, never the reverse', () => {
    const outside = files.filter((file) => path.relative(LIB, file).split(path.sep)[0] !== 'operations');
    expect(offending(outside, (file, specifier) => libTarget(file, specifier) === 'operations')).toEqual([]);
    // The operator's own callers still reach it (the check looks where the imports are).
    expect(importsOf(path.resolve('app/api/admin/status/route.ts')).some((specifier) => specifier.startsWith('#lib/operations/'))).toBe(true);
  });

  it('never lets lib reach up into app/, scripts/ or tests/', () => {
    expect(offending(files, (file, specifier) => ['app', 'scripts', 'tests'].includes(topFolder(file, specifier) ?? ''))).toEqual([]);
  });

  it('keeps scripts off tests/: what scripts and tests share lives in scripts/support', () => {
    const scripts = sourceFiles(path.resolve('scripts'));
    expect(scripts.length).toBeGreaterThan(10);
    expect(offending(scripts, (file, specifier) => topFolder(file, specifier) === 'tests')).toEqual([]);
  });
});
