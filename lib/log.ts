import pino from 'pino';

/**
 * JSON logs, one object per line. Callers log ids, codes and counts, never header values, tokens or
 * secrets; the redact list is a second line of defence for the obvious field names.
 */
// An invalid LOG_LEVEL must not crash the process before the configuration can say what is
// wrong (lib/config.ts validates it and answers 503 service_misconfigured naming it).
const requestedLevel = process.env.LOG_LEVEL?.trim();
const level = requestedLevel && (Object.hasOwn(pino.levels.values, requestedLevel) || requestedLevel === 'silent') ? requestedLevel : 'info';

export const log = pino({
  level,
  base: { service: 'account-link-service' },
  redact: {
    paths: ['authorization', 'token', 'secret', '*.authorization', '*.token', '*.secret', 'headers', '*.headers'],
    censor: '[redacted]',
  },
});

export type Logger = pino.Logger;
