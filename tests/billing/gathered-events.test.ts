import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { describeEventEffects } from '../../lib/billing/event-effects.ts';
import { RECORD_BILLING_EVENT, recordBillingEvent, type RecordBillingEventOptions } from '../../lib/billing/record-event.ts';
import type { BillingWebhookBody } from '../../lib/billing/webhook-body.ts';
import { callDbGathered, MOST_CALLS_GATHERED } from '../../lib/db/gathered-calls.ts';
import { callDb, DbError, replaceDatabase } from '../../lib/db/index.ts';
import { openPglite } from '../../lib/db/pglite.ts';
import { openPostgres } from '../../lib/db/postgres.ts';
import { describeOn, suiteDatabase } from '../support/databases.ts';
import { billingIssue, cancellation, countAdapterCalls, day, entitlementsOf, eventRow, expiration, holdOutboundUserLock, holdSubscriberLock, purchase, renewal } from './support.ts';

// Billing events that would wait for a pooled connection travel together, as one call of
// public.record_billing_events that commits each on its own (lib/db/gathered-calls.ts); one that
// finds a connection free goes alone. These tests start the calls in one turn of the event loop
// against a pool of their own, so which go alone and which wait is known: as many as the pool has
// connections go alone, the rest wait and go by tens.

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

/** The arguments recordBillingEvent sends for this body (the gathered function's). */
const recordArgs = (body: BillingWebhookBody, plan = describeEventEffects(body.event, NOW, { ignoreSandbox: false })) =>
  ({ p_body: body, p_plan: plan, p_sync_after: 'none', p_content_digest: null });

