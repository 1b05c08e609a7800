import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import type { DatabaseAdapter } from './adapter.ts';
import { DbError, toDbError } from './errors.ts';
import { runMigrations, type SqlSession } from './migrate.ts';
import { buildFunctionCall } from './sql-call.ts';

/**
 * The embedded database: PGlite (Postgres compiled to WASM) in a local folder. PGlite does not lock
 * its folder, and two processes writing one folder corrupt it, so a lock file beside the folder
 * (`<folder>.lock`, holding the owner's pid) makes a second process refuse with a clear message.
 */
export async function openPglite(dataDir: string, options: { migrate?: boolean } = {}): Promise<DatabaseAdapter & { pg: PGlite }> {
  mkdirSync(path.dirname(dataDir), { recursive: true });
  const releaseLock = acquireFolderLock(dataDir);
  let pg: PGlite;
  try {
    pg = await PGlite.create(dataDir);
    if (options.migrate !== false) await runMigrations(pgliteSession(pg));
  } catch (error) {
    releaseLock();
    throw error;
  }
  return {
    mode: 'embedded',
    pg,
    async call(fn, args) {
      const { text, values } = buildFunctionCall(fn, args);
      try {
        const result = await pg.query<{ result: unknown }>(text, values);
        return result.rows[0]?.result ?? null;
      } catch (error) {
        throw toDbError(error);
      }
    },
    async close() {
      if (pg.closed) return;
      try {
        await pg.close();
      } finally {
        releaseLock();
      }
    },
  };
}

export function pgliteSession(pg: PGlite): SqlSession {
  return {
    query: async (text, values) => ({ rows: (await pg.query<Record<string, unknown>>(text, values)).rows }),
    exec: async (sql) => {
      await pg.exec(sql);
    },
  };
}

function acquireFolderLock(dataDir: string): () => void {
  const lockPath = `${dataDir}.lock`;
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      writeFileSync(lockPath, String(process.pid), { flag: 'wx' });
      const release = () => rmSync(lockPath, { force: true });
      process.once('exit', release);
      return () => {
        process.removeListener('exit', release);
        release();
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const owner = Number(readFileSync(lockPath, 'utf8').trim());
      if (Number.isInteger(owner) && owner > 0 && owner !== process.pid && isAlive(owner)) {
        throw new DbError('unavailable', `The embedded database folder ${dataDir} is in use by process ${owner}. ` +
          'Stop that process (another `npm run dev` or `npm start`?), or set EMBEDDED_DB_DIR to another folder.');
      }
      rmSync(lockPath, { force: true }); // left by a process that is gone (or by this one, before a reopen)
    }
  }
  throw new DbError('unavailable', `Could not lock the embedded database folder ${dataDir}.`);
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
