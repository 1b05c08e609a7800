// npm run billing:rebuild [-- --apply] - fold every customer's stored billing history again with
// the current decision code and show what changes; --apply writes it (one short transaction per
// customer, safe while webhooks keep arriving). Reads .env.local like the server, but needs only the database settings `npm run migrate` uses.
import './load-env.ts';
import { describeChange, rebuildBilling } from '../lib/billing/rebuild.ts';
import { configureForOperator } from '../lib/config.ts';
import { closeDatabase } from '../lib/db/index.ts';
import { commandArgs } from './command-args.ts';
import { progressLine } from './progress.ts';

const HELP = {
  about: "Fold every customer's stored billing history again with the current decision code and show what changes; --apply writes it (one short transaction per customer, safe while webhooks arrive).",
  usage: 'Usage: npm run billing:rebuild [-- --apply]',
  docs: 'docs/billing.md',
};
const { apply } = commandArgs(HELP, { apply: { type: 'boolean', default: false } });

try {
  configureForOperator(); // only the database settings `npm run migrate` uses (lib/config.ts)
  const report = await rebuildBilling({ apply, onProgress: progressLine('customers') });
  console.log(`${report.events} stored entries, ${report.customers} customers; ${report.changed.length} ${apply ? 'changed' : 'would change'}.`);
  for (const change of report.changed.slice(0, 50)) for (const line of describeChange(change)) console.log(`  ${line}`);
  if (report.changed.length > 50) console.log(`  ... and ${report.changed.length - 50} more customers.`);
  if (!apply && report.changed.length > 0) console.log('Nothing was written. Run `npm run billing:rebuild -- --apply` to write it.');
} catch (error) {
  console.error(`Rebuild failed: ${(error as Error).message}`);
  process.exitCode = 1;
} finally {
  await closeDatabase();
}
