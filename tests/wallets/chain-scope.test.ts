import { randomBytes, randomUUID } from 'node:crypto';
import { cpSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { callDb } from '../../lib/db/index.ts';
import { runMigrations, type SqlSession } from '../../lib/db/migrate.ts';
import { openPglite } from '../../lib/db/pglite.ts';
import { clientSession } from '../../lib/db/postgres.ts';
import { toApiError } from '../../lib/http/route.ts';
import type { WalletLink, WalletProofKind } from '../../lib/wallets/links.ts';
import { parseChallengeRequest } from '../../lib/wallets/schemas.ts';
import { issueChallenge, listWalletLinks } from '../../lib/wallets/service.ts';
import { DATABASE_KINDS, suiteDatabase, type DatabaseKind } from '../support/databases.ts';
import { createDatabase } from '../../scripts/support/postgres-server.ts';
import { evmWallet } from './wallets.ts';

/**
 * Whose a wallet is, chain by chain (20261127000400_wallets_chain_scope.sql), through the SQL
 * functions the service calls, on both engines. A key's link holds its address on every EVM chain;
 * a contract's link holds it on its chain only; scopes that overlap have one owner. The proofs
 * themselves are checked before these calls (tests/wallets/contract-wallets.slow.test.ts does it against
 * a real EVM); here each claim says what proved it, as the service passes it on.
 */

const CONFIG = { wallet: { evmChainIds: [1, 8453], solanaClusters: ['mainnet'], evmRpcUrls: new Map<number, string>() } };
const newUser = () => ({ userId: randomUUID(), email: null });
type EvmLink = Extract<WalletLink, { chain: 'evm' }>;
const evmLinks = async (user: User) => (await listWalletLinks(user)).links as EvmLink[];
type User = ReturnType<typeof newUser>;

/**
 * A claim of `address` on `chainId` as the service makes it: a challenge, then for a contract the
 * check wallet_start_contract_check counts before the chain is asked, then wallet_link with the
 * kind the proof had. Answers the status the route would send, or the problem code.
 */
async function claim(user: User, address: string, chainId: number, kind: WalletProofKind): Promise<{ status: number; link?: WalletLink } | { code: string }> {
  const challenge = await issueChallenge(user, parseChallengeRequest({ chain: 'evm', address, chainId }, CONFIG));
  const call = { p_user_id: user.userId, p_challenge_id: challenge.challengeId, p_message: challenge.message, p_chain: 'evm', p_address_key: address.toLowerCase() };
  try {
    if (kind !== 'eoa') await callDb('wallet_start_contract_check', call);
    const result = await callDb<{ link: WalletLink; alreadyLinked: boolean }>('wallet_link', { ...call, p_kind: kind });
    return { status: result.alreadyLinked ? 200 : 201, link: result.link };
  } catch (error) {
    return { code: toApiError(error).code };
  }
}

const KEY = 'eoa' as const;
const CONTRACT = 'erc1271' as const;

describe.each(DATABASE_KINDS)('wallet links scoped to what proved them, on %s', (kind) => {
  const db = suiteDatabase(kind);
  /** Move a user's challenges out of the rate-limit window (10 a minute), as a minute later would. */
  const age = (user: User) => db.sql(`update public.wallet_challenges set created_at = created_at - interval '2 minutes' where user_id = $1`, [user.userId]);

  it("links a contract wallet on its chain only: another account's proof on another chain links too, on the same chain it is 409", async () => {
    const [a, b, c] = [newUser(), newUser(), newUser()];
    const { address } = evmWallet();
    const first = await claim(a, address, 1, 'erc6492');
    expect(first).toMatchObject({ status: 201, link: { chainId: 1, kind: 'erc6492', scope: 'chain', accountId: `eip155:1:${address}` } });
    const second = await claim(b, address, 8453, CONTRACT);
    expect(second).toMatchObject({ status: 201, link: { chainId: 8453, kind: CONTRACT, scope: 'chain', accountId: `eip155:8453:${address}` } });
    expect(await claim(c, address, 1, CONTRACT)).toEqual({ code: 'wallet_already_linked' });
    expect(await claim(c, address, 8453, 'erc6492')).toEqual({ code: 'wallet_already_linked' });
    expect((await listWalletLinks(a)).links).toMatchObject([{ accountId: `eip155:1:${address}` }]);
    expect((await listWalletLinks(b)).links).toMatchObject([{ accountId: `eip155:8453:${address}` }]);
  });

  // The overlaps: a key's link holds the address everywhere, so it meets every contract link of it.
  it.each([
    { name: "a key's link refuses another account's contract proof on any chain", first: { kind: KEY, chainId: 1 }, then: { kind: CONTRACT, chainId: 8453 }, answer: 'wallet_already_linked' },
    { name: "a key's link refuses another account's key proof on another chain", first: { kind: KEY, chainId: 1 }, then: { kind: KEY, chainId: 8453 }, answer: 'wallet_already_linked' },
    { name: "a contract link refuses another account's key proof (the key's link would hold that chain too)", first: { kind: CONTRACT, chainId: 1 }, then: { kind: KEY, chainId: 8453 }, answer: 'wallet_already_linked' },
    { name: "a contract link leaves another account's contract proof on another chain alone", first: { kind: CONTRACT, chainId: 1 }, then: { kind: 'erc6492' as const, chainId: 8453 }, answer: 201 },
  ])('$name', async ({ first, then, answer }) => {
    const [a, b] = [newUser(), newUser()];
    const { address } = evmWallet();
    expect(await claim(a, address, first.chainId, first.kind)).toMatchObject({ status: 201 });
    const second = await claim(b, address, then.chainId, then.kind);
    expect(typeof answer === 'number' ? (second as { status: number }).status : (second as { code: string }).code).toBe(answer);
    expect((await listWalletLinks(a)).links).toHaveLength(1);
  });

  it('lets one account hold a contract wallet on several chains, one link each; its key link covers them all', async () => {
    const user = newUser();
    const { address } = evmWallet();
    const onMainnet = await claim(user, address, 1, CONTRACT);
    const onBase = await claim(user, address, 8453, 'erc6492');
    expect([onMainnet, onBase]).toMatchObject([{ status: 201 }, { status: 201 }]);
    expect(await claim(user, address, 8453, CONTRACT)).toMatchObject({ status: 200, link: { accountId: `eip155:8453:${address}` } });
    expect((await evmLinks(user)).map((link) => link.accountId)).toEqual([`eip155:1:${address}`, `eip155:8453:${address}`]);

    // Its key's proof replaces them with one link that holds the address on every chain.
    const key = await claim(user, address, 8453, KEY);
    expect(key).toMatchObject({ status: 201, link: { kind: 'eoa', scope: 'evm', accountId: `eip155:8453:${address}` } });
    expect((await listWalletLinks(user)).links).toEqual([(key as { link: WalletLink }).link]);
    // A contract proof on any chain is then the same wallet: already linked, the key's link.
    expect(await claim(user, address, 1, CONTRACT)).toEqual({ status: 200, link: (key as { link: WalletLink }).link });
  });

  it('counts the contract links a key proof replaces as one wallet toward the 10', async () => {
    const user = newUser();
    for (let i = 0; i < 8; i++) expect(await claim(user, evmWallet().address, 1, KEY)).toMatchObject({ status: 201 });
    await age(user);
    const { address } = evmWallet();
    expect(await claim(user, address, 1, CONTRACT)).toMatchObject({ status: 201 });
    expect(await claim(user, address, 8453, CONTRACT)).toMatchObject({ status: 201 });
    expect(await claim(user, evmWallet().address, 1, KEY)).toEqual({ code: 'too_many_wallets' });
    expect(await claim(user, address, 1, KEY)).toMatchObject({ status: 201 });
    expect((await listWalletLinks(user)).links).toHaveLength(9);
  });

  it('keeps contract checks for the 10 minutes the per-account limit looks back: maintenance deletes older ones, and a deleted user\'s', async () => {
    const [a, b] = [newUser(), newUser()];
    const check = (user: User, age: string) => db.sql(`insert into public.wallet_contract_checks (user_id, checked_at) values ($1, now() - $2::interval)`, [user.userId, age]);
    await check(a, '11 minutes');
    await check(a, '10 minutes 1 second');
    await check(a, '9 minutes');
    await check(b, '1 minute');
    const run = () => callDb<{ challengesDeleted: number; contractChecksDeleted: number; done: boolean }>('wallets_maintain', { p_now: new Date(), p_deadline: new Date(Date.now() + 5_000) });
    expect(await run()).toMatchObject({ contractChecksDeleted: 2, done: true });
    expect(await run()).toMatchObject({ contractChecksDeleted: 0, done: true });
    const left = () => db.sql<{ user_id: string }>('select user_id from public.wallet_contract_checks where user_id = any ($1::uuid[]) order by checked_at', [[a.userId, b.userId]]);
    expect(await left()).toEqual([{ user_id: a.userId }, { user_id: b.userId }]);
    expect(await callDb('forget_user', { p_user_id: a.userId })).toMatchObject({ walletLinks: 0, walletChallenges: 0 });
    expect(await left()).toEqual([{ user_id: b.userId }]);
  });

  // Two scopes can overlap without sharing a key of the unique constraint (a key's link, a contract
  // link on chain 8453): wallet_link takes a lock on the address. A real race on the Postgres server
  // (PGlite runs one transaction at a time): A's key link is made in a transaction left open, B's
  // contract link of the same address must wait for it, then see it.
  it.runIf(kind === 'postgres')('makes a contract proof wait for a key proof of the same address in flight, then refuses it (409)', async () => {
    const [a, b] = [newUser(), newUser()];
    const { address } = evmWallet();
    const callOf = async (user: User, chainId: number) => {
      const challenge = await issueChallenge(user, parseChallengeRequest({ chain: 'evm', address, chainId }, CONFIG));
      return { p_user_id: user.userId, p_challenge_id: challenge.challengeId, p_message: challenge.message, p_chain: 'evm', p_address_key: address.toLowerCase() };
    };
    const [callA, callB] = [await callOf(a, 1), await callOf(b, 8453)];
    const held = new pg.Client({ connectionString: db.url });
    await held.connect();
    try {
      await held.query('begin');
      await held.query('select public.wallet_link($1, $2, $3, $4, $5, $6)', [callA.p_user_id, callA.p_challenge_id, callA.p_message, 'evm', callA.p_address_key, KEY]);
      let settled = false;
      const contender = callDb('wallet_link', { ...callB, p_kind: CONTRACT }).then(
        (result) => ({ result }),
        (error: unknown) => ({ code: toApiError(error).code }),
      ).finally(() => {
        settled = true;
      });
      // Wait until B waits for the lock (or, if nothing makes it wait, until it is done).
      for (;;) {
        const [{ waiting }] = await db.sql<{ waiting: number }>(`
          select count(*)::int as waiting from pg_locks
          where locktype = 'advisory' and not granted and database = (select oid from pg_database where datname = current_database())`);
        if (waiting > 0 || settled) break;
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      expect(settled).toBe(false);
      await held.query('commit');
      expect(await contender).toEqual({ code: 'wallet_already_linked' });
    } finally {
      await held.query('rollback').catch(() => undefined);
      await held.end();
    }
    expect(await db.sql('select user_id from public.wallet_links where address_key = $1', [address.toLowerCase()])).toEqual([{ user_id: a.userId }]);
  });
});

/**
 * The migration on a database that already has links: every contract link made before it is scoped
 * to the chain it was proven on, every key link stays address-wide, and the new rule holds on them.
 */
describe.each(DATABASE_KINDS)('20261127000400_wallets_chain_scope.sql on a database with links, on %s', (kind) => {
  const MIGRATION = '20261127000400_wallets_chain_scope.sql';
  let before: string;
  let opened: { session: SqlSession; close(): Promise<void> };

  beforeAll(async () => {
    before = mkdtempSync(path.join(tmpdir(), 'migrations-before-'));
    for (const file of readdirSync('supabase/migrations').filter((file) => file.endsWith('.sql') && file < MIGRATION)) {
      cpSync(path.join('supabase/migrations', file), path.join(before, file));
    }
    opened = await openBlank(kind);
    await runMigrations(opened.session, { dir: before });
  });
  afterAll(async () => {
    await opened?.close();
    rmSync(before, { recursive: true, force: true });
  });

  it('scopes existing contract links to their recorded chain id, and keeps key links address-wide', async () => {
    const { session } = opened;
    const [a, b] = [randomUUID(), randomUUID()];
    const contract = evmWallet().address;
    const key = evmWallet().address;
    const link = (user: string, address: string, chainId: number, proof: WalletProofKind) => session.query(`
      insert into public.wallet_links (user_id, chain, address, address_key, chain_id, challenge_id, kind)
      values ($1, 'evm', $2, lower($2), $3, gen_random_uuid(), $4)`, [user, address, chainId, proof]);
    await link(a, contract, 8453, 'erc6492');
    await link(a, key, 1, 'eoa');

    expect(await runMigrations(session)).toContain(MIGRATION);
    const { rows: [listed] } = await session.query('select public.account_wallets($1) as links', [a]);
    expect((listed!.links as EvmLink[]).map(({ address, chainId, kind: proof, scope, accountId }) => ({ address, chainId, proof, scope, accountId }))).toEqual([
      { address: contract, chainId: 8453, proof: 'erc6492', scope: 'chain', accountId: `eip155:8453:${contract}` },
      { address: key, chainId: 1, proof: 'eoa', scope: 'evm', accountId: `eip155:1:${key}` },
    ]);

    // The contract on chain 1 is another wallet: another account links it there; the key is A's everywhere.
    const claimOn = async (user: string, address: string, chainId: number, proof: WalletProofKind) => {
      const challenge = randomUUID();
      await session.query(`
        insert into public.wallet_challenges (id, user_id, chain, address, address_key, chain_id, nonce, message, issued_at, expires_at)
        values ($1, $2, 'evm', $3, lower($3), $4, 'n', 'm', now(), now() + interval '10 minutes')`, [challenge, user, address, chainId]);
      try {
        const { rows: [row] } = await session.query(`select public.wallet_link($1, $2, 'm', 'evm', lower($3), $4) as result`, [user, challenge, address, proof]);
        return (row!.result as { alreadyLinked: boolean }).alreadyLinked ? 200 : 201;
      } catch (error) {
        return (error as Error).message;
      }
    };
    expect(await claimOn(b, contract, 1, 'erc1271')).toBe(201);
    expect(await claimOn(b, contract, 8453, 'erc1271')).toMatch(/wallet_already_linked/);
    expect(await claimOn(b, key, 8453, 'erc1271')).toMatch(/wallet_already_linked/);
  });
});

/** A database with no migration applied yet, of either engine, and one session on it. */
async function openBlank(kind: DatabaseKind): Promise<{ session: SqlSession; close(): Promise<void> }> {
  if (kind === 'pglite') {
    const dir = path.join(mkdtempSync(path.join(tmpdir(), 'account-link-pglite-')), 'db');
    const db = await openPglite(dir, { migrate: false });
    return {
      session: db.session,
      close: async () => {
        await db.close();
        rmSync(path.dirname(dir), { recursive: true, force: true });
      },
    };
  }
  const name = `scope_${randomBytes(4).toString('hex')}`;
  await createDatabase(inject('postgresServerUrl'), name);
  const client = new pg.Client({ connectionString: inject('postgresServerUrl').replace(/\/postgres$/, `/${name}`) });
  await client.connect();
  return { session: clientSession(client), close: () => client.end() };
}
