import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { callDb, dbCallCount } from '../../lib/db/index.ts';
import { toApiError } from '../../lib/http/route.ts';
import { CHALLENGE_TTL_MS } from '../../lib/wallets/challenge.ts';
import { parseChallengeRequest, parseLinkRequest } from '../../lib/wallets/schemas.ts';
import { issueChallenge, linkWallet, listWalletLinks, unlinkWallet, type ChallengeResponse } from '../../lib/wallets/service.ts';
import { formatSignInMessage, parseSignInMessage } from '../../lib/wallets/sign-in-message.ts';
import { DATABASE_KINDS, describeOn, suiteDatabase, untilASessionWaitsForALock } from '../support/databases.ts';
import { evmWallet, highSTwin, networkOf, solanaWallet, type TestWallet } from './wallets.ts';

/**
 * The SQL functions of supabase/schemas/05_wallets.sql through the wallet service (the same path the
 * routes take), on PGlite and on the real Postgres server: single use, idempotency, races, limits.
 */

const CONFIG = { wallet: { evmChainIds: [1, 8453], solanaClusters: ['mainnet'], evmRpcUrls: new Map<number, string>() } };
const newUser = () => ({ userId: randomUUID(), email: `u-${randomUUID().slice(0, 6)}@example.test` });
type User = ReturnType<typeof newUser>;

/** The problem code a call ends in, as the route wrapper would answer it. */
async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
    return 'ok';
  } catch (error) {
    return toApiError(error).code;
  }
}

function issue(user: User, wallet: TestWallet, now?: Date) {
  return issueChallenge(user, parseChallengeRequest({ chain: wallet.chain, address: wallet.address, ...networkOf(wallet) }, CONFIG), now);
}

async function signed(wallet: TestWallet, challenge: ChallengeResponse, message = challenge.message) {
  return { payload: { chain: wallet.chain, address: wallet.address, ...networkOf(wallet), message, signature: await wallet.sign(message) } };
}

/** Link as the route does, with the status it answers (201 a new link, 200 already linked). */
async function submit(user: User, body: unknown, now?: Date) {
  const result = await linkWallet(user, parseLinkRequest(body, CONFIG), now);
  return { status: result.alreadyLinked ? 200 : 201, body: result };
}

