// npm run events:listen [-- --forward-to <url>] [--base-url <url>] [--since <ISO time>] [--interval-ms <ms>]
// - for local development, as `stripe listen` is: follows the outbox of a running service and
// prints each event as it is written (type, user, sequence, webhook-id, the body), or, with
// --forward-to, POSTs each one there signed as the service signs (Standard Webhooks: webhook-id,
// webhook-timestamp, webhook-signature) and prints the receiver's status. The secret it signs with:
// EVENTS_WEBHOOK_SECRET when set (.env.local, like the server), else a `whsec_` secret made for this
// run and printed at the start: give it to your receiver. Ctrl-C stops it.
//
// It asks the service over HTTP (GET /api/admin/events, with ADMIN_API_SECRET, or local mode's dev
// secret on a loopback URL): in local mode the embedded database is the server process's own. It
// does not deliver: the service's own deliveries to EVENTS_WEBHOOK_URL go on as they would.
import './load-env.ts';
import { randomBytes } from 'node:crypto';
import { styleText } from 'node:util';
import { signWebhook } from '#client/webhooks';
import { EVENTS_USER_AGENT } from '../lib/events/attempt.ts';
import type { WrittenEvent } from '../lib/events/operate.ts';
import { commandArgs, usageError } from './command-args.ts';
import { askDeployment, defaultBaseUrl, isUnreachable, unreachableMessage } from './operator.ts';

const HELP = {
  about: 'For local development, as `stripe listen` is: print each event of a running service as it is written, or forward it, signed, to a local URL.',
  usage: 'Usage: npm run events:listen [-- --forward-to <url>] [--base-url <url>] [--since <ISO time>] [--interval-ms <milliseconds>]',
  docs: 'docs/events.md',
};
/** Events are listed by their transaction's start: one that committed late has an earlier time than some already printed. Re-read this much. */
const OVERLAP_MS = 30_000;
const PAGE = 1000;

const values = commandArgs(HELP, {
  'forward-to': { type: 'string' }, 'base-url': { type: 'string', default: defaultBaseUrl() }, since: { type: 'string' }, 'interval-ms': { type: 'string', default: '500' },
});
let forwardTo: URL | undefined;
let since: Date;
let intervalMs: number;
try {
  if (values['forward-to'] !== undefined) {
    forwardTo = new URL(values['forward-to']);
    if (!/^https?:$/.test(forwardTo.protocol)) throw new Error(`--forward-to ${values['forward-to']}: an http:// or https:// URL`);
  }
  since = values.since === undefined ? new Date() : new Date(values.since);
  if (Number.isNaN(since.getTime())) throw new Error(`--since ${values.since}: an ISO 8601 time, such as 2026-01-01T00:00:00Z`);
  intervalMs = Number(values['interval-ms']);
  if (!Number.isSafeInteger(intervalMs) || intervalMs < 50) throw new Error(`--interval-ms ${values['interval-ms']}: a whole number of milliseconds, at least 50`);
} catch (error) {
  usageError(HELP, (error as Error).message);
}

const baseUrl = values['base-url']!;
const configured = process.env.EVENTS_WEBHOOK_SECRET?.split(',').map((secret) => secret.trim()).filter(Boolean) ?? [];
const secrets = configured.length > 0 ? configured : [`whsec_${randomBytes(32).toString('base64')}`];

const stop = new AbortController();
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => stop.abort());

console.log(`Ready! Following the events of ${baseUrl}${forwardTo ? `, forwarding them to ${forwardTo.origin}${forwardTo.pathname}` : ''} (^C to quit).`);
if (forwardTo) {
  console.log(configured.length > 0
    ? 'Signing with EVENTS_WEBHOOK_SECRET of these settings (the service\'s own when it reads the same .env.local).'
    : `Your webhook signing secret is ${secrets[0]} (made for this run: set it in your receiver, or set EVENTS_WEBHOOK_SECRET to keep one).`);
}

await follow();
process.exit(); // the exit code set, if any: the timers of a poll under way do not hold it

async function follow(): Promise<void> {
  // Ids already printed, with their time: kept while they are inside the overlap.
  const seen = new Map<string, number>();
  let cursor = since.getTime();
  // After a full page, the next one goes on from its last event (more than a page may share one time).
  let after: string | undefined;
  let unreachable = false;
  while (!stop.signal.aborted) {
    let events: WrittenEvent[];
    try {
      const query = new URLSearchParams({ since: new Date(cursor - OVERLAP_MS).toISOString(), limit: String(PAGE), ...(after ? { after } : {}) });
      ({ events } = await askDeployment<{ events: WrittenEvent[] }>(baseUrl, { method: 'GET', path: `/api/admin/events?${query}` }));
      if (unreachable) console.error(`Reached ${baseUrl} again.`);
      unreachable = false;
    } catch (error) {
      if (!isUnreachable(error) && !/Could not reach/.test((error as Error).message)) {
        console.error(`Listening failed: ${(error as Error).message}`);
        process.exitCode = 1;
        return;
      }
      if (!unreachable) console.error(`${unreachableMessage(baseUrl)} Trying again until it answers.`);
      unreachable = true;
      await pause(Math.max(intervalMs, 1000));
      continue;
    }
    for (const event of events) {
      const at = Date.parse(event.createdAt);
      if (seen.has(event.id) || at < since.getTime()) continue;
      seen.set(event.id, at);
      cursor = Math.max(cursor, at);
      await show(event);
    }
    for (const [id, at] of seen) if (at < cursor - 2 * OVERLAP_MS) seen.delete(id);
    // A full page: more are waiting; read on at once, after its last event.
    after = events.length === PAGE ? events.at(-1)!.id : undefined;
    if (!after) await pause(intervalMs);
  }
}

async function show(event: WrittenEvent): Promise<void> {
  const line = `${event.createdAt}  ${styleText('bold', event.type)}  user ${event.userId}  #${event.sequence}  ${event.webhookId}`;
  if (!forwardTo) {
    console.log(`${line}\n${JSON.stringify(JSON.parse(event.body), null, 2)}`);
    return;
  }
  const timestamp = Math.floor(Date.now() / 1000);
  try {
    const response = await fetch(forwardTo, {
      method: 'POST',
      redirect: 'manual',
      signal: AbortSignal.timeout(15_000),
      headers: {
        'content-type': 'application/json',
        'user-agent': EVENTS_USER_AGENT, // as the service sends them
        'webhook-id': event.webhookId,
        'webhook-timestamp': String(timestamp),
        'webhook-signature': await signWebhook({ id: event.webhookId, timestamp, body: event.body, secrets }),
      },
      body: event.body,
    });
    await response.body?.cancel();
    console.log(`${line}  --> [${response.status}] POST ${forwardTo.origin}${forwardTo.pathname}`);
  } catch (error) {
    const cause = (error as { cause?: { code?: string } }).cause?.code ?? (error as Error).message;
    console.log(`${line}  --> failed: POST ${forwardTo.origin}${forwardTo.pathname}: ${cause}`);
  }
}

function pause(ms: number): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    stop.signal.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    }, { once: true });
  });
}
