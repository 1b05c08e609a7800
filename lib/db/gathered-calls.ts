import type { DatabaseAdapter } from './adapter.ts';
import { DbError, toDbError } from './errors.ts';
import { callDb, countDbCall, countDbCalls, currentDbRequestStats, getDatabase, pauseBeforeConflictRetry, RETRYABLE_SQL_STATES, type DbRequestStats } from './index.ts';

/**
 * A SQL function whose calls may travel together, and the procedure that runs several of them: it
 * takes their named arguments as `p_calls` (a JSON array), runs each in a transaction of its own,
 * committed before the next, and answers `p_answers`, one `{result}` or `{error: {sqlstate,
 * message, detail}}` per call, in order (supabase/migrations/20261127006000_billing_gathered_events.sql);
 * those commits do not wait for the log's flush, the procedure's last one does
 * (20261127007000_billing_gathered_events_one_flush.sql), so every answer leaves after its call is on disk.
 */
export interface GatheredFunction {
  fn: string;
  procedure: string;
  /** When a call in flight counts as slow (SLOW_CALL_MS unless given; tests give their own). */
  slowCallMs?: number;
}

/** The most calls one procedure call carries: ten share its fixed cost well (docs/benchmarks.md). */
export const MOST_CALLS_GATHERED = 10;

/**
 * The most calls of one gathered function in flight at once, whatever the pool's size. Two calls
 * of ten carry more than one Node process can serve (~2,000 webhooks a second), and fewer
 * transactions at once contend less for the database's cores: in the bench, two gathered calls at
 * once cost 0.39 ms of Postgres CPU a webhook against 0.49 with four (docs/benchmarks.md).
 */
export const MOST_GATHERED_CALLS_AT_ONCE = 2;

/**
 * A call in flight longer than this may be waiting for a lock (a call of ten takes a few
 * milliseconds), so the calls behind it need not wait for it: a second may start. (Timed by the
 * clock: a process whose event loop lags this long finds its call slow and starts a second, as
 * every call did before this rule; no worse than that.)
 */
export const SLOW_CALL_MS = 20;

function callsAtOnce(db: DatabaseAdapter): number {
  return Math.min(db.capacity!.parallelCalls, MOST_GATHERED_CALLS_AT_ONCE);
}

/**
 * Whether another call may start now. One at a time carries the most events a call, the least
 * work an event (in the bench at 10 connections, 0.88 ms of server and Postgres CPU a webhook
 * against 1.05 when a second call started whenever one was free: docs/benchmarks.md). A second
 * starts when as many wait as one call carries, or when the one in flight is slow.
 */
function mayStartCall(gathered: GatheredFunction, queue: CallQueue, db: DatabaseAdapter): boolean {
  const inFlight = queue.startedAt.length;
  if (inFlight === 0) return true;
  if (inFlight >= callsAtOnce(db)) return false;
  return queue.waiting.length >= MOST_CALLS_GATHERED || performance.now() >= slowAt(gathered, queue);
}

/** When the oldest call in flight turns slow (performance.now() time; Infinity when none is in flight). */
const slowAt = (gathered: GatheredFunction, queue: CallQueue) => Math.min(...queue.startedAt) + (gathered.slowCallMs ?? SLOW_CALL_MS);

/** setTimeout's longest delay (a longer one fires at once). */
const MOST_TIMER_MS = 2 ** 31 - 1;

