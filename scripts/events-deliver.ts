// npm run events:deliver [-- --budget-ms <ms>] [--url <deployment>] - move the outbox now, as GET
// /api/cron/events does: tell access that ended by time, then send each endpoint its due events
// (retries that came due, replays). Prints the run's report (stdout, JSON).
// - Without --url: on the database the operator settings name, to the receivers this shell's
//   settings name (EVENTS_WEBHOOK_URL / EVENTS_WEBHOOK_ENDPOINTS, from .env.local like the server).
//   Outside local mode a shell without them is refused: a run registers the receivers it is given,
//   and would retire the deployment's.
// - With --url: asks that deployment (or the local service) to run, POST /api/cron/events with this
//   shell's CRON_SECRET: its receivers, its settings.
import './load-env.ts';
import { parseArgs } from 'node:util';
import { configureForOperator } from '../lib/config.ts';
import { closeDatabase } from '../lib/db/index.ts';
import { embeddedFolderHolder } from '../lib/db/pglite.ts';
import { runOutboundEvents, type OutboundRunReport } from '../lib/events/delivery.ts';
import { getEventEndpoints } from '../lib/events/endpoints.ts';
import { defaultBaseUrl, isUnreachable } from './operator.ts';

const USAGE = 'Usage: npm run events:deliver [-- --budget-ms <milliseconds>] [--url <deployment>]';
let values: { 'budget-ms'?: string; url?: string };
let budgetMs: number;
try {
  ({ values } = parseArgs({ options: { 'budget-ms': { type: 'string', default: '60000' }, url: { type: 'string' } } }));
  budgetMs = Number(values['budget-ms']);
  if (!Number.isSafeInteger(budgetMs) || budgetMs < 1) throw new Error(`--budget-ms ${values['budget-ms']}: a whole number of milliseconds`);
} catch (error) {
  console.error(`${(error as Error).message}\n${USAGE}`);
  process.exit(2);
}

try {
  const report = values.url !== undefined ? await askToRun(values.url) : await runHere();
  console.log(JSON.stringify(report, null, 2));
  const sent = report.endpoints.map((endpoint) => `${endpoint.id}: ${endpoint.delivered} delivered, ${endpoint.retried} to retry, ${endpoint.dead} dead-lettered`);
  console.error(`${report.lapsesTold} lapse(s) told; ${sent.length ? sent.join('; ') : 'no endpoint'}. ${report.done ? 'Everything due is done.' : 'Not everything due within the budget: run it again.'}`);
} catch (error) {
  console.error(`Delivery failed: ${(error as Error).message}`);
  process.exitCode = 1;
} finally {
  await closeDatabase();
}

async function runHere(): Promise<OutboundRunReport> {
  const config = configureForOperator();
  const holder = config.databaseMode === 'embedded' ? embeddedFolderHolder(config.embeddedDbDir) : null;
  if (holder !== null) {
    throw new Error(`the embedded database folder ${config.embeddedDbDir} is in use by process ${holder} (the running service?), which moves its outbox itself: after each write, and every minute. `
      + 'To run it now instead: stop the service and run this again; or give the service a CRON_SECRET in .env.local with LOCAL_DEV=1 '
      + `(a real secret alone takes it out of local mode), restart it, and run \`npm run events:deliver -- --url ${defaultBaseUrl()}\` with the same CRON_SECRET.`);
  }
  const endpoints = getEventEndpoints(config);
  if (!config.local && endpoints.length === 0) {
    throw new Error('this shell\'s settings name no receiver (EVENTS_WEBHOOK_URL or EVENTS_WEBHOOK_ENDPOINTS): a run would retire the deployment\'s endpoints. '
      + 'Set the deployment\'s receivers here, or ask the deployment: `npm run events:deliver -- --url https://<your deployment>` (with its CRON_SECRET).');
  }
  return runOutboundEvents({ budgetMs, endpoints });
}

async function askToRun(url: string): Promise<OutboundRunReport> {
  let base: URL;
  try {
    base = new URL(url);
  } catch {
    throw new Error(`--url ${url} is not a URL: give the deployment's, such as https://<your-app>.vercel.app.`);
  }
  const secret = process.env.CRON_SECRET?.trim();
  if (!secret) throw new Error('set CRON_SECRET in this shell (or .env.local) to the deployment\'s value: POST /api/cron/events answers only with it.');
  let response: Response;
  try {
    response = await fetch(new URL('/api/cron/events', base.origin), { method: 'POST', headers: { authorization: `Bearer ${secret}` }, signal: AbortSignal.timeout(120_000) });
  } catch (error) {
    if (isUnreachable(error)) throw new Error(`could not reach ${base.origin}: check the URL, or start the service.`);
    throw error;
  }
  const answer = await response.json().catch(() => undefined) as (OutboundRunReport & { code?: string; detail?: string }) | undefined;
  if (!response.ok || !answer) throw new Error(`${base.origin} answered POST /api/cron/events with ${response.status}${answer?.code ? ` ${answer.code}: ${answer.detail ?? ''}` : ''}`);
  return answer;
}