describe('billing events gathered into one call (postgres)', () => {
  const db = suiteDatabase('postgres');
  let adapter: Awaited<ReturnType<typeof openPostgres>> | undefined;

  /** The service's port on a pool of `max` connections, counting the calls that go alone and the gathered ones (with how many events each carried). */
  async function usePool(max: number, waits: Parameters<typeof openPostgres>[0]['waits'] = {}) {
    adapter = await openPostgres({ connectionString: db.url!, max, migrate: false, waits });
    const counts = countAdapterCalls(adapter);
    replaceDatabase(adapter);
    return counts;
  }
  /**
   * Two fillers take the pool's two connections; the four events behind them go as one call, the
   * held one fourth. The others are applied; the held one is skipped in the call (stored nothing)
   * and goes alone, waiting for its lock until `release`. Its answer, once released.
   */
  async function gatheredAroundAHeldEvent(counts: Awaited<ReturnType<typeof usePool>>, release: () => Promise<void>, bodies: { fillers: BillingWebhookBody[]; others: BillingWebhookBody[]; held: BillingWebhookBody }) {
    let heldAnswer: Promise<unknown> | undefined;
    try {
      let heldDone = false;
      const calls = [...bodies.fillers, bodies.others[0]!, bodies.held, ...bodies.others.slice(1)].map((body) => recordBillingEvent(body, OPTIONS));
      heldAnswer = calls[3]!.finally(() => (heldDone = true));
      const answered = await Promise.all([...calls.slice(0, 3), ...calls.slice(4)]);
      expect(answered.map((result) => result.outcome)).toEqual(['applied', 'applied', 'applied', 'applied', 'applied']);
      // The two fillers alone, the four behind them as one call, of which the held customer's went alone again.
      expect(counts).toEqual({ alone: 3, gathered: [4] });
      expect(heldDone).toBe(false);
      expect(await eventRow(db, bodies.held.event.id)).toBeUndefined();
    } finally {
      await release();
    }
    return heldAnswer;
  }
  afterEach(async () => {
    replaceDatabase(db.adapter);
    await adapter?.close();
    adapter = undefined;
  });

  it('sends alone what finds a connection free and the rest by tens, and leaves exactly what one-at-a-time delivery leaves', async () => {
    const counts = await usePool(1);
    const users = Array.from({ length: 12 }, (_, i) => `gathered-${i}-${Date.now()}`);
    const events = (prefix: string) => shuffled(users.flatMap((user) => history(`${prefix}${user}`)), 7);
    const together = events('t-');
    const alone = events('a-');

    const results = await Promise.all(together.map((body) => recordBillingEvent(body, OPTIONS)));
    expect(results.every((result) => !result.duplicate)).toBe(true);
    // The first took the pool's one connection; the 59 behind it went as six calls (10 x 5, then 9).
    expect(counts.alone).toBe(1);
    expect(counts.gathered).toEqual([10, 10, 10, 10, 10, 9]);
    expect(Math.max(...counts.gathered)).toBe(MOST_CALLS_GATHERED);

    for (const body of alone) await recordBillingEvent(body, OPTIONS);
    for (const user of users) {
      const gathered = await entitlementsOf(db, `t-${user}`, NOW);
      expect(gathered.length).toBeGreaterThan(0);
      expect(gathered).toEqual(await entitlementsOf(db, `a-${user}`, NOW));
    }
    for (const body of together) expect((await eventRow(db, body.event.id))?.count).toBe(1);
  });

  it('sends every call alone while connections are free: one at a time, nothing gathered', async () => {
    const counts = await usePool(4);
    for (let i = 0; i < 6; i++) await recordBillingEvent(purchase(`gathered-calm-${i}-${Date.now()}`, 0.001, 0, 30), OPTIONS);
    // Four at once fit the pool of four.
    await Promise.all(Array.from({ length: 4 }, (_, i) => recordBillingEvent(purchase(`gathered-four-${i}-${Date.now()}`, 0.001, 0, 30), OPTIONS)));
    expect(counts).toEqual({ alone: 10, gathered: [] });
  });

  it('answers each gathered call as a call of its own would: a refused event refuses only itself, a repeated id is a duplicate', async () => {
    const counts = await usePool(1);
    const user = `gathered-answers-${Date.now()}`;
    const first = purchase(user, 0.001, 0, 30);
    const bad = renewal(user, 30.001, 30, 60);
    const badPlan = { ...describeEventEffects(bad.event, NOW, { ignoreSandbox: false }), eventId: 'another-event' };
    const later = renewal(`${user}-other`, 30.001, 30, 60);
    const filler = purchase(`${user}-filler`, 0.001, 0, 30);

    const answers = await Promise.allSettled([
      callDbGathered(RECORD_BILLING_EVENT, recordArgs(filler)),
      callDbGathered(RECORD_BILLING_EVENT, recordArgs(first)),
      callDbGathered(RECORD_BILLING_EVENT, recordArgs(bad, badPlan)),
      callDbGathered(RECORD_BILLING_EVENT, recordArgs(first)),
      callDbGathered(RECORD_BILLING_EVENT, recordArgs(later)),
    ]);
    expect(counts).toEqual({ alone: 1, gathered: [4] });

    const [, firstAnswer, badAnswer, againAnswer, laterAnswer] = answers;
    expect(firstAnswer).toMatchObject({ status: 'fulfilled', value: { duplicate: false, outcome: 'applied', ownerId: user } });
    expect(badAnswer).toMatchObject({ status: 'rejected', reason: { kind: 'invalid', reason: 'invalid_request', sqlState: 'PT400' } });
    expect((badAnswer as PromiseRejectedResult).reason).toBeInstanceOf(DbError);
    expect(againAnswer).toMatchObject({ status: 'fulfilled', value: { duplicate: true, outcome: 'applied' } });
    expect(laterAnswer).toMatchObject({ status: 'fulfilled', value: { duplicate: false, ownerId: `${user}-other` } });
    expect(await eventRow(db, bad.event.id)).toBeUndefined();
    expect((await eventRow(db, first.event.id))?.count).toBe(1);
  });

  it('answers the others when one gathered event carries a value Postgres refuses (a \\u0000 in its JSON): that one alone is refused, as invalid', async () => {
    const counts = await usePool(1);
    const user = `gathered-nul-${Date.now()}`;
    const [before, after] = [`${user}-before`, `${user}-after`].map((id) => purchase(id, 0.001, 0, 30));
    // The webhook refuses such a body before any database call (400 invalid_json); a gathered call
    // must not let one refuse its neighbours either.
    const bad = purchase(user, 0.001, 0, 30, { store_note: 'a\u0000b' });
    const filler = purchase(`${user}-filler`, 0.001, 0, 30);
    const answers = await Promise.allSettled([filler, before!, bad, after!].map((body) => callDbGathered(RECORD_BILLING_EVENT, recordArgs(body))));
    expect(counts.gathered).toEqual([3]);
    const [, beforeAnswer, badAnswer, afterAnswer] = answers;
    expect(beforeAnswer).toMatchObject({ status: 'fulfilled', value: { duplicate: false, outcome: 'applied' } });
    expect(badAnswer).toMatchObject({ status: 'rejected', reason: { kind: 'invalid' } });
    expect(afterAnswer).toMatchObject({ status: 'fulfilled', value: { duplicate: false, outcome: 'applied' } });
    expect(await eventRow(db, bad.event.id)).toBeUndefined();
    for (const body of [before!, after!]) expect((await eventRow(db, body.event.id))?.count).toBe(1);
  });

  it('never lets a customer\'s held lock hold up the other events of a call: that event goes alone and waits there, the others are applied', async () => {
    // A lock wait far longer than the test for the event sent alone: it waits until released.
    const counts = await usePool(2, { lockMs: 600_000, callMs: 900_000 });
    const held = `gathered-held-${Date.now()}`;
    const release = await holdSubscriberLock(db.url!, held);
    const heldAnswer = await gatheredAroundAHeldEvent(counts, release, {
      fillers: [0, 1].map((i) => purchase(`${held}-filler-${i}`, 0.001, 0, 30)),
      others: [0, 1, 2].map((i) => purchase(`${held}-other-${i}`, 0.001, 0, 30)),
      held: purchase(held, 0.001, 0, 30),
    });
    expect(heldAnswer).toMatchObject({ duplicate: false, outcome: 'applied', ownerId: held });
  });

  it('skips alone an event whose outbound events wait for a lock at its end: the others of the call are applied, and it goes alone and waits', async () => {
    // A Supabase user's purchase is told as an outbound event when its transaction ends, under the
    // user's sequence row lock; another transaction holds that lock.
    const counts = await usePool(2, { lockMs: 600_000, callMs: 900_000 });
    const user = crypto.randomUUID();
    const release = await holdOutboundUserLock(db.url!, user);
    const heldAnswer = await gatheredAroundAHeldEvent(counts, release, {
      fillers: [0, 1].map((i) => purchase(`events-filler-${i}-${Date.now()}`, 0.001, 0, 30)),
      others: [0, 1, 2].map(() => purchase(crypto.randomUUID(), 0.001, 0, 30)),
      held: purchase(user, 0.001, 0, 30),
    });
    expect(heldAnswer).toMatchObject({ duplicate: false, outcome: 'applied', ownerId: user });
  });

  it('fails the calls it carries when no connection comes in time, as each would have failed alone', async () => {
    const counts = await usePool(1, { connectionMs: 200, lockMs: 600_000, callMs: 900_000 });
    const held = `gathered-wait-${Date.now()}`;
    const release = await holdSubscriberLock(db.url!, held);
    // The held customer's event takes the one connection and waits; the two behind it wait for the connection.
    const first = recordBillingEvent(purchase(held, 0.001, 0, 30), OPTIONS);
    try {
      const waiting = await Promise.allSettled([0, 1].map((i) => recordBillingEvent(purchase(`${held}-${i}`, 0.001, 0, 30), OPTIONS)));
      expect(waiting.map((answer) => answer.status)).toEqual(['rejected', 'rejected']);
      for (const answer of waiting) expect((answer as PromiseRejectedResult).reason).toMatchObject({ kind: 'unavailable' });
      expect(counts.gathered).toEqual([]);
    } finally {
      await release();
    }
    await expect(first).resolves.toMatchObject({ outcome: 'applied' });
  });
});