/**
 * Call `gathered.fn` as callDb would, and give the same answer or the same DbError; but while one
 * of these calls is in flight, the calls that arrive meanwhile wait here instead of in the pool's
 * queue, and go together, in arrival order, as ONE call of the procedure when it ends. A second
 * call starts beside it (up to MOST_GATHERED_CALLS_AT_ONCE, or fewer: the embedded database's one
 * connection) only when ten wait or the one in flight is slow (mayStartCall). Under load that
 * shares each call's fixed cost (parsing, planning, a round trip: about half of a billing event's
 * database CPU) among up to ten; a call that overlaps no other goes alone, as before. The price: a
 * call that overlaps one in flight waits for it, up to SLOW_CALL_MS, even with a connection free.
 *
 * Each gathered call is its own transaction, so it commits or fails alone, exactly as it would
 * have alone. A call refused for a conflict a retry can resolve (a deadlock), or one the procedure
 * skipped when its time ran short, is made again on its own; so is every call of a procedure call
 * refused whole for its input (one call's value Postgres would not take). A call waits here no
 * longer than it would have waited for a pooled connection (then it fails as unavailable, never
 * sent). If the
 * procedure call itself fails (the connection drops, the call is cancelled), every call it carried
 * gets that error, although those it had already committed stay committed (unless the database
 * crashes before the flush it would have ended with): the same as a call whose answer is lost after
 * its commit, which callers already handle (a webhook answers 503, and the redelivery is a
 * duplicate, or stored again).
 *
 * Where the adapter cannot call procedures (Supabase's Data API), every call goes alone.
 */
export async function callDbGathered<T = unknown>(gathered: GatheredFunction, args: Record<string, unknown>): Promise<T> {
  const db = await getDatabase();
  if (!db.callProcedure || !db.capacity) return callDb<T>(gathered.fn, args);
  const queue = queueFor(db, gathered.procedure);
  if (queue.waiting.length === 0 && mayStartCall(gathered, queue, db)) {
    const started = callStarted(queue);
    try {
      return await callDb<T>(gathered.fn, args);
    } finally {
      callEnded(queue, started);
      sendWaiting(gathered, queue, db);
    }
  }
  return new Promise<T>((resolve, reject) => {
    const call: WaitingCall = { args, resolve: resolve as (value: unknown) => void, reject, stats: currentDbRequestStats(), since: performance.now() };
    const waitMs = db.capacity?.waitMs;
    if (waitMs !== undefined) {
      call.expiry = setTimeout(() => {
        const position = queue.waiting.indexOf(call);
        if (position >= 0) queue.waiting.splice(position, 1);
        reject(new DbError('unavailable', `No database connection was free within ${waitMs} ms.`));
      }, waitMs);
    }
    queue.waiting.push(call);
    sendWaiting(gathered, queue, db);
  });
}

interface WaitingCall {
  args: Record<string, unknown>;
  resolve(value: unknown): void;
  reject(error: unknown): void;
  /** The counts of the request that made the call (it runs in another request's turn). */
  stats?: DbRequestStats;
  since: number;
  /** Fails the call if it is still waiting when the adapter's wait for a connection is over. */
  expiry?: ReturnType<typeof setTimeout>;
}

interface CallQueue {
  /** When each call in flight started (performance.now()): one entry a call. */
  startedAt: number[];
  waiting: WaitingCall[];
  /**
   * Set while calls wait behind one in flight: sends them once that one is slow. (It may outlive
   * the calls it was set for; it then looks again and finds nothing, or sets itself anew.)
   */
  slowCheck?: ReturnType<typeof setTimeout>;
}

function callStarted(queue: CallQueue): number {
  const started = performance.now();
  queue.startedAt.push(started);
  return started;
}

function callEnded(queue: CallQueue, started: number): void {
  queue.startedAt.splice(queue.startedAt.indexOf(started), 1);
}

// Per adapter (a database replaced or reopened starts with an empty queue: nothing made for the new
// one is sent through the old), then per procedure. On globalThis, like the port's state
// (lib/db/index.ts): one set per process, whichever route bundle loaded this module.
const QUEUES_KEY = Symbol.for('account-link-service.db-gathered-calls');
const queues: WeakMap<DatabaseAdapter, Map<string, CallQueue>> =
  ((globalThis as Record<symbol, WeakMap<DatabaseAdapter, Map<string, CallQueue>>>)[QUEUES_KEY] ??= new WeakMap());

function queueFor(db: DatabaseAdapter, procedure: string): CallQueue {
  let byProcedure = queues.get(db);
  if (!byProcedure) queues.set(db, (byProcedure = new Map()));
  let queue = byProcedure.get(procedure);
  if (!queue) byProcedure.set(procedure, (queue = { startedAt: [], waiting: [] }));
  return queue;
}

