import { withRequestStart } from './request-clock.ts';
import { ConfigError, getConfig } from '../config.ts';
import { countDbCalls, DbError, pendingMigrationsIn, schemaBehindMessage, type DbRequestStats } from '../db/index.ts';
import { DomainError } from '../errors.ts';
import { log, type Logger } from '../log.ts';
import { corsPreflightHeaders, corsResponseHeaders } from './cors.ts';
import { acceptRequestId, vercelRequestId } from './request-id.ts';
import { ApiError, isProblemCode, PROBLEM_CATALOG, problemFromDomainError, problemResponse, RETRY_AFTER_SECONDS, type ProblemCode } from './problem.ts';

export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
const ALL_METHODS: readonly HttpMethod[] = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'];

/** The order `Allow` lists a path's methods in: its own, HEAD where there is GET, and OPTIONS. */
export const ALLOW_ORDER = [...ALL_METHODS, 'HEAD', 'OPTIONS'] as const;

/** The `Allow` of a path with these methods (any case): HEAD comes with GET, OPTIONS with every path. */
export function allowHeaderFor(methods: readonly string[]): string {
  const upper = methods.map((method) => method.toUpperCase());
  return ALLOW_ORDER.filter((method) => upper.includes(method) || (method === 'HEAD' && upper.includes('GET')) || method === 'OPTIONS').join(', ');
}

export interface RequestContext {
  requestId: string;
  params: Record<string, string>;
  log: Logger;
  /**
   * Add fields (an event id, counts) to every later log line of this request, including the one
   * request line written at the end: one line per request, with what it was about.
   */
  annotate(fields: Record<string, unknown>): void;
}

export type RouteHandler = (request: Request, context: RequestContext) => Promise<Response> | Response;

type NextRouteContext = { params?: Promise<Record<string, string | string[]>> };
type NextHandler = (request: Request, context: NextRouteContext) => Promise<Response>;


/**
 * Wrap a route's handlers: request id in and out, one log line per request, every error turned into
 * problem+json, and 405 with `Allow` for the methods the route does not have (Next's own 405 has no
 * `Allow`). Use as `export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({ ... })`.
 */
export interface RouteOptions {
  /** A route a tool polls (`npm run events:listen`, twice a second): its answers below 400 are logged at debug, not info. */
  polled?: boolean;
}

export function defineRoute(handlers: Partial<Record<HttpMethod, RouteHandler>>, options: RouteOptions = {}): Record<HttpMethod | 'OPTIONS', NextHandler> {
  const allowed = ALL_METHODS.filter((method) => handlers[method]);
  const readable = [...allowed, ...(allowed.includes('GET') ? ['HEAD'] : [])];
  const allow = allowHeaderFor(allowed);

  const methodNotAllowed: RouteHandler = (request) => {
    throw new ApiError('method_not_allowed', {
      detail: `${request.method} is not supported here; use ${allowed.join(' or ')}.`,
      headers: { allow },
    });
  };
  const answerOptions: RouteHandler = (request) => new Response(null, {
    status: 204,
    headers: {
      allow,
      ...corsPreflightHeaders(request.headers.get('origin'), allowedCorsOrigins(), request.headers.get('access-control-request-method'),
        request.headers.get('access-control-request-headers'), readable),
    },
  });

  const wrapped = {} as Record<HttpMethod | 'OPTIONS', NextHandler>;
  for (const method of ALL_METHODS) wrapped[method] = wrap(handlers[method] ?? methodNotAllowed, options);
  wrapped.OPTIONS = wrap(answerOptions, options);
  return wrapped;
}

function wrap(handler: RouteHandler, options: RouteOptions): NextHandler {
  return async (request, nextContext) => {
    const started = performance.now();
    const requestId = acceptRequestId(request.headers.get('x-request-id'));
    const vercelId = vercelRequestId(request.headers.get('x-vercel-id'));
    const path = new URL(request.url).pathname;
    // What the request's lines say besides their own fields. The one request line is written from it
    // at the end; a child logger is made only for a line written before that (a warning), so an
    // ordinary request makes none (pino serializes a child's fields when it is made).
    const fields: Record<string, unknown> = vercelId ? { requestId, vercelId } : { requestId };
    let child: Logger | undefined;
    const requestLog = () => (child ??= log.child(fields));
    const db: DbRequestStats = { calls: 0, ms: 0 };
    let response: Response;
    try {
      const params = Object.fromEntries(
        Object.entries((await nextContext?.params) ?? {}).map(([key, value]) => [key, Array.isArray(value) ? value.join('/') : value]),
      );
      const context: RequestContext = {
        requestId,
        params,
        get log() {
          return requestLog();
        },
        annotate: (more) => {
          Object.assign(fields, more);
          child = undefined;
        },
      };
      response = await withRequestStart(started, () => countDbCalls(db, async () => handler(request, context)));
    } catch (error) {
      response = problemResponse(toApiError(error, requestLog()), requestId);
    }
    const ms = performance.now() - started;
    response = withHeader(response, 'x-request-id', requestId);
    // A preflight's CORS headers are the OPTIONS handler's alone (none when it refused).
    const preflight = request.method === 'OPTIONS' && request.headers.has('access-control-request-method');
    if (!preflight) {
      for (const [name, value] of Object.entries(corsResponseHeaders(request.headers.get('origin'), allowedCorsOrigins()))) {
        response = name === 'vary' ? withVary(response, value) : withHeader(response, name, value);
      }
    }
    // Server-Timing (visible in browser dev tools, and read by the bench): database calls and time.
    response = withHeader(response, 'server-timing', `db;desc="${db.calls} calls";dur=${db.ms.toFixed(1)}, total;dur=${ms.toFixed(1)}`);
    const level = options.polled && response.status < 400 ? 'debug' : 'info';
    log[level]({ ...fields, method: request.method, path, status: response.status, ms: Math.round(ms), dbCalls: db.calls }, 'request');
    return response;
  };
}

