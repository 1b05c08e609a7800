import { afterEach, describe, expect, it } from 'vitest';
import { logStartup } from '../../lib/startup.ts';
import { setEnv } from '../support/env.ts';
import { captureLogs, type LogCapture } from '../support/log-capture.ts';

/** The startup log's local-mode line names the defaults that fill in: the database, the webhook secrets, the dev key, each only when in use. */
describe('the startup log in local mode', () => {
  let capture: LogCapture | undefined;
  let restore: (() => void) | undefined;
  afterEach(() => {
    capture?.stop();
    restore?.();
  });

  const localModeLine = () => capture!.lines.map((line) => String(line.msg)).find((msg) => msg.startsWith('local mode'));

  it('on the embedded database: says the embedded database is the default in use', () => {
    restore = setEnv({ LOCAL_DEV: undefined, DATABASE_URL: undefined, SUPABASE_URL: undefined, EVENTS_WEBHOOK_URL: undefined, EVENTS_WEBHOOK_ENDPOINTS: undefined });
    capture = captureLogs('info');
    logStartup();
    expect(localModeLine()).toContain('(embedded database, dev webhook secrets');
  });

  it('with LOCAL_DEV=1 on a Postgres of this machine: does not claim the embedded database', () => {
    restore = setEnv({ LOCAL_DEV: '1', DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/app', SUPABASE_URL: undefined, EVENTS_WEBHOOK_URL: undefined, EVENTS_WEBHOOK_ENDPOINTS: undefined });
    capture = captureLogs('info');
    logStartup();
    expect(localModeLine()).toBe('local mode (development only): dev defaults fill what is not set (dev webhook secrets as listed above, `npm run token` and local sign-in with the dev key)');
  });

  it('with every setting of its own in local mode: says nothing is filled in', () => {
    restore = setEnv({
      LOCAL_DEV: '1', DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/app', SUPABASE_URL: undefined, EVENTS_WEBHOOK_URL: undefined, EVENTS_WEBHOOK_ENDPOINTS: undefined,
      SUBSCRIPTION_WEBHOOK_SECRET: 'a-subscription-secret-of-my-own-0123456789', LEAGUES_WEBHOOK_SECRET: 'a-leagues-secret-of-my-own-0123456789',
      SUPABASE_JWT_SECRET: 'a-jwt-secret-of-my-own-that-is-long-enough-0123456789',
    });
    capture = captureLogs('info');
    logStartup();
    expect(localModeLine()).toBe('local mode (development only): dev defaults fill what is not set (nothing: every setting is your own)');
  });
});
