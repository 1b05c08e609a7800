// npm run events:deliver [-- --budget-ms <ms>] [--url <deployment>] [--base-url <url>] - move the
// outbox now, as GET /api/cron/events does: tell access that ended by time, then send each endpoint
// its due events (retries that came due, replays). Prints the run's report (stdout, JSON).
// - Without --url: on the database the operator settings name, to the receivers this shell's
//   settings name (EVENTS_WEBHOOK_URL / EVENTS_WEBHOOK_ENDPOINTS, from .env.local like the server).
//   Outside local mode a shell without them is refused: such a run would send nothing (it sends to
//   the receivers it is given, never the deployment's). While the local service holds the embedded database, the
//   service runs it (POST /api/admin/events/deliver, its receivers), as the other events:* commands ask it.
// - With --url: asks that deployment to run, POST /api/admin/events/deliver with this shell's
//   ADMIN_API_SECRET: its receivers, its settings.
// Asked over HTTP, the run is the service's: about 20 s, whatever --budget-ms says.
import './load-env.ts';
import type { Config } from '../lib/config.ts';
import { closeDatabase } from '../lib/db/index.ts';
import { runOutboundEvents, type OutboundRunReport } from '../lib/events/delivery.ts';
import { getEventEndpoints } from '../lib/events/endpoints.ts';
import { DomainError } from '../lib/errors.ts';
import { commandArgs, milliseconds } from './command-args.ts';
import { askDeployment, databaseOrService } from './operator.ts';

const HELP = {
  about: 'Move the outbox now, as the events cron does: tell access that ended by time, then send each endpoint its due events.',
  usage: 'Usage: npm run events:deliver [-- --budget-ms <milliseconds>] [--url <deployment>] [--base-url <url>]',
  docs: 'docs/events.md',
};
const values = commandArgs(HELP, { 'budget-ms': { type: 'string', default: '60000' }, url: { type: 'string' }, 'base-url': { type: 'string' } });
const budgetMs = milliseconds(HELP, 'budget-ms', values['budget-ms']);

const route = { method: 'POST', path: '/api/admin/events/deliver' } as const;
try {
  const report = values.url !== undefined
    ? await askDeployment<OutboundRunReport>(values.url, route)
    : await databaseOrService({ baseUrl: values['base-url'], direct: runHere, route });
  console.log(JSON.stringify(report, null, 2));
  const sent = report.endpoints.map((endpoint) => `${endpoint.id}: ${endpoint.delivered} delivered, ${endpoint.retried} to retry, ${endpoint.dead} dead-lettered`);
  console.error(`${report.lapsesTold} lapse(s) told; ${sent.length ? sent.join('; ') : 'no endpoint'}. ${report.done ? 'Everything due is done (`npm run events:status` shows what still waits, and when its next attempt is due).' : 'Not everything due within the budget: run it again.'}`);
} catch (error) {
  console.error(`Delivery failed: ${error instanceof DomainError ? `${error.code}: ${error.detail}` : (error as Error).message}`);
  process.exitCode = 1;
} finally {
  await closeDatabase();
}

async function runHere(config: Config): Promise<OutboundRunReport> {
  const endpoints = getEventEndpoints(config);
  if (!config.local && endpoints.length === 0) {
    throw new Error('this shell\'s settings name no receiver (EVENTS_WEBHOOK_URL or EVENTS_WEBHOOK_ENDPOINTS): a run here sends to those only, and would send nothing. '
      + 'Set the deployment\'s receivers here, or ask the deployment: `npm run events:deliver -- --url https://<your deployment>` (with its ADMIN_API_SECRET).');
  }
  return runOutboundEvents({ budgetMs, endpoints });
}
