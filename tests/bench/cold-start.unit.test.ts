import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { median, routeBundle, rssGrowth } from '../../scripts/bench/cold-start.ts';

describe('the bench\'s cold-start and soak arithmetic', () => {
  const dist = mkdtempSync(path.join(os.tmpdir(), 'bench-bundle-'));
  afterAll(() => rmSync(dist, { recursive: true, force: true }));

  it('weighs a route as its loader plus every chunk the loader names, each once', () => {
    mkdirSync(path.join(dist, 'server', 'app', 'api', 'me'), { recursive: true });
    mkdirSync(path.join(dist, 'server', 'chunks'), { recursive: true });
    writeFileSync(path.join(dist, 'server', 'chunks', 'a.js'), 'x'.repeat(1000));
    writeFileSync(path.join(dist, 'server', 'chunks', '[root]__b._.js'), 'y'.repeat(250));
    const loader = [
      'var R=require("../../../chunks/[turbopack]_runtime.js")("server/app/api/me/route.js")',
      'R.c("server/chunks/a.js")', 'R.c("server/chunks/[root]__b._.js")', 'R.c("server/chunks/a.js")', 'R.m(1)',
    ].join('\n');
    writeFileSync(path.join(dist, 'server', 'app', 'api', 'me', 'route.js'), loader);
    const bundle = routeBundle(dist, '/api/me');
    expect(bundle?.files).toEqual([path.join('server', 'app', 'api', 'me', 'route.js'), 'server/chunks/a.js', 'server/chunks/[root]__b._.js']);
    expect(bundle?.bytes).toBe(Buffer.byteLength(loader) + 1000 + 250);
    expect(routeBundle(dist, '/api/none')).toBeNull();
  });

  it('takes the middle value, or the mean of the two middle ones', () => {
    expect(median([30, 10, 20])).toBe(20);
    expect(median([4, 1, 3, 2])).toBe(2.5);
    expect(median([])).toBeNaN();
  });

  it('compares the memory once warmed with the memory at the end, leaving out the first tenth', () => {
    const duration = 100_000;
    const samples = Array.from({ length: 21 }, (_, i) => ({ atMs: i * 5_000, rssMiB: i === 0 ? 100 : i <= 6 ? 400 : i >= 16 ? 440 : 420 }));
    expect(rssGrowth(samples, duration)).toEqual({ warmMiB: 400, endMiB: 440, growth: 0.1 });
    expect(() => rssGrowth(samples.slice(0, 2), duration)).toThrow(/too few/);
  });
});
