// npm run billing:explain -- --user <app user id> [--json] [--base-url <url>] - why a subscriber
// has (or lacks) each entitlement, in words: the customer's ids (aliases, transfers), each event
// and snapshot in event order with what it did to which row, and per entitlement why it grants or
// not now. Reads the stored log of the database and changes nothing (as GET
// /api/admin/billing/subscribers/{id}). Reads .env.local like the server, but needs only the
// database settings `npm run migrate` uses; in local mode on the embedded database, while the
// running service holds the folder, it asks that service's route instead (at --base-url, default
// as defaultBaseUrl in operator.ts says).
import './load-env.ts';
import { explainSubscriber, explanationLines, type SubscriberExplanation } from '../lib/billing/explain.ts';
import { closeDatabase } from '../lib/db/index.ts';
import { DomainError } from '../lib/errors.ts';
import { commandArgs, usageError } from './command-args.ts';
import { databaseOrService } from './operator.ts';

const HELP = {
  about: 'Why a subscriber has (or lacks) each entitlement, in words: their ids, each event and snapshot in order with what it did, and why each entitlement grants or not now. Changes nothing.',
  usage: 'Usage: npm run billing:explain -- --user <app user id> [--json] [--base-url <url>]',
  docs: 'docs/operations.md',
};
const values = commandArgs(HELP, { user: { type: 'string' }, json: { type: 'boolean', default: false }, 'base-url': { type: 'string' } });
const user = values.user || usageError(HELP, 'Missing --user <app user id>.');

try {
  const explanation = await databaseOrService<SubscriberExplanation>({
    baseUrl: values['base-url'],
    direct: () => explainSubscriber(user),
    route: { method: 'GET', path: `/api/admin/billing/subscribers/${encodeURIComponent(user)}` },
  });
  console.log(values.json ? JSON.stringify(explanation, null, 2) : explanationLines(explanation).join('\n'));
} catch (error) {
  console.error(error instanceof DomainError ? `${error.code}: ${error.detail}` : `Explain failed: ${(error as Error).message}`);
  process.exitCode = 1;
} finally {
  await closeDatabase();
}
