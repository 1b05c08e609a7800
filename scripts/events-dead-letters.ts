// npm run events:dead-letters [-- --endpoint <id>] [--limit <n>] [--json] [--url <deployment>] [--base-url <url>]
// - the deliveries whose retries ran out, newest first, as GET /api/admin/events/dead-letters
// answers them; send them again with `npm run events:replay`. Reaches the database as `npm run
// events:status` does.
import './load-env.ts';
import { closeDatabase } from '../lib/db/index.ts';
import { DomainError, parseWithSchema } from '../lib/errors.ts';
import { deadLettersQuerySchema, listDeadLetters, type DeadLetterView } from '../lib/events/operate.ts';
import { formatUtc } from '../lib/words.ts';
import { commandArgs, optionProblems, usageError } from './command-args.ts';
import { askDeployment, databaseOrService } from './operator.ts';

const HELP = {
  about: 'The events whose retries ran out, newest first, with the last error each got.',
  usage: 'Usage: npm run events:dead-letters [-- --endpoint <id>] [--limit <1..1000>] [--json] [--url <deployment>] [--base-url <url>]',
  docs: 'docs/events.md',
};
const values = commandArgs(HELP, {
  endpoint: { type: 'string' }, limit: { type: 'string' }, json: { type: 'boolean', default: false }, url: { type: 'string' }, 'base-url': { type: 'string' },
});
let query: ReturnType<typeof deadLettersQuerySchema.parse>;
try {
  query = parseWithSchema(deadLettersQuerySchema, { endpoint: values.endpoint, limit: values.limit }, 'Invalid options.');
} catch (error) {
  usageError(HELP, optionProblems(error));
}

const search = new URLSearchParams({ ...(query.endpoint ? { endpoint: query.endpoint } : {}), limit: String(query.limit) });
const route = { method: 'GET', path: `/api/admin/events/dead-letters?${search}` } as const;
try {
  const { deadLetters } = values.url !== undefined
    ? await askDeployment<{ deadLetters: DeadLetterView[] }>(values.url, route)
    : await databaseOrService({ baseUrl: values['base-url'], direct: () => listDeadLetters(query), route });
  if (values.json) console.log(JSON.stringify({ deadLetters }, null, 2));
  else if (deadLetters.length === 0) console.log('No dead letters.');
  else {
    for (const dead of deadLetters) {
      console.log(`${formatUtc(dead.lastAttemptAt)}  endpoint ${dead.endpointId}  ${dead.webhookId}  ${dead.type}  user ${dead.userId} #${dead.sequence}  after ${dead.attempts} attempt(s): ${dead.lastError ?? '(no error recorded)'}`);
    }
    // To its own endpoint: without --endpoint a replay sends to every endpoint, and those that had it get it again.
    console.error(`${deadLetters.length} dead letter(s). Send one again with \`npm run events:replay -- --event <webhook-id> --endpoint <endpoint>\`, or a time range with --from and --to (and --endpoint).`);
  }
} catch (error) {
  console.error(error instanceof DomainError ? `${error.code}: ${error.detail}` : `Dead letters failed: ${(error as Error).message}`);
  process.exitCode = 1;
} finally {
  await closeDatabase();
}
