import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { describe, expect, inject, it, vi } from 'vitest';
import { describeEventEffects } from '../../lib/billing/event-effects.ts';
import { RECORD_BILLING_EVENT, recordBillingEvent, type RecordBillingEventOptions } from '../../lib/billing/record-event.ts';
import type { BillingWebhookBody } from '../../lib/billing/webhook-body.ts';
import { callDbGathered, MOST_CALLS_GATHERED } from '../../lib/db/gathered-calls.ts';
import { dbCallCount, DbError, replaceDatabase } from '../../lib/db/index.ts';
import { openPglite } from '../../lib/db/pglite.ts';
import { openPostgres } from '../../lib/db/postgres.ts';
import { DATABASE_KINDS, describeOn, suiteDatabase } from '../support/databases.ts';
import { billingIssue, cancellation, day, deliver, entitlementsOf, eventRow, expiration, purchase, renewal } from './support.ts';

// Events that arrive while a call is in flight travel together, as one call of
// public.record_billing_events that commits each on its own (lib/db/gathered-calls.ts). These
// tests start the calls in one turn of the event loop, so which go alone and which wait is known:
// the first goes alone, the rest wait and go by tens (a second call beside the first once ten
// wait, where the database runs two at once).

const NOW = new Date(day(70));
const OPTIONS: RecordBillingEventOptions = { now: NOW, ignoreSandbox: false, syncAfter: 'none' };

/** One subscriber's month: bought, renewed, a billing issue, cancelled, expired; five events. */
const history = (user: string): BillingWebhookBody[] => [
  purchase(user, 0.001, 0, 30),
  renewal(user, 30.001, 30, 60),
  billingIssue(user, 55.001, 30, 60, 62),
  cancellation(user, 'UNSUBSCRIBE', 56.001, 30, 60),
  expiration(user, 'UNSUBSCRIBE', 62.001, 30, 60),
];

