// npm run events:replay -- --event <id or evt_<id>> | --from <ISO> --to <ISO> [--endpoint <id>]
// [--url <deployment>] [--base-url <url>] - send events again, as POST /api/admin/events/replay
// does: one event, or those written in [from, to), to every active endpoint that takes them or to
// one; each pending again under the same webhook-id. They go out with the next run (the service's
// after this, the events cron, or `npm run events:deliver`). Reaches the database as `npm run
// events:status` does.
import './load-env.ts';
import { parseArgs } from 'node:util';
import { closeDatabase } from '../lib/db/index.ts';
import { DomainError } from '../lib/errors.ts';
import { parseReplayRequest, replay, type ReplayRequest } from '../lib/events/operate.ts';
import { askDeployment, databaseOrService, defaultBaseUrl } from './operator.ts';

const USAGE = 'Usage: npm run events:replay -- --event <id> | --from <ISO time> --to <ISO time> [--endpoint <id>] [--url <deployment>] [--base-url <url>]';
let values: { event?: string; from?: string; to?: string; endpoint?: string; url?: string; 'base-url'?: string };
let request: ReplayRequest;
// What was given, in the route's words (its body), for the route and for the messages.
let body: Record<string, string>;
try {
  ({ values } = parseArgs({ options: {
    event: { type: 'string' }, from: { type: 'string' }, to: { type: 'string' }, endpoint: { type: 'string' }, url: { type: 'string' }, 'base-url': { type: 'string', default: defaultBaseUrl() },
  } }));
  body = Object.fromEntries(Object.entries({ eventId: values.event, from: values.from, to: values.to, endpoint: values.endpoint }).filter(([, value]) => value !== undefined)) as Record<string, string>;
  request = parseReplayRequest(body);
} catch (error) {
  const option = (path: string) => ({ eventId: '--event', '(body)': 'options' }[path] ?? `--${path}`);
  const problems = error instanceof DomainError ? (error.errors ?? []).map((problem) => `${option(problem.path)}: ${problem.message}`).join('; ') : (error as Error).message;
  console.error(`${problems}\n${USAGE}`);
  process.exit(2);
}

const route = { method: 'POST', path: '/api/admin/events/replay', body } as const;
try {
  const { replayed } = values.url !== undefined
    ? await askDeployment<{ replayed: number }>(values.url, route)
    : await databaseOrService({ baseUrl: values['base-url']!, direct: () => replay(request), route });
  console.log(`Replayed: ${replayed} delivery(ies) pending again, under their events' webhook-ids.`);
  if (replayed > 0) console.error('They go out with the next run: the service\'s own (after its next write, or within a minute on a long-running server), the events cron, or `npm run events:deliver`.');
} catch (error) {
  console.error(error instanceof DomainError ? `${error.code}: ${error.detail}` : `Replay failed: ${(error as Error).message}`);
  process.exitCode = 1;
} finally {
  await closeDatabase();
}
