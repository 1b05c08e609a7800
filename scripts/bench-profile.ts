// Where a request's CPU time goes: a V8 CPU profile of the server (node --cpu-prof), each sample
// mapped back to its source through the build's source maps and put in one bucket by the innermost
// frame that says what it is. Used by `npm run bench` for the billing webhook.
import { existsSync, readFileSync } from 'node:fs';
import { SourceMap } from 'node:module';
import { fileURLToPath } from 'node:url';

/** The buckets, in the order the bench prints them. */
export const PROFILE_BUCKETS = ['framework', 'route wrapper', 'auth', 'body and schema', 'decision', 'database call', 'logging', 'garbage collection'] as const;
export type ProfileBucket = (typeof PROFILE_BUCKETS)[number];

/** Source path patterns (after source mapping) and the bucket they stand for; the first match wins. */
const BUCKET_OF_SOURCE: [RegExp, ProfileBucket][] = [
  [/\/lib\/log\.ts$|node_modules\/(pino|sonic-boom|thread-stream|pino-std-serializers|fast-redact|quick-format-unescaped|atomic-sleep|on-exit-leak-free|safe-stable-stringify)\//, 'logging'],
  [/\/lib\/db\/|node_modules\/(pg|pg-protocol|pg-pool|pg-types|pgpass|postgres-[a-z]+|@electric-sql\/pglite)\/|^wasm:/, 'database call'],
  [/\/lib\/billing\/|\/lib\/wallets\/|\/lib\/leagues\//, 'decision'],
  [/\/lib\/http\/body\.ts$|\/lib\/errors\.ts$|node_modules\/zod\//, 'body and schema'],
  [/\/lib\/auth\//, 'auth'],
  [/\/lib\/http\/|\/app\/api\//, 'route wrapper'],
];

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number; columnNumber: number };
  children?: number[];
}
export interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

export interface ProfileSummary {
  /** CPU ms in each bucket over the whole profile (idle time left out). */
  ms: Record<ProfileBucket, number>;
  totalMs: number;
  /** The heaviest functions by self time (source-mapped), for the next person who wants to attack one. */
  topFunctions: { name: string; source: string; ms: number }[];
}

/** Start the server with this in NODE_OPTIONS so that profileWhile() can reach its inspector. */
export const INSPECT_OPTION = '--inspect=127.0.0.1:0';

/**
 * Profile the server (started with INSPECT_OPTION; `next start` serves in its own process) while
 * `work` runs, through the inspector protocol, so start-up and warm-up stay out of the profile.
 */
export async function profileWhile(serverOutput: () => string, work: () => Promise<void>): Promise<CpuProfile> {
  const url = /Debugger listening on (ws:\/\/\S+)/.exec(serverOutput())?.[1];
  if (!url) throw new Error('the server has no inspector: start it with NODE_OPTIONS=' + INSPECT_OPTION);
  const socket = new WebSocket(url);
  await new Promise((resolve, reject) => {
    socket.addEventListener('open', resolve, { once: true });
    socket.addEventListener('error', reject, { once: true });
  });
  let nextId = 1;
  const pending = new Map<number, (result: unknown) => void>();
  socket.addEventListener('message', (message) => {
    const data = JSON.parse(String(message.data)) as { id?: number; result?: unknown };
    if (data.id !== undefined) pending.get(data.id)?.(data.result);
  });
  const send = <T>(method: string, params: Record<string, unknown> = {}) => new Promise<T>((resolve) => {
    const id = nextId++;
    pending.set(id, resolve as (result: unknown) => void);
    socket.send(JSON.stringify({ id, method, params }));
  });
  try {
    await send('Profiler.enable');
    await send('Profiler.setSamplingInterval', { interval: 200 });
    await send('Profiler.start');
    await work();
    return (await send<{ profile: CpuProfile }>('Profiler.stop')).profile;
  } finally {
    socket.close();
  }
}

export function summarizeProfile(profile: CpuProfile): ProfileSummary {
  const maps = new Map<string, SourceMap | null>();
  const sourceOf = (frame: ProfileNode['callFrame']): string => {
    const { url } = frame;
    if (url.startsWith('wasm:')) return url;
    if (!url.startsWith('file://')) return url;
    const file = fileURLToPath(url);
    if (!maps.has(file)) maps.set(file, existsSync(`${file}.map`) ? new SourceMap(JSON.parse(readFileSync(`${file}.map`, 'utf8'))) : null);
    const map = maps.get(file);
    const entry = map?.findEntry(frame.lineNumber, frame.columnNumber);
    return entry && 'originalSource' in entry && entry.originalSource ? entry.originalSource : file;
  };

  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parent = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
  const bucketOfNode = new Map<number, ProfileBucket | null>();
  const sourceOfNode = new Map<number, string>();
  const nodeSource = (id: number) => {
    if (!sourceOfNode.has(id)) sourceOfNode.set(id, sourceOf(byId.get(id)!.callFrame));
    return sourceOfNode.get(id)!;
  };
  /** The innermost frame with a bucket decides; none at all: the framework (Next, Node, undici). */
  const bucketOf = (id: number): ProfileBucket | null => {
    if (bucketOfNode.has(id)) return bucketOfNode.get(id)!;
    const name = byId.get(id)!.callFrame.functionName;
    let bucket: ProfileBucket | null = null;
    if (name === '(idle)') bucket = null;
    else if (name === '(garbage collector)') bucket = 'garbage collection';
    else {
      // The mapped source, and the file it ran from (PGlite maps to its own ../src/*.ts).
      const where = [nodeSource(id), byId.get(id)!.callFrame.url];
      bucket = BUCKET_OF_SOURCE.find(([pattern]) => where.some((text) => pattern.test(text)))?.[1] ?? null;
      if (!bucket) {
        const up = parent.get(id);
        bucket = up === undefined ? 'framework' : (bucketOf(up) ?? 'framework');
      }
    }
    bucketOfNode.set(id, bucket);
    return bucket;
  };

  const ms = Object.fromEntries(PROFILE_BUCKETS.map((bucket) => [bucket, 0])) as Record<ProfileBucket, number>;
  const selfMs = new Map<number, number>();
  let totalMs = 0;
  profile.samples.forEach((id, index) => {
    const name = byId.get(id)!.callFrame.functionName;
    if (name === '(idle)') return;
    const delta = (profile.timeDeltas[index] ?? 0) / 1000;
    const bucket = bucketOf(id);
    if (!bucket) return;
    ms[bucket] += delta;
    totalMs += delta;
    selfMs.set(id, (selfMs.get(id) ?? 0) + delta);
  });

  const byFunction = new Map<string, { name: string; source: string; ms: number }>();
  for (const [id, time] of selfMs) {
    const frame = byId.get(id)!.callFrame;
    const source = nodeSource(id).replace(/^.*\/(node_modules\/|lib\/|app\/)/, '$1');
    const key = `${frame.functionName}@${source}`;
    const entry = byFunction.get(key) ?? { name: frame.functionName || '(anonymous)', source, ms: 0 };
    entry.ms += time;
    byFunction.set(key, entry);
  }
  const topFunctions = [...byFunction.values()].sort((a, b) => b.ms - a.ms).slice(0, 12);
  return { ms, totalMs, topFunctions };
}
