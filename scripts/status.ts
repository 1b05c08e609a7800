// npm run status [-- --json] - the operator's view of the configured service, as GET
// /api/admin/status answers it: the last delivery of each webhook and the day's counts, the sync
// queue and the last sweep, the last maintenance run and what it is behind, the schema's migrations
// against this code's, and which optional parts are on. Reads .env.local like the server and asks
// the configured database directly (one call), so it works without ADMIN_API_SECRET on this machine
// and while the service is down or refusing (a schema behind its code). In embedded mode the
// running service holds the database folder: stop it first, or use Postgres (see docs/operations.md).
import './load-env.ts';
import { closeDatabase } from '../lib/db/index.ts';
import { describeStatus, readServiceStatus } from '../lib/operations/status.ts';

const args = process.argv.slice(2);
if (args.some((arg) => arg !== '--json')) {
  console.error('Usage: npm run status [-- --json]');
  process.exit(2);
}

try {
  const status = await readServiceStatus();
  console.log(args.includes('--json') ? JSON.stringify(status, null, 2) : describeStatus(status).join('\n'));
} catch (error) {
  console.error(`Status failed: ${(error as Error).message}`);
  process.exitCode = 1;
} finally {
  await closeDatabase();
}
