import { describe, expect, it } from 'vitest';
import { ConfigError, DEV_WEBHOOK_SECRETS, describeConfig, loadConfig } from '../../lib/config.ts';

describe('configuration', () => {
  const modes: { name: string; env: Record<string, string>; database: string; auth: string }[] = [
    { name: 'nothing set', env: {}, database: 'embedded', auth: 'dev-key' },
    { name: 'empty strings count as unset', env: { DATABASE_URL: '', SUPABASE_URL: '  ', SUPABASE_SECRET_KEY: '' }, database: 'embedded', auth: 'dev-key' },
    { name: 'DATABASE_URL', env: { DATABASE_URL: 'postgres://u:p@db:5432/app' }, database: 'postgres', auth: 'dev-key' },
    { name: 'Supabase URL + secret key', env: { SUPABASE_URL: 'https://abc.supabase.co', SUPABASE_SECRET_KEY: 'sb_secret_x' }, database: 'supabase', auth: 'supabase-jwks' },
    { name: 'legacy service_role key name', env: { SUPABASE_URL: 'https://abc.supabase.co', SUPABASE_SERVICE_ROLE_KEY: 'eyJ...' }, database: 'supabase', auth: 'supabase-jwks' },
    { name: 'DATABASE_URL wins over the Data API (pooler + Supabase Auth)', env: { DATABASE_URL: 'postgresql://u:p@pooler:6543/postgres', SUPABASE_URL: 'https://abc.supabase.co', SUPABASE_SECRET_KEY: 'sb_secret_x' }, database: 'postgres', auth: 'supabase-jwks' },
    { name: 'HS256 secret alone', env: { SUPABASE_JWT_SECRET: 'x'.repeat(40) }, database: 'embedded', auth: 'hs256' },
  ];

  it.each(modes)('$name -> $database database, $auth auth', ({ env, database, auth }) => {
    const config = loadConfig({ ...env, AUTH_VERIFY_SESSION: 'false' });
    expect(config.databaseMode).toBe(database);
    expect(config.auth.mode).toBe(auth);
  });

  it('turns the liveness check on by default only where there is an Auth server', () => {
    expect(loadConfig({ SUPABASE_URL: 'https://abc.supabase.co', SUPABASE_SECRET_KEY: 'k' }).auth.verifySession).toBe(true);
    expect(loadConfig({}).auth.verifySession).toBe(false);
    expect(() => loadConfig({ AUTH_VERIFY_SESSION: 'true' })).toThrow(ConfigError);
  });

  it('uses the documented dev webhook secrets in embedded mode only', () => {
    expect(loadConfig({}).webhookSecrets).toEqual({ subscription: [DEV_WEBHOOK_SECRETS.subscription], leagues: [DEV_WEBHOOK_SECRETS.leagues] });
    expect(loadConfig({ DATABASE_URL: 'postgres://db/app' }).webhookSecrets).toEqual({ subscription: [], leagues: [] });
  });

  it('accepts the current and the previous secret during a rotation', () => {
    const config = loadConfig({ SUBSCRIPTION_WEBHOOK_SECRET: 'new', SUBSCRIPTION_WEBHOOK_SECRET_PREVIOUS: 'old', LEAGUES_WEBHOOK_SECRET: 'l' });
    expect(config.webhookSecrets).toEqual({ subscription: ['new', 'old'], leagues: ['l'] });
  });

  const deployedCases: { name: string; env: Record<string, string>; mentions: string[] }[] = [
    { name: 'nothing configured', env: {}, mentions: ['DATABASE_URL', 'SUPABASE_URL', 'SUBSCRIPTION_WEBHOOK_SECRET', 'LEAGUES_WEBHOOK_SECRET'] },
    { name: 'database but no webhook secrets', env: { SUPABASE_URL: 'https://abc.supabase.co', SUPABASE_SECRET_KEY: 'k' }, mentions: ['SUBSCRIPTION_WEBHOOK_SECRET', 'LEAGUES_WEBHOOK_SECRET'] },
    { name: 'Postgres but no token verification', env: { DATABASE_URL: 'postgres://db/app', SUBSCRIPTION_WEBHOOK_SECRET: 's', LEAGUES_WEBHOOK_SECRET: 'l' }, mentions: ['SUPABASE_URL or SUPABASE_JWT_SECRET'] },
  ];
  it.each(deployedCases)('refuses to run deployed (VERCEL=1) with $name, saying what to set', ({ env, mentions }) => {
    let message = '';
    try {
      loadConfig({ ...env, VERCEL: '1' });
    } catch (error) {
      expect(error).toBeInstanceOf(ConfigError);
      message = (error as Error).message;
    }
    for (const name of mentions) expect(message).toContain(name);
  });

  it('runs deployed with a complete configuration', () => {
    const config = loadConfig({ VERCEL: '1', SUPABASE_URL: 'https://abc.supabase.co', SUPABASE_SECRET_KEY: 'k', SUBSCRIPTION_WEBHOOK_SECRET: 's', LEAGUES_WEBHOOK_SECRET: 'l' });
    expect(config.deployed).toBe(true);
  });

  it('reports invalid values by name', () => {
    expect(() => loadConfig({ DATABASE_URL: 'mysql://db' })).toThrow(/DATABASE_URL/);
    expect(() => loadConfig({ LOG_LEVEL: 'verbose' })).toThrow(/LOG_LEVEL/);
    expect(() => loadConfig({ WALLET_EVM_CHAIN_IDS: '1,abc' })).toThrow(/WALLET_EVM_CHAIN_IDS/);
  });

  it('describes itself for the startup log without any secret', () => {
    const secrets = ['db-password-123', 'query-password-999', 'sb_secret_456', 'webhook-789', 'webhook-old-000', 'leagues-abc'];
    const config = loadConfig({
      DATABASE_URL: `postgres://user:${secrets[0]}@db:5432/app?password=${secrets[1]}&sslmode=require`,
      SUPABASE_URL: 'https://abc.supabase.co',
      SUPABASE_SECRET_KEY: secrets[2],
      SUBSCRIPTION_WEBHOOK_SECRET: secrets[3],
      SUBSCRIPTION_WEBHOOK_SECRET_PREVIOUS: secrets[4],
      LEAGUES_WEBHOOK_SECRET: secrets[5],
    });
    const line = JSON.stringify(describeConfig(config));
    for (const secret of secrets) expect(line).not.toContain(secret);
    expect(line).toContain('postgres');
    expect(line).toContain('sslmode=require');
    expect(line).toContain('supabase-jwks');
  });
});
