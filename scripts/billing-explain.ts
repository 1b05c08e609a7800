// npm run billing:explain -- --user <app user id> [--json] - why a subscriber has (or lacks) each
// entitlement, in words: the customer's ids (aliases, transfers), each event and snapshot in event
// order with what it did to which row, and per entitlement why it grants or not now. Reads the
// stored log of the configured database and changes nothing (as GET
// /api/admin/billing/subscribers/{id}). Reads .env.local like the server; in embedded mode stop the
// running service first (it holds the database folder).
import './load-env.ts';
import { parseArgs } from 'node:util';
import { explainSubscriber, explanationLines } from '../lib/billing/explain.ts';
import { closeDatabase } from '../lib/db/index.ts';
import { DomainError } from '../lib/errors.ts';

let values: { user?: string; json?: boolean };
try {
  ({ values } = parseArgs({ options: { user: { type: 'string' }, json: { type: 'boolean', default: false } } }));
} catch (error) {
  values = {};
  console.error((error as Error).message);
}
if (!values.user) {
  console.error('Usage: npm run billing:explain -- --user <app user id> [--json]');
  process.exit(2);
}

try {
  const explanation = await explainSubscriber(values.user);
  console.log(values.json ? JSON.stringify(explanation, null, 2) : explanationLines(explanation).join('\n'));
} catch (error) {
  console.error(error instanceof DomainError ? `${error.code}: ${error.detail}` : `Explain failed: ${(error as Error).message}`);
  process.exitCode = 1;
} finally {
  await closeDatabase();
}
