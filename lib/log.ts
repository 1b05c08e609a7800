import pino from 'pino';

/**
 * JSON logs, one object per line. Callers log ids, codes and counts, never header values, tokens or
 * secrets; the redact list is a second line of defence for the obvious field names.
 */
export const log = pino({
  level: process.env.LOG_LEVEL || 'info',
  base: { service: 'account-link-service' },
  redact: {
    paths: ['authorization', 'token', 'secret', '*.authorization', '*.token', '*.secret', 'headers', '*.headers'],
    censor: '[redacted]',
  },
});

export type Logger = pino.Logger;