describe.each(DATABASE_KINDS)('wallet-link SQL functions on %s', (kind) => {
  const db = suiteDatabase(kind);

  /** Move a user's challenges out of the rate-limit window (a fixture shortcut for "a minute later"). */
  const age = (user: User) => db.sql(`update public.wallet_challenges set created_at = created_at - interval '2 minutes' where user_id = $1`, [user.userId]);

  it.each([{ make: evmWallet }, { make: solanaWallet }])('links a $make.name and lists it, one database call per step', async ({ make }) => {
    const user = newUser();
    const wallet = make();
    const before = dbCallCount();
    const challenge = await issue(user, wallet);
    expect(dbCallCount() - before).toBe(1);
    const body = await signed(wallet, challenge);
    const linked = await submit(user, body);
    expect(dbCallCount() - before).toBe(2);
    expect(linked.status).toBe(201);
    expect(linked.body).toMatchObject({ userId: user.userId, email: user.email, alreadyLinked: false, link: { chain: wallet.chain, address: wallet.address, ...networkOf(wallet) } });
    expect(linked.body.link.createdAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    expect(await listWalletLinks(user)).toEqual({ links: [linked.body.link] });
    expect(await callDb('account_wallets', { p_user_id: user.userId })).toEqual([linked.body.link]);
    expect(dbCallCount() - before).toBe(4);
  });

  it('answers 200 alreadyLinked to the same user re-submitting (same signature, its high-s twin, or a fresh challenge)', async () => {
    const user = newUser();
    const wallet = evmWallet();
    const body = await signed(wallet, await issue(user, wallet));
    const first = await submit(user, body);
    const again = await submit(user, body);
    const twin = await submit(user, { payload: { ...body.payload, signature: highSTwin(body.payload.signature as `0x${string}`) } });
    const fresh = await submit(user, await signed(wallet, await issue(user, wallet)));
    expect([first.status, again.status, twin.status, fresh.status]).toEqual([201, 200, 200, 200]);
    expect(new Set([first, again, twin, fresh].map((r) => r.body.link.id)).size).toBe(1);
    expect(again.body.alreadyLinked).toBe(true);
    expect((await listWalletLinks(user)).links).toHaveLength(1);
  });

  it('refuses replays: another user gets challenge_not_found; after unlink the owner gets challenge_already_used', async () => {
    const owner = newUser();
    const other = newUser();
    const wallet = evmWallet();
    const body = await signed(wallet, await issue(owner, wallet));
    const { body: linked } = await submit(owner, body);
    expect(await codeOf(submit(other, body))).toBe('challenge_not_found');
    await unlinkWallet(owner, linked.link.id);
    expect(await codeOf(submit(owner, body))).toBe('challenge_already_used');
    expect(await codeOf(submit(owner, { payload: { ...body.payload, signature: highSTwin(body.payload.signature as `0x${string}`) } }))).toBe('challenge_already_used');
    expect((await listWalletLinks(owner)).links).toEqual([]);
  });

  it("refuses another user's challenge even when the wallet signed it, and leaves it usable by its owner", async () => {
    const owner = newUser();
    const thief = newUser();
    const wallet = evmWallet();
    const body = await signed(wallet, await issue(owner, wallet));
    expect(await codeOf(submit(thief, body))).toBe('challenge_not_found');
    expect((await submit(owner, body)).status).toBe(201);
  });

  it('refuses a message the wallet signed that is not byte for byte the issued one (422 invalid_message)', async () => {
    const user = newUser();
    const wallet = evmWallet();
    const challenge = await issue(user, wallet);
    const parsed = parseSignInMessage(challenge.message);
    if (!parsed.ok) throw new Error(parsed.reason);
    const altered = formatSignInMessage({ ...parsed.message, statement: 'Something else entirely.' });
    expect(await codeOf(submit(user, await signed(wallet, challenge, altered)))).toBe('invalid_message');
    expect((await submit(user, await signed(wallet, challenge))).status).toBe(201);
  });

  it('lets exactly one of several users racing for one wallet win; the others get 409 wallet_already_linked', async () => {
    const wallet = evmWallet();
    const users = Array.from({ length: 5 }, newUser);
    const bodies = await Promise.all(users.map(async (user) => signed(wallet, await issue(user, wallet))));
    const codes = await Promise.all(users.map((user, i) => codeOf(submit(user, bodies[i]))));
    expect(codes.filter((code) => code === 'ok')).toHaveLength(1);
    expect(codes.filter((code) => code === 'wallet_already_linked')).toHaveLength(4);
    const [{ n }] = await db.sql<{ n: number }>('select count(*)::int as n from public.wallet_links where address_key = $1', [wallet.address.toLowerCase()]);
    expect(n).toBe(1);
  });

  it('gives one link and 200s when the same user submits the same proof concurrently', async () => {
    const user = newUser();
    const wallet = solanaWallet();
    const body = await signed(wallet, await issue(user, wallet));
    const results = await Promise.all(Array.from({ length: 5 }, () => submit(user, body)));
    expect(results.map((r) => r.status).sort()).toEqual([200, 200, 200, 200, 201]);
    expect(new Set(results.map((r) => r.body.link.id)).size).toBe(1);
  });

  it('treats the lower-case and checksummed spellings of an address as one wallet', async () => {
    const wallet = evmWallet();
    const first = newUser();
    const second = newUser();
    const lower = { ...wallet, address: wallet.address.toLowerCase() as `0x${string}` };
    const issued = await issue(first, lower);
    expect(issued.address).toBe(wallet.address);
    expect((await submit(first, await signed(lower, issued))).body.link.address).toBe(wallet.address);
    expect(await codeOf(submit(second, await signed(wallet, await issue(second, wallet))))).toBe('wallet_already_linked');
  });

  it('lets another user link a wallet once its owner unlinked it', async () => {
    const wallet = solanaWallet();
    const [a, b] = [newUser(), newUser()];
    const { body } = await submit(a, await signed(wallet, await issue(a, wallet)));
    expect(await codeOf(submit(b, await signed(wallet, await issue(b, wallet))))).toBe('wallet_already_linked');
    await unlinkWallet(a, body.link.id);
    expect((await submit(b, await signed(wallet, await issue(b, wallet)))).status).toBe(201);
  });

  it('unlinks only the caller\'s links (404 link_not_found for others, unknown and malformed ids)', async () => {
    const [owner, other] = [newUser(), newUser()];
    const wallet = evmWallet();
    const { body } = await submit(owner, await signed(wallet, await issue(owner, wallet)));
    const before = dbCallCount();
    expect(await codeOf(unlinkWallet(other, body.link.id))).toBe('link_not_found');
    expect(await codeOf(unlinkWallet(owner, randomUUID()))).toBe('link_not_found');
    expect(await codeOf(unlinkWallet(owner, 'not-a-uuid'))).toBe('link_not_found');
    expect(dbCallCount() - before).toBe(2); // the malformed id never reaches the database
    expect((await listWalletLinks(owner)).links).toHaveLength(1);
    expect(await codeOf(unlinkWallet(owner, body.link.id.toUpperCase()))).toBe('ok');
    expect((await listWalletLinks(owner)).links).toEqual([]);
  });

  it('caps an account at 10 wallets (409 too_many_wallets), leaving the refused challenge usable', async () => {
    const user = newUser();
    const links: string[] = [];
    for (let i = 0; i < 10; i++) {
      if (i === 5) await age(user);
      const wallet = i % 2 ? evmWallet() : solanaWallet();
      links.push((await submit(user, await signed(wallet, await issue(user, wallet)))).body.link.id);
    }
    await age(user);
    const eleventh = evmWallet();
    const body = await signed(eleventh, await issue(user, eleventh));
    expect(await codeOf(submit(user, body))).toBe('too_many_wallets');
    await unlinkWallet(user, links[0]!);
    expect((await submit(user, body)).status).toBe(201);
    expect((await listWalletLinks(user)).links).toHaveLength(10);
  });

  it('allows 10 challenges a minute per user, then 429 rate_limited with a Retry-After, storing nothing', async () => {
    const [user, bystander] = [newUser(), newUser()];
    const wallet = evmWallet();
    for (let i = 0; i < 10; i++) await issue(user, wallet);
    const error = toApiError(await issue(user, wallet).catch((e: unknown) => e));
    expect(error.code).toBe('rate_limited');
    const retryAfter = Number(error.options.headers?.['retry-after']);
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    const [{ n }] = await db.sql<{ n: number }>('select count(*)::int as n from public.wallet_challenges where user_id = $1', [user.userId]);
    expect(n).toBe(10);
    expect(await codeOf(issue(bystander, wallet))).toBe('ok');
    await age(user);
    expect(await codeOf(issue(user, wallet))).toBe('ok');
  });

  it('keeps at most 5 challenges open: the oldest is retired (400 challenge_expired), the newer ones work', async () => {
    const user = newUser();
    const wallets = Array.from({ length: 6 }, evmWallet);
    const challenges: ChallengeResponse[] = [];
    for (const wallet of wallets) challenges.push(await issue(user, wallet));
    const [{ open }] = await db.sql<{ open: number }>('select count(*)::int as open from public.wallet_challenges where user_id = $1 and retired_at is null and used_at is null', [user.userId]);
    expect(open).toBe(5);
    expect(await codeOf(submit(user, await signed(wallets[0]!, challenges[0]!)))).toBe('challenge_expired');
    expect((await submit(user, await signed(wallets[1]!, challenges[1]!))).status).toBe(201);
    expect((await submit(user, await signed(wallets[5]!, challenges[5]!))).status).toBe(201);
  });

  it('refuses an expired challenge by the database clock too (400 challenge_expired)', async () => {
    const user = newUser();
    const wallet = evmWallet();
    const issuedAt = new Date(Date.now() - CHALLENGE_TTL_MS - 60_000);
    const challenge = await issue(user, wallet, issuedAt);
    // The service's clock says "still valid" (one minute after issue); the database's says expired.
    expect(await codeOf(submit(user, await signed(wallet, challenge), new Date(issuedAt.getTime() + 60_000)))).toBe('challenge_expired');
    // By the real clock the service refuses it before the database is asked.
    const before = dbCallCount();
    expect(await codeOf(submit(user, await signed(wallet, challenge)))).toBe('challenge_expired');
    expect(dbCallCount()).toBe(before);
  });

  it('refuses even an idempotent retry once the used challenge has expired (the link stays)', async () => {
    const user = newUser();
    const wallet = evmWallet();
    const challenge = await issue(user, wallet);
    const body = await signed(wallet, challenge);
    expect((await submit(user, body)).status).toBe(201);
    await db.sql(`update public.wallet_challenges set expires_at = now() - interval '1 second' where id = $1`, [challenge.challengeId]);
    expect(await codeOf(submit(user, body))).toBe('challenge_expired');
    expect((await listWalletLinks(user)).links).toHaveLength(1);
  });

  it('sweeps challenges that expired more than a day ago when issuing', async () => {
    const [old, user] = [newUser(), newUser()];
    await issue(old, evmWallet());
    await db.sql(`update public.wallet_challenges set created_at = now() - interval '2 days', expires_at = now() - interval '2 days' where user_id = $1`, [old.userId]);
    await issue(user, evmWallet());
    const [{ n }] = await db.sql<{ n: number }>('select count(*)::int as n from public.wallet_challenges where user_id = $1', [old.userId]);
    expect(n).toBe(0);
  });

  it("removes a deleted auth user's links and challenges (trigger on auth.users)", async () => {
    const user = newUser();
    await db.sql('insert into auth.users (id, email) values ($1, $2)', [user.userId, user.email]);
    const wallet = evmWallet();
    await submit(user, await signed(wallet, await issue(user, wallet)));
    await issue(user, solanaWallet());
    await db.sql('delete from auth.users where id = $1', [user.userId]);
    const rows = await db.sql<{ n: number }>(`select (select count(*) from public.wallet_links where user_id = $1)::int + (select count(*) from public.wallet_challenges where user_id = $1)::int as n`, [user.userId]);
    expect(rows[0]!.n).toBe(0);
  });
});

// Two sessions at once need a real server (PGlite has one connection), so this race runs on Postgres.
describeOn('postgres')('wallet_link insert race on the real Postgres server', () => {
  const db = suiteDatabase('postgres');

  it('answers wallet_already_linked to the loser of an insert race that the pre-check cannot see', async () => {
    // Session A links the wallet in an open transaction; B's call passes the "already linked?"
    // check (A's row is not committed) and waits on the unique index; A commits; B must get 409.
    const wallet = evmWallet();
    const [a, b] = [newUser(), newUser()];
    const [ca, cb] = [await issue(a, wallet), await issue(b, wallet)];
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      await client.query('begin');
      await client.query("select public.wallet_link(p_user_id => $1, p_challenge_id => $2, p_message => $3, p_chain => $4, p_address_key => $5, p_kind => 'eoa')",
        [a.userId, ca.challengeId, ca.message, 'evm', wallet.address.toLowerCase()]);
      const loser = codeOf(callDb('wallet_link', { p_user_id: b.userId, p_challenge_id: cb.challengeId, p_message: cb.message, p_chain: 'evm', p_address_key: wallet.address.toLowerCase(), p_kind: 'eoa' }));
      await untilASessionWaitsForALock(db);
      await client.query('commit');
      expect(await loser).toBe('wallet_already_linked');
    } finally {
      await client.end();
    }
    const [{ used }] = await db.sql<{ used: boolean }>('select used_at is not null as used from public.wallet_challenges where id = $1', [cb.challengeId]);
    expect(used).toBe(false);
  });
});
