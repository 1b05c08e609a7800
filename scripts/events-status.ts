// npm run events:status [-- --json] [--url <deployment>] [--base-url <url>] - each event endpoint
// with its backlog (pending, the oldest), dead letters, last delivery and last failure, and the
// lapses due, as GET /api/admin/events/endpoints answers it. How it reaches the database is `npm run
// status`'s (scripts/operator.ts): --url asks a deployment's route with ADMIN_API_SECRET; without
// it, the database the operator settings name, directly (the endpoints' URLs only in local mode,
// where this shell has the service's settings), or the running local service that holds the
// embedded database.
import './load-env.ts';
import { closeDatabase } from '../lib/db/index.ts';
import { endpointSettings } from '../lib/events/endpoints.ts';
import { describeOutbox, readOutboxOverview, type OutboxOverview } from '../lib/events/operate.ts';
import { commandArgs } from './command-args.ts';
import { askDeployment, databaseOrService } from './operator.ts';

const HELP = {
  about: 'Each event endpoint with its backlog, dead letters, last delivery and last failure, and the lapses due.',
  usage: 'Usage: npm run events:status [-- --json] [--url <deployment>] [--base-url <url>]',
  docs: 'docs/events.md',
};
const ROUTE = { method: 'GET', path: '/api/admin/events/endpoints' } as const;
const values = commandArgs(HELP, { json: { type: 'boolean', default: false }, url: { type: 'string' }, 'base-url': { type: 'string' } });

try {
  const overview = values.url !== undefined
    ? await askDeployment<OutboxOverview>(values.url, ROUTE)
    : await databaseOrService<OutboxOverview>({
      baseUrl: values['base-url'],
      direct: (config) => readOutboxOverview(config.local ? endpointSettings(config) : null),
      route: ROUTE,
    });
  console.log(values.json ? JSON.stringify(overview, null, 2) : describeOutbox(overview).join('\n'));
} catch (error) {
  console.error(`Events status failed: ${(error as Error).message}`);
  process.exitCode = 1;
} finally {
  await closeDatabase();
}
