import { ConfigError, describeConfig, getConfig, usesDevWebhookSecret, type Config } from './config.ts';
import { announceServedPort } from './db/served-port.ts';
import { checkReceiverAddresses, getEventEndpoints, type AddressCheck } from './events/endpoints.ts';
import { log } from './log.ts';

export function logStartup(): void {
  try {
    const config = getConfig();
    log.info(describeConfig(config), `account-link-service: ${config.databaseMode} database, ${config.auth.mode} auth`);
    for (const warning of config.warnings) log.warn(warning);
    if (config.local) {
      log.info(`local mode (development only): dev defaults fill what is not set (${localDefaultsInUse(config).join(', ') || 'nothing: every setting is your own'})`);
    }
    logEventReceivers();
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    // Every request will answer 503 service_misconfigured with this message too.
    log.error({ err: { message: error.message } }, 'account-link-service cannot start with this configuration');
  }
}

/** What local mode filled in for this configuration: each only where the setting was left unset. */
function localDefaultsInUse(config: Config): string[] {
  const devSecrets = usesDevWebhookSecret(config, 'subscription') || usesDevWebhookSecret(config, 'leagues');
  return [
    ...(config.databaseMode === 'embedded' ? ['embedded database'] : []),
    ...(devSecrets ? ['dev webhook secrets as listed above'] : []),
    ...(config.auth.mode === 'dev-key' ? ['`npm run token` and local sign-in with the dev key'] : []),
  ];
}

/** On the embedded database, where this server serves, for the `npm run` commands that ask it (lib/db/served-port.ts). */
export function announceLocalService(): void {
  try {
    const config = getConfig();
    if (config.databaseMode === 'embedded') announceServedPort(config.embeddedDbDir);
  } catch {
    // the configuration's own error, logged by logStartup
  }
}

/**
 * The event receivers (EVENTS_WEBHOOK_*), by host and event types, never a secret or a path; or why
 * they are refused. A refused setting stops events only (the drain answers 503 with the same
 * message), not the rest of the service.
 */
function logEventReceivers(): void {
  try {
    const endpoints = getEventEndpoints();
    if (endpoints.length > 0) {
      log.info({ eventReceivers: endpoints.map((endpoint) => ({ id: endpoint.id, host: endpoint.url.host, types: endpoint.types ?? 'all', secrets: endpoint.secrets.length })) }, `outbound events go to ${endpoints.length} receiver${endpoints.length === 1 ? '' : 's'}`);
    }
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    log.error({ err: { message: error.message } }, 'outbound events cannot be sent with this configuration');
  }
}

/**
 * Outside local mode, whether every receiver's host resolves to public addresses only (DNS, so
 * async: instrumentation.ts starts it without holding up the server). One that resolves to a
 * non-public address refuses the settings, as a literal one does (lib/events/endpoints.ts), until the
 * runs find it public; one that does not resolve is a warning. Never throws.
 */
export async function checkEventReceiverAddresses(): Promise<void> {
  let found: AddressCheck;
  try {
    found = await checkReceiverAddresses(getConfig());
  } catch {
    return; // the configuration's own error, logged by logStartup
  }
  if (found.refused) {
    log.error({ err: { message: found.refused } }, 'outbound events cannot be sent with this configuration: nothing is sent until the setting or its DNS record is fixed (looked up again by every run: each minute on a long-running server, and each call of /api/cron/events)');
  }
  if (found.unresolved) {
    log.warn({ err: { message: found.unresolved } }, 'outbound events: a receiver does not resolve; its attempts fail, and are retried, until it does');
  }
}
