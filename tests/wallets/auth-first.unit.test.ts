import { describe, expect, it } from 'vitest';
import * as walletLinkRoute from '../../app/api/wallet-link/route.ts';
import * as challengeRoute from '../../app/api/wallet-link/challenge/route.ts';
import { dbCallCount } from '../../lib/db/index.ts';
import { callRoute } from '../support/http.ts';

// The contract: the wallet-link endpoints require the Authorization header. A caller without a
// token learns nothing about the body rules (allowed chains, sizes), whatever they send.
const bodies: { name: string; body: unknown; headers?: Record<string, string> }[] = [
  { name: 'an invalid body', body: { nope: true } },
  { name: 'a chain that is not allowed', body: { chain: 'evm', address: '0x0000000000000000000000000000000000000001', chainId: 999 } },
  { name: 'a non-JSON content type', body: 'chain=evm', headers: { 'content-type': 'text/plain' } },
  { name: 'an oversized body', body: { pad: 'x'.repeat(64 * 1024) } },
];

describe.each([
  { route: 'POST /api/wallet-link/challenge', module: challengeRoute },
  { route: 'POST /api/wallet-link', module: walletLinkRoute },
])('$route authenticates before it reads the body', ({ module }) => {
  it.each(bodies)('no token + $name -> 401 missing_token, no database call', async ({ body, headers }) => {
    const before = dbCallCount();
    const response = await callRoute(module, { method: 'POST', body, headers });
    expect(response.status).toBe(401);
    expect(response.body).toMatchObject({ code: 'missing_token' });
    expect(dbCallCount()).toBe(before);
  });
});
