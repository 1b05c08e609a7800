import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { Worker } from 'node:worker_threads';
import type { DatabaseAdapter } from './adapter.ts';
import { DbError, toDbError } from './errors.ts';
import { isAlive } from './served-port.ts';
import { runMigrations, type SqlSession } from './migrate.ts';
import { buildFunctionCall, buildProcedureCall, withLiteralValues, type SqlCall } from './sql-call.ts';

/** The embedded database: an adapter, and a session for raw SQL (migrations, scripts, tests). */
export interface EmbeddedDatabase extends DatabaseAdapter {
  session: SqlSession;
}

/**
 * The embedded database: PGlite (Postgres compiled to WASM) in a local folder, run on a worker
 * thread of its own. PGlite executes SQL synchronously, so on the server's thread every statement
 * would stop HTTP parsing, routing and JSON work for its whole duration (about a millisecond for a
 * billing event), and requests would queue behind it on one core. On its own thread the SQL runs
 * beside the request handling, on the machine's other core. Calls still run one at a time (PGlite
 * has one connection), in the order they were made.
 *
 * Durability is PGlite's own, unchanged by the thread: each call's WAL is written to the folder's
 * files before the call returns (plain writes, no fsync: a killed process loses nothing a call returned, an operating-system crash
 * or power cut may lose the last commits). It is a development database;
 * it is refused when deployed.
 *
 * PGlite does not lock its folder, and two processes writing one folder corrupt it, so a lock file
 * beside the folder (`<folder>.lock`, holding the owner's pid) makes a second process refuse with a
 * clear message. (A Next server also says where it serves: ./served-port.ts.)
 */
export async function openPglite(dataDir: string, options: { migrate?: boolean } = {}): Promise<EmbeddedDatabase> {
  mkdirSync(path.dirname(dataDir), { recursive: true });
  const releaseLock = acquireFolderLock(dataDir);
  let thread: PgliteThread;
  try {
    thread = await PgliteThread.start(dataDir);
  } catch (error) {
    releaseLock();
    throw toDbError(error);
  }
  const session: SqlSession = {
    query: async (text, values) => ({ rows: (await thread.request('query', { text, values })) as Record<string, unknown>[] }),
    exec: async (sql) => {
      await thread.request('exec', { text: sql });
    },
  };
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    try {
      await thread.close();
    } finally {
      releaseLock();
    }
  };
  if (options.migrate !== false) {
    try {
      await runMigrations(session);
    } catch (error) {
      await close();
      throw error;
    }
  }
  const calls = new CallsOnTheThread();
  // One statement with its values as literals (two passes through the WASM server instead of six:
  // sql-call.ts); sent with parameters only when a value cannot be a literal.
  const firstRowOf = async (call: SqlCall) => {
    const literal = withLiteralValues(call);
    const rows = (literal === null ? await thread.request('query', call) : await thread.request('statement', { text: literal })) as Record<string, unknown>[];
    return rows[0];
  };
  return {
    mode: 'embedded',
    session,
    async call(fn, args) {
      return (await calls.send(() => firstRowOf(buildFunctionCall(fn, args))))?.result ?? null;
    },
    // Billing events that would queue behind the thread's calls go together (lib/db/gathered-calls.ts):
    // ten renewals in one call cost the thread about a fifth less each than alone (docs/decisions/gathered-calls.md).
    hasFreeConnection: () => calls.hasRoom(),
    async callProcedureWhenConnected(procedure, take) {
      await calls.room();
      const args = take();
      if (!args) {
        calls.leave();
        return undefined;
      }
      // No lock timeout or time budget: on its one connection a call never waits for another's
      // lock, and no caller gives up on the thread's answer.
      return (await calls.sendInRoom(() => firstRowOf(buildProcedureCall(procedure, args)))) ?? {};
    },
    close,
  };
}

/**
 * The calls this process has on the database thread: two at a time, which leaves the thread never
 * waiting for this thread's next message (one runs while the next waits behind it). The others wait
 * here, in the order they were made, as calls wait for a pooled connection: billing events that
 * wait go by tens as one call when room comes (lib/db/gathered-calls.ts), and every call waits its
 * turn (were reads sent past the waiting events, a steady stream of them would hold the events
 * back for as long as it lasted).
 */
class CallsOnTheThread {
  private static readonly ROOM = 2;
  private onThread = 0;
  private readonly waiting: Array<() => void> = [];

  hasRoom(): boolean {
    return this.onThread < CallsOnTheThread.ROOM && this.waiting.length === 0;
  }

  /** Send when there is room. (Its place is taken before this returns: hasRoom() counts it at once.) */
  async send<T>(work: () => Promise<T>): Promise<T> {
    await this.room();
    return this.sendInRoom(work);
  }

