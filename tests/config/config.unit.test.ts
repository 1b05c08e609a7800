import { describe, expect, it } from 'vitest';
import { ConfigError, configureForOperator, DEV_WEBHOOK_SECRETS, describeConfig, getConfig, loadConfig, MIN_SECRET_LENGTH } from '../../lib/config.ts';
import { sessionCookieOptions } from '../../lib/web/session-cookie.ts';
import { setEnv } from '../support/env.ts';

/** Everything a deployment needs, on Supabase. */
const COMPLETE: Record<string, string> = {
  SUPABASE_URL: 'https://abc.supabase.co',
  SUPABASE_SECRET_KEY: 'sb_secret_x',
  SUPABASE_PUBLISHABLE_KEY: 'sb_publishable_x',
  SUBSCRIPTION_WEBHOOK_SECRET: 's'.repeat(32),
  LEAGUES_WEBHOOK_SECRET: 'l'.repeat(32),
  APP_ORIGIN: 'https://app.example.com',
};

/** A database and a Supabase stack on this machine: what LOCAL_DEV=1 may run beside (tests, benches). */
const LOCAL_DB = 'postgres://u:p@127.0.0.1:5432/app';
const LOCAL_SUPABASE = 'http://127.0.0.1:54321';

/** The same settings with their database and Supabase project on this machine. */
function onThisMachine(env: Record<string, string>): Record<string, string> {
  const moved = { ...env };
  for (const name of ['SUPABASE_URL', 'NEXT_PUBLIC_SUPABASE_URL']) if (moved[name]) moved[name] = LOCAL_SUPABASE;
  if (moved.DATABASE_URL) moved.DATABASE_URL = LOCAL_DB;
  return moved;
}

