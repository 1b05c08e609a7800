import type { Config } from '../config.ts';
import type { DatabaseAdapter } from '../db/adapter.ts';
import { endpointSettings } from './endpoints.ts';
import { addEndpoints, mendQueues } from './outbox.ts';

/**
 * An event gets a delivery for each endpoint registered when it is written. Outbox runs register
 * the endpoints of their settings (and retire the others), but a run comes after a change: so the
 * service's server also adds its settings' endpoints as it opens the database (lib/db/index.ts),
 * before the first change it makes, or a fresh deployment's first event would reach no receiver.
 * It retires nothing there: that stays with the runs, which the operator steers. And it puts back
 * any queue's row found missing (outbound_mend_queues), so that no delivery waits for the maintenance.
 *
 * No endpoint configured, or settings startup refuses: nothing.
 */
export async function registerEndpointsAsDatabaseOpens(db: DatabaseAdapter, config: Config): Promise<void> {
  const endpoints = endpointSettings(config);
  // Refused: lib/startup.ts says why, and the status shows it; nothing is sent meanwhile.
  if ('refused' in endpoints || endpoints.length === 0) return;
  await addEndpoints(endpoints.map((endpoint) => ({ id: endpoint.id, types: endpoint.types })), db);
  await mendQueues(db);
}
