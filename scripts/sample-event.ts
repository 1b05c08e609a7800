// npm run sample-event -- --type <TYPE> [--user <id>] [--reason <REASON>] [--to <id>] [--production] [--base-url <url>] [--print]
// Posts a fresh RevenueCat-shaped event, dated now, to the running service's billing webhook with
// the right secret (the local dev secret, or SUBSCRIPTION_WEBHOOK_SECRET from .env.local), for the
// dev user (ana@example.com) unless --user names another. The user's current subscription period
// is kept in a file beside the dev key (.data/sample-events.json), so samples follow each other: a
// RENEWAL continues the subscription an INITIAL_PURCHASE began, a CANCELLATION names its end.
//   --type     INITIAL_PURCHASE, RENEWAL, CANCELLATION, UNCANCELLATION, BILLING_ISSUE, EXPIRATION,
//              PRODUCT_CHANGE, NON_RENEWING_PURCHASE, TRANSFER, TEST, SUBSCRIPTION_EXTENDED,
//              SUBSCRIPTION_PAUSED, TEMPORARY_ENTITLEMENT_GRANT, REFUND_REVERSED
//   --reason   CANCELLATION's cancel_reason (UNSUBSCRIBE by default; CUSTOMER_SUPPORT is a refund) or
//              EXPIRATION's expiration_reason
//   --to       TRANSFER: the id that receives the purchases (default: a new random UUID, a user nobody else has)
//   --production  environment PRODUCTION (default SANDBOX, which grants in local mode only)
//   --print    print the body and send nothing
import './load-env.ts';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { DEV_USER } from '../lib/auth/dev-user.ts';
import { buildSampleEvent, CANCEL_REASONS, EXPIRATION_REASONS, SAMPLE_EVENT_TYPES, type SampleEventType, type SamplePeriod } from '../lib/billing/sample-events.ts';
import { getConfig } from '../lib/config.ts';
import { formatUtc } from '../lib/words.ts';
import { commandArgs, commandFailed, usageError } from './command-args.ts';
import { defaultBaseUrl, unreachableMessage } from './operator.ts';

const HELP = {
  about: "Post a fresh RevenueCat-shaped event, dated now, to the running service's billing webhook, for the dev user unless --user names another (samples follow each other: a RENEWAL continues what an INITIAL_PURCHASE began).",
  usage: `Usage: npm run sample-event -- --type <${SAMPLE_EVENT_TYPES.join('|')}> [--user <id>] [--reason <REASON>] [--to <id>] [--production] [--base-url <url>] [--print]`,
  docs: 'docs/development.md',
};

/** The secret the service takes and where the state file lives, from the configuration the service reads too. */
function settings(): { secret: string | undefined; stateFile: string } {
  try {
    const config = getConfig();
    return { secret: config.webhookSecrets.subscription[0], stateFile: path.join(path.dirname(config.embeddedDbDir), 'sample-events.json') };
  } catch {
    // A configuration the service would refuse: the secret may still be set.
    return { secret: process.env.SUBSCRIPTION_WEBHOOK_SECRET?.trim() || undefined, stateFile: path.resolve('.data', 'sample-events.json') };
  }
}

function readState(file: string): Record<string, SamplePeriod> {
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as Record<string, SamplePeriod>;
  } catch {
    return {};
  }
}

async function main() {
  const values = commandArgs(HELP, {
    type: { type: 'string' }, user: { type: 'string' }, reason: { type: 'string' }, to: { type: 'string' },
    production: { type: 'boolean', default: false }, print: { type: 'boolean', default: false },
    'base-url': { type: 'string', default: defaultBaseUrl() },
  });
  const type = values.type?.toUpperCase() || usageError(HELP, 'Missing --type.');
  if (!(SAMPLE_EVENT_TYPES as readonly string[]).includes(type)) usageError(HELP, `Unknown event type ${values.type}: the known ones are ${SAMPLE_EVENT_TYPES.join(', ')}.`);
  const reason = values.reason?.toUpperCase();
  const reasons: readonly string[] = type === 'CANCELLATION' ? CANCEL_REASONS : type === 'EXPIRATION' ? EXPIRATION_REASONS : [];
  if (reason && !reasons.includes(reason)) usageError(HELP, reasons.length ? `--reason for ${type} is one of ${reasons.join(', ')}.` : `${type} takes no --reason.`);
  const user = values.user ?? DEV_USER.id;
  const baseUrl = values['base-url']!.replace(/\/+$/, '');

  const { secret, stateFile } = settings();
  const state = readState(stateFile);
  const key = `${baseUrl} ${user}`;
  const { body, period } = buildSampleEvent({
    type: type as SampleEventType, user, now: new Date(), reason, to: values.to,
    environment: values.production ? 'PRODUCTION' : 'SANDBOX', period: state[key] ?? null,
  });
  if (values.print) {
    console.log(JSON.stringify(body, null, 2));
    return;
  }
  if (!secret) commandFailed('No billing webhook secret: outside local mode, set SUBSCRIPTION_WEBHOOK_SECRET (in .env.local) to the one the service has.');

  let response: Response;
  try {
    response = await fetch(`${baseUrl}/api/webhooks/subscription-billing`, {
      method: 'POST',
      headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  } catch {
    commandFailed(unreachableMessage(baseUrl));
  }
  const answer = (await response.text()).trim();
  const event = body.event as Record<string, unknown>;
  const about = type === 'TRANSFER'
    ? `from ${user} to ${(event.transferred_to as string[])[0]}`
    : `for ${user}: ${event.product_id}${event.expiration_at_ms === null ? ', lifetime' : ` until ${formatUtc(new Date(event.expiration_at_ms as number))}`}`;
  console.log(`${type}${reason ? ` ${reason}` : ''} ${body.event.id} ${about} -> ${response.status} ${answer}`);
  if (response.status !== 200) process.exit(1);
  if (type !== 'TRANSFER' && period) {
    mkdirSync(path.dirname(stateFile), { recursive: true });
    // Read again and written whole, then renamed over the old file: a run for another user that
    // ended while this one waited for its answer keeps its entry, and a run at the same moment reads
    // one file or the other.
    const written = `${stateFile}.${process.pid}.tmp`;
    writeFileSync(written, `${JSON.stringify({ ...readState(stateFile), [key]: period }, null, 2)}\n`);
    renameSync(written, stateFile);
  }
}

await main();