describe('configuration', () => {
  // Which database and which auth follow from the settings alone; LOCAL_DEV=1 lets the incomplete
  // ones load (outside local mode they are refused, see below).
  const modes: { name: string; env: Record<string, string>; database: string; auth: string }[] = [
    { name: 'nothing set', env: {}, database: 'embedded', auth: 'dev-key' },
    { name: 'empty strings count as unset', env: { DATABASE_URL: '', SUPABASE_URL: '  ', SUPABASE_SECRET_KEY: '' }, database: 'embedded', auth: 'dev-key' },
    { name: 'DATABASE_URL', env: { DATABASE_URL: LOCAL_DB, LOCAL_DEV: '1' }, database: 'postgres', auth: 'dev-key' },
    { name: 'Supabase URL + secret key', env: { SUPABASE_URL: LOCAL_SUPABASE, SUPABASE_SECRET_KEY: 'sb_secret_x', LOCAL_DEV: '1' }, database: 'supabase', auth: 'supabase-jwks' },
    { name: 'legacy service_role key name', env: { SUPABASE_URL: LOCAL_SUPABASE, SUPABASE_SERVICE_ROLE_KEY: 'eyJ...', LOCAL_DEV: '1' }, database: 'supabase', auth: 'supabase-jwks' },
    { name: 'DATABASE_URL wins over the Data API (pooler + Supabase Auth)', env: { DATABASE_URL: 'postgresql://u:p@localhost:6543/postgres', SUPABASE_URL: LOCAL_SUPABASE, SUPABASE_SECRET_KEY: 'sb_secret_x', LOCAL_DEV: '1' }, database: 'postgres', auth: 'supabase-jwks' },
    { name: 'HS256 secret alone', env: { SUPABASE_JWT_SECRET: 'x'.repeat(40), LOCAL_DEV: '1' }, database: 'embedded', auth: 'hs256' },
  ];

  it.each(modes)('$name -> $database database, $auth auth', ({ env, database, auth }) => {
    const config = loadConfig({ ...env, AUTH_VERIFY_SESSION: 'false' });
    expect(config.databaseMode).toBe(database);
    expect(config.auth.mode).toBe(auth);
  });

  it('turns the liveness check on by default only where there is an Auth server', () => {
    expect(loadConfig({ SUPABASE_URL: LOCAL_SUPABASE, SUPABASE_SECRET_KEY: 'k', LOCAL_DEV: '1' }).auth.verifySession).toBe(true);
    expect(loadConfig({}).auth.verifySession).toBe(false);
    expect(() => loadConfig({ AUTH_VERIFY_SESSION: 'true' })).toThrow(ConfigError);
  });

  it('uses the documented dev webhook secrets in local mode only', () => {
    const dev = { subscription: [DEV_WEBHOOK_SECRETS.subscription], leagues: [DEV_WEBHOOK_SECRETS.leagues] };
    expect(loadConfig({}).webhookSecrets).toEqual(dev);
    expect(loadConfig({ DATABASE_URL: LOCAL_DB, LOCAL_DEV: '1' }).webhookSecrets).toEqual(dev);
    expect(loadConfig(COMPLETE).webhookSecrets).toEqual({ subscription: ['s'.repeat(32)], leagues: ['l'.repeat(32)] });
  });

  it('accepts the current and the previous secret during a rotation', () => {
    const config = loadConfig({ SUBSCRIPTION_WEBHOOK_SECRET: 'new-secret-0123456789abcdef012345', SUBSCRIPTION_WEBHOOK_SECRET_PREVIOUS: 'old-secret-0123456789abcdef012345', LEAGUES_WEBHOOK_SECRET: 'l'.repeat(32), LOCAL_DEV: '1' });
    expect(config.webhookSecrets).toEqual({ subscription: ['new-secret-0123456789abcdef012345', 'old-secret-0123456789abcdef012345'], leagues: ['l'.repeat(32)] });
  });

  it('is in local mode with nothing production-like set, or with LOCAL_DEV=1, and nowhere else', () => {
    expect(loadConfig({}).local).toBe(true);
    expect(loadConfig({ APP_ORIGIN: 'http://localhost:4000' }).local).toBe(true);
    expect(loadConfig({ APP_ORIGIN: 'https://localhost:3443' }).local).toBe(true);
    // A public https origin is a site served to others: not local, so without a database it is refused.
    expect(() => loadConfig({ APP_ORIGIN: 'https://app.example.com', SUBSCRIPTION_WEBHOOK_SECRET: 's'.repeat(32), LEAGUES_WEBHOOK_SECRET: 'l'.repeat(32) })).toThrow(/DATABASE_URL.*SUPABASE_URL or SUPABASE_JWT_SECRET/);
    expect(loadConfig({ DATABASE_URL: LOCAL_DB, LOCAL_DEV: '1' }).local).toBe(true);
    expect(loadConfig({ ...onThisMachine(COMPLETE), LOCAL_DEV: 'true' }).local).toBe(true);
    expect(loadConfig(COMPLETE).local).toBe(false);
    expect(loadConfig({ ...COMPLETE, VERCEL: '1' }).local).toBe(false);
  });

  // Vercel sets VERCEL=1, but any value says "on Vercel": production-like (no local mode) and
  // deployed (LOCAL_DEV refused, Vercel's pool) must follow the same rule, or VERCEL=true LOCAL_DEV=1
  // would run a deployment in local mode with dev keys and dev secrets.
  it.each(['1', 'true', 'yes', ' 1 '])('counts VERCEL=%j as deployed, for every rule that asks', (vercel) => {
    expect(() => loadConfig({ ...COMPLETE, VERCEL: vercel, LOCAL_DEV: '1' })).toThrow(/LOCAL_DEV=1 is refused on a deployment/);
    expect(() => loadConfig({ VERCEL: vercel, LOCAL_DEV: 'true' })).toThrow(/LOCAL_DEV=1 is refused on a deployment/);
    const config = loadConfig({ ...COMPLETE, VERCEL: vercel });
    expect({ deployed: config.deployed, local: config.local, pool: config.databasePool.max }).toEqual({ deployed: true, local: false, pool: 3 });
    expect(() => loadConfig({ VERCEL: vercel })).toThrow(/^Deployed \(on Vercel\) without the settings a deployment needs/);
  });

  it('counts an empty VERCEL as unset: not deployed', () => {
    for (const vercel of ['', '  ']) {
      const config = loadConfig({ VERCEL: vercel });
      expect({ deployed: config.deployed, local: config.local }).toEqual({ deployed: false, local: true });
    }
  });

  // The gaps an outside review found: a deployment that is not on Vercel, or not completely set up,
  // silently got the dev key, the dev webhook secrets, local sign-in or the embedded database.
  const incomplete: { name: string; env: Record<string, string>; mentions: string[] }[] = [
    { name: 'only DATABASE_URL (self-hosting)', env: { DATABASE_URL: 'postgres://db/app' }, mentions: ['SUPABASE_URL or SUPABASE_JWT_SECRET', 'SUBSCRIPTION_WEBHOOK_SECRET', 'APP_ORIGIN'] },
    { name: 'SUPABASE_URL without a database key or webhook secrets', env: { SUPABASE_URL: 'https://abc.supabase.co', SUPABASE_PUBLISHABLE_KEY: 'sb_publishable_x' }, mentions: ['DATABASE_URL, or SUPABASE_URL + SUPABASE_SECRET_KEY', 'SUBSCRIPTION_WEBHOOK_SECRET'] },
    { name: 'only the browser-side Supabase settings', env: { NEXT_PUBLIC_SUPABASE_URL: 'https://abc.supabase.co' }, mentions: ['DATABASE_URL', 'SUBSCRIPTION_WEBHOOK_SECRET'] },
    { name: 'the HS256 secret alone', env: { SUPABASE_JWT_SECRET: 'x'.repeat(40) }, mentions: ['DATABASE_URL', 'SUBSCRIPTION_WEBHOOK_SECRET'] },
    { name: 'everything but the webhook secrets', env: { ...COMPLETE, SUBSCRIPTION_WEBHOOK_SECRET: '', LEAGUES_WEBHOOK_SECRET: '' }, mentions: ['SUBSCRIPTION_WEBHOOK_SECRET'] },
    { name: 'everything but APP_ORIGIN', env: { ...COMPLETE, APP_ORIGIN: '' }, mentions: ['APP_ORIGIN'] },
    { name: 'an http:// APP_ORIGIN', env: { ...COMPLETE, APP_ORIGIN: 'http://app.example.com' }, mentions: ['APP_ORIGIN'] },
  ];
  it.each(incomplete)('refuses $name, off Vercel too, naming what to set', ({ env, mentions }) => {
    for (const where of [{}, { VERCEL: '1' }]) {
      let message = '';
      try {
        loadConfig({ ...env, ...where });
      } catch (error) {
        expect(error).toBeInstanceOf(ConfigError);
        message = (error as Error).message;
      }
      for (const name of mentions) expect(message).toContain(name);
    }
  });

  it.each(incomplete)('loads $name with LOCAL_DEV=1 off Vercel with its database and project on this machine (tests and benches), and refuses LOCAL_DEV=1 on Vercel', ({ env }) => {
    expect(loadConfig({ ...onThisMachine(env), LOCAL_DEV: '1', AUTH_VERIFY_SESSION: 'false' }).local).toBe(true);
    expect(() => loadConfig({ ...env, LOCAL_DEV: '1', VERCEL: '1' })).toThrow(/LOCAL_DEV/);
  });

  it('refuses to run on Vercel with nothing configured, saying what to set', () => {
    expect(() => loadConfig({ VERCEL: '1' })).toThrow(/DATABASE_URL.*SUPABASE_URL or SUPABASE_JWT_SECRET.*SUBSCRIPTION_WEBHOOK_SECRET.*APP_ORIGIN/);
  });

  it('runs with a complete configuration, on Vercel or elsewhere, with no dev default in it', () => {
    for (const where of [{}, { VERCEL: '1' }]) {
      const config = loadConfig({ ...COMPLETE, ...where });
      expect({ local: config.local, database: config.databaseMode, auth: config.auth.mode, appOrigin: config.appOrigin })
        .toEqual({ local: false, database: 'supabase', auth: 'supabase-jwks', appOrigin: 'https://app.example.com' });
    }
    expect(loadConfig({ ...COMPLETE, VERCEL: '1' }).deployed).toBe(true);
  });

  it('makes the session cookie Secure whenever not in local mode', () => {
    const expires = new Date();
    expect(sessionCookieOptions(loadConfig(COMPLETE), expires).secure).toBe(true);
    expect(sessionCookieOptions(loadConfig({}), expires).secure).toBe(false);
    expect(sessionCookieOptions(loadConfig({ APP_ORIGIN: 'https://dev.example.test', LOCAL_DEV: '1' }), expires).secure).toBe(true);
  });

  it('says in words what is wrong with a number setting', () => {
    expect(() => loadConfig({ DATABASE_POOL_MAX: 'abc', LOCAL_DEV: '1' })).toThrow(/DATABASE_POOL_MAX: must be a number$/);
    expect(() => loadConfig({ DATABASE_POOL_MAX: '1.5', LOCAL_DEV: '1' })).toThrow(/DATABASE_POOL_MAX: must be a whole number$/);
    expect(() => loadConfig({ REVENUECAT_REQUESTS_PER_SECOND: 'fast', LOCAL_DEV: '1' })).toThrow(/REVENUECAT_REQUESTS_PER_SECOND: must be a number$/);
  });

  it('refuses a billing secret that cannot travel as Bearer credentials (RFC 6750 token68)', () => {
    expect(() => loadConfig({ SUBSCRIPTION_WEBHOOK_SECRET: 'has space' })).toThrow(/SUBSCRIPTION_WEBHOOK_SECRET can only hold/);
    expect(() => loadConfig({ SUBSCRIPTION_WEBHOOK_SECRET: 'ok-secret-0123456789abcdef0123456', SUBSCRIPTION_WEBHOOK_SECRET_PREVIOUS: 'quote"d' })).toThrow(/SUBSCRIPTION_WEBHOOK_SECRET_PREVIOUS/);
    const token68 = `rk_AZ09-._~+/${'x'.repeat(MIN_SECRET_LENGTH - 15)}==`;
    expect(loadConfig({ SUBSCRIPTION_WEBHOOK_SECRET: token68, LOCAL_DEV: '1' }).webhookSecrets.subscription).toEqual([token68]);
  });

  it('names every refused setting at once (a deployment would need a redeploy for each), numbered; one alone in its own words', () => {
    const refusal = (env: Record<string, string>) => {
      try {
        loadConfig(env);
      } catch (error) {
        expect(error).toBeInstanceOf(ConfigError);
        return (error as Error).message;
      }
      return 'accepted';
    };
    const message = refusal({ ...COMPLETE, CRON_SECRET: 'short', CORS_ORIGINS: '*', WALLET_EVM_CHAIN_IDS: '1,eth', BILLING_SANDBOX_GRANTS: 'true', BILLING_IGNORE_SANDBOX: 'true' });
    expect(message).toMatch(/^4 settings to fix: \(1\) /);
    for (const [index, words] of [
      'WALLET_EVM_CHAIN_IDS: "eth" is not a chain id',
      'BILLING_SANDBOX_GRANTS and the deprecated BILLING_IGNORE_SANDBOX say opposite things',
      'CORS_ORIGINS takes exact origins',
      'CRON_SECRET must be at least 32 characters',
    ].entries()) expect(message).toContain(`(${index + 1}) ${words}`);
    expect(message).not.toContain('short');
    expect(refusal({ ...COMPLETE, CORS_ORIGINS: '*' })).toMatch(/^CORS_ORIGINS takes exact origins/);
  });

  // Vercel Cron and the operator send theirs the same way (lib/auth/operator-secret.ts reads them
  // with the same Bearer grammar): a value that cannot travel so would make its route 401 forever.
  it.each(['CRON_SECRET', 'ADMIN_API_SECRET'])('refuses a %s that cannot travel as Bearer credentials (RFC 6750 token68)', (name) => {
    for (const value of ['has space', 'quote"d', 'comma,separated', 'tab\there', 'trailing=padding=not-last', 'été']) {
      expect(() => loadConfig({ [name]: value }), value).toThrow(ConfigError);
      expect(() => loadConfig({ [name]: value }), value).toThrow(new RegExp(`(^|\\(\\d\\) )${name} can only hold letters, digits and - \\. _ ~ \\+ /`));
    }
    // The refusal names the variable, never the value.
    const refusal = (() => {
      try {
        loadConfig({ [name]: 'not a token68 zq-7731' });
      } catch (error) {
        return (error as Error).message;
      }
      return 'accepted';
    })();
    expect(refusal).toContain(name);
    expect(refusal).not.toContain('zq-7731');
    const accepted = `rk_AZ09-._~+/${'x'.repeat(MIN_SECRET_LENGTH - 15)}==`;
    const config = loadConfig({ [name]: accepted, LOCAL_DEV: '1' });
    expect(name === 'CRON_SECRET' ? config.cronSecret : config.adminSecret).toBe(accepted);
  });

  // Found by an outside review: real secrets beside no database still ran in local mode, where anyone
  // signs in as anyone and the dev secrets are accepted beside the real ones.
  const realSecret = 'r'.repeat(MIN_SECRET_LENGTH);
  const productionLike: { name: string; env: Record<string, string> }[] = [
    ...['REVENUECAT_SECRET_API_KEY', 'SUBSCRIPTION_WEBHOOK_SECRET', 'SUBSCRIPTION_WEBHOOK_SECRET_PREVIOUS', 'LEAGUES_WEBHOOK_SECRET', 'LEAGUES_WEBHOOK_SECRET_PREVIOUS', 'CRON_SECRET', 'ADMIN_API_SECRET']
      .map((name) => ({ name, env: { [name]: realSecret } })),
    { name: 'WALLET_EVM_RPC_URLS to another machine', env: { WALLET_EVM_RPC_URLS: '1=http://127.0.0.1:8545,8453=https://base.example/v2/key' } },
    { name: 'REVENUECAT_API_URL of another machine', env: { REVENUECAT_API_URL: 'https://revenuecat-proxy.example' } },
  ];
  it.each(productionLike)('counts $name as production-like: not local mode, so without a database it is refused, naming the setting', ({ env }) => {
    const [name] = Object.keys(env);
    expect(() => loadConfig(env)).toThrow(new RegExp(`^Not in local mode \\(${name} is set: .*a real secret, a URL of another machine.*DATABASE_URL, or SUPABASE_URL \\+ SUPABASE_SECRET_KEY.*not in \\.env\\.local`));
    // A RevenueCat key is a real account's unless its API is on this machine (a stand-in).
    const local = env.REVENUECAT_SECRET_API_KEY ? { ...env, REVENUECAT_API_URL: 'http://127.0.0.1:9999' } : env;
    expect(loadConfig({ ...local, LOCAL_DEV: '1' }).local).toBe(true);
  });

  // Found by an outside review: LOCAL_DEV=1 beside a real deployment's settings kept the dev doors
  // open onto its data (the dev admin secret read any subscriber's history, the dev leagues secret
  // wrote, the RevenueCat stand-in served any record). Refused, naming the settings.
  const realDeployment: { name: string; env: Record<string, string>; names: string[] }[] = [
    { name: 'a database on another machine', env: { DATABASE_URL: 'postgres://app:pw@db.example.com:5432/app' }, names: ['DATABASE_URL'] },
    { name: 'a database on this machine\'s LAN address', env: { DATABASE_URL: 'postgres://app:pw@10.0.0.5/app' }, names: ['DATABASE_URL'] },
    { name: 'a loopback URL whose host= parameter names another machine', env: { DATABASE_URL: 'postgres://app:pw@127.0.0.1/app?host=db.example.com' }, names: ['DATABASE_URL'] },
    { name: 'a URL with no host and PGHOST elsewhere', env: { DATABASE_URL: 'postgres:///app', PGHOST: 'db.example.com' }, names: ['DATABASE_URL'] },
    { name: 'the integration\'s pooled and direct URLs', env: { POSTGRES_URL: 'postgres://u:p@aws-0.pooler.supabase.com:6543/postgres', POSTGRES_URL_NON_POOLING: 'postgres://u:p@db.abc.supabase.co:5432/postgres' }, names: ['POSTGRES_URL_NON_POOLING', 'POSTGRES_URL'] },
    { name: 'a Supabase project', env: { SUPABASE_URL: 'https://abc.supabase.co', SUPABASE_SECRET_KEY: 'sb_secret_x' }, names: ['SUPABASE_URL'] },
    { name: 'a Supabase project named for the browser only', env: { NEXT_PUBLIC_SUPABASE_URL: 'https://abc.supabase.co' }, names: ['NEXT_PUBLIC_SUPABASE_URL'] },
    { name: 'a public https origin (a stack on one machine served to the internet)', env: { DATABASE_URL: 'postgres://app:pw@localhost:5432/prod', SUPABASE_URL: 'http://127.0.0.1:8000', APP_ORIGIN: 'https://shop.acme-store.app' }, names: ['APP_ORIGIN'] },
    { name: 'a RevenueCat key (RevenueCat itself)', env: { REVENUECAT_SECRET_API_KEY: 'sk_real' }, names: ['REVENUECAT_SECRET_API_KEY'] },
    { name: 'RevenueCat keys behind a proxy elsewhere', env: { REVENUECAT_SECRET_API_KEY: 'sk_real', REVENUECAT_V2_SECRET_API_KEY: 'sk_v2', REVENUECAT_PROJECT_ID: 'proj1', REVENUECAT_API_URL: 'https://rc-proxy.example' }, names: ['REVENUECAT_SECRET_API_KEY', 'REVENUECAT_V2_SECRET_API_KEY'] },
    {
      name: 'the reviewers\' mix: a remote database, a Supabase project and real secrets, with the stand-in',
      env: { DATABASE_URL: 'postgres://app:pw@db.example.com/app', SUPABASE_URL: 'https://abc.supabase.co', SUBSCRIPTION_WEBHOOK_SECRET: realSecret, CRON_SECRET: realSecret, REVENUECAT_STAND_IN: '1' },
      names: ['DATABASE_URL', 'SUPABASE_URL'],
    },
  ];
  it.each(realDeployment)('refuses LOCAL_DEV=1 beside $name, naming the settings and never their values', ({ env, names }) => {
    let message = '';
    try {
      loadConfig({ ...env, LOCAL_DEV: '1' });
    } catch (error) {
      expect(error).toBeInstanceOf(ConfigError);
      message = (error as Error).message;
    }
    expect(message).toMatch(/^LOCAL_DEV=1 is refused beside a real deployment's settings: /);
    for (const name of names) expect(message).toContain(name);
    for (const value of ['pw@', 'example.com', 'supabase.co', 'sk_real', 'sk_v2', realSecret]) expect(message).not.toContain(value);
    // The operator commands read the same settings: refused there too.
    expect(() => loadConfig({ ...env, LOCAL_DEV: '1' }, { operator: true })).toThrow(/^LOCAL_DEV=1 is refused beside/);
  });

  it('keeps LOCAL_DEV=1 beside a database, a Supabase stack and a RevenueCat stand-in on this machine, with real-looking secrets', () => {
    for (const env of [
      { DATABASE_URL: 'postgres://postgres:pw@127.0.0.1:54329/postgres' }, { DATABASE_URL: 'postgresql://u@localhost/app' }, { DATABASE_URL: 'postgres://u@[::1]:5432/app' },
      { DATABASE_URL: 'postgres:///app?host=/var/run/postgresql' }, { DATABASE_URL: 'postgres:///app' },
      { SUPABASE_URL: 'http://127.0.0.1:54321', SUPABASE_SECRET_KEY: 'sb_secret_local' },
      { REVENUECAT_SECRET_API_KEY: 'sk_test', REVENUECAT_API_URL: 'http://127.0.0.1:8080' },
      { DATABASE_URL: 'postgres://u:p@127.0.0.1/app', SUBSCRIPTION_WEBHOOK_SECRET: realSecret, CRON_SECRET: realSecret, ADMIN_API_SECRET: realSecret },
    ]) {
      expect(loadConfig({ ...env, LOCAL_DEV: '1', AUTH_VERIFY_SESSION: 'false' }).local, JSON.stringify(env)).toBe(true);
    }
  });

  it('keeps LOCAL_DEV=1 beside an origin that names this machine or its network (a LAN address for a phone, a name mapped here for https)', () => {
    for (const origin of ['https://dev.example.test', 'https://app.example.com', 'https://shop.localhost', 'https://box.local', 'https://svc.home.arpa',
      'https://192.168.1.10:3443', 'https://10.0.0.5', 'https://172.20.0.3', 'https://[fd00::5]:3443', 'https://[fe80::1]', 'https://my-laptop:3443', 'http://devbox.lan:3000']) {
      expect(loadConfig({ APP_ORIGIN: origin, LOCAL_DEV: '1' }).local, origin).toBe(true);
    }
  });

  it('refuses LOCAL_DEV=1 beside an origin with a public name, over http too', () => {
    for (const origin of ['https://shop.acme-store.app', 'http://shop.acme-store.app', 'http://abc123.ngrok-free.app', 'https://203.0.113.5', 'http://[2001:db8::5]:3000']) {
      expect(() => loadConfig({ APP_ORIGIN: origin, LOCAL_DEV: '1' }), origin).toThrow(/^LOCAL_DEV=1 is refused beside a real deployment's settings: APP_ORIGIN names a public host/);
    }
  });

  it('keeps local mode for URLs of this machine (a chain node or a RevenueCat stand-in on loopback)', () => {
    expect(loadConfig({ WALLET_EVM_RPC_URLS: '1=http://127.0.0.1:8545,8453=http://localhost:8546' }).local).toBe(true);
    expect(loadConfig({ REVENUECAT_API_URL: 'http://[::1]:9999' }).local).toBe(true);
  });

  it.each(['CRON_SECRET', 'ADMIN_API_SECRET', 'SUBSCRIPTION_WEBHOOK_SECRET', 'SUBSCRIPTION_WEBHOOK_SECRET_PREVIOUS', 'LEAGUES_WEBHOOK_SECRET', 'LEAGUES_WEBHOOK_SECRET_PREVIOUS'])('refuses a %s shorter than 32 characters at start, naming the setting and not the value', (name) => {
    for (const env of [{ LOCAL_DEV: '1' }, COMPLETE]) {
      for (const value of ['a', 'x'.repeat(MIN_SECRET_LENGTH - 1)]) {
        expect(() => loadConfig({ ...env, [name]: value })).toThrow(ConfigError);
        expect(() => loadConfig({ ...env, [name]: value })).toThrow(new RegExp(`^${name} must be at least 32 characters`));
      }
      expect(() => loadConfig({ ...env, [name]: 'short-zq7731' })).not.toThrow(/zq7731/);
      expect(loadConfig({ ...env, [name]: 'x'.repeat(MIN_SECRET_LENGTH) })).toBeDefined();
    }
  });

  // The secret API key goes out as a Bearer token to this URL, and its answers become entitlements.
  const revenuecatUrls: { name: string; env: Record<string, string>; refused?: boolean }[] = [
    { name: 'plain http to another host, deployed', env: { ...COMPLETE, REVENUECAT_API_URL: 'http://api.revenuecat.com' }, refused: true },
    { name: 'plain http to another host, not on Vercel', env: { REVENUECAT_API_URL: 'http://revenuecat.lan:8080' }, refused: true },
    { name: 'plain http to loopback, deployed (a stand-in or a proxy on this machine)', env: { ...COMPLETE, REVENUECAT_API_URL: 'http://127.0.0.1:8080' } },
    { name: 'plain http to loopback in local mode', env: { LOCAL_DEV: '1', REVENUECAT_API_URL: 'http://localhost:8080' } },
    { name: 'https, deployed', env: { ...COMPLETE, REVENUECAT_API_URL: 'https://api.revenuecat.com' } },
    { name: 'the default, deployed', env: COMPLETE },
  ];
  it.each(revenuecatUrls)('REVENUECAT_API_URL: $name', ({ env, refused }) => {
    const load = () => loadConfig({ ...env, REVENUECAT_SECRET_API_KEY: 'sk_test_key' });
    if (refused) expect(load).toThrow(/(^|\(\d\) )REVENUECAT_API_URL must be https:\/\/ \(plain http:\/\/ only to this machine/);
    else expect(load().revenuecat?.apiUrl).toMatch(/^https?:\/\//);
  });

  // Sandbox purchases cost nothing: they grant only where a developer tests purchases, or when asked.
  const sandboxCases: { name: string; env: Record<string, string>; grants: boolean; warns?: boolean }[] = [
    { name: 'local mode (nothing set)', env: {}, grants: true },
    { name: 'local mode asked for (LOCAL_DEV=1 with a database)', env: { DATABASE_URL: LOCAL_DB, LOCAL_DEV: '1' }, grants: true },
    { name: 'local mode, BILLING_SANDBOX_GRANTS=false', env: { BILLING_SANDBOX_GRANTS: 'false' }, grants: false },
    { name: 'a deployment (not on Vercel)', env: COMPLETE, grants: false },
    { name: 'a deployment on Vercel', env: { ...COMPLETE, VERCEL: '1' }, grants: false },
    { name: 'a deployment, BILLING_SANDBOX_GRANTS=true', env: { ...COMPLETE, BILLING_SANDBOX_GRANTS: 'true' }, grants: true },
    { name: 'a deployment, deprecated BILLING_IGNORE_SANDBOX=false', env: { ...COMPLETE, BILLING_IGNORE_SANDBOX: 'false' }, grants: true, warns: true },
    { name: 'local mode, deprecated BILLING_IGNORE_SANDBOX=true', env: { BILLING_IGNORE_SANDBOX: 'true' }, grants: false, warns: true },
    { name: 'both names, agreeing', env: { ...COMPLETE, BILLING_SANDBOX_GRANTS: 'true', BILLING_IGNORE_SANDBOX: 'false' }, grants: true, warns: true },
  ];
  it.each(sandboxCases)('sandbox purchases in $name: grant $grants', ({ env, grants, warns = false }) => {
    const config = loadConfig(env);
    expect(config.billingIgnoreSandbox).toBe(!grants);
    expect(describeConfig(config).sandboxPurchases).toBe(grants ? 'grant' : 'recorded, grant nothing');
    expect(config.warnings.some((warning) => /BILLING_IGNORE_SANDBOX is deprecated: set BILLING_SANDBOX_GRANTS=(true|false) instead/.test(warning))).toBe(warns);
    if (warns) expect(config.warnings[0]).toContain(`BILLING_SANDBOX_GRANTS=${grants}`);
  });

  it('refuses the two sandbox settings when they disagree', () => {
    expect(() => loadConfig({ ...COMPLETE, BILLING_SANDBOX_GRANTS: 'true', BILLING_IGNORE_SANDBOX: 'true' })).toThrow(/BILLING_SANDBOX_GRANTS and the deprecated BILLING_IGNORE_SANDBOX say opposite things/);
    expect(() => loadConfig({ BILLING_SANDBOX_GRANTS: 'maybe' })).toThrow(/BILLING_SANDBOX_GRANTS/);
  });

  it('reports invalid values by name', () => {
    expect(() => loadConfig({ DATABASE_URL: 'mysql://db' })).toThrow(/DATABASE_URL/);
    expect(() => loadConfig({ LOG_LEVEL: 'verbose' })).toThrow(/LOG_LEVEL/);
    expect(() => loadConfig({ WALLET_EVM_CHAIN_IDS: '1,abc' })).toThrow(/WALLET_EVM_CHAIN_IDS/);
  });

  it('describes itself for the startup log without any secret', () => {
    const secrets = ['db-password-123', 'query-password-999', 'sb_secret_456', 'webhook-789-0123456789abcdef012345', 'webhook-old-000-0123456789abcdef0123', 'leagues-abc-0123456789abcdef0123456'];
    const config = loadConfig({
      DATABASE_URL: `postgres://user:${secrets[0]}@db:5432/app?password=${secrets[1]}&sslmode=require`,
      SUPABASE_URL: 'https://abc.supabase.co',
      SUPABASE_SECRET_KEY: secrets[2],
      SUBSCRIPTION_WEBHOOK_SECRET: secrets[3],
      SUBSCRIPTION_WEBHOOK_SECRET_PREVIOUS: secrets[4],
      LEAGUES_WEBHOOK_SECRET: secrets[5],
      APP_ORIGIN: 'https://app.example.com',
    });
    const line = JSON.stringify(describeConfig(config));
    for (const secret of secrets) expect(line).not.toContain(secret);
    expect(line).toContain('postgres');
    expect(line).toContain('sslmode=require');
    expect(line).toContain('supabase-jwks');
  });

  describe('WALLET_EVM_RPC_URLS (where smart-contract wallets are checked)', () => {
    it('reads one URL per allowed chain, and none by default', () => {
      expect(loadConfig({}).wallet.evmRpcUrls).toEqual(new Map());
      expect(loadConfig({}).wallet.evmRpcTimeoutMs).toBe(4000);
      const config = loadConfig({ ...COMPLETE, WALLET_EVM_RPC_URLS: ' 1=https://eth.example/v2/k1?x=a=b , 8453=https://base.example/k2,', WALLET_EVM_RPC_TIMEOUT_MS: '2500' });
      expect(config.wallet.evmRpcUrls).toEqual(new Map([[1, 'https://eth.example/v2/k1?x=a=b'], [8453, 'https://base.example/k2']]));
      expect(config.wallet.evmRpcTimeoutMs).toBe(2500);
    });

    const refused: { name: string; env: Record<string, string>; mentions: string }[] = [
      { name: 'an entry without a chain id', env: { WALLET_EVM_RPC_URLS: 'https://eth.example/v2/secret-1' }, mentions: 'entry 1: expected "<chain id>=<URL>"' },
      { name: 'a chain id that is not a number', env: { WALLET_EVM_RPC_URLS: '1=https://a.example,base=https://b.example/secret-1' }, mentions: 'entry 2: expected' },
      { name: 'a URL that is not one', env: { WALLET_EVM_RPC_URLS: '1=not a url secret-1' }, mentions: 'the URL for chain 1 is not a valid URL' },
      { name: 'another scheme', env: { WALLET_EVM_RPC_URLS: '1=wss://eth.example/secret-1' }, mentions: 'must be https://' },
      { name: 'plain http to another host outside local mode', env: { ...COMPLETE, WALLET_EVM_RPC_URLS: '1=http://eth.example/secret-1' }, mentions: 'must be https:// outside local mode' },
      { name: 'two URLs for one chain', env: { WALLET_EVM_RPC_URLS: '1=https://a.example/secret-1,1=https://b.example' }, mentions: 'chain 1 has a URL already' },
      { name: 'a chain that is not allowed', env: { WALLET_EVM_RPC_URLS: '137=https://polygon.example/secret-1' }, mentions: 'chain 137 is not in WALLET_EVM_CHAIN_IDS (1, 8453)' },
      { name: 'a timeout out of range', env: { WALLET_EVM_RPC_TIMEOUT_MS: '60000' }, mentions: 'WALLET_EVM_RPC_TIMEOUT_MS' },
    ];
    it.each(refused)('refuses $name at startup, without repeating the URL', ({ env, mentions }) => {
      let message = '';
      try {
        loadConfig(env);
      } catch (error) {
        expect(error).toBeInstanceOf(ConfigError);
        message = (error as Error).message;
      }
      expect(message).toContain(mentions);
      expect(message).not.toContain('secret-1');
    });

    it('takes plain http on loopback anywhere, and on any host in local mode', () => {
      expect(loadConfig({ ...COMPLETE, WALLET_EVM_RPC_URLS: '1=http://127.0.0.1:8545' }).wallet.evmRpcUrls.get(1)).toBe('http://127.0.0.1:8545/');
      expect(loadConfig({ WALLET_EVM_RPC_URLS: '1=http://node.lan:8545', LOCAL_DEV: '1' }).wallet.evmRpcUrls.get(1)).toBe('http://node.lan:8545/');
    });

    it('logs only the host of each RPC, never its credentials, path or query', () => {
      const config = loadConfig({ ...COMPLETE, WALLET_EVM_RPC_URLS: '1=https://user:pass-123@eth.example/v2/key-456?token=tok-789' });
      const line = JSON.stringify(describeConfig(config));
      expect(describeConfig(config).walletRpc).toEqual({ 1: 'eth.example' });
      for (const secret of ['pass-123', 'key-456', 'tok-789', 'user']) expect(line).not.toContain(secret);
      expect(describeConfig(loadConfig({})).walletRpc).toBe('none (contract wallets cannot be verified)');
    });
  });
});

describe('getConfig while the process runs', () => {
  // What `next dev` does when .env.local changes: new values in process.env, in the same process,
  // with nothing else told (setEnv would also forget the configuration).
  const change = (vars: Record<string, string | undefined>) => {
    const saved = Object.fromEntries(Object.keys(vars).map((key) => [key, process.env[key]]));
    const apply = (values: Record<string, string | undefined>) => {
      for (const [key, value] of Object.entries(values)) {
        if (value === undefined) delete process.env[key];
        else process.env[key] = value;
      }
    };
    apply(vars);
    return () => apply(saved);
  };
  const localEnv = { LOCAL_DEV: '1', DATABASE_URL: LOCAL_DB, POSTGRES_URL_NON_POOLING: undefined, EVENTS_WEBHOOK_URL: undefined, EVENTS_WEBHOOK_SECRET: undefined, EVENTS_WEBHOOK_ENDPOINTS: undefined };
  const receiverLater = { EVENTS_WEBHOOK_URL: 'http://127.0.0.1:3999/hook', EVENTS_WEBHOOK_SECRET: `whsec_${Buffer.alloc(32, 7).toString('base64')}` };

  it('under `next dev` (NODE_ENV=development), reads the settings again once one changed, and only then', () => {
    const restore = setEnv({ ...localEnv, NODE_ENV: 'development' });
    try {
      const first = getConfig();
      expect(first.eventEndpointSettings.EVENTS_WEBHOOK_URL).toBeUndefined();
      expect(getConfig()).toBe(first);
      const undo = change(receiverLater);
      try {
        const later = getConfig();
        expect(later.eventEndpointSettings).toEqual({ ...receiverLater, EVENTS_WEBHOOK_ENDPOINTS: undefined });
        expect(getConfig()).toBe(later);
      } finally {
        undo();
      }
      // An operator command's configuration stays one when its settings change: the direct
      // connection string first (as `npm run migrate` takes it), not the service's.
      const direct = 'postgres://u:p@127.0.0.1:5432/direct';
      const undoDirect = change({ POSTGRES_URL_NON_POOLING: direct });
      try {
        expect(configureForOperator().databaseUrl).toBe(direct);
        const undoReceiver = change(receiverLater);
        try {
          expect(getConfig()).toMatchObject({ databaseUrl: direct, eventEndpointSettings: receiverLater });
        } finally {
          undoReceiver();
        }
      } finally {
        undoDirect();
      }
    } finally {
      restore();
    }
  });

  it('elsewhere (next start, Vercel, tests), reads them once', () => {
    const restore = setEnv({ ...localEnv, NODE_ENV: 'production' });
    try {
      const first = getConfig();
      const undo = change(receiverLater);
      try {
        expect(getConfig()).toBe(first);
      } finally {
        undo();
      }
    } finally {
      restore();
    }
  });
});
