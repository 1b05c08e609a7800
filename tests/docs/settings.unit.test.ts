import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { envSchema } from '../../lib/config.ts';

/**
 * One source for the settings: the configuration schema (lib/config.ts) is what the service reads;
 * docs/configuration.md documents every name it reads, and .env.local.example offers every name
 * a developer sets, and nothing else.
 */
const read = Object.keys(envSchema.shape);
/** Set by Vercel or Next itself, or deprecated: documented, not offered. */
const NOT_OFFERED = ['VERCEL', 'VERCEL_ENV', 'VERCEL_PROJECT_PRODUCTION_URL', 'VERCEL_URL', 'BILLING_IGNORE_SANDBOX', 'PORT'];

describe('the settings', () => {
  it('docs/configuration.md documents every setting the service reads, in its tables', () => {
    const tableRows = readFileSync('docs/configuration.md', 'utf8').split('\n').filter((line) => line.startsWith('| `'));
    const documented = new Set(tableRows.flatMap((row) => [...row.split('|')[1]!.matchAll(/`([A-Z][A-Z0-9_]*)`/g)].map((match) => match[1]!)));
    expect(read.filter((name) => !documented.has(name))).toEqual([]);
    expect([...documented].filter((name) => !read.includes(name))).toEqual([]);
  });

  it('.env.local.example offers every setting a developer sets, and nothing the service does not read', () => {
    const offered = [...readFileSync('.env.local.example', 'utf8').matchAll(/^([A-Z][A-Z0-9_]*)=/gm)].map((match) => match[1]!);
    expect(read.filter((name) => !NOT_OFFERED.includes(name) && !offered.includes(name))).toEqual([]);
    expect(offered.filter((name) => !read.includes(name) || NOT_OFFERED.includes(name))).toEqual([]);
    expect(new Set(offered).size).toBe(offered.length);
  });
});
