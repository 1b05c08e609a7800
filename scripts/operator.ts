// What the operator commands share (status, billing:explain, billing:sync, billing:rebuild,
// db:maintain), and the scripts that talk to the running service (link-wallet, sample-event):
// - the operator's configuration: only the database settings, chosen as `npm run migrate` chooses
//   them (configureForOperator, lib/config.ts);
// - in local mode on the embedded database, while the running service holds the folder (PGlite
//   has one process per folder), the same answer asked of that service over HTTP, through its
//   operator routes, with the admin secret (ADMIN_API_SECRET, or local mode's dev one);
// - where the service is, by default (BASE_URL, else http://localhost:3000).
import { DEV_ADMIN_SECRET, LOCAL_APP_ORIGIN, configureForOperator, embeddedDbDirOf, type Config } from '../lib/config.ts';
import { embeddedFolderHolder } from '../lib/db/pglite.ts';
import { announcedServer } from '../lib/db/served-port.ts';
import { DomainError, type DomainErrorCode } from '../lib/errors.ts';

/**
 * Where the scripts look for the running service unless --base-url says otherwise: BASE_URL; else
 * the local service on the embedded database, on the port it announced as it started
 * (`next dev` takes the next free one when 3000 is busy: lib/db/served-port.ts); else
 * http://localhost:3000.
 */
export function defaultBaseUrl(env: Record<string, string | undefined> = process.env): string {
  const running = announcedServer(embeddedDbDirOf(env));
  return env.BASE_URL?.trim() || (running?.origin ?? LOCAL_APP_ORIGIN);
}

/** fetch reports a server it could not reach as a TypeError "fetch failed" (the socket error is its cause). */
export function isUnreachable(error: unknown): boolean {
  return error instanceof TypeError && error.message === 'fetch failed';
}

/** What to say when nothing answered at the service's URL. */
export function unreachableMessage(baseUrl: string): string {
  return `Could not reach the service at ${baseUrl}: is it running? Start it with \`npm run dev\`, or pass --base-url.`;
}

export interface OperatorRoute {
  method: 'GET' | 'POST';
  /** The operator route that answers the same (under /api/admin). */
  path: string;
  body?: unknown;
}

/**
 * Run an operator command on the operator's configuration: directly on the database, or through
 * `route` of a running service, whose JSON answer is the same value the direct path returns (every
 * time in it is an ISO string, as in the route's answer): the service at `baseUrl` when the command
 * line names one (--base-url: the operator asked for that service, on whatever database it runs),
 * else the local service when the embedded folder is held by a running process (found as
 * defaultBaseUrl says). Refusals of the route come back as the DomainError the direct path would
 * throw (`subscriber_unknown: ...`).
 */
export async function databaseOrService<T>(options: { baseUrl: string | undefined; direct: (config: Config) => Promise<T>; route: OperatorRoute }): Promise<T> {
  // A service named on the command line needs none of this shell's database settings (its own
  // folder held by it aside, below).
  if (options.baseUrl !== undefined && embeddedFolderHolder(embeddedDbDirOf({ EMBEDDED_DB_DIR: process.env.EMBEDDED_DB_DIR })) === null) {
    console.error(`Asking the service at ${options.baseUrl} (--base-url).`);
    return askDeployment<T>(options.baseUrl, options.route, process.env, '--base-url');
  }
  const config = configureForOperator();
  const holder = config.databaseMode === 'embedded' ? embeddedFolderHolder(config.embeddedDbDir) : null;
  if (holder === null) return options.direct(config);
  const baseUrl = options.baseUrl ?? defaultBaseUrl();
  console.error(`The embedded database folder ${config.embeddedDbDir} is in use by process ${holder} (the running service?): asking the service at ${baseUrl}.`);
  return askService<T>(config, baseUrl, options.route, holder);
}

async function askService<T>(config: Config, baseUrl: string, route: OperatorRoute, holder: number): Promise<T> {
  try {
    return await callOperatorRoute<T>(baseUrl, route, config.adminSecret ?? '');
  } catch (error) {
    if (!isUnreachable(error)) throw error;
    throw new Error(`The embedded database folder ${config.embeddedDbDir} is in use by process ${holder}, and no service answered at ${baseUrl}. `
      + 'If that process is the service, pass its URL with --base-url (or BASE_URL); otherwise stop it, or set EMBEDDED_DB_DIR to another folder.');
  }
}

/**
 * Ask a running deployment (`--url`, or `--base-url` for a command that reads the database
 * otherwise): its operator route, with this shell's ADMIN_API_SECRET (on a loopback URL without
 * one, local mode's dev secret, which only a local server accepts). Needs no database settings:
 * the deployment answers with its own view, the parts it has on included.
 */
export async function askDeployment<T>(url: string, route: OperatorRoute, env: Record<string, string | undefined> = process.env, option = '--url'): Promise<T> {
  let base: URL;
  try {
    base = new URL(url);
  } catch {
    throw new Error(`${option} ${url} is not a URL: give the service's, such as https://<your-app>.vercel.app or http://localhost:3000.`);
  }
  // (`localhost:3000` parses, as a URL of the scheme `localhost:`.)
  if (base.protocol !== 'https:' && base.protocol !== 'http:') {
    throw new Error(`${option} ${url} does not start with https:// or http://: give the service's URL, such as https://<your-app>.vercel.app or http://localhost:3000.`);
  }
  const secret = env.ADMIN_API_SECRET?.trim() || (isLoopback(base) ? DEV_ADMIN_SECRET : undefined);
  if (!secret) {
    throw new Error(`Set ADMIN_API_SECRET in this shell to the deployment's value (ADMIN_API_SECRET=… npm run …; not in .env.local, where it ends local mode): ${route.method} ${route.path} answers only with it.`);
  }
  try {
    return await callOperatorRoute<T>(base.origin, route, secret);
  } catch (error) {
    if (!isUnreachable(error)) throw error;
    throw new Error(`Could not reach the deployment at ${base.origin}: ${describeUnreachable(error)}. Check the URL.`);
  }
}

function isLoopback(url: URL): boolean {
  return ['localhost', '127.0.0.1', '[::1]'].includes(url.hostname);
}

function describeUnreachable(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? 'no answer';
}

/** One call of an operator route; its refusals come back as the DomainError the direct path would throw. */
async function callOperatorRoute<T>(baseUrl: string, route: OperatorRoute, secret: string): Promise<T> {
  const response = await fetch(new URL(route.path, baseUrl), {
    method: route.method,
    headers: { authorization: `Bearer ${secret}`, ...(route.body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: route.body === undefined ? undefined : JSON.stringify(route.body),
    signal: AbortSignal.timeout(120_000),
  });
  const text = await response.text();
  let answer: unknown;
  try {
    answer = JSON.parse(text);
  } catch {
    throw new Error(`The service at ${baseUrl} answered ${route.method} ${route.path} with ${response.status} and no JSON: is it this service?`);
  }
  if (response.ok) return answer as T;
  const problem = answer as { code?: string; detail?: string; title?: string };
  if (!problem.code) throw new Error(`The service at ${baseUrl} answered ${route.method} ${route.path} with ${response.status}: ${text.slice(0, 300)}`);
  const hints: Partial<Record<string, string>> = {
    invalid_admin_secret: ' (this shell and the service must have the same ADMIN_API_SECRET, or both none in local mode)',
    admin_not_configured: ' (the service has no ADMIN_API_SECRET: set one there, and the same in this shell)',
  };
  const hint = hints[problem.code] ?? '';
  throw new DomainError(problem.code as DomainErrorCode, `${problem.detail ?? problem.title ?? ''}${hint}`);
}
