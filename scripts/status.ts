// npm run status [-- --json] [--base-url <url>] - the operator's view of the service, as GET
// /api/admin/status answers it: the last delivery of each webhook and the day's counts, the sync
// queue and the last sweep, the last maintenance run and what it is behind, the schema's migrations
// against this code's, and which optional parts are on. Reads .env.local like the server, but needs
// only the database settings `npm run migrate` uses (POSTGRES_URL_NON_POOLING, else DATABASE_URL,
// else POSTGRES_URL), and asks that database directly (one call): no ADMIN_API_SECRET needed, and
// it works while the service is down or refusing (a schema behind its code). In local mode on the
// embedded database, while the running service holds the folder, it asks that service instead
// (its GET /api/admin/status at --base-url, default BASE_URL or http://localhost:3000).
import './load-env.ts';
import { parseArgs } from 'node:util';
import { closeDatabase } from '../lib/db/index.ts';
import { describeStatus, readServiceStatus, type ServiceStatus } from '../lib/operations/status.ts';
import { databaseOrService, defaultBaseUrl } from './operator.ts';

const USAGE = 'Usage: npm run status [-- --json] [--base-url <url>]';
let values: { json?: boolean; 'base-url'?: string };
try {
  ({ values } = parseArgs({ options: { json: { type: 'boolean', default: false }, 'base-url': { type: 'string', default: defaultBaseUrl() } } }));
} catch (error) {
  console.error(`${(error as Error).message}\n${USAGE}`);
  process.exit(2);
}

try {
  const status = await databaseOrService<ServiceStatus>({
    baseUrl: values['base-url']!,
    direct: () => readServiceStatus(),
    route: { method: 'GET', path: '/api/admin/status' },
  });
  console.log(values.json ? JSON.stringify(status, null, 2) : describeStatus(status).join('\n'));
} catch (error) {
  console.error(`Status failed: ${(error as Error).message}`);
  process.exitCode = 1;
} finally {
  await closeDatabase();
}
