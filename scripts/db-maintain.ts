// npm run db:maintain [-- --budget-ms <ms>] - apply every retention rule to the configured database,
// as GET /api/cron/maintenance does, but keep going until everything due is done (or the budget,
// default 10 minutes, runs out): for a first run on a database with a backlog, or where no Vercel
// Cron runs it. Each database call works about 2 s, so requests keep being served meanwhile.
// Safe to run while the cron job runs. Reads .env.local like the server.
import './load-env.ts';
import { closeDatabase } from '../lib/db/index.ts';
import { runMaintenance } from '../lib/maintenance.ts';

const args = process.argv.slice(2);
const budgetIndex = args.indexOf('--budget-ms');
const budgetMs = budgetIndex >= 0 ? Number(args[budgetIndex + 1]) : 600_000;
if (args.some((arg, i) => arg !== '--budget-ms' && i !== budgetIndex + 1) || !Number.isSafeInteger(budgetMs) || budgetMs < 1) {
  console.error('Usage: npm run db:maintain [-- --budget-ms <milliseconds>]');
  process.exit(2);
}

try {
  const report = await runMaintenance({
    budgetMs,
    onCall: (result) => console.error(`call: ${JSON.stringify(result)}`),
  });
  console.log(JSON.stringify(report, null, 2));
  const failed = (report.billing as { failed?: number } | undefined)?.failed ?? 0;
  if (failed > 0) console.error(`${failed} customer group(s) could not be checkpointed (logged above); their events stay until a later run checkpoints them.`);
  if (!report.done) console.error('Not done within the budget: run it again (or with a larger --budget-ms).');
} catch (error) {
  console.error(`Maintenance failed: ${(error as Error).message}`);
  process.exitCode = 1;
} finally {
  await closeDatabase();
}
