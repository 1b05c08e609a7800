import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as explainRoute from '../../app/api/admin/billing/subscribers/[appUserId]/route.ts';
import { syncKnownSubscriber } from '../../lib/billing/sync.ts';
import { explainSubscriber, explanationLines, periodWords } from '../../lib/billing/explain.ts';
import { subscriberExplanationSchema } from '../../lib/openapi/responses.ts';
import { DATABASE_KINDS, describeOn, suiteDatabase, type TestDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { formatUtc } from '../../lib/words.ts';
import { startFakeRevenueCat, v1Entitlement, v1Subscription, type FakeRevenueCat } from '../../scripts/support/fake-revenuecat.ts';
import { callRoute } from '../support/http.ts';
import { DAY_MS, T0 } from './fixtures.ts';
import { apple, billingEvent, day, deliver, flowSettings, MONTHLY, purchase, refund, renewal, transfer, YEARLY } from './support.ts';

/**
 * "Why does this user (not) have pro?" from the stored log: a customer with an alias, a refund of a
 * renewal delivered before the renewal itself, a yearly purchase transferred to them from another
 * id, and a sync of RevenueCat's record. The words a support person reads, the one database call,
 * and that asking changes nothing.
 */
const ADMIN_SECRET = 'admin-secret-for-explain-tests-0123456789';

/** Every row of every table the billing log and its state live in, to show that explaining writes nothing. */
async function everything(db: TestDatabase) {
  const tables = ['billing_events', 'billing_event_ids', 'billing_subscribers', 'entitlements', 'billing_sync_queue', 'billing_sync_rate',
    'billing_sync_requests', 'billing_sync_runs', 'billing_content_keys', 'operator_runs'];
  const dump: Record<string, unknown> = {};
  for (const table of tables) dump[table] = await db.sql(`select coalesce(jsonb_agg(to_jsonb(t) order by to_jsonb(t)::text), '[]') as rows from public.${table} t`);
  return dump;
}

describe.each(DATABASE_KINDS)('explaining a subscriber on %s', (kind) => {
  const db = suiteDatabase(kind);
  let revenuecat: FakeRevenueCat;
  let restoreEnv: () => void;
  const alice = randomUUID();
  const bob = randomUUID();
  const anon = `$RCAnonymousID:${randomUUID().replace(/-/g, '')}`;
  const ids: Record<string, string> = {};

  beforeAll(async () => {
    revenuecat = await startFakeRevenueCat();
    restoreEnv = setEnv({ ...flowSettings(revenuecat), ADMIN_API_SECRET: ADMIN_SECRET, LOCAL_DEV: '1' });
    const first = purchase(alice, 0, 0, 30, { aliases: [anon, alice], original_app_user_id: anon });
    const renewed = renewal(alice, 30, 30, 60);
    const refunded = refund(alice, 40, 30, 40, apple(String(renewed.event.transaction_id)));
    const yearly = purchase(bob, 41, 41, 406, { ...apple('9000', '9000', YEARLY) });
    // (Naming the receiver's anonymous id beside it, as RevenueCat's sample TRANSFER does.)
    const moved = transfer([bob], [anon, alice], 45);
    Object.assign(ids, { first: first.event.id, renewed: renewed.event.id, refunded: refunded.event.id, yearly: yearly.event.id, moved: moved.event.id });
    // The refund of the renewal arrives before the renewal itself.
    for (const body of [first, refunded, renewed, yearly, moved]) expect((await deliver(body)).status).toBe(200);
    revenuecat.setCustomer(alice, {
      entitlements: { pro: v1Entitlement(YEARLY, { purchased: day(41), expires: day(406) }) },
      subscriptions: {
        [YEARLY]: v1Subscription({ purchased: day(41), expires: day(406), transactionId: '9000' }),
        // Refunded, and auto-renewal turned off at the refund (a refund alone leaves it on): the sync turns it off here.
        [MONTHLY]: v1Subscription({ purchased: day(30), expires: day(60), refunded: day(40), unsubscribed: day(40), transactionId: String(renewed.event.transaction_id) }),
      },
    });
    revenuecat.setClock(day(50));
    await syncKnownSubscriber(alice, 'admin');
  });
  afterAll(async () => {
    restoreEnv();
    await revenuecat.close();
  });

  it('names the customer\'s ids: the one asked about, its anonymous alias, and the id whose purchase was transferred to it', async () => {
    const explanation = await explainSubscriber(alice, new Date(day(50)));
    const role = (id: string) => explanation.ids.find((entry) => entry.appUserId === id)?.role;
    expect(role(alice)).toContain('the id asked about');
    expect(role(alice)).toContain(`received the purchases of ${bob} on ${utc(45)} (TRANSFER ${ids.moved})`);
    expect(role(anon)).toContain('anonymous');
    expect(role(anon)).toContain(`one customer with ${alice} (RevenueCat's events name them together)`);
    expect(role(bob)).toContain(`its purchases were transferred to ${alice} on ${utc(45)} (TRANSFER ${ids.moved})`);
  });

  it('says per entitlement why it grants now: the transferred yearly purchase, confirmed by the sync; the monthly one refunded', async () => {
    const explanation = await explainSubscriber(alice, new Date(day(50)));
    expect(explanation.entitlements.map((entitlement) => ({ id: entitlement.id, grantsNow: entitlement.grantsNow }))).toEqual([{ id: 'pro', grantsNow: true }]);
    const [verdict, first, second] = explanation.entitlements[0]!.why;
    expect(verdict).toBe('pro: grants now.');
    expect(first).toBe(`grants: ${YEARLY} (APP_STORE) held by ${alice}: active until ${utc(406)} (yearly, renews); `
      + `period from INITIAL_PURCHASE ${ids.yearly} on ${utc(41)} (of ${bob}); moved to ${alice} on ${utc(45)} by TRANSFER ${ids.moved}; RevenueCat's record confirmed it at ${utc(50)}.`);
    // A refund leaves auto-renewal as it was (RevenueCat: "a subscription's auto-renewal setting may still be active"); the sync says it is off.
    expect(second).toBe(`does not grant: ${MONTHLY} (APP_STORE) held by ${alice}: refunded ${utc(40)}; period from RENEWAL ${ids.renewed} on ${utc(30)}; `
      + `refunded on ${utc(40)} by CANCELLATION CUSTOMER_SUPPORT ${ids.refunded}; renewal off on ${utc(50)} by a sync (RevenueCat's record, ${syncId(explanation)}); RevenueCat's record confirmed it at ${utc(50)}.`);
    expect(explanation.elsewhere).toEqual([`pro: does not grant: ${YEARLY} (APP_STORE) held by ${bob}: its purchase was transferred to ${alice} on ${utc(45)} by TRANSFER ${ids.moved}; `
      + `period from INITIAL_PURCHASE ${ids.yearly} on ${utc(41)}.`]);
    expect(explanation.consistent).toBe(true);
    // The other side of the transfer: what GET /api/me shows for it.
    const fromBob = await explainSubscriber(bob, new Date(day(50)));
    expect(fromBob.entitlements.map((entitlement) => entitlement.why[0])).toEqual(['pro: does not grant now.']);
  });

  it('lists every event and the sync in event order with what each did, and that the late renewal was folded in its place', async () => {
    const explanation = await explainSubscriber(alice, new Date(day(50)));
    const types = explanation.history.map((entry) => entry.type);
    expect(types).toEqual(['INITIAL_PURCHASE', 'RENEWAL', 'CANCELLATION', 'INITIAL_PURCHASE', 'TRANSFER', 'SYNC']);
    const entry = (eventId: string) => explanation.history.find((candidate) => candidate.eventId === eventId)!;
    // (Received now, by the database's clock: long after the events were generated.)
    expect(entry(ids.first).title).toMatch(new RegExp(`^${escape(utc(0))}  INITIAL_PURCHASE ${ids.first} \\(${escape(MONTHLY)}, APP_STORE, PRODUCTION\\), received `));
    expect(entry(ids.first).changes.map((change) => change.words)).toEqual([`pro (${MONTHLY}) of ${alice}: new row: active until ${utc(30)}, renews`]);
    expect(entry(ids.renewed).did).toMatch(new RegExp(`^arrived after later events \\(CANCELLATION ${ids.refunded} among them\\): the history was folded again with it in its place; grants pro: changed 1 row\\(s\\)\\.$`));
    expect(entry(ids.refunded).title).toContain('CANCELLATION CUSTOMER_SUPPORT');
    expect(entry(ids.refunded).title).toContain('a refund');
    expect(entry(ids.refunded).changes[0]!.after).toMatchObject({ status: 'refunded', expiresAt: new Date(day(40)).toISOString(), willRenew: true });
    expect(entry(ids.moved).did).toBe(`moved the purchases of ${bob} to ${alice}; ids ${anon} joined to ${alice}: changed 2 row(s).`);
    expect(explanation.history.at(-1)!.did).toBe(`RevenueCat showed ${YEARLY} active (pro); ${MONTHLY} refunded: changed 1 row(s), confirmed 1 as it was.`);
    expect(entry(ids.moved).changes.map((change) => change.words)).toEqual(expect.arrayContaining([
      expect.stringMatching(new RegExp(`^pro \\(${escape(YEARLY)}\\) of ${alice}: new row: active until`)),
      expect.stringMatching(new RegExp(`^pro \\(${escape(YEARLY)}\\) of ${bob}: active until .* -> transferred`)),
    ]));
    const sync = explanation.history.at(-1)!;
    expect(sync.title).toMatch(new RegExp(`^${escape(utc(50))}  SYNC sync:[0-9a-f-]+: RevenueCat's record of ${alice}$`));
    expect(explanation.sync).toEqual([]);
    expect(subscriberExplanationSchema.safeParse(explanation).success).toBe(true);
    const lines = explanationLines(explanation);
    expect(lines[0]).toBe(`Subscriber ${alice}, as of ${utc(50)}`);
    expect(lines).toContain('Entitlements now (as GET /api/me shows them for this id):');
    expect(lines).toContain('  pro: grants now.');
  });

  it('changes nothing: every table is as it was after explaining each of the ids', async () => {
    const before = await everything(db);
    for (const id of [alice, bob, anon]) await explainSubscriber(id, new Date(day(50)));
    expect((await callRoute(explainRoute, { params: { appUserId: alice }, headers: { authorization: `Bearer ${ADMIN_SECRET}` } })).status).toBe(200);
    expect(await everything(db)).toEqual(before);
  });

  it('GET /api/admin/billing/subscribers/{id}: 200 with the explanation in one database call; an unknown id 404; the admin secret only', async () => {
    const get = (appUserId: string, authorization = `Bearer ${ADMIN_SECRET}`) => callRoute(explainRoute, { params: { appUserId }, headers: { authorization } });
    const response = await get(alice);
    expect(response.status).toBe(200);
    expect(subscriberExplanationSchema.safeParse(response.body).success).toBe(true);
    expect(response.body.entitlements[0]).toMatchObject({ id: 'pro', grantsNow: true });
    expect(response.headers.get('server-timing')).toMatch(/^db;desc="1 calls"/);
    expect(await get(anon)).toMatchObject({ status: 200, body: { appUserId: anon } });
    expect(await get(`nobody-${randomUUID()}`)).toMatchObject({ status: 404, body: { code: 'subscriber_unknown' } });
    expect(await get(alice, 'Bearer not-the-admin-secret')).toMatchObject({ status: 401, body: { code: 'invalid_admin_secret' } });
  });

  it('an id with a NUL character (%00): 400 saying no event can name one, in no database call', async () => {
    const response = await callRoute(explainRoute, { params: { appUserId: 'user\u0000id' }, headers: { authorization: `Bearer ${ADMIN_SECRET}` } });
    expect(response).toMatchObject({ status: 400, body: { code: 'invalid_request', detail: expect.stringContaining('no NUL character') } });
    expect(response.headers.get('server-timing')).toMatch(/^db;desc="0 calls"/);
  });

  it('an id over 256 characters: 400 saying such an id holds no entitlement (its events are stored, never keyed), in no database call', async () => {
    const response = await callRoute(explainRoute, { params: { appUserId: 'u'.repeat(257) }, headers: { authorization: `Bearer ${ADMIN_SECRET}` } });
    expect(response).toMatchObject({ status: 400, body: { code: 'invalid_request', detail: expect.stringContaining('holds no entitlement') } });
    expect(response.headers.get('server-timing')).toMatch(/^db;desc="0 calls"/);
  });

  it('explains a history an older version stored without plans: computes them as a rebuild would, and stores none', async () => {
    const user = randomUUID();
    const first = purchase(user, 0, 0, 30);
    const cancelled = billingEvent('cancellation-unsubscribe', user, { at: 10, purchased: 0, expires: 30 }, { ...apple('1000'), cancel_reason: 'UNSUBSCRIBE' });
    for (const body of [first, cancelled]) expect((await deliver(body)).status).toBe(200);
    const withPlans = await explainSubscriber(user, new Date(day(20)));
    await db.sql('update public.billing_events set plan = null where subject_id = $1', [user]);
    const without = await explainSubscriber(user, new Date(day(20)));
    expect(without.entitlements).toEqual(withPlans.entitlements);
    expect(without.history.map((entry) => entry.changes)).toEqual(withPlans.history.map((entry) => entry.changes));
    expect(without.entitlements[0]!.why[1]).toContain(`cancelled: active until ${utc(30)}, then ends (monthly, will not renew); period from INITIAL_PURCHASE ${first.event.id}`);
    expect(await db.sql('select count(*)::int as n from public.billing_events where subject_id = $1 and plan is null', [user])).toEqual([{ n: 2 }]);
  });

  it('names the transfer that moved a purchase last: away, back and away again', async () => {
    const [from, to] = [randomUUID(), randomUUID()];
    const bought = purchase(from, 0, 0, 400, { ...apple('9100', '9100', YEARLY) });
    const away = transfer([from], [to], 10);
    const back = transfer([to], [from], 20);
    const again = transfer([from], [to], 30);
    for (const body of [bought, away, back, again]) expect((await deliver(body)).status).toBe(200);
    const explanation = await explainSubscriber(to, new Date(day(40)));
    expect(explanation.elsewhere.join('\n')).toContain(`its purchase was transferred to ${to} on ${utc(30)} by TRANSFER ${again.event.id}`);
  });

  it('an erased id (its user deleted): says it was erased and when, before and after an event naming it again, which grants nothing', async () => {
    const user = randomUUID();
    expect((await deliver(purchase(user, 0, 0, 30))).status).toBe(200);
    await db.sql('select public.forget_user($1::uuid)', [user]);
    const [{ erased_at: erasedAt }] = await db.sql<{ erased_at: Date }>('select erased_at from public.billing_erased_ids where id_hash = public.billing_id_hash($1)', [user]);
    const erased = `This id was erased on ${formatUtc(new Date(erasedAt).toISOString())} (its user was deleted)`;
    const response = await callRoute(explainRoute, { params: { appUserId: user }, headers: { authorization: `Bearer ${ADMIN_SECRET}` } });
    expect(response).toMatchObject({ status: 200, body: { entitlements: [], notes: [expect.stringContaining(erased)] } });
    expect(subscriberExplanationSchema.safeParse(response.body).success).toBe(true);

    // RevenueCat renews the store subscription the deletion did not cancel: stored, grants nothing.
    expect((await deliver(renewal(user, 30, 30, 60))).status).toBe(200);
    const explanation = await explainSubscriber(user, new Date(day(31)));
    expect(explanation.entitlements).toEqual([]);
    expect(explanationLines(explanation).join('\n')).toContain(erased);

    // A user erased before any event named them: still not a subscriber, and the 404 says erased.
    const never = randomUUID();
    await db.sql('select public.forget_user($1::uuid)', [never]);
    expect(await callRoute(explainRoute, { params: { appUserId: never }, headers: { authorization: `Bearer ${ADMIN_SECRET}` } }))
      .toMatchObject({ status: 404, body: { code: 'subscriber_unknown', detail: expect.stringMatching(/^This app user id was erased on .* \(its user was deleted\)/) } });
  });

  it('explains a TEST event\'s user: recorded, changes nothing', async () => {
    const user = `test-${randomUUID()}`;
    expect((await deliver(purchase(user, 0, 0, 30, { type: 'TEST', id: `TEST-${randomUUID()}` }))).status).toBe(200);
    const explanation = await explainSubscriber(user, new Date(day(1)));
    expect(explanation.entitlements).toEqual([]);
    expect(explanation.history.map((entry) => [entry.type, entry.outcome, entry.did])).toEqual([
      ['TEST', 'ignored', 'recorded; changes nothing: this type of event changes no entitlement (RevenueCat\'s TEST, which its dashboard\'s "Send test event" sends; an invoice, an alias, ...).'],
    ]);
  });
});

describeOn('postgres')('npm run billing:explain', () => {
  const db = suiteDatabase('postgres');
  const run = (args: string[]) => promisify(execFile)(process.execPath, ['scripts/billing-explain.ts', ...args], {
    env: { ...process.env, DATABASE_URL: db.url!, LOCAL_DEV: '1', LOG_LEVEL: 'silent', SUPABASE_URL: '', VERCEL: '' },
    timeout: 60_000,
  });

  it('prints the explanation of a subscriber (or JSON), and says when an id is unknown', async () => {
    const user = randomUUID();
    const now = Date.now();
    expect((await deliver(purchase(user, 0, 0, 30, { event_timestamp_ms: now - DAY_MS, purchased_at_ms: now - DAY_MS, expiration_at_ms: now + 29 * DAY_MS }))).status).toBe(200);
    const { stdout } = await run(['--user', user]);
    expect(stdout).toContain(`Subscriber ${user}, as of`);
    expect(stdout).toContain('  pro: grants now.');
    expect(stdout).toMatch(/grants: com\.example\.pro\.monthly \(APP_STORE\): active until .* \(monthly, renews\); period from INITIAL_PURCHASE /);
    expect(JSON.parse((await run(['--user', user, '--json'])).stdout)).toMatchObject({ appUserId: user, entitlements: [{ id: 'pro', grantsNow: true }] });
    await expect(run(['--user', `nobody-${randomUUID()}`])).rejects.toMatchObject({ code: 1, stderr: expect.stringContaining('subscriber_unknown') });
    await expect(run([])).rejects.toMatchObject({ code: 2, stderr: expect.stringContaining('Usage:') });
  });
});

describe('the length of a period, as a person names it', () => {
  const at = (days: number) => new Date(T0 + days * DAY_MS).toISOString();
  it.each([
    { days: 7, type: 'NORMAL', words: 'weekly' },
    { days: 30, type: 'NORMAL', words: 'monthly' },
    { days: 365, type: 'NORMAL', words: 'yearly' },
    { days: 3, type: 'TRIAL', words: 'trial, a 3-day period' },
    { days: 5 / 1440, type: 'NORMAL', words: 'a 5-minute period' },
    { days: null, type: 'NORMAL', words: 'lifetime' },
  ])('$days days ($type): $words', ({ days, type, words }) => {
    expect(periodWords({ period_purchased_at: at(0), expires_at: days === null ? null : at(days), period_type: type, environment: 'PRODUCTION' })).toBe(words);
  });
});

const syncId = (explanation: { history: { type: string; eventId: string }[] }) => explanation.history.find((entry) => entry.type === 'SYNC')!.eventId;
const utc = (days: number) => new Date(day(days)).toISOString().replace('T', ' ').replace(/:00\.000Z$/, ' UTC').replace(/\.000Z$/, ' UTC');
const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
