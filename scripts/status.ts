// npm run status [-- --json] [--url <deployment>] [--base-url <url>] - the operator's view of the
// service, as GET /api/admin/status answers it: the last delivery of each webhook and the day's
// counts, the sync queue and the last sweep, the last maintenance run and what it is behind, the
// schema's migrations against this code's, and which optional parts are on.
// - With --url: asks that deployment's GET /api/admin/status, with this shell's ADMIN_API_SECRET.
//   The whole answer is the deployment's own, its optional parts included.
// - With --base-url: the same of the service there (a local one on Postgres, say), unless the
//   embedded folder is held (below).
// - Without: reads .env.local like the server, but needs only the database settings `npm run
//   migrate` uses (POSTGRES_URL_NON_POOLING, else DATABASE_URL, else POSTGRES_URL), and asks that
//   database directly (one call): no ADMIN_API_SECRET needed, and it works while the service is
//   down or refusing (a schema behind its code). Outside local mode this shell does not have the
//   deployment's settings, so the parts are shown as not visible, never as "off". In local mode on
//   the embedded database, while the running service holds the folder, it asks that service
//   instead (its GET /api/admin/status at --base-url, default as defaultBaseUrl in operator.ts says).
import './load-env.ts';
import { closeDatabase } from '../lib/db/index.ts';
import { describeStatus, readServiceStatus, type ServiceStatus } from '../lib/operations/status.ts';
import { commandArgs } from './command-args.ts';
import { askDeployment, databaseOrService } from './operator.ts';

const HELP = {
  about: 'What the service is running on and what it is behind on: the database, the migrations, billing, maintenance, outbound events.',
  usage: 'Usage: npm run status [-- --json] [--url <deployment, e.g. https://your-app.vercel.app>] [--base-url <url>]',
  docs: 'docs/operations.md',
};
const STATUS_ROUTE = { method: 'GET', path: '/api/admin/status' } as const;
const values = commandArgs(HELP, { json: { type: 'boolean', default: false }, url: { type: 'string' }, 'base-url': { type: 'string' } });

try {
  const status = values.url !== undefined
    ? await askDeployment<ServiceStatus>(values.url, STATUS_ROUTE)
    : await databaseOrService<ServiceStatus>({
      baseUrl: values['base-url'],
      // Only in local mode does this shell have the service's settings (the same .env.local).
      direct: (config) => readServiceStatus(new Date(), { partsVisible: config.local }),
      route: STATUS_ROUTE,
    });
  console.log(values.json ? JSON.stringify(status, null, 2) : describeStatus(status).join('\n'));
} catch (error) {
  console.error(`Status failed: ${(error as Error).message}`);
  process.exitCode = 1;
} finally {
  await closeDatabase();
}