/** CORS_ORIGINS; none while the configuration is refused (every answer is a 503 then anyway). */
function allowedCorsOrigins(): readonly string[] {
  try {
    return getConfig().corsOrigins;
  } catch {
    return [];
  }
}

/** All a caller learns of a refused configuration; the server log names what to set. */
export const MISCONFIGURED_DETAIL = 'The service is misconfigured.';

export function toApiError(error: unknown, requestLog: Logger = log): ApiError {
  if (error instanceof ApiError) return error;
  if (error instanceof DomainError) {
    // What the answer does not say (a setting, an upstream's or the database's words) is logged.
    if (error.operatorDetail) requestLog.warn({ code: error.code, operatorDetail: error.operatorDetail }, 'detail for the operator');
    return problemFromDomainError(error);
  }
  if (error instanceof DbError) {
    // A problem code raised by one of our SQL functions, with a detail written for the caller.
    if (isProblemCode(error.reason)) return new ApiError(error.reason, { detail: error.detail, headers: retryAfterFor(error.reason) });
    // Anything else is the database's own words (a constraint, a key, a value): the log has them,
    // the answer says what it means.
    const dbLog = { err: { message: error.message, sqlState: error.sqlState, detail: error.detail } };
    const pending = pendingMigrationsIn(error);
    if (pending) {
      // Not "the database did not answer": it answered, and lacks migrations of this code. The log
      // says what to run; the answer names nothing of the schema (the caller only needs to retry).
      requestLog.error({ pending }, schemaBehindMessage(pending));
      return new ApiError('database_unavailable', {
        detail: 'The service cannot use its database until its operator finishes an upgrade; nothing was changed. Retry later.',
        headers: { 'retry-after': String(RETRY_AFTER_SECONDS) },
      });
    }
    if (error.kind === 'unavailable') {
      requestLog.warn(dbLog, 'database unavailable');
      return new ApiError('database_unavailable', {
        detail: 'The database did not answer; nothing was changed. Retry later.',
        headers: { 'retry-after': String(RETRY_AFTER_SECONDS) },
      });
    }
    if (error.kind === 'conflict') {
      requestLog.warn(dbLog, 'database conflict');
      return new ApiError('conflict', { detail: 'The request conflicts with what is stored; nothing was changed.' });
    }
    if (error.kind === 'not_found') {
      requestLog.warn(dbLog, 'database: not found');
      return new ApiError('not_found', { detail: 'What the request names does not exist.' });
    }
    // A value the database cannot store (SQLSTATE 22xxx/23xxx: out of range, too long) comes from
    // the request, so it is the sender's 400, never a 500 that every retry would repeat. Input is
    // validated before it gets here, so this is also a gap in that validation: logged to be closed.
    requestLog.warn(dbLog, 'database refused data that passed validation');
    return new ApiError('invalid_request', { detail: 'A value in the request cannot be stored; nothing was changed.' });
  }
  if (error instanceof ConfigError) {
    // What to set is for the operator (here, and in the startup log), not for every caller.
    requestLog.error({ err: { message: error.message } }, 'configuration error');
    return new ApiError('service_misconfigured', { detail: MISCONFIGURED_DETAIL, headers: { 'retry-after': '60' } });
  }
  requestLog.error({ err: error }, 'unhandled error');
  return new ApiError('internal_error', { detail: 'Something went wrong on our side.' });
}

function retryAfterFor(code: ProblemCode): Record<string, string> | undefined {
  const status = PROBLEM_CATALOG[code][0];
  return status === 429 || status === 503 ? { 'retry-after': String(RETRY_AFTER_SECONDS) } : undefined;
}

function withHeader(response: Response, name: string, value: string): Response {
  try {
    response.headers.set(name, value);
    return response;
  } catch {
    // Some responses have immutable headers; copy into one we can change.
    const copy = new Response(response.body, response);
    copy.headers.set(name, value);
    return copy;
  }
}

/** Add names to the response's Vary, keeping those a handler put there. */
function withVary(response: Response, names: string): Response {
  const present = response.headers.get('vary');
  if (!present) return withHeader(response, 'vary', names);
  const have = new Set(present.split(',').map((name) => name.trim().toLowerCase()));
  const more = names.split(',').map((name) => name.trim()).filter((name) => !have.has(name.toLowerCase()));
  return more.length === 0 ? response : withHeader(response, 'vary', [present, ...more].join(', '));
}

/** A JSON response with no caching (every answer here is per-user or per-delivery). */
export function json(body: unknown, init: { status?: number; headers?: Record<string, string> } = {}): Response {
  return jsonText(JSON.stringify(body), init);
}

/** json() for a body that is JSON text already. */
export function jsonText(body: string, init: { status?: number; headers?: Record<string, string> } = {}): Response {
  return new Response(body, {
    status: init.status ?? 200,
    headers: { 'content-type': 'application/json', 'cache-control': 'no-store', ...init.headers },
  });
}
