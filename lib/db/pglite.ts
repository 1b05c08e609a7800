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
 * has one connection), in the order they were sent: a billing event that waits to go with others
 * (CallsOnTheThread) is sent when its turn comes.
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
  const calls = new CallsOnTheThread();
  thread.onExit((error) => calls.fail(error));
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    // Calls already sent finish first (the thread answers in order); gathered ones still waiting fail.
    calls.fail(new DbError('unavailable', 'The embedded database was closed.'));
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
      await calls.turn();
      const args = take();
      if (!args) {
        calls.giveBack();
        return undefined;
      }
      // No lock timeout or time budget: on its one connection a call never waits for another's
      // lock, and no caller gives up on the thread's answer.
      return (await calls.sendInTurn(() => firstRowOf(buildProcedureCall(procedure, args)))) ?? {};
    },
    close,
  };
}

/**
 * The calls this process has sent to the database thread, which answers them one at a time in the
 * order they came. A call is sent at once, never held here (a read waits on the thread's queue, as
 * it always did). Billing events that would queue behind two calls wait here instead, and go by
 * tens as one call (lib/db/gathered-calls.ts) when their turn comes: when fewer than two of the
 * calls sent before they began to wait are unanswered, so the calls sent after them (a stream of
 * reads) never push them back, and the thread still has the next call queued while it runs one.
 */
class CallsOnTheThread {
  private static readonly ROOM = 2;
  /** Calls sent (or turns given), and of them answered (or given back): the thread answers in order. */
  private sent = 0;
  private answered = 0;
  private failed: Error | undefined;
  /** Gathered calls waiting for their turn, each with how many calls were sent before it. */
  private readonly waiting: Array<{ after: number; resolve(): void; reject(error: Error): void }> = [];

  hasRoom(): boolean {
    return this.failed === undefined && this.sent - this.answered < CallsOnTheThread.ROOM && this.waiting.length === 0;
  }

  /** Send now (counted at once, so hasRoom() sees it in the same turn). */
  send<T>(work: () => Promise<T>): Promise<T> {
    this.sent++;
    return this.sendInTurn(work);
  }

  /** Wait for a turn; it is this caller's until it sends (sendInTurn) or gives it back. */
  turn(): Promise<void> {
    if (this.failed) return Promise.reject(this.failed);
    if (this.hasRoom()) {
      this.sent++;
      return Promise.resolve();
    }
    return new Promise((resolve, reject) => this.waiting.push({ after: this.sent, resolve, reject }));
  }

  async sendInTurn<T>(work: () => Promise<T>): Promise<T> {
    try {
      return await work();
    } finally {
      this.giveBack();
    }
  }

  /** A call answered, or a turn given back unused: the first waiting call may go. */
  giveBack(): void {
    this.answered++;
    while (this.waiting.length > 0 && this.waiting[0]!.after - this.answered < CallsOnTheThread.ROOM) {
      const next = this.waiting.shift()!;
      this.sent++;
      // The ones behind it wait for it too.
      for (const later of this.waiting) later.after = Math.max(later.after, this.sent);
      next.resolve();
    }
  }

  /** The thread is gone (or closing): every waiting call fails so, and every later turn. */
  fail(error: Error): void {
    this.failed ??= error;
    for (const waiter of this.waiting.splice(0)) waiter.reject(this.failed);
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
  // The SQL functions' plans are kept for the connection, made with the tables as they were then,
  // and PGlite never analyzes (no autovacuum): a database filled after its first calls would go on
  // reading grown tables whole. After 1,000 requests, then 2,000 more, 4,000 more, ... (at most
  // every 256,000), the plans are dropped and made again with the tables as they are now.
  let handled = 0;
  let replanAfter = 1000;
  let replanStep = 1000;
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
      if (message.op !== 'close' && ++handled >= replanAfter) {
        replanStep = Math.min(replanStep * 2, 256000);
        replanAfter = handled + replanStep;
        await pg.exec('discard plans').catch(() => {}); // (refused only inside a failed transaction: the next time, then)
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
    // The thread died (out of memory, a WASM abort) or was closed: every waiting call fails as
    // unavailable, and so does every later one (a message to a dead thread is never answered).
    worker.on('exit', (code) => {
      this.exited = new DbError('unavailable', `The embedded database thread exited (${code}).`);
      for (const waiter of this.pending.values()) waiter.reject(this.exited);
      this.pending.clear();
      for (const listener of this.exitListeners) listener(this.exited);
    });
  }

  private exited: DbError | undefined;
  private readonly exitListeners: Array<(error: DbError) => void> = [];

  onExit(listener: (error: DbError) => void): void {
    this.exitListeners.push(listener);
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
    if (this.exited) return Promise.reject(this.exited);
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

