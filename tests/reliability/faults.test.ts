import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newTally, runWorkers, send, sleep, type Answer } from './client.ts';
import { billingOutcome, leaguesDelivery, leaguesOutcome, purchaseEvent, type BillingDelivery, type LeaguesDelivery } from './events.ts';
import { scanLogs, startStack, type ReliabilityStack } from './stack.ts';
import { recordLogScan, recordScenario } from './summary.ts';
import { isAlive } from '../../scripts/support/next-server.ts';

/**
 * Faults under a running production server:
 *  - the Postgres server is stopped in the middle of a stream of webhook deliveries and started
 *    again; senders redeliver whatever did not get a 200, as RevenueCat and the sync worker do;
 *    every purchase that got its 200 has its one outbound event, and no other has one;
 *  - the server process is killed after the database committed an event and before it answered
 *    (lib/faults.ts), and the sender redelivers to a new process.
 */
const CONCURRENCY = 6;
/** Redeliveries come quickly (RevenueCat waits minutes): the point is many attempts while the database is down. */
const REDELIVER_AFTER_MS = 200;

describe('faults (production server, Postgres)', () => {
  let stack: ReliabilityStack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(async () => {
    await stack?.close();
  });

  it('Postgres stopped mid-run: webhooks answer 503 + Retry-After and never 2xx; restarted, the redeliveries apply exactly once', async () => {
    const tally = newTally();
    const base = stack.server.url;
    const billingHeaders = { authorization: stack.billingAuthorization, 'content-type': 'application/json' };
    const leaguesHeaders = { 'x-webhook-secret': stack.secrets.leagues, 'content-type': 'application/json' };
    const source = `fault-${randomUUID().slice(0, 8)}`;

    type Item = { url: string; headers: Record<string, string>; text: string; acked: boolean; retryAt: number };
    const billing: BillingDelivery[] = [];
    const leagues: LeaguesDelivery[] = [];
    const items: Item[] = [];
    const retries: Item[] = [];
    const answers: { answer: Answer; webhook: string }[] = [];
    let made = 0;
    const make = (): Item => {
      // One delivery in four is a league batch: both webhooks must fail safe.
      if (made++ % 4 === 3) {
        const delivery = leaguesDelivery(source);
        leagues.push(delivery);
        return { url: `${base}/api/webhooks/leagues-sync`, headers: leaguesHeaders, text: delivery.text, acked: false, retryAt: 0 };
      }
      const event = purchaseEvent('fault', { asUser: true });
      billing.push(event);
      return { url: `${base}/api/webhooks/subscription-billing`, headers: billingHeaders, text: event.text, acked: false, retryAt: 0 };
    };

    let generating = true;
    let downFrom = Infinity;
    let downTo = -Infinity;
    const controller = (async () => {
      await sleep(2_000);
      await stack.pg.pause(); // the Postgres process has exited when this returns
      downFrom = performance.now();
      await sleep(3_000);
      downTo = performance.now();
      await stack.pg.resume();
      await sleep(2_000);
      generating = false;
    })();

    const hardDeadline = Date.now() + 90_000;
    const unacked = () => items.some((item) => !item.acked);
    await runWorkers(CONCURRENCY, () => (generating || unacked()) && Date.now() < hardDeadline, async () => {
      const due = retries.findIndex((item) => item.retryAt <= performance.now());
      let item: Item;
      if (due >= 0) item = retries.splice(due, 1)[0]!;
      else if (generating) items.push((item = make()));
      else {
        await sleep(20); // nothing due yet: redeliveries wait their turn
        return;
      }
      const answer = await send(tally, item.url, { method: 'POST', headers: item.headers, body: item.text });
      answers.push({ answer, webhook: item.url.endsWith('leagues-sync') ? 'leagues' : 'billing' });
      if (answer.status === 200) {
        item.acked = true;
      } else {
        item.retryAt = performance.now() + REDELIVER_AFTER_MS;
        retries.push(item);
      }
    });
    await controller;

    const whileDown = answers.filter(({ answer }) => answer.startedAt >= downFrom && answer.endedAt <= downTo);
    const badWhileDown = whileDown.filter(({ answer }) => !(answer.status === 503 && /^\d+$/.test(answer.headers.get('retry-after') ?? '') && answer.body?.code === 'database_unavailable'));
    const otherFailures = answers.filter(({ answer }) => answer.status !== 200 && answer.status !== 503);
    const billingResult = await billingOutcome(stack, billing);
    const leaguesResult = await leaguesOutcome(stack, leagues);
    const n503 = answers.filter(({ answer }) => answer.status === 503).length;
    const unique = billing.length + leagues.length;
    recordScenario({
      order: 5,
      scenario: 'Fault: Postgres stopped mid-run, then restarted',
      requests: tally.requests,
      fiveXx: tally.fiveXx,
      // Only the 503s answered while the database was down (or in the moment it went) are expected.
      expectedFiveXx: n503,
      eventsLost: billingResult.lost + leaguesResult.lost,
      duplicatesApplied: billingResult.duplicatesApplied + leaguesResult.duplicatesApplied,
      notes: `${unique} unique deliveries (${billing.length} billing, ${leagues.length} leagues); down ${((downTo - downFrom) / 1000).toFixed(1)} s: ` +
        `${whileDown.length} answers while down, all 503 + Retry-After, 0 x 2xx; ${n503} x 503 in all; ${tally.requests - unique} redeliveries`,
    });

    expect(whileDown.length).toBeGreaterThan(10);
    expect(whileDown.filter(({ webhook }) => webhook === 'leagues').length).toBeGreaterThan(0);
    expect(badWhileDown.map(({ answer }) => `${answer.status} ${answer.text.slice(0, 200)}`)).toEqual([]);
    expect(otherFailures.map(({ answer }) => `${answer.status} ${answer.error ?? answer.text.slice(0, 200)}`)).toEqual([]);
    expect(tally.fiveXx).toBe(n503); // the only 5xx is 503
    expect(retries).toEqual([]); // every delivery finally got its 200
    expect(billingResult).toEqual({ rows: billing.length, effects: billing.length, lost: 0, duplicatesApplied: 0 });
    expect(leaguesResult).toEqual({ rows: leagues.length, effects: leagues.length, lost: 0, duplicatesApplied: 0 });
    // The outbound events were written with their changes: one entitlement.granted per purchase
    // that got its 200, none for an attempt that did not commit, none twice.
    const told = await stack.sql<{ user_id: string; events: number; first: string }>(
      "select user_id, count(*)::int as events, min(type) as first from public.outbound_events where user_id = any ($1) group by user_id", [billing.map((e) => e.subscriber)]);
    expect(told.filter((t) => t.events !== 1 || t.first !== 'entitlement.granted')).toEqual([]);
    expect(told).toHaveLength(billing.length);
  });

  it('server killed after commit and before the response: the redelivery is a duplicate, one effect', async () => {
    const tally = newTally();
    const headers = { authorization: stack.billingAuthorization, 'content-type': 'application/json' };
    const event = purchaseEvent('crash');
    const crashing = await stack.startServer({ FAULT_CRASH_AFTER_COMMIT: event.id });
    const url = (server: { url: string }) => `${server.url}/api/webhooks/subscription-billing`;

    // The hook is inert for every other event id, on this very process.
    const others = [purchaseEvent('crash-other'), purchaseEvent('crash-other')];
    const otherAnswers = [];
    for (const other of others) otherAnswers.push((await send(tally, url(crashing), { method: 'POST', headers, body: other.text })).status);

    const first = await send(tally, url(crashing), { method: 'POST', headers, body: event.text });
    for (let i = 0; i < 100 && isAlive(crashing.serverPid); i++) await sleep(50);
    const diedAfterCommit = {
      answer: first.status,
      processAlive: isAlive(crashing.serverPid),
      ...(await billingOutcome(stack, [event])),
    };

    // The sender saw no 200 and redelivers, to the restarted service.
    const restarted = await stack.startServer();
    const again = await send(tally, url(restarted), { method: 'POST', headers, body: event.text });
    const after = await billingOutcome(stack, [event]);
    const duplicateLogged = restarted.output().split('\n').some((line) => line.includes(`"eventId":"${event.id}"`) && line.includes('"duplicate":true'));
    recordScenario({
      order: 6,
      scenario: 'Fault: server killed after commit, before the response',
      requests: tally.requests,
      fiveXx: tally.fiveXx,
      eventsLost: after.lost,
      duplicatesApplied: after.duplicatesApplied,
      notes: `first delivery: no response (process SIGKILLed after commit); redelivery to a new process: ${again.status}, logged duplicate: ${duplicateLogged}; event rows ${after.rows}, effects ${after.effects}`,
    });

    expect(otherAnswers).toEqual([200, 200]);
    expect({ ...diedAfterCommit, error: first.error === undefined ? 'none' : 'connection lost' })
      .toEqual({ answer: 0, processAlive: false, rows: 1, effects: 1, lost: 0, duplicatesApplied: 0, error: 'connection lost' });
    expect({ status: again.status, body: again.body }).toEqual({ status: 200, body: { received: true } });
    expect(duplicateLogged).toBe(true);
    expect(after).toEqual({ rows: 1, effects: 1, lost: 0, duplicatesApplied: 0 });
  });

  it('no configured secret and no issued token appears in the logs of any server process', () => {
    const { leaks, requestLines, scan } = scanLogs(stack);
    recordLogScan(scan);
    expect(requestLines).toBeGreaterThan(50);
    expect(leaks).toEqual([]);
  });
});
