// npm run events:replay -- --event <id or evt_<id>> | --from <ISO> --to <ISO> [--endpoint <id>]
// [--url <deployment>] [--base-url <url>] - send events again, as POST /api/admin/events/replay
// does: one event, or those written in [from, to), to every active endpoint that takes them or to
// one; each pending again under the same webhook-id. A service asked sends them right after its
// answer; replayed on the database directly, they go out with the next run (the service's own, the
// events cron, or `npm run events:deliver`). Reaches the database as `npm run events:status` does.
import './load-env.ts';
import { closeDatabase } from '../lib/db/index.ts';
import { DomainError } from '../lib/errors.ts';
import { parseReplayRequest, replay, type ReplayRequest } from '../lib/events/operate.ts';
import { commandArgs, optionProblems, usageError } from './command-args.ts';
import { askDeployment, databaseOrService } from './operator.ts';

const HELP = {
  about: 'Send events again, under their webhook-ids: one event, or those written in a time range, to every active endpoint that takes them or to one.',
  usage: 'Usage: npm run events:replay -- --event <id> | --from <ISO time> --to <ISO time> [--endpoint <id>] [--url <deployment>] [--base-url <url>]',
  docs: 'docs/events.md',
};
const values = commandArgs(HELP, {
  event: { type: 'string' }, from: { type: 'string' }, to: { type: 'string' }, endpoint: { type: 'string' }, url: { type: 'string' }, 'base-url': { type: 'string' },
});
// What was given, in the route's words (its body), for the route and for the messages.
const body = Object.fromEntries(Object.entries({ eventId: values.event, from: values.from, to: values.to, endpoint: values.endpoint }).filter(([, value]) => value !== undefined)) as Record<string, string>;
let request: ReplayRequest;
try {
  request = parseReplayRequest(body);
} catch (error) {
  const option = (path: string) => ({ eventId: '--event', '(body)': 'options' }[path] ?? `--${path}`);
  usageError(HELP, optionProblems(error, option));
}

const route = { method: 'POST', path: '/api/admin/events/replay', body } as const;
let onTheDatabase = false;
try {
  const { replayed } = values.url !== undefined
    ? await askDeployment<{ replayed: number }>(values.url, route)
    : await databaseOrService({ baseUrl: values['base-url'], direct: () => ((onTheDatabase = true), replay(request)), route });
  console.log(`Replayed: ${replayed} delivery(ies) pending again, under their events' webhook-ids.`);
  if (replayed > 0) {
    console.error(onTheDatabase
      ? 'They go out with the next run: the service\'s own (after its next write, or within a minute on a long-running server), the events cron, or `npm run events:deliver`.'
      : 'The service sends them now, after its answer (what it cannot deliver is retried as any event is).');
  }
} catch (error) {
  console.error(error instanceof DomainError ? `${error.code}: ${error.detail}` : `Replay failed: ${(error as Error).message}`);
  process.exitCode = 1;
} finally {
  await closeDatabase();
}