/**
 * While another call may start, send the waiting calls, up to MOST_CALLS_GATHERED at a time; if
 * some still wait behind a single call in flight, look again when that one turns slow.
 */
function sendWaiting(gathered: GatheredFunction, queue: CallQueue, db: DatabaseAdapter): void {
  while (queue.waiting.length > 0 && mayStartCall(gathered, queue, db)) {
    const calls = queue.waiting.splice(0, MOST_CALLS_GATHERED);
    for (const call of calls) clearTimeout(call.expiry);
    const started = callStarted(queue);
    void sendTogether(gathered, db, calls).finally(() => {
      callEnded(queue, started);
      sendWaiting(gathered, queue, db);
    });
  }
  if (queue.waiting.length === 0 || queue.startedAt.length >= callsAtOnce(db) || queue.slowCheck) return;
  const slowIn = slowAt(gathered, queue) - performance.now();
  // (Not for a call that is never slow: setTimeout would take Infinity as 1 ms.)
  if (!Number.isFinite(slowIn)) return;
  // (A millisecond more: a timer may fire up to a millisecond before its time by performance.now().)
  queue.slowCheck = setTimeout(() => {
    queue.slowCheck = undefined;
    sendWaiting(gathered, queue, db);
  }, Math.min(Math.max(0, slowIn) + 1, MOST_TIMER_MS));
  queue.slowCheck.unref?.();
}

interface ProcedureAnswer {
  result?: unknown;
  error?: { sqlstate: string; message: string; detail?: string | null };
  skipped?: boolean;
}

async function sendTogether(gathered: GatheredFunction, db: DatabaseAdapter, calls: WaitingCall[]): Promise<void> {
  let answers: ProcedureAnswer[];
  try {
    countDbCall();
    const row = await db.callProcedure!(gathered.procedure, { p_calls: calls.map((call) => call.args) });
    answers = Array.isArray(row.p_answers) ? (row.p_answers as ProcedureAnswer[]) : [];
  } catch (error) {
    // Refused whole for a value one call carried (jsonb that Postgres will not take, such as a
    // \u0000 escape): each goes alone, for its own answer, so the others are not refused with it.
    // Any other failure (the connection, a cancel) is every call's.
    const refusedInput = error instanceof DbError && error.kind === 'invalid' && calls.length > 1;
    for (const call of calls) {
      if (refusedInput) sendAlone(gathered, call);
      else call.reject(error);
    }
    return;
  } finally {
    const now = performance.now();
    for (const call of calls) {
      if (!call.stats) continue;
      call.stats.calls++;
      call.stats.ms += now - call.since;
    }
  }
  calls.forEach((call, index) => {
    const answer = answers[index];
    if (answer && 'result' in answer) return call.resolve(answer.result ?? null);
    // Skipped for time: it goes alone. Refused for a deadlock (that event changed nothing): it goes
    // alone after the pause callDb makes before a retry.
    if (answer?.skipped) return sendAlone(gathered, call);
    if (answer?.error && RETRYABLE_SQL_STATES.has(answer.error.sqlstate)) return void pauseBeforeConflictRetry(0).then(() => sendAlone(gathered, call));
    if (!answer?.error) return call.reject(new DbError('unavailable', `${gathered.procedure} gave no answer for call ${index + 1} of ${calls.length}`));
    // As the adapters read a driver's error: a SQLSTATE they know becomes its DbError, any other is a bug.
    const { sqlstate, message, detail } = answer.error;
    call.reject(toDbError(Object.assign(new Error(message), { code: sqlstate, detail: detail ?? undefined })));
  });
}

/** Make a call that waited, on its own (callDb, which retries conflicts), counted for its request. */
function sendAlone(gathered: GatheredFunction, call: WaitingCall): void {
  countDbCalls(call.stats ?? { calls: 0, ms: 0 }, () => callDb(gathered.fn, call.args)).then(call.resolve, call.reject);
}
