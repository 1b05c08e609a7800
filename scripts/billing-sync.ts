// npm run billing:sync -- --user <app user id> | --all [--restart]
// Sync subscribers from RevenueCat's REST API into their entitlements, as the admin route does:
// --user one subscriber RevenueCat has sent events about; --all every subscriber that holds rows or
// is marked, in id order, within RevenueCat's rate budget, saving its place (an interrupted run
// resumes where it stopped; --restart starts over). Reads .env.local like the server.
import './load-env.ts';
import { syncKnownSubscriber, syncSubscriber } from '../lib/billing/sync.ts';
import { callDb, closeDatabase } from '../lib/db/index.ts';
import { DomainError } from '../lib/errors.ts';
import { progressLine } from './progress.ts';

const RUN = 'billing-sync-all';
const args = process.argv.slice(2);
const userIndex = args.indexOf('--user');
const user = userIndex >= 0 ? args[userIndex + 1] : undefined;
const all = args.includes('--all');
if ((user === undefined) === !all || (userIndex >= 0 && !user)) {
  console.error('Usage: npm run billing:sync -- --user <app user id>   or   npm run billing:sync -- --all [--restart]');
  process.exit(2);
}

try {
  if (user) {
    const result = await syncKnownSubscriber(user, 'cli');
    console.log(JSON.stringify({ appUserId: user, outcome: result.outcome, entitlements: result.entitlements }, null, 2));
  } else {
    await syncAll(args.includes('--restart'));
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
