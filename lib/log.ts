import { createRequire } from 'node:module';
import { types } from 'node:util';
import pino from 'pino';

/**
 * Logs, one line per event. Deployed and under `next start`: JSON objects with the level's name
 * (`"level":"info"`, what Vercel's log view and drains read), an ISO 8601 `time`, and on request
 * lines the request id and Vercel's `x-vercel-id`. Under `npm run dev`: readable lines (pino-pretty),
 * unless LOG_FORMAT=json. Callers log ids, codes and counts, never header values, tokens or
 * secrets; the redact list is a second line of defence for the obvious field names.
 */
// An invalid LOG_LEVEL must not crash the process before the configuration can say what is
// wrong (lib/config.ts validates it and answers 503 service_misconfigured naming it).
const requestedLevel = process.env.LOG_LEVEL?.trim();
const level = requestedLevel && (Object.hasOwn(pino.levels.values, requestedLevel) || requestedLevel === 'silent') ? requestedLevel : 'info';

const options: pino.LoggerOptions = {
  level,
  base: { service: 'account-link-service' },
  timestamp: pino.stdTimeFunctions.isoTime,
  formatters: { level: (label) => ({ level: label }) },
  // The `{ message }` callers log where only the message is theirs to say (a configuration refused,
  // a failure already explained) stays as it is, not `"type":"Object"` with an empty stack; anything
  // else (an Error, of any realm, or an object with a cause) gets pino's error serializer.
  serializers: { err: (value: unknown) => (isMessageOnly(value) ? value : pino.stdSerializers.err(value as Error)) },
  redact: {
    paths: ['authorization', 'token', 'secret', '*.authorization', '*.token', '*.secret', 'headers', '*.headers'],
    censor: '[redacted]',
  },
};

function isMessageOnly(value: unknown): boolean {
  return typeof value === 'object' && value !== null && !types.isNativeError(value) && Object.getPrototypeOf(value) === Object.prototype
    && !('cause' in value) && !('errors' in value) && !('stack' in value);
}

/** Readable lines for a developer's terminal: `next dev` sets NODE_ENV=development. */
export function wantsReadableLogs(env: Record<string, string | undefined> = process.env): boolean {
  const format = env.LOG_FORMAT?.trim().toLowerCase();
  return format === 'pretty' || (format !== 'json' && env.NODE_ENV === 'development');
}

function readableStream(): pino.DestinationStream {
  // Loaded only here, so a production bundle never needs it.
  const pretty = createRequire(import.meta.url)('pino-pretty') as (options: object) => pino.DestinationStream;
  return pretty({ colorize: process.stdout.isTTY, sync: true, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname,service' });
}

/**
 * JSON lines to stdout. Off Vercel (`next start`, scripts) a request does not wait for its line: the
 * writes are asynchronous (pino's destination with `sync: false`: lines written while one write is
 * under way go out together in the next), and the buffer is written out synchronously when the
 * process exits, whatever the way (the end of its work, `process.exit`, and `next start`'s SIGTERM
 * and SIGINT, which end in `process.exit`), so a clean exit loses no line. On Vercel the writes stay
 * synchronous: a function instance may be frozen as soon as its response is sent, with a write
 * still pending (pino's advice for Lambda-like runtimes).
 */
export function jsonDestination(env: Record<string, string | undefined> = process.env): pino.DestinationStream {
  return pino.destination({ dest: 1, sync: Boolean(env.VERCEL) });
}

export const log = wantsReadableLogs() ? pino(options, readableStream()) : pino(options, jsonDestination());

export type Logger = pino.Logger;
