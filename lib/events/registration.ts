import type { Config } from '../config.ts';
import type { DatabaseAdapter } from '../db/adapter.ts';
import { log } from '../log.ts';
import { getEventEndpoints, type EventEndpoint } from './endpoints.ts';
import { setEndpoints } from './outbox.ts';

/**
 * Registering the endpoints the settings name (public.outbound_set_endpoints; the others are
 * retired). An event gets a delivery for each endpoint registered when it is written, so the
 * service's server registers them as it opens the database, before the first change it makes (a
 * fresh deployment's first event would otherwise reach no receiver), and each outbox run again
 * whenever its settings differ from what this process registered last.
 */

// What this process registered last (the endpoints' ids and filters).
let registered: string | undefined;

/** `db`: through this adapter rather than the port (setEndpoints). */
export async function registerEndpoints(endpoints: readonly EventEndpoint[], db?: DatabaseAdapter): Promise<void> {
  const rows = endpoints.map((endpoint) => ({ id: endpoint.id, types: endpoint.types }));
  const key = JSON.stringify(rows);
  if (key === registered) return;
  await setEndpoints(rows, db);
  registered = key;
}

/**
 * As the server's database opens (lib/db/index.ts), through the adapter itself. No endpoint
 * configured, or settings startup refuses: nothing (a run retires what the settings dropped). A
 * failure does not fail the open: it is logged, and the first outbox run registers them.
 */
export async function registerEndpointsAsDatabaseOpens(db: DatabaseAdapter, config: Config): Promise<void> {
  let endpoints: EventEndpoint[];
  try {
    endpoints = getEventEndpoints(config);
  } catch {
    return; // lib/startup.ts says why the settings are refused; nothing is sent meanwhile
  }
  if (endpoints.length === 0) return;
  try {
    await registerEndpoints(endpoints, db);
  } catch (error) {
    log.warn({ err: { message: (error as Error).message } }, 'registering the event endpoints as the database opened failed; the first outbox run registers them');
  }
}

/** Forget what this process registered (tests that change the settings between runs). */
export function forgetRegisteredEndpoints(): void {
  registered = undefined;
}
