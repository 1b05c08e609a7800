import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { freePort } from './postgres-server.ts';

/**
 * The production server (`next build` + `next start`) on a free loopback port, for the browser test,
 * the reliability suite and the bench. `next start` runs the server in a child process titled
 * "next-server"; that process is the one measured (peak RSS) and killed.
 */
export interface NextServer {
  url: string;
  port: number;
  /** pid of the process that serves requests (the next-server child). */
  serverPid: number;
  /** ms from spawning `next start` to the first 200 from its ready path (/api/health unless told). */
  coldStartMs: number;
  /** Everything the server printed (stdout + stderr). */
  output(): string;
  /** Peak resident memory of the server process so far, in MiB (VmHWM). */
  peakRssMiB(): number;
  /** Resident memory of the server process now, in MiB (VmRSS). */
  rssMiB(): number;
  /** SIGKILL the server at once (a crash), without waiting. */
  crash(): void;
  stop(): Promise<void>;
}

const ROOT = process.cwd();

export interface BuildOptions {
  /** Build into this folder instead of .next (next.config.mjs reads NEXT_DIST_DIR); start it with the same variable. */
  distDir?: string;
  /** Variables for `next build` (the bench's BENCH_FLOOR=1). */
  env?: Record<string, string>;
}

/**
 * Build unless the folder holds a build newer than every source file. Returns true when it built.
 * Test suites and the bench may ask at the same time; a lock file makes the others wait.
 */
export function ensureProductionBuild(options: BuildOptions = {}): boolean {
  const distDir = options.distDir ?? '.next';
  const release = acquireBuildLock();
  try {
    const buildId = path.join(ROOT, distDir, 'BUILD_ID');
    if (existsSync(buildId) && newestSourceMtime() < statSync(buildId).mtimeMs) return false;
    const result = spawnSync(process.execPath, [path.join(ROOT, 'node_modules/next/dist/bin/next'), 'build'], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      encoding: 'utf8',
      env: { ...process.env, NEXT_TELEMETRY_DISABLED: '1', NEXT_DIST_DIR: distDir, ...options.env },
    });
    if (result.status !== 0) throw new Error(`next build failed:\n${result.stdout}\n${result.stderr}`);
    return true;
  } finally {
    release();
  }
}

function acquireBuildLock(): () => void {
  const lock = path.join(ROOT, '.next-build.lock');
  const deadline = Date.now() + 10 * 60_000;
  while (Date.now() < deadline) {
    try {
      writeFileSync(lock, String(process.pid), { flag: 'wx' });
      return () => rmSync(lock, { force: true });
    } catch {
      const owner = Number(readFileSync(lock, 'utf8') || 0);
      if (!owner || !isAlive(owner)) rmSync(lock, { force: true });
      else Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 500); // another build is running
    }
  }
  throw new Error('Timed out waiting for another `next build` to finish');
}

function newestSourceMtime(): number {
  let newest = 0;
  const visit = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) visit(full);
      else newest = Math.max(newest, statSync(full).mtimeMs);
    }
  };
  // packages/client/src: the pages import the client package's source (its dist/ is not the app's).
  for (const dir of ['app', 'lib', 'public', 'supabase', 'packages/client/src']) if (existsSync(path.join(ROOT, dir))) visit(path.join(ROOT, dir));
  for (const file of ['next.config.mjs', 'package.json', 'instrumentation.ts', 'proxy.ts']) if (existsSync(path.join(ROOT, file))) newest = Math.max(newest, statSync(path.join(ROOT, file)).mtimeMs);
  return newest;
}

export interface StartOptions {
  env?: Record<string, string | undefined>;
  timeoutMs?: number;
  /**
   * Start it the way users do, `next start` without `-H` (bound to every interface), instead of
   * bound to 127.0.0.1. Next behaves differently between the two (a proxy rewrite that works on
   * one failed on the other), so the HTTP-contract tests run on both. Requests still go to 127.0.0.1.
   */
  everyInterface?: boolean;
  /**
   * The path whose 200 says the server is up (default /api/health, which also needs the database).
   * A server started with a refused configuration answers 503 there by design: wait for
   * /api/health/live, which needs neither the database nor the configuration.
   */
  readyPath?: string;
  /** Listen on this port (default: a free one). */
  port?: number;
  /**
   * Wait for this request's answer instead of a GET of readyPath (the bench's cold starts: the
   * process's first request is to the route measured). `init` is called for every attempt (a
   * fresh body each time); `ok` says which status means up (default: 2xx).
   */
  readyRequest?: { path: string; init?: () => RequestInit; ok?: (status: number) => boolean };
  /** Pause between attempts while the server is not up yet (default 50 ms). */
  pollMs?: number;
}

