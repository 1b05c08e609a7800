import type { DatabaseAdapter } from './adapter.ts';
import { DbError, toDbError } from './errors.ts';
import { callDb, callDbOn, countDbCall, countDbCalls, currentDbRequestStats, getDatabase, pauseBeforeConflictRetry, RETRYABLE_SQL_STATES, type DbRequestStats } from './index.ts';
import { processWide } from '../process-wide.ts';

/**
 * A SQL function whose calls may travel together, and the procedure that runs several of them: it
 * takes their named arguments as `p_calls` (a JSON array), runs each in a transaction of its own,
 * and answers `p_answers`, one `{result}`, `{error: {sqlstate, message, detail}}` or `{skipped}`
 * per call, in order (public.record_billing_events, supabase/schemas/03_billing_fold.sql).
 */
export interface GatheredFunction {
  fn: string;
  procedure: string;
}

/** The most calls one procedure call carries: ten share its fixed cost well (docs/decisions/gathered-calls.md). */
export const MOST_CALLS_GATHERED = 10;

/**
 * Call `gathered.fn` as callDb would, and give the same answer or the same DbError. A call that
 * finds a pooled connection free goes alone at once, exactly as callDb. One that would wait for a
 * connection waits here instead, and when a connection comes, the calls waiting by then (up to ten)
 * go on it together as ONE call of the procedure: under load, a call's fixed cost (parsing,
 * planning, a round trip, a WAL flush) is shared; below it, nothing changes and nothing waits longer.
 *
 * No customer's lock holds up another's event: inside the procedure an event waits a few
 * milliseconds at most for a lock, then is sent alone (where it waits on a connection of its own,
 * as every call did). Each event is its own transaction, so it commits or fails alone. A call
 * refused for a conflict a retry can resolve (a deadlock), or skipped for time, is made again on
 * its own; so is every call of a procedure call refused whole for its input (one call's value
 * Postgres would not take). A call waits here no longer than it would have waited for a pooled
 * connection (then it fails as unavailable, never sent). If the procedure call itself fails (the
 * connection drops), every call it carried gets that error, although those it had already committed
 * stay committed: the same as a call whose answer is lost after its commit, which callers already
 * handle (a webhook answers 503, and the redelivery is a duplicate, or stored again).
 *
 * The embedded database (lib/db/pglite.ts) counts as two connections: a call waits here while two
 * calls sent before it are unanswered on its thread, with no bound (its one connection waits on no
 * other's lock).
 * Supabase's Data API cannot call a procedure: there every call goes alone.
 */
export async function callDbGathered<T = unknown>(gathered: GatheredFunction, args: Record<string, unknown>): Promise<T> {
  const db = await getDatabase();
  if (!db.callProcedureWhenConnected || !db.hasFreeConnection) return callDb<T>(gathered.fn, args);
  const queue = queueFor(db, gathered.procedure);
  if (queue.waiting.length === 0 && db.hasFreeConnection()) return callDbOn<T>(db, gathered.fn, args);
  return new Promise<T>((resolve, reject) => {
    queue.waiting.push({ args, resolve: resolve as (value: unknown) => void, reject, stats: currentDbRequestStats(), since: performance.now() });
    askForConnections(gathered, queue, db);
  });
}

interface WaitingCall {
  args: Record<string, unknown>;
  resolve(value: unknown): void;
  reject(error: unknown): void;
  /** The counts of the request that made the call (it is sent in another's turn). */
  stats?: DbRequestStats;
  since: number;
}

interface CallQueue {
  waiting: WaitingCall[];
  /** Procedure calls waiting for a pooled connection: each takes up to ten waiting calls when one comes. */
  askedFor: number;
}

// Per adapter (a database replaced or reopened starts with an empty queue), then per procedure. On
// globalThis, like the port's state (lib/db/index.ts): one set per process, whichever route bundle
// loaded this module.
const queues = processWide('db-gathered-calls', () => new WeakMap<DatabaseAdapter, Map<string, CallQueue>>());

