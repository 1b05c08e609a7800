import { afterEach, describe, expect, it } from 'vitest';
import { ApiError } from '../../lib/http/problem.ts';
import { defineRoute, json } from '../../lib/http/route.ts';
import { captureLogs, type LogCapture } from '../support/log-capture.ts';
import { callRoute } from '../support/http.ts';

/**
 * A route a tool polls (`npm run events:listen` asks the event listing twice a second) logs its
 * answers below 400 at debug, so under `npm run dev` they do not drown the requests being watched;
 * a refusal or a failure is logged at info as any route's.
 */
describe('the request log of a polled route', () => {
  let capture: LogCapture | undefined;
  afterEach(() => capture?.stop());

  const route = (polled: boolean) => defineRoute({
    GET: (request) => {
      if (!request.headers.has('authorization')) throw new ApiError('missing_token', { detail: 'Send a token.' });
      return json({ events: [] });
    },
  }, { polled });
  const levels = () => capture!.lines.filter((line) => line.msg === 'request').map((line) => ({ status: line.status, level: line.level }));

  it('logs a polled route\'s answers at debug, its refusals at info; any other route\'s at info', async () => {
    capture = captureLogs('debug');
    expect((await callRoute(route(true), { headers: { authorization: 'Bearer x' } })).status).toBe(200);
    expect((await callRoute(route(true), {})).status).toBe(401);
    expect((await callRoute(route(false), { headers: { authorization: 'Bearer x' } })).status).toBe(200);
    expect(levels()).toEqual([{ status: 200, level: 'debug' }, { status: 401, level: 'info' }, { status: 200, level: 'info' }]);
  });
});
