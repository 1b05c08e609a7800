// The bench's cold starts and its soak: what a route's server bundle weighs in a build, the median
// of a few fresh processes, and how much a server's resident memory grew over a long mixed run.
import { existsSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';

export interface RouteBundle {
  /** The route's own file and every chunk it loads before its module runs, in bytes. */
  bytes: number;
  /** Those files, relative to the build folder. */
  files: string[];
}

/**
 * What `next build` (Turbopack) puts in a route's server bundle: `server/app/<path>/route.js`, a
 * loader that names the chunks to load (`R.c("server/chunks/...")`) before it runs the route's
 * module. Chunks loaded later by a dynamic import() are not counted: they are not paid at the
 * route's first request unless it reaches that import. Null when the build has no such route.
 */
export function routeBundle(distDir: string, routePath: string): RouteBundle | null {
  const entry = path.join('server', 'app', ...routePath.split('/').filter(Boolean), 'route.js');
  const entryFile = path.join(distDir, entry);
  if (!existsSync(entryFile)) return null;
  const chunks = [...readFileSync(entryFile, 'utf8').matchAll(/R\.c\("([^"]+)"\)/g)].map((match) => match[1]!);
  const files = [entry, ...new Set(chunks)];
  const bytes = files.reduce((sum, file) => sum + (existsSync(path.join(distDir, file)) ? statSync(path.join(distDir, file)).size : 0), 0);
  return { bytes, files };
}

export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

export interface RssSample {
  /** ms since the run began. */
  atMs: number;
  rssMiB: number;
}

export interface RssGrowth {
  /** Median resident memory once warmed (the samples from 10% to 30% of the run). */
  warmMiB: number;
  /** Median resident memory at the end (the last 20% of the run). */
  endMiB: number;
  /** endMiB over warmMiB, less one (0.05: grew 5%). */
  growth: number;
}

/**
 * How much the server's memory grew over a run. The first tenth is left out (the routes' modules
 * loading, V8 compiling and its heap sizing itself to the load), and each end is a median of
 * several samples, so one garbage collection's timing does not decide it.
 */
export function rssGrowth(samples: readonly RssSample[], durationMs: number): RssGrowth {
  const within = (from: number, to: number) => samples.filter((s) => s.atMs >= from * durationMs && s.atMs <= to * durationMs).map((s) => s.rssMiB);
  const warm = within(0.1, 0.3);
  const end = within(0.8, 1.01);
  if (warm.length === 0 || end.length === 0) throw new Error(`too few memory samples (${samples.length}) over ${durationMs} ms`);
  const warmMiB = median(warm);
  const endMiB = median(end);
  // (A median of an even count is a mean of two: shown to a tenth of a MiB, as the samples are.)
  const tenths = (mib: number) => Math.round(mib * 10) / 10;
  return { warmMiB: tenths(warmMiB), endMiB: tenths(endMiB), growth: Math.round((endMiB / warmMiB - 1) * 1000) / 1000 };
}