function queueFor(db: DatabaseAdapter, procedure: string): CallQueue {
  let byProcedure = queues.get(db);
  if (!byProcedure) queues.set(db, (byProcedure = new Map()));
  let queue = byProcedure.get(procedure);
  if (!queue) byProcedure.set(procedure, (queue = { waiting: [], askedFor: 0 }));
  return queue;
}

/** Enough procedure calls in the pool's queue for every waiting call: one per ten. */
function askForConnections(gathered: GatheredFunction, queue: CallQueue, db: DatabaseAdapter): void {
  while (queue.askedFor * MOST_CALLS_GATHERED < queue.waiting.length) {
    queue.askedFor++;
    void sendWhenConnected(gathered, queue, db);
  }
}

interface ProcedureAnswer {
  result?: unknown;
  error?: { sqlstate: string; message: string; detail?: string | null };
  /** Not run: a lock was held ('locked') or the call's time ran short ('time'). */
  skipped?: string;
}

async function sendWhenConnected(gathered: GatheredFunction, queue: CallQueue, db: DatabaseAdapter): Promise<void> {
  let calls: WaitingCall[] | undefined;
  let row: Record<string, unknown> | undefined;
  try {
    row = await db.callProcedureWhenConnected!(gathered.procedure, () => {
      queue.askedFor--;
      calls = queue.waiting.splice(0, MOST_CALLS_GATHERED);
      if (calls.length === 0) return undefined;
      countDbCall();
      return { p_calls: calls.map((call) => call.args) };
    });
  } catch (error) {
    if (!calls) {
      // No connection came (the pool's wait ran out, the database is down): the calls this one
      // would have carried get that error, as each would have alone.
      queue.askedFor--;
      for (const call of queue.waiting.splice(0, MOST_CALLS_GATHERED)) call.reject(error);
      return;
    }
    // Refused whole for a value one call carried (jsonb that Postgres will not take, such as a
    // \u0000 escape): each goes alone, for its own answer, so the others are not refused with it.
    // Any other failure (the connection, a timeout) is every call's.
    const refusedInput = error instanceof DbError && error.kind === 'invalid' && calls.length > 1;
    for (const call of calls) {
      if (refusedInput) sendAlone(gathered, call);
      else call.reject(error);
    }
    return;
  } finally {
    countForRequests(calls ?? []);
  }
  if (!calls || calls.length === 0) return;
  const answers = Array.isArray(row?.p_answers) ? (row.p_answers as ProcedureAnswer[]) : [];
  calls.forEach((call, index) => {
    const answer = answers[index];
    if (answer && 'result' in answer) return call.resolve(answer.result ?? null);
    // Skipped (a lock held, or time short): it goes alone. Refused for a deadlock (that event
    // changed nothing): it goes alone after the pause callDb makes before a retry.
    if (answer?.skipped) return sendAlone(gathered, call);
    if (answer?.error && RETRYABLE_SQL_STATES.has(answer.error.sqlstate)) return void pauseBeforeConflictRetry(0).then(() => sendAlone(gathered, call));
    if (!answer?.error) return call.reject(new DbError('unavailable', `${gathered.procedure} gave no answer for call ${index + 1} of ${calls!.length}`));
    // As the adapters read a driver's error: a SQLSTATE they know becomes its DbError, any other is a bug.
    const { sqlstate, message, detail } = answer.error;
    call.reject(toDbError(Object.assign(new Error(message), { code: sqlstate, detail: detail ?? undefined })));
  });
}

/** Each request's Server-Timing counts the gathered call once, with the time since it asked. */
function countForRequests(calls: WaitingCall[]): void {
  const now = performance.now();
  for (const call of calls) {
    if (!call.stats) continue;
    call.stats.calls++;
    call.stats.ms += now - call.since;
  }
}

/** Make a call that waited, on its own (callDb, which retries conflicts), counted for its request. */
function sendAlone(gathered: GatheredFunction, call: WaitingCall): void {
  countDbCalls(call.stats ?? { calls: 0, ms: 0 }, () => callDb(gathered.fn, call.args)).then(call.resolve, call.reject);
}
