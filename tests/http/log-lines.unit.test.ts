import { runInNewContext } from 'node:vm';
import { afterEach, describe, expect, it } from 'vitest';
import { log } from '../../lib/log.ts';
import { captureLogs, type LogCapture } from '../support/log-capture.ts';

/** What the service's log lines carry under `err`, as a deployment's log shows them. */
describe('the log line of an error', () => {
  let capture: LogCapture | undefined;
  afterEach(() => capture?.stop());

  it('an Error: its type, message and stack', () => {
    capture = captureLogs('error');
    log.error({ err: new TypeError('bad thing') }, 'failed');
    expect(capture.lines[0]!.err).toMatchObject({ type: 'TypeError', message: 'bad thing', stack: expect.stringContaining('TypeError: bad thing') });
  });

  it('an Error made in another realm, and an object with a cause: serialized as errors, nothing dropped', () => {
    capture = captureLogs('error');
    log.error({ err: runInNewContext('new RangeError("elsewhere")') }, 'failed');
    log.error({ err: { message: 'outer', cause: new Error('inner') } }, 'failed');
    expect(capture.lines[0]!.err).toMatchObject({ type: 'RangeError', message: 'elsewhere', stack: expect.stringContaining('elsewhere') });
    expect(JSON.stringify(capture.lines[1]!.err)).toContain('inner');
  });

  it('only a message (a refused setting, a failure already explained): the message alone, no "Object" type or empty stack', () => {
    capture = captureLogs('error');
    log.error({ err: { message: 'EVENTS_WEBHOOK_SECRET: secret 1 is not whsec_' } }, 'outbound events cannot be sent with this configuration');
    expect(capture.lines[0]!.err).toEqual({ message: 'EVENTS_WEBHOOK_SECRET: secret 1 is not whsec_' });
  });
});