export async function startNextServer(options: StartOptions = {}): Promise<NextServer> {
  // A port found free can be taken by another process before next binds it (tests run in parallel
  // workers): then try another, unless the caller named the port.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startNextServerOnce(options.port ?? await freePort(), options);
    } catch (error) {
      if (options.port !== undefined || attempt >= 3 || !/EADDRINUSE/.test(String(error))) throw error;
    }
  }
}

async function startNextServerOnce(port: number, options: StartOptions): Promise<NextServer> {
  const url = `http://127.0.0.1:${port}`;
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries({ ...process.env, NEXT_TELEMETRY_DISABLED: '1', ...options.env })) if (value !== undefined) env[key] = value;
  const started = performance.now();
  const bind = options.everyInterface ? [] : ['-H', '127.0.0.1'];
  const child: ChildProcess = spawn(process.execPath, [path.join(ROOT, 'node_modules/next/dist/bin/next'), 'start', '-p', String(port), ...bind], {
    cwd: ROOT,
    env: env as NodeJS.ProcessEnv,
    detached: true, // its own process group, so stop() ends the launcher and next-server together
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk) => (output += chunk));
  child.stderr!.on('data', (chunk) => (output += chunk));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));

  const deadline = Date.now() + (options.timeoutMs ?? 60_000);
  let coldStartMs = -1;
  const ready = options.readyRequest ?? { path: options.readyPath ?? '/api/health', ok: (status: number) => status === 200 };
  const isUp = ready.ok ?? ((status: number) => status >= 200 && status < 300);
  let lastStatus: number | undefined;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`next start exited (${child.exitCode}):\n${output}`);
    try {
      const response = await fetch(`${url}${ready.path}`, ready.init?.());
      await response.arrayBuffer();
      lastStatus = response.status;
      if (isUp(response.status)) {
        coldStartMs = performance.now() - started;
        break;
      }
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, options.pollMs ?? 50));
  }
  if (coldStartMs < 0) {
    killGroup(child.pid!, 'SIGKILL');
    throw new Error(`next start did not answer ${ready.path} within the time limit${lastStatus === undefined ? '' : ` (last status ${lastStatus})`}:\n${output}`);
  }
  const serverPid = findServerPid(child.pid!);

  return {
    url,
    port,
    serverPid,
    coldStartMs,
    output: () => output,
    peakRssMiB: () => readStatusMiB(serverPid, 'VmHWM'),
    rssMiB: () => readStatusMiB(serverPid, 'VmRSS'),
    crash: () => killGroup(child.pid!, 'SIGKILL'),
    async stop() {
      killGroup(child.pid!, 'SIGTERM');
      const timer = setTimeout(() => killGroup(child.pid!, 'SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
      // The next-server child may outlive the launcher by a moment.
      for (let i = 0; i < 50 && isAlive(serverPid); i++) await new Promise((resolve) => setTimeout(resolve, 50));
      if (isAlive(serverPid)) process.kill(serverPid, 'SIGKILL');
    },
  };
}

/** The next-server child of `next start`, or the launcher itself when it serves in-process. */
function findServerPid(launcherPid: number): number {
  const result = spawnSync('ps', ['-o', 'pid=,args=', '--ppid', String(launcherPid)], { encoding: 'utf8' });
  const child = result.stdout.split('\n').map((line) => line.trim()).find((line) => line.length > 0);
  return child ? Number(child.split(/\s+/)[0]) : launcherPid;
}

function readStatusMiB(pid: number, field: 'VmHWM' | 'VmRSS'): number {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1] ?? 0);
    return Math.round((kb / 1024) * 10) / 10;
  } catch {
    return 0;
  }
}

function killGroup(pid: number, signal: NodeJS.Signals) {
  try {
    process.kill(-pid, signal);
  } catch {
    // already gone
  }
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
