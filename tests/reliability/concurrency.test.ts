import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { evmWallet, networkOf, solanaWallet, type TestWallet } from '../wallets/wallets.ts';
import { newTally, send } from './client.ts';
import { billingOutcome, leaguesDelivery, leaguesOutcome, purchaseEvent, writesByKey } from './events.ts';
import { scanLogs, startStack, type ReliabilityStack } from './stack.ts';
import { recordLogScan, recordScenario } from './summary.ts';

/**
 * Races through the production server: the same billing event 20 times at once, one wallet claimed
 * by two users at once, one league delivery twice at once. Each race is run several times; every
 * time exactly one effect must land.
 */
const ROUNDS = 5;

describe('concurrent deliveries and races (production server, Postgres)', () => {
  let stack: ReliabilityStack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(async () => {
    await stack?.close();
  });

  it(`20 identical billing deliveries at once (${ROUNDS} times): all 200, one event row, one effect`, async () => {
    const tally = newTally();
    const url = `${stack.server.url}/api/webhooks/subscription-billing`;
    const headers = { authorization: stack.billingAuthorization, 'content-type': 'application/json' };
    const events = Array.from({ length: ROUNDS }, () => purchaseEvent('burst'));
    const statuses: number[][] = [];
    for (const event of events) {
      const answers = await Promise.all(Array.from({ length: 20 }, () => send(tally, url, { method: 'POST', headers, body: event.text })));
      statuses.push(answers.map((answer) => answer.status));
    }
    const outcome = await billingOutcome(stack, events);
    recordScenario({
      order: 2, scenario: `Concurrency: 20 identical billing deliveries at once (x${ROUNDS})`, requests: tally.requests, fiveXx: tally.fiveXx,
      eventsLost: outcome.lost, duplicatesApplied: outcome.duplicatesApplied,
      notes: `${outcome.rows} event rows and ${outcome.effects} effects for ${events.length} ids`,
    });
    expect(statuses).toEqual(events.map(() => Array(20).fill(200)));
    expect(outcome).toEqual({ rows: ROUNDS, effects: ROUNDS, lost: 0, duplicatesApplied: 0 });
  });

  it(`one wallet raced by two users (${ROUNDS * 2} times, EVM and Solana): exactly one link, the other 409 wallet_already_linked`, async () => {
    const tally = newTally();
    const base = stack.server.url;
    type User = Awaited<ReturnType<ReliabilityStack['mintUser']>>;
    const challenge = async (user: User, wallet: TestWallet) => {
      const answer = await send(tally, `${base}/api/wallet-link/challenge`, {
        method: 'POST', headers: { authorization: user.authorization }, body: { chain: wallet.chain, address: wallet.address, ...networkOf(wallet) },
      });
      expect(answer.status).toBe(201);
      return answer.body as { message: string };
    };
    const link = async (user: User, wallet: TestWallet, message: string) => send(tally, `${base}/api/wallet-link`, {
      method: 'POST', headers: { authorization: user.authorization },
      body: { payload: { chain: wallet.chain, address: wallet.address, ...networkOf(wallet), message, signature: await wallet.sign(message) } },
    });

    const results: { statuses: number[]; loserCode: string | undefined; loserSaysWho: boolean }[] = [];
    const keys: string[] = [];
    for (let round = 0; round < ROUNDS * 2; round++) {
      const wallet = round % 2 === 0 ? evmWallet() : solanaWallet();
      keys.push(wallet.chain === 'evm' ? wallet.address.toLowerCase() : wallet.address);
      const [a, b] = [await stack.mintUser(), await stack.mintUser()];
      const [ca, cb] = await Promise.all([challenge(a, wallet), challenge(b, wallet)]);
      // Sign first, then send both at once: the race is between the two database calls.
      const [ra, rb] = await Promise.all([link(a, wallet, ca.message), link(b, wallet, cb.message)]);
      const [winner, loser] = ra.status === 201 ? [ra, rb] : [rb, ra];
      const winnerUser = winner === ra ? a : b;
      results.push({ statuses: [ra.status, rb.status].sort(), loserCode: loser.body?.code, loserSaysWho: loser.text.includes(winnerUser.userId) });
    }
    const writes = await writesByKey(stack, 'wallet_links', keys);
    const [{ links }] = (await stack.sql<{ links: number }>('select count(*)::int as links from public.wallet_links where address_key = any($1)', [keys])) as [{ links: number }];
    recordScenario({
      order: 3, scenario: `Concurrency: one wallet raced by two users (x${ROUNDS * 2})`, requests: tally.requests, fiveXx: tally.fiveXx,
      eventsLost: keys.length - writes.size, duplicatesApplied: links - writes.size + [...writes.values()].reduce((total, count) => total + count - 1, 0),
      notes: `${links} links for ${keys.length} wallets; losers: ${results.filter((r) => r.loserCode === 'wallet_already_linked').length} x 409 wallet_already_linked`,
    });
    expect(results).toEqual(keys.map(() => ({ statuses: [201, 409], loserCode: 'wallet_already_linked', loserSaysWho: false })));
    expect(links).toBe(keys.length);
    expect([...writes.values()]).toEqual(keys.map(() => 1));
  });

  it(`the same league delivery twice at once (${ROUNDS * 2} times): one applied, the other a duplicate, one effect`, async () => {
    const tally = newTally();
    const url = `${stack.server.url}/api/webhooks/leagues-sync`;
    const headers = { 'x-webhook-secret': stack.secrets.leagues, 'content-type': 'application/json' };
    const source = `rel-${randomUUID().slice(0, 8)}`;
    const deliveries = Array.from({ length: ROUNDS * 2 }, () => leaguesDelivery(source));
    const bodies: unknown[] = [];
    for (const delivery of deliveries) {
      const answers = await Promise.all([0, 1].map(() => send(tally, url, { method: 'POST', headers, body: delivery.text })));
      bodies.push(answers.map((answer) => ({ status: answer.status, body: answer.body })).sort((x, y) => Number(Boolean(x.body?.duplicate)) - Number(Boolean(y.body?.duplicate))));
    }
    const outcome = await leaguesOutcome(stack, deliveries);
    recordScenario({
      order: 4, scenario: `Concurrency: one league delivery twice at once (x${ROUNDS * 2})`, requests: tally.requests, fiveXx: tally.fiveXx,
      eventsLost: outcome.lost, duplicatesApplied: outcome.duplicatesApplied,
      notes: `${outcome.rows} delivery rows and ${outcome.effects} league writes for ${deliveries.length} deliveries`,
    });
    const counts = { received: true, upserted: 1, unchanged: 0, stale: 0, deleted: 0 };
    expect(bodies).toEqual(deliveries.map(() => [{ status: 200, body: counts }, { status: 200, body: { ...counts, duplicate: true } }]));
    expect(outcome).toEqual({ rows: deliveries.length, effects: deliveries.length, lost: 0, duplicatesApplied: 0 });
  });

  it('no configured secret and no issued token appears in the server logs', () => {
    const { leaks, requestLines, scan } = scanLogs(stack);
    recordLogScan(scan);
    expect(requestLines).toBeGreaterThan(50);
    expect(leaks).toEqual([]);
  });
});
