import { ConfigError, describeConfig, getConfig } from './config.ts';
import { log } from './log.ts';

export function logStartup(): void {
  try {
    const config = getConfig();
    log.info(describeConfig(config), `account-link-service: ${config.databaseMode} database, ${config.auth.mode} auth`);
    for (const warning of config.warnings) log.warn(warning);
    if (config.local) {
      log.info('local mode (development only): dev defaults fill what is not set (embedded database, dev webhook secrets as listed above, `npm run token` and local sign-in with the dev key)');
    }
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    // Every request will answer 503 service_misconfigured with this message too.
    log.error({ err: { message: error.message } }, 'account-link-service cannot start with this configuration');
  }
}