describeOn('pglite')('billing events gathered into one call (embedded)', () => {
  // The embedded database runs one call at a time on its thread; two are sent to it at once (one
  // runs, the next waits there), and billing events that find two there wait in the server and go
  // by tens (lib/db/pglite.ts).

  /** A fresh embedded database of its own, the service's for `work`, counting the calls that go alone and the gathered ones. */
  async function onEmbedded(work: (counts: ReturnType<typeof countAdapterCalls>, db: Awaited<ReturnType<typeof openPglite>>, folder: string) => Promise<void>) {
    const root = mkdtempSync(path.join(tmpdir(), 'account-link-gathered-'));
    const folder = path.join(root, 'db');
    cpSync(inject('pgliteTemplateDir'), folder, { recursive: true });
    const db = await openPglite(folder, { migrate: false });
    try {
      const counts = countAdapterCalls(db);
      replaceDatabase(db);
      await work(counts, db, folder);
    } finally {
      await db.close();
      rmSync(root, { recursive: true, force: true });
    }
  }
  const sql = async (db: Awaited<ReturnType<typeof openPglite>>, text: string, values: unknown[] = []) => (await db.session.query(text, values)).rows;

  it('sends two alone and the rest by tens, and leaves exactly what one-at-a-time delivery leaves', async () => {
    await onEmbedded(async (counts, db) => {
      const users = Array.from({ length: 12 }, (_, i) => `embedded-gathered-${i}`);
      const events = (prefix: string) => shuffled(users.flatMap((user) => history(`${prefix}${user}`)), 7);
      const together = events('t-');
      const results = await Promise.all(together.map((body) => recordBillingEvent(body, OPTIONS)));
      expect(results.every((result) => !result.duplicate)).toBe(true);
      // Two went to the thread at once; the 58 behind them went as six calls (10 x 5, then 8).
      expect(counts.alone).toBe(2);
      expect(counts.gathered).toEqual([10, 10, 10, 10, 10, 8]);

      for (const body of events('a-')) await recordBillingEvent(body, OPTIONS);
      expect(counts.gathered).toHaveLength(6);
      const rowsOf = (prefix: string) => sql(db,
        `select substr(app_user_id, 3) as user_id, entitlement_id, product_id, status, expires_at, will_renew from public.entitlements
         where app_user_id like $1 order by 1, 2, 3`, [`${prefix}%`]);
      const gathered = await rowsOf('t-');
      expect(gathered.length).toBe(users.length);
      expect(gathered).toEqual(await rowsOf('a-'));
      const stored = await sql(db, 'select count(*)::int as n from public.billing_events where event_id = any ($1)', [together.map((body) => body.event.id)]);
      expect(stored[0]?.n).toBe(together.length);
    });
  });

  it('settles every call when the database closes while gathered ones wait: those sent are answered, the waiting ones fail as unavailable, later ones at once', async () => {
    const root = mkdtempSync(path.join(tmpdir(), 'account-link-gathered-close-'));
    try {
      cpSync(inject('pgliteTemplateDir'), path.join(root, 'db'), { recursive: true });
      const db = await openPglite(path.join(root, 'db'), { migrate: false });
      const counts = countAdapterCalls(db);
      replaceDatabase(db);
      const calls = Array.from({ length: 12 }, (_, i) => recordBillingEvent(purchase(`embedded-closing-${i}`, 0.001, 0, 30), OPTIONS));
      // (Were one never answered, this would wait until the test's timeout.)
      const settling = Promise.allSettled(calls);
      // Two are on the thread and the others wait to go together when it closes.
      while (counts.alone < 2) await new Promise((resolve) => setImmediate(resolve));
      await db.close();
      const settled = await settling;
      expect(settled.slice(0, 2).map((answer) => answer.status)).toEqual(['fulfilled', 'fulfilled']);
      for (const answer of settled.slice(2)) expect(answer).toMatchObject({ status: 'rejected', reason: { kind: 'unavailable' } });
      await expect(db.call('record_billing_event', recordArgs(purchase('embedded-closed', 0.001, 0, 30)))).rejects.toMatchObject({ kind: 'unavailable' });
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  it('gives waiting billing events their turn while reads keep coming: reads made after them never push them back', async () => {
    await onEmbedded(async (counts) => {
      let stop = false;
      let reads = 0;
      // Four readers, each making a call as soon as its last one is answered: there are always
      // calls on the thread, sent after the events began to wait.
      const readers = Array.from({ length: 4 }, async () => {
        while (!stop) {
          await callDb('outbound_status', {});
          reads++;
        }
      });
      const events = Array.from({ length: 12 }, (_, i) => recordBillingEvent(purchase(`embedded-turn-${i}`, 0.001, 0, 30), OPTIONS));
      try {
        const answers = await Promise.all(events);
        expect(answers.every((answer) => answer.outcome === 'applied')).toBe(true);
        expect(counts.gathered.length).toBeGreaterThan(0);
        expect(reads).toBeGreaterThan(0);
      } finally {
        stop = true;
        await Promise.all(readers);
      }
    });
  });

  it('answers each gathered call as a call of its own would: a refused event, a repeated id, a value Postgres refuses', async () => {
    await onEmbedded(async (counts, db) => {
      const first = purchase('embedded-answers', 0.001, 0, 30);
      const bad = renewal('embedded-answers', 30.001, 30, 60);
      const badPlan = { ...describeEventEffects(bad.event, NOW, { ignoreSandbox: false }), eventId: 'another-event' };
      // A value Postgres refuses (a \u0000 escape in jsonb): it refuses the whole gathered call.
      const nul = purchase('embedded-answers-nul', 0.001, 0, 30, { store_note: 'a\u0000b' });
      const fillers = [0, 1].map((i) => purchase(`embedded-answers-filler-${i}`, 0.001, 0, 30));
      const answers = await Promise.allSettled([...fillers, first, bad, first, nul].map((body, i) =>
        callDbGathered(RECORD_BILLING_EVENT, recordArgs(body, i === 3 ? badPlan : undefined))));
      // The four behind the fillers went as one call, refused whole for the NUL; then each went alone.
      expect(counts.gathered).toEqual([4]);
      expect(counts.alone).toBe(6);
      const [, , firstAnswer, badAnswer, againAnswer, nulAnswer] = answers;
      expect(firstAnswer).toMatchObject({ status: 'fulfilled', value: { duplicate: false, outcome: 'applied' } });
      expect(badAnswer).toMatchObject({ status: 'rejected', reason: { kind: 'invalid', reason: 'invalid_request', sqlState: 'PT400' } });
      expect(againAnswer).toMatchObject({ status: 'fulfilled', value: { duplicate: true } });
      expect(nulAnswer).toMatchObject({ status: 'rejected', reason: { kind: 'invalid' } });
      const stored = await sql(db, 'select event_id from public.billing_events where event_id = any ($1) order by 1', [[first, bad, nul].map((body) => body.event.id)]);
      expect(stored).toEqual([{ event_id: first.event.id }]);
    });
  });

  it('keeps every event a gathered call answered on disk: a copy of the folder taken as it returns holds them all', async () => {
    // Each event of the call commits without waiting for its log to be written, and the call ends
    // with one commit that waits (record_billing_events). PGlite has no background writer, so a
    // copy of its folder the moment a call returns is what a crash at that moment would leave.
    const bodies = Array.from({ length: 12 }, (_, i) => purchase(`embedded-crash-image-${i}`, 0.001, 0, 30));
    const ids = bodies.map((body) => body.event.id);
    const image = mkdtempSync(path.join(tmpdir(), 'account-link-crash-image-'));
    try {
      await onEmbedded(async (counts, _db, folder) => {
        const answers = await Promise.all(bodies.map((body) => recordBillingEvent(body, OPTIONS)));
        expect(answers.every((answer) => answer.outcome === 'applied')).toBe(true);
        expect(counts.gathered).toEqual([10]);
        cpSync(folder, path.join(image, 'db'), { recursive: true });
      });
      const recovered = await openPglite(path.join(image, 'db'), { migrate: false });
      try {
        const { rows } = await recovered.session.query('select event_id from public.billing_events where event_id = any ($1)', [ids]);
        expect(rows.map((row) => String(row.event_id)).sort()).toEqual([...ids].sort());
      } finally {
        await recovered.close();
      }
    } finally {
      rmSync(image, { recursive: true, force: true });
    }
  });
});