  /** Wait for room; the room is this caller's until it sends (sendInRoom) or leaves. */
  room(): Promise<void> {
    if (this.hasRoom()) {
      this.onThread++;
      return Promise.resolve();
    }
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  async sendInRoom<T>(work: () => Promise<T>): Promise<T> {
    try {
      return await work();
    } finally {
      this.leave();
    }
  }

  /** A call answered (or room given back unused): the first waiting caller gets its room. */
  leave(): void {
    this.onThread--;
    while (this.onThread < CallsOnTheThread.ROOM && this.waiting.length > 0) {
      this.onThread++;
      this.waiting.shift()!();
    }
  }
}

// The worker's code, evaluated as CommonJS on its own thread: it loads PGlite from the project's
// node_modules (a string, so no bundler has to find a second entry point), opens the folder, and
// answers one request at a time. A database error travels as its fields (a structured clone keeps
// only an Error's message), so the caller's toDbError() reads the SQLSTATE as from PGlite itself.
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const { PGlite } = require(workerData.pglitePath);
const fieldsOf = (error) => ({
  message: String(error && error.message || error),
  code: error && error.code, detail: error && error.detail, hint: error && error.hint,
  severity: error && error.severity, where: error && error.where,
});
PGlite.create(workerData.dataDir).then((pg) => {
  let queue = Promise.resolve();
  parentPort.on('message', (message) => {
    queue = queue.then(async () => {
      try {
        let result = null;
        if (message.op === 'query') result = (await pg.query(message.text, message.values)).rows;
        else if (message.op === 'statement') result = (await pg.exec(message.text)).at(-1).rows;
        else if (message.op === 'exec') await pg.exec(message.text);
        else if (message.op === 'close') await pg.close();
        parentPort.postMessage({ id: message.id, result });
      } catch (error) {
        parentPort.postMessage({ id: message.id, error: fieldsOf(error) });
      }
    });
  });
  parentPort.postMessage({ ready: true });
}, (error) => parentPort.postMessage({ ready: false, error: fieldsOf(error) }));
`;

type Op = 'query' | 'statement' | 'exec' | 'close';
interface Reply {
  id?: number;
  ready?: boolean;
  result?: unknown;
  error?: { message: string; code?: string; detail?: string };
}

/** PGlite on a worker thread: requests in, replies (or errors) out, matched by id. */
class PgliteThread {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve(value: unknown): void; reject(error: unknown): void }>();

  private readonly worker: Worker;

  private constructor(worker: Worker) {
    this.worker = worker;
    worker.on('message', (reply: Reply) => {
      if (reply.id === undefined) return;
      const waiter = this.pending.get(reply.id);
      this.pending.delete(reply.id);
      if (this.pending.size === 0) worker.unref();
      if (reply.error) waiter?.reject(Object.assign(new Error(reply.error.message), reply.error));
      else waiter?.resolve(reply.result);
    });
    // The thread died (out of memory, a WASM abort): every waiting call fails as unavailable.
    worker.on('exit', (code) => {
      for (const waiter of this.pending.values()) waiter.reject(new DbError('unavailable', `The embedded database thread exited (${code}).`));
      this.pending.clear();
    });
  }

  static async start(dataDir: string): Promise<PgliteThread> {
    keepWasmImportWrappersGeneric();
    // Resolved from the project (process.cwd()), where `npm run dev`, `npm start` and the tests run.
    const pglitePath = createRequire(path.join(/*turbopackIgnore: true*/ process.cwd(), 'package.json')).resolve('@electric-sql/pglite');
    const worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { dataDir, pglitePath } });
    const ready = await new Promise<Reply>((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
    });
    if (!ready.ready) {
      await worker.terminate();
      throw Object.assign(new Error(ready.error?.message ?? 'PGlite did not start'), ready.error);
    }
    // Idle, the thread does not keep the process alive (a script that forgets close() still ends);
    // while a call is waiting, it does.
    worker.unref();
    return new PgliteThread(worker);
  }

  request(op: Op, payload: { text?: string; values?: unknown[] } = {}): Promise<unknown> {
    const id = this.nextId++;
    this.worker.ref();
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, op, ...payload });
    }).catch((error: unknown) => {
      throw toDbError(error);
    });
  }

  async close(): Promise<void> {
    try {
      await this.request('close');
    } finally {
      await this.worker.terminate();
    }
  }
}

/**
 * PGlite's calls between WASM and JavaScript stay on V8's generic wrappers, never tiered up to
 * compiled ones: a mitigation of a V8 crash in Node 24. When several PGlite instances come and go
 * in one process (each test file opens several; the test runner's setup opens two at once), the
 * process now and then died (`Check failed: jit_page.has_value()`, SIGTRAP, or a SIGSEGV). Both
 * core dumps read here stopped in `Runtime_TierUpWasmToJSWrapper`, freeing dead code of an instance
 * already gone through a registry that no longer knew it; nodejs/node#64500 reports the same
 * crash. With the tier-up budget out of reach that call is never made (gdb: 13 in 3,000 queries,
 * then none) and the queries ran no slower. Other routes to the same bug in V8 are not ruled out.
 * The budget is copied into each module's imports when it is instantiated, so it is set (again, to
 * the same value) before each database thread starts; it also keeps JavaScript-to-WASM wrappers
 * generic, for every module instantiated after it. 2^30 - 1: V8 keeps it as a small integer.
 */
function keepWasmImportWrappersGeneric(): void {
  setFlagsFromString(`--wasm-wrapper-tiering-budget=${2 ** 30 - 1}`);
}

/**
 * The process that holds the embedded database folder (its lock file names it and it is alive),
 * or null: nobody, a lock left by a process that is gone, or this process itself. The operator
 * commands ask it first, to ask the running service instead of refusing.
 */
export function embeddedFolderHolder(dataDir: string): number | null {
  let owner: number;
  try {
    owner = Number(readFileSync(`${dataDir}.lock`, 'utf8').trim());
  } catch {
    return null;
  }
  return Number.isInteger(owner) && owner > 0 && owner !== process.pid && isAlive(owner) ? owner : null;
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
      const owner = embeddedFolderHolder(dataDir);
      if (owner !== null) {
        throw new DbError('unavailable', `The embedded database folder ${dataDir} is in use by process ${owner}. ` +
          'Stop that process (another `npm run dev` or `npm start`?), or set EMBEDDED_DB_DIR to another folder.');
      }
      rmSync(lockPath, { force: true }); // left by a process that is gone (or by this one, before a reopen)
    }
  }
  throw new DbError('unavailable', `Could not lock the embedded database folder ${dataDir}.`);
}

