// npm run billing:sync -- --user <app user id> [--base-url <url>] | --all [--restart]
// Sync subscribers from RevenueCat's REST API into their entitlements, as the admin route does:
// --user one subscriber RevenueCat has sent events about; --all every subscriber that holds rows or
// is marked, in id order, within RevenueCat's rate budget, saving its place (an interrupted run
// resumes where it stopped; --restart starts over). Reads .env.local like the server, but needs
// only the database settings `npm run migrate` uses and the RevenueCat key. In local mode on the
// embedded database, while the running service holds the folder, --user asks that service (its
// POST /api/admin/billing/sync at --base-url, default as defaultBaseUrl in operator.ts says), which
// also serves the RevenueCat stand-in (REVENUECAT_STAND_IN=1).
import './load-env.ts';
import { syncKnownSubscriber, syncSubscriber } from '../lib/billing/sync.ts';
import { configureForOperator } from '../lib/config.ts';
import { callDb, closeDatabase } from '../lib/db/index.ts';
import { DomainError } from '../lib/errors.ts';
import { commandArgs, usageError } from './command-args.ts';
import { databaseOrService } from './operator.ts';
import { progressLine } from './progress.ts';

const RUN = 'billing-sync-all';
const HELP = {
  about: "Sync subscribers from RevenueCat's REST API into their entitlements: one subscriber, or all of them within RevenueCat's rate budget (an interrupted run resumes).",
  usage: 'Usage: npm run billing:sync -- --user <app user id> [--base-url <url>]   or   npm run billing:sync -- --all [--restart]',
  docs: 'docs/sync.md',
};
const values = commandArgs(HELP, {
  user: { type: 'string' }, all: { type: 'boolean', default: false }, restart: { type: 'boolean', default: false },
  'base-url': { type: 'string' },
});
const user = values.user;
if ((user === undefined) === !values.all || user === '') usageError(HELP, 'Give either --user <app user id> or --all.');
// (--all runs here, on this shell's database: no route of the service runs it.)
if (values.all && values['base-url'] !== undefined) usageError(HELP, '--all runs on this shell\'s database (POSTGRES_URL_NON_POOLING, DATABASE_URL or POSTGRES_URL), not through a service: leave out --base-url.');

try {
  if (user) {
    const result = await databaseOrService<{ appUserId: string; outcome: string; entitlements: unknown[] }>({
      baseUrl: values['base-url'],
      direct: async () => {
        const { outcome, entitlements } = await syncKnownSubscriber(user, 'cli');
        return { appUserId: user, outcome, entitlements };
      },
      route: { method: 'POST', path: '/api/admin/billing/sync', body: { app_user_id: user } },
    });
    console.log(JSON.stringify({ appUserId: result.appUserId, outcome: result.outcome, entitlements: result.entitlements }, null, 2));
  } else {
    configureForOperator();
    await syncAll(values.restart ?? false);
  }
} catch (error) {
  console.error(`Sync failed: ${describeFailure(error)}`);
  process.exitCode = 1;
} finally {
  await closeDatabase();
}

/** A failure for the operator at the shell: the code, the answer's words, and what lies behind them (which setting, what RevenueCat said). */
function describeFailure(error: unknown): string {
  if (!(error instanceof DomainError)) return (error as Error).message;
  return `${error.code}: ${error.detail}${error.operatorDetail ? ` (${error.operatorDetail})` : ''}`;
}

async function syncAll(restart: boolean) {
  let place = restart ? null : await callDb<string | null>('billing_sync_run_place', { p_name: RUN, p_last_id: null, p_save: false });
  if (place) console.error(`Resuming after ${place} (--restart to start over).`);
  const counts = { synced: 0, failed: 0 };
  const total = await callDb<number>('billing_subscribers_count', {});
  const progress = progressLine('subscribers');
  for (;;) {
    const page = await callDb<string[]>('billing_subscribers_page', { p_after: place, p_limit: 100 });
    if (page.length === 0) break;
    for (const id of page) {
      try {
        await syncSubscriber(id, { reason: 'cli', maxSlotWaitMs: 60_000 });
        counts.synced++;
      } catch (error) {
        counts.failed++;
        console.error(`\n${id}: ${describeFailure(error)}`);
      }
      place = id;
      progress(counts.synced + counts.failed, Math.max(total, counts.synced + counts.failed), `(synced ${counts.synced}, failed ${counts.failed})`);
    }
    await callDb('billing_sync_run_place', { p_name: RUN, p_last_id: place, p_save: true });
  }
  await callDb('billing_sync_run_place', { p_name: RUN, p_last_id: null, p_save: true });
  console.log(`Done: ${counts.synced} synced, ${counts.failed} failed (failures stay marked for the sweep).`);
}
