import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * The arrows point one way: routes -> http -> domain -> db. A domain module raises DomainError
 * (lib/errors.ts) and never imports lib/http; only lib/http (and the OpenAPI document it serves)
 * knows statuses and problem+json.
 */
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
  return [...text.matchAll(/(?:^|\n)\s*(?:import|export)\b[^'"]*?from\s+['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/g)].map((m) => (m[1] ?? m[2])!);
}

/** The lib folder an import lands in (`http`, `wallets`, `errors.ts`), or undefined outside lib. */
function libTarget(file: string, specifier: string): string | undefined {
  const resolved = specifier.startsWith('#lib/') ? path.join(LIB, specifier.slice(5)) : specifier.startsWith('.') ? path.resolve(path.dirname(file), specifier) : undefined;
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
});
