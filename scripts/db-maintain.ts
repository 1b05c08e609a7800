// npm run db:maintain [-- --budget-ms <ms>] - apply every retention rule to the configured database,
// as GET /api/cron/maintenance does, but keep going until everything due is done (or the budget,
// default 10 minutes, runs out): for a first run on a database with a backlog, or where no Vercel
// Cron runs it. Each database call works about 2 s, so requests keep being served meanwhile.
// Safe to run while the cron job runs. Says what it is doing as it goes (stderr), then prints the
// report (stdout, JSON). Reads .env.local like the server, but needs only the database settings `npm run migrate` uses.
import './load-env.ts';
import type { BillingMaintenance } from '../lib/billing/maintenance.ts';
import { configureForOperator } from '../lib/config.ts';
import { closeDatabase } from '../lib/db/index.ts';
import { runMaintenance, type MaintenanceCounts } from '../lib/maintenance.ts';
import { recordedRun } from '../lib/operations/runs.ts';
import { readServiceStatus } from '../lib/operations/status.ts';
import { commandArgs, milliseconds } from './command-args.ts';
import { progressLine } from './progress.ts';

const HELP = {
  about: 'Apply every retention rule to the configured database, as the maintenance cron does, until everything due is done or the budget (default 10 minutes) runs out.',
  usage: 'Usage: npm run db:maintain [-- --budget-ms <milliseconds>]',
  docs: 'docs/operations.md',
};
const values = commandArgs(HELP, { 'budget-ms': { type: 'string', default: '600000' } });
const budgetMs = milliseconds(HELP, 'budget-ms', values['budget-ms']);

try {
  configureForOperator(); // only the database settings `npm run migrate` uses (lib/config.ts)
  // What is due, before starting: the months past the billing log's retention and the customers they wait for.
  const { maintenance } = await readServiceStatus();
  const { monthsToDrop, customersWaiting, heldEvents } = maintenance.behind;
  console.error(`Billing event log: ${monthsToDrop.length === 0 ? 'no month past the retention' : `month(s) past the retention: ${monthsToDrop.join(', ')}`}; `
    + `${customersWaiting} customer(s) to checkpoint first${heldEvents > 0 ? `; ${heldEvents} event(s) held aside` : ''}.`);
  const checkpoints = progressLine('customers checkpointed');
  let checkpointed = 0;
  let gaveWay = 0;
  let otherCalls = 0;
  const report = await recordedRun('maintenance', () => runMaintenance({
    budgetMs,
    onBillingCall: (call: BillingMaintenance) => {
      checkpointed += call.checkpoints;
      gaveWay += call.gaveWay;
      const notes = [
        call.busy > 0 ? `${call.busy} busy, tried again later` : '',
        // Calls that stopped early for the database's live traffic (docs/operations.md).
        gaveWay > 0 ? `gave way to live traffic ${gaveWay} time(s)` : '',
      ].filter(Boolean);
      if (customersWaiting > 0) checkpoints(Math.min(checkpointed, customersWaiting), customersWaiting, notes.length > 0 ? `(${notes.join('; ')})` : '');
      if (call.partitionsDropped.length > 0) console.error(`Billing event log: dropped ${call.partitionsDropped.join(', ')}${call.heldEvents > 0 ? ` (${call.heldEvents} event(s) held aside)` : ''}.`);
      if (call.skipped) console.error('Billing event log: another run is at it; this one leaves it.');
    },
    onCall: (result: MaintenanceCounts) => {
      otherCalls++;
      const count = (part: string, key: string) => Number((result[part] as MaintenanceCounts | undefined)?.[key] ?? 0);
      console.error(`Other rules, call ${otherCalls}: deleted wallet challenges ${count('wallets', 'challengesDeleted')}, contract checks ${count('wallets', 'contractChecksDeleted')}, `
        + `league deliveries ${count('leagues', 'deliveriesDeleted')}, refresh requests ${count('billingSync', 'refreshRequestsDeleted')}${result.done === true ? '; done' : '; more to do'}.`);
    },
  }));
  console.log(JSON.stringify(report, null, 2));
  const failed = (report.billing as { failed?: number } | undefined)?.failed ?? 0;
  if (failed > 0) console.error(`${failed} customer group(s) could not be checkpointed (logged above); their events stay until a later run checkpoints them.`);
  console.error(report.done ? 'Done: everything due is done (recorded for `npm run status`).' : 'Not done within the budget: run it again (or with a larger --budget-ms).');
} catch (error) {
  console.error(`Maintenance failed: ${(error as Error).message}`);
  process.exitCode = 1;
} finally {
  await closeDatabase();
}