/** A fixed shuffle (the same every run), so events of one subscriber arrive out of order too. */
function shuffled<T>(items: T[], seed: number): T[] {
  const out = [...items];
  let state = seed;
  for (let i = out.length - 1; i > 0; i--) {
    state = (state * 1_103_515_245 + 12_345) % 2 ** 31;
    const j = state % (i + 1);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

/** The plan recordBillingEvent would send with this body (the gathered function's arguments). */
const recordArgs = (body: BillingWebhookBody, plan = describeEventEffects(body.event, NOW, { ignoreSandbox: false })) =>
  ({ p_body: body, p_plan: plan, p_sync_after: 'none', p_content_digest: null });

/**
 * Run `work` with performance.now() held still, so no call in flight turns slow (SLOW_CALL_MS) and
 * which calls go together depends on their order alone: on a busy machine a stall of the test's
 * own process could otherwise start a second call early. Timers run as usual.
 */
async function withNoCallSlow<T>(work: () => Promise<T>): Promise<T> {
  vi.useFakeTimers({ toFake: ['performance'] });
  try {
    return await work();
  } finally {
    vi.useRealTimers();
  }
}

describe.each(DATABASE_KINDS)('billing events gathered into one call (%s)', (kind) => {
  const db = suiteDatabase(kind);
  it('sends the events that wait as one call per ten, and leaves exactly what one-at-a-time delivery leaves', async () => {
    const users = Array.from({ length: 12 }, (_, i) => `gathered-${kind}-${i}-${Date.now()}`);
    const events = (prefix: string) => shuffled(users.flatMap((user) => history(`${prefix}${user}`)), 7);
    const together = events('t-');
    const alone = events('a-');

    const before = dbCallCount();
    const results = await withNoCallSlow(() => Promise.all(together.map((body) => recordBillingEvent(body, OPTIONS))));
    const calls = dbCallCount() - before;
    for (const body of alone) await recordBillingEvent(body, OPTIONS);

    expect(results.every((result) => !result.duplicate)).toBe(true);
    expect(calls).toBe(1 + Math.ceil((together.length - 1) / MOST_CALLS_GATHERED));
    expect(calls).toBeLessThan(together.length);
    for (const user of users) {
      const gathered = await entitlementsOf(db, `t-${user}`, NOW);
      expect(gathered.length).toBeGreaterThan(0);
      expect(gathered).toEqual(await entitlementsOf(db, `a-${user}`, NOW));
    }
    for (const body of together) expect((await eventRow(db, body.event.id))?.count).toBe(1);
  });

  it('sends the events that arrive while a call is in flight as one call after it, when fewer than ten wait', async () => {
    const bodies = Array.from({ length: 6 }, (_, i) => purchase(`gathered-few-${kind}-${i}-${Date.now()}`, 0.001, 0, 30));
    const before = dbCallCount();
    const results = await withNoCallSlow(() => Promise.all(bodies.map((body) => recordBillingEvent(body, OPTIONS))));
    // The first alone, the five behind it together (never a second call for some of them).
    expect(dbCallCount() - before).toBe(2);
    expect(results.map((result) => result.outcome)).toEqual(bodies.map(() => 'applied'));
  });

  it('answers each call as a call of its own would: a refused event refuses only itself, a repeated id is a duplicate', async () => {
    const user = `gathered-answers-${kind}-${Date.now()}`;
    const first = purchase(user, 0.001, 0, 30);
    const bad = renewal(user, 30.001, 30, 60);
    const badPlan = { ...describeEventEffects(bad.event, NOW, { ignoreSandbox: false }), eventId: 'another-event' };
    const later = renewal(`${user}-other`, 30.001, 30, 60);
    // A call in front, so that the four behind it wait, and go as one.
    const fillers = [purchase(`${user}-filler`, 0.001, 0, 30)];

    const before = dbCallCount();
    const answers = await withNoCallSlow(() => Promise.allSettled([
      ...fillers.map((body) => callDbGathered(RECORD_BILLING_EVENT, recordArgs(body))),
      callDbGathered(RECORD_BILLING_EVENT, recordArgs(first)),
      callDbGathered(RECORD_BILLING_EVENT, recordArgs(bad, badPlan)),
      callDbGathered(RECORD_BILLING_EVENT, recordArgs(first)),
      callDbGathered(RECORD_BILLING_EVENT, recordArgs(later)),
    ]));
    expect(dbCallCount() - before).toBe(2);

    const [firstAnswer, badAnswer, againAnswer, laterAnswer] = answers.slice(fillers.length);
    expect(firstAnswer).toMatchObject({ status: 'fulfilled', value: { duplicate: false, outcome: 'applied', ownerId: user } });
    expect(badAnswer).toMatchObject({ status: 'rejected', reason: { kind: 'invalid', reason: 'invalid_request', sqlState: 'PT400' } });
    expect((badAnswer as PromiseRejectedResult).reason).toBeInstanceOf(DbError);
    expect(againAnswer).toMatchObject({ status: 'fulfilled', value: { duplicate: true, outcome: 'applied' } });
    expect(laterAnswer).toMatchObject({ status: 'fulfilled', value: { duplicate: false, ownerId: `${user}-other` } });
    expect(await eventRow(db, bad.event.id)).toBeUndefined();
    expect((await eventRow(db, first.event.id))?.count).toBe(1);
  });

  it('answers the others when one gathered event carries a value Postgres refuses (a \\u0000 in its JSON): that one alone is refused, as invalid', async () => {
    const user = `gathered-nul-${kind}-${Date.now()}`;
    const [before, after] = [`${user}-before`, `${user}-after`].map((id) => purchase(id, 0.001, 0, 30));
    // The webhook refuses such a body before any database call (400 invalid_json); the gathered
    // call must not let one refuse its neighbours either.
    const bad = purchase(user, 0.001, 0, 30, { store_note: 'a\u0000b' });
    const fillers = [purchase(`${user}-filler`, 0.001, 0, 30)];
    const answers = await Promise.allSettled([...fillers, before!, bad, after!].map((body) => callDbGathered(RECORD_BILLING_EVENT, recordArgs(body))));
    const [beforeAnswer, badAnswer, afterAnswer] = answers.slice(fillers.length);
    expect(beforeAnswer).toMatchObject({ status: 'fulfilled', value: { duplicate: false, outcome: 'applied' } });
    expect(badAnswer).toMatchObject({ status: 'rejected', reason: { kind: 'invalid' } });
    expect((badAnswer as PromiseRejectedResult).reason).toBeInstanceOf(DbError);
    expect(afterAnswer).toMatchObject({ status: 'fulfilled', value: { duplicate: false, outcome: 'applied' } });
    expect(await eventRow(db, bad.event.id)).toBeUndefined();
    for (const body of [before!, after!]) expect((await eventRow(db, body.event.id))?.count).toBe(1);
  });

  it('answers every webhook delivered at once over HTTP with 200, each event stored once', async () => {
    const user = `gathered-http-${kind}-${Date.now()}`;
    const bodies = shuffled(Array.from({ length: 6 }, (_, i) => history(`${user}-${i}`)).flat(), 3);
    const responses = await Promise.all(bodies.map((body) => deliver(body)));
    expect(responses.map((response) => response.status)).toEqual(bodies.map(() => 200));
    // Each waited on one database call, its own or a shared one.
    for (const response of responses) expect(response.headers.get('server-timing')).toMatch(/^db;desc="1 calls"/);
    for (const body of bodies) expect((await eventRow(db, body.event.id))?.count).toBe(1);
  });
});

describeOn('postgres')('billing events gathered into one call, against a lock (postgres)', () => {
  const db = suiteDatabase('postgres');

  /** Hold the lock the service takes for a subscriber's group, from a connection of its own. */
  async function holdSubscriberLock(user: string): Promise<() => Promise<void>> {
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    await client.query('begin');
    await client.query(`select pg_advisory_xact_lock(hashtextextended('billing_group:' || $1, 0))`, [user]);
    return async () => {
      await client.query('rollback');
      await client.end();
    };
  }

  /** An adapter of `max` connections (one unless given) with these bounds, as the service's port, for the test's length. */
  async function withAdapter<T>(waits: Parameters<typeof openPostgres>[0]['waits'], work: () => Promise<T>, max = 1): Promise<T> {
    const adapter = await openPostgres({ connectionString: db.url!, max, migrate: false, waits });
    replaceDatabase(adapter);
    try {
      return await work();
    } finally {
      await adapter.close();
      replaceDatabase(db.adapter);
    }
  }

  /** The backends of this test's database that wait for an advisory lock (other test files share the server). */
  async function backendsWaitingForLocks(): Promise<number[]> {
    const rows = await db.sql<{ pid: number }>(`select pid from pg_locks where locktype = 'advisory' and not granted
      and database = (select oid from pg_database where datname = current_database())`);
    return rows.map((row) => row.pid);
  }

  /** Wait until some backend of this database other than `except` waits for an advisory lock (the gathered call reached a held one); its pid. */
  async function backendWaitingForLock(except: number[] = []): Promise<number> {
    for (;;) {
      const waiting = (await backendsWaitingForLocks()).find((pid) => !except.includes(pid));
      if (waiting !== undefined) return waiting;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  const record = (bodies: BillingWebhookBody[], gathered = RECORD_BILLING_EVENT) =>
    Promise.allSettled(bodies.map((body) => callDbGathered(gathered, recordArgs(body))));

  it('starts a second call beside one that waits for a lock: the events behind it are applied meanwhile', async () => {
    const user = `gathered-slow-${Date.now()}`;
    const [blocked, ...behind] = [user, `${user}-a`, `${user}-b`, `${user}-c`].map((id) => purchase(id, 0.001, 0, 30));
    const release = await holdSubscriberLock(user);
    try {
      // (A call's time budget is 180 - 2 x 60 s: room to start every event it carries.)
      await withAdapter({ lockMs: 60_000, callMs: 180_000 }, async () => {
        let firstAnswered = false;
        const first = record([blocked!]).finally(() => (firstAnswered = true));
        const rest = await record(behind); // settles only if they went beside the blocked call
        expect(rest.map((answer) => answer.status)).toEqual(behind.map(() => 'fulfilled'));
        expect(firstAnswered).toBe(false); // still waiting for the lock
        await release();
        expect(await first).toMatchObject([{ status: 'fulfilled', value: { duplicate: false, outcome: 'applied' } }]);
      }, 2);
    } finally {
      await release().catch(() => undefined);
    }
    for (const body of [blocked!, ...behind]) expect((await eventRow(db, body.event.id))?.count).toBe(1);
  });

  it('starts a second call beside the one in flight as soon as ten wait; fewer wait for it to end', async () => {
    const user = `gathered-ten-${Date.now()}`;
    const [blocked, ...behind] = [user, ...Array.from({ length: 19 }, (_, i) => `${user}-${i}`)].map((id) => purchase(id, 0.001, 0, 30));
    const [ten, nine] = [behind.slice(0, MOST_CALLS_GATHERED), behind.slice(MOST_CALLS_GATHERED)];
    // Never slow here: only the ten waiting can start the second call.
    const neverSlow = { ...RECORD_BILLING_EVENT, slowCallMs: 3_600_000 };
    const release = await holdSubscriberLock(user);
    try {
      await withAdapter({ lockMs: 60_000, callMs: 180_000 }, async () => {
        const before = dbCallCount();
        const first = record([blocked!], neverSlow);
        const tenAnswers = record(ten, neverSlow);
        let nineAnswered = false;
        const nineAnswers = record(nine, neverSlow).finally(() => (nineAnswered = true));
        expect((await tenAnswers).map((answer) => answer.status)).toEqual(ten.map(() => 'fulfilled'));
        // The second call has ended; the nine wait for the first, which waits for the lock: unsent.
        expect(dbCallCount() - before).toBe(2);
        for (const body of nine) expect(await eventRow(db, body.event.id)).toBeUndefined();
        expect(nineAnswered).toBe(false);
        await release();
        expect(await first).toMatchObject([{ status: 'fulfilled' }]);
        expect((await nineAnswers).map((answer) => answer.status)).toEqual(nine.map(() => 'fulfilled'));
        expect(dbCallCount() - before).toBe(3);
      }, 2);
    } finally {
      await release().catch(() => undefined);
    }
    for (const body of [blocked!, ...behind]) expect((await eventRow(db, body.event.id))?.count).toBe(1);
  });

  it('gives each gathered event the lock timeout: the one that waits too long is refused as unavailable, those after it are applied', async () => {
    const user = `gathered-lock-${Date.now()}`;
    const [alone, before, blocked, after] = [`${user}-alone`, `${user}-before`, user, `${user}-after`].map((id) => purchase(id, 0.001, 0, 30));
    const release = await holdSubscriberLock(user);
    try {
      const answers = await withAdapter({ lockMs: 300 }, () => record([alone!, before!, blocked!, after!]));
      expect(answers.map((answer) => answer.status)).toEqual(['fulfilled', 'fulfilled', 'rejected', 'fulfilled']);
      expect(answers[2]).toMatchObject({ reason: { kind: 'unavailable', sqlState: '55P03' } });
    } finally {
      await release();
    }
    expect(await eventRow(db, blocked!.event.id)).toBeUndefined();
    for (const body of [alone!, before!, after!]) expect((await eventRow(db, body.event.id))?.count).toBe(1);
    // The redelivery, once the lock is gone, is applied.
    expect(await recordBillingEvent(blocked!, OPTIONS)).toMatchObject({ duplicate: false, outcome: 'applied' });
  });

  it('sends an event that lost a deadlock inside the gathered call again on its own, and it is applied', async () => {
    const user = `gathered-deadlock-${Date.now()}`;
    const [first, second] = [`${user}-a`, `${user}-b`];
    const alone = purchase(`${user}-alone`, 0.001, 0, 30);
    // One customer under two ids: the event locks both groups, in order, first then second.
    const crossing = purchase(first, 0.001, 0, 30, { aliases: [first, second], original_app_user_id: second });
    // Postgres looks for a deadlock once, deadlock_timeout (1 s) after a backend starts to wait, so
    // the gathered event must be the last to close the cycle: `holder` keeps the first group until
    // the event and then `other` queue for it; `other` already holds the second and, looking late,
    // is never the one refused.
    const [holder, other] = [new pg.Client({ connectionString: db.url }), new pg.Client({ connectionString: db.url })];
    await holder.connect();
    await other.connect();
    const otherPid = (await other.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
    const lock = (client: pg.Client, group: string) => client.query(`select pg_advisory_xact_lock(hashtextextended('billing_group:' || $1, 0))`, [group]);
    try {
      await holder.query('begin');
      await lock(holder, first);
      await other.query('begin');
      await other.query(`set local deadlock_timeout = '600s'`);
      await lock(other, second);
      const before = dbCallCount();
      const answers = await withAdapter({ lockMs: 120_000, callMs: 600_000 }, async () => {
        const settled = record([alone, crossing]);
        await backendWaitingForLock([otherPid]); // the gathered event waits for the first group
        const otherTakesFirst = lock(other, first); // queued behind the event
        while (!(await backendsWaitingForLocks()).includes(otherPid)) await new Promise((resolve) => setTimeout(resolve, 10));
        await holder.query('rollback'); // the event takes the first group and waits for the second: the cycle closes
        await otherTakesFirst; // granted once Postgres has refused the gathered event (40P01)
        await other.query('rollback'); // the event, sent again alone, can now take both
        return settled;
      });
      expect(answers).toMatchObject([{ status: 'fulfilled' }, { status: 'fulfilled', value: { duplicate: false } }]);
      // The first alone, the second gathered (refused for the deadlock), then alone again.
      expect(dbCallCount() - before).toBe(3);
    } finally {
      await holder.end();
      await other.end();
    }
    expect((await eventRow(db, crossing.event.id))?.count).toBe(1);
    expect(await entitlementsOf(db, first, NOW)).not.toEqual([]);
  });

  it('starts no event past the call\'s time budget: the ones it skips are sent alone and applied', async () => {
    const user = `gathered-budget-${Date.now()}`;
    const bodies = Array.from({ length: 5 }, (_, i) => purchase(`${user}-${i}`, 0.001, 0, 30));
    // An answer due within 10 s, and 5 s a lock wait: no time left to start a second event.
    const before = dbCallCount();
    const answers = await withAdapter({ lockMs: 5_000, callMs: 10_000 }, () => record(bodies));
    expect(answers.map((answer) => answer.status)).toEqual(bodies.map(() => 'fulfilled'));
    // The first alone; the other four as one call, which ran one and skipped three; those three alone.
    expect(dbCallCount() - before).toBe(1 + 1 + 3);
    for (const body of bodies) expect((await eventRow(db, body.event.id))?.count).toBe(1);
  });

  it('fails the calls that wait longer than a pooled connection may be waited for, unsent', async () => {
    const user = `gathered-wait-${Date.now()}`;
    const [blocked, ...waiting] = [user, `${user}-a`, `${user}-b`].map((id) => purchase(id, 0.001, 0, 30));
    const release = await holdSubscriberLock(user);
    let answers: PromiseSettledResult<unknown>[];
    try {
      answers = await withAdapter({ connectionMs: 200, lockMs: 60_000 }, async () => {
        const first = record([blocked!]);
        const rest = await record(waiting);
        await release();
        return [...(await first), ...rest];
      });
    } finally {
      await release().catch(() => undefined);
    }
    expect(answers[0]).toMatchObject({ status: 'fulfilled', value: { duplicate: false, outcome: 'applied' } });
    expect(answers.slice(1)).toMatchObject(waiting.map(() => ({ status: 'rejected', reason: { kind: 'unavailable' } })));
    for (const body of waiting) expect(await eventRow(db, body.event.id)).toBeUndefined();
  });

  it('when the gathered call itself fails, refuses every event it carried; those it had committed are duplicates when redelivered', async () => {
    const user = `gathered-fail-${Date.now()}`;
    const [alone, committed, blocked, unreached] = [`${user}-alone`, `${user}-committed`, user, `${user}-unreached`].map((id) => purchase(id, 0.001, 0, 30));
    const release = await holdSubscriberLock(user);
    let answers: PromiseSettledResult<unknown>[];
    try {
      // While the third event waits for the lock, the whole call is cancelled (as a statement
      // timeout would): the second event is committed by then.
      answers = await withAdapter({ lockMs: 5_000, callMs: 60_000 }, async () => {
        const settled = record([alone!, committed!, blocked!, unreached!]);
        await db.sql('select pg_cancel_backend($1)', [await backendWaitingForLock()]);
        return settled;
      });
    } finally {
      await release();
    }
    expect(answers.map((answer) => answer.status)).toEqual(['fulfilled', 'rejected', 'rejected', 'rejected']);
    for (const answer of answers.slice(1)) expect(answer).toMatchObject({ reason: { kind: 'unavailable', sqlState: '57014' } });
    expect((await eventRow(db, committed!.event.id))?.count).toBe(1);
    expect(await eventRow(db, blocked!.event.id)).toBeUndefined();
    expect(await eventRow(db, unreached!.event.id)).toBeUndefined();
    // RevenueCat redelivers all three: the committed one changes nothing, the others are applied.
    const redelivered = await Promise.all([committed!, blocked!, unreached!].map((body) => recordBillingEvent(body, OPTIONS)));
    expect(redelivered.map((result) => result.duplicate)).toEqual([true, false, false]);
    for (const body of [committed!, blocked!, unreached!]) expect((await eventRow(db, body.event.id))?.count).toBe(1);
  });
});

describeOn('pglite')('billing events gathered into one call, as a crash of the embedded database leaves them', () => {
  // Each gathered event commits without waiting for its WAL to be written, and the call ends with
  // one commit that waits, which writes every record before it (20261127007000_billing_gathered_events_one_flush.sql).
  // PGlite has no background writer, so a copy of its folder taken the moment a call returns is
  // what a crash at that moment would leave.

  /** Run `work` on a fresh embedded database, copy its folder as it stands, and read the events the copy holds. */
  async function eventsInCrashImage(ids: string[], work: (db: Awaited<ReturnType<typeof openPglite>>) => Promise<void>): Promise<string[]> {
    const root = mkdtempSync(path.join(tmpdir(), 'account-link-crash-image-'));
    const [live, image] = [path.join(root, 'live'), path.join(root, 'image')];
    cpSync(inject('pgliteTemplateDir'), live, { recursive: true });
    try {
      const db = await openPglite(live, { migrate: false });
      try {
        await work(db);
        cpSync(live, image, { recursive: true });
      } finally {
        await db.close();
      }
      const recovered = await openPglite(image, { migrate: false });
      try {
        const { rows } = await recovered.session.query('select event_id from public.billing_events where event_id = any ($1)', [ids]);
        return rows.map((row) => String(row.event_id)).sort();
      } finally {
        await recovered.close();
      }
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  }

  it('keeps every event the call answered as stored', async () => {
    const bodies = Array.from({ length: MOST_CALLS_GATHERED }, (_, i) => purchase(`crash-image-${i}`, 0.001, 0, 30));
    const ids = bodies.map((body) => body.event.id);
    const kept = await eventsInCrashImage(ids, async (db) => {
      const { p_answers } = await db.callProcedure!(RECORD_BILLING_EVENT.procedure, { p_calls: bodies.map((body) => recordArgs(body)) });
      expect(p_answers).toMatchObject(bodies.map(() => ({ result: { duplicate: false, outcome: 'applied' } })));
    });
    expect(kept).toEqual([...ids].sort());
  });

  it('keeps the stored ones when the first and last events of the call are refused: it flushes once any event was stored', async () => {
    const bodies = Array.from({ length: 4 }, (_, i) => purchase(`crash-image-refused-${i}`, 0.001, 0, 30));
    const refused = (body: BillingWebhookBody) => recordArgs(body, { ...describeEventEffects(body.event, NOW, { ignoreSandbox: false }), eventId: 'another-event' });
    const stored = bodies.slice(1, -1);
    const kept = await eventsInCrashImage(bodies.map((body) => body.event.id), async (db) => {
      const { p_answers } = await db.callProcedure!(RECORD_BILLING_EVENT.procedure, {
        p_calls: [refused(bodies[0]!), ...stored.map((body) => recordArgs(body)), refused(bodies.at(-1)!)],
      });
      expect(p_answers).toMatchObject([{ error: { sqlstate: 'PT400' } }, ...stored.map(() => ({ result: { duplicate: false } })), { error: { sqlstate: 'PT400' } }]);
    });
    expect(kept).toEqual(stored.map((body) => body.event.id).sort());
  });

  it('answers a duplicate only once the event it repeats is on disk', async () => {
    const body = purchase('crash-image-duplicate', 0.001, 0, 30);
    const kept = await eventsInCrashImage([body.event.id], async (db) => {
      // The first delivery commits as a gathered call's event does, without waiting for the flush...
      await db.session.exec('set synchronous_commit = off');
      expect(await db.call(RECORD_BILLING_EVENT.fn, recordArgs(body))).toMatchObject({ duplicate: false });
      await db.session.exec('set synchronous_commit = on');
      // ...and a second delivery of it, alone, is answered as a duplicate (its sender then stops retrying).
      expect(await db.call(RECORD_BILLING_EVENT.fn, recordArgs(body))).toMatchObject({ duplicate: true });
    });
    expect(kept).toEqual([body.event.id]);
  });
});
