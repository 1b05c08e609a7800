import { createHash, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../lib/config.ts';
import { nonPublicRange } from '../../lib/events/addresses.ts';
import { checkEndpointAddresses, checkReceiverAddresses, endpointSettings, endpointWants, getEventEndpoints, parseEventEndpoints, type EventEndpointSettings } from '../../lib/events/endpoints.ts';

const secret = () => `whsec_${randomBytes(32).toString('base64')}`;
const DEPLOYED = { local: false };
const LOCAL = { local: true };

function refusal(settings: EventEndpointSettings, mode = DEPLOYED): string {
  try {
    parseEventEndpoints(settings, mode);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return (error as Error).message;
  }
  throw new Error('expected a ConfigError');
}

describe('nonPublicRange', () => {
  const cases: [string, string | null][] = [
    ['93.184.216.34', null], ['2606:4700::6810:84e5', null],
    ['10.1.2.3', 'private'], ['172.16.0.1', 'private'], ['192.168.1.1', 'private'],
    ['127.0.0.1', 'loopback'], ['::1', 'loopback'], ['[::1]', 'loopback'],
    ['169.254.169.254', 'linkLocal'], ['fe80::1', 'linkLocal'],
    ['100.64.0.1', 'carrierGradeNat'], ['fd00::1', 'uniqueLocal'], ['fc00::1', 'uniqueLocal'],
    ['0.0.0.0', 'unspecified'], ['::', 'unspecified'],
    // IPv4-mapped IPv6 is judged as the IPv4 address it carries.
    ['::ffff:10.0.0.1', 'private'], ['::ffff:127.0.0.1', 'loopback'], ['::ffff:169.254.169.254', 'linkLocal'], ['::ffff:93.184.216.34', null],
    ['::127.0.0.1', 'loopback'], ['::5db8:d822', 'ipv4Compatible'], ['::a00:1', 'ipv4Compatible'], ['64:ff9b::a00:1', 'rfc6052'], ['224.0.0.1', 'multicast'], ['192.0.2.1', 'reserved'],
  ];
  for (const [address, range] of cases) {
    it(`${address}: ${range ?? 'public'}`, () => expect(nonPublicRange(address)).toBe(range));
  }
});

describe('parseEventEndpoints, the simple form', () => {
  it('is empty when nothing is set', () => {
    expect(parseEventEndpoints({}, DEPLOYED)).toEqual([]);
  });

  it('gives every URL every secret and every event, with an id that is a short SHA-256 of the URL', () => {
    const [a, b] = [secret(), secret()];
    const endpoints = parseEventEndpoints({ EVENTS_WEBHOOK_URL: 'https://a.example/hooks, https://b.example/in?key=k', EVENTS_WEBHOOK_SECRET: `${a},${b}` }, DEPLOYED);
    expect(endpoints.map((endpoint) => [endpoint.url.href, endpoint.secrets, endpoint.types])).toEqual([
      ['https://a.example/hooks', [a, b], null],
      ['https://b.example/in?key=k', [a, b], null],
    ]);
    expect(endpoints[0]!.id).toBe(createHash('sha256').update('https://a.example/hooks').digest('hex').slice(0, 16));
    // Stable: the same URL gives the same id in another parse (deliveries are keyed by it).
    expect(parseEventEndpoints({ EVENTS_WEBHOOK_URL: 'https://a.example/hooks', EVENTS_WEBHOOK_SECRET: a }, DEPLOYED)[0]!.id).toBe(endpoints[0]!.id);
  });

  const cases: { name: string; settings: EventEndpointSettings; says: RegExp; mode?: { local: boolean } }[] = [
    { name: 'a URL without a secret', settings: { EVENTS_WEBHOOK_URL: 'https://a.example' }, says: /EVENTS_WEBHOOK_URL is set without EVENTS_WEBHOOK_SECRET/ },
    { name: 'a secret without a URL', settings: { EVENTS_WEBHOOK_SECRET: secret() }, says: /EVENTS_WEBHOOK_SECRET is set without EVENTS_WEBHOOK_URL/ },
    { name: 'plain http outside local mode', settings: { EVENTS_WEBHOOK_URL: 'http://a.example', EVENTS_WEBHOOK_SECRET: secret() }, says: /EVENTS_WEBHOOK_URL, entry 1: the URL must be https/ },
    { name: 'a private address outside local mode', settings: { EVENTS_WEBHOOK_URL: 'https://a.example,https://10.0.0.5/x', EVENTS_WEBHOOK_SECRET: secret() }, says: /entry 2: 10\.0\.0\.5 is a private address/ },
    { name: 'an IPv4-mapped loopback outside local mode', settings: { EVENTS_WEBHOOK_URL: 'https://[::ffff:127.0.0.1]/x', EVENTS_WEBHOOK_SECRET: secret() }, says: /loopback address/ },
    { name: 'localhost outside local mode', settings: { EVENTS_WEBHOOK_URL: 'https://localhost:8443/x', EVENTS_WEBHOOK_SECRET: secret() }, says: /localhost is this machine/ },
    { name: 'localhost. (the absolute name) outside local mode', settings: { EVENTS_WEBHOOK_URL: 'https://api.localhost./x', EVENTS_WEBHOOK_SECRET: secret() }, says: /api\.localhost\. is this machine/ },
    { name: 'a URL with a password', settings: { EVENTS_WEBHOOK_URL: 'https://u:p@a.example/x', EVENTS_WEBHOOK_SECRET: secret() }, says: /user name or password; put a receiver's token in its query \(the status shows a URL's path, never its query\)/ },
    { name: 'a URL of port 0', settings: { EVENTS_WEBHOOK_URL: 'https://a.example:0/x', EVENTS_WEBHOOK_SECRET: secret() }, says: /port 0 is no port/ },
    { name: 'not a URL', settings: { EVENTS_WEBHOOK_URL: 'a.example/hooks', EVENTS_WEBHOOK_SECRET: secret() }, says: /entry 1: not a URL/ },
    { name: 'a comma in a URL\'s query', settings: { EVENTS_WEBHOOK_URL: 'https://a.example/x?ids=1,2', EVENTS_WEBHOOK_SECRET: secret() }, says: /entry 2: not a URL\. The setting's URLs are separated by commas: write a comma inside a URL as %2C, or list the receivers in EVENTS_WEBHOOK_ENDPOINTS\.$/ },
    { name: 'a comma and a colon in a URL\'s query', settings: { EVENTS_WEBHOOK_URL: 'https://a.example/x?tags=a,b:c', EVENTS_WEBHOOK_SECRET: secret() }, says: /entry 2: not a URL\. The setting's URLs are separated by commas/ },
    { name: 'a site-local IPv6 address', settings: { EVENTS_WEBHOOK_URL: 'https://[fec0::1]/x', EVENTS_WEBHOOK_SECRET: secret() }, says: /is a site-local \(deprecated\) address/ },
    { name: 'an address in the carrier-grade NAT range', settings: { EVENTS_WEBHOOK_URL: 'https://100.64.0.1/x', EVENTS_WEBHOOK_SECRET: secret() }, says: /100\.64\.0\.1 is a carrier-grade NAT address, not on the public internet/ },
    { name: 'the unspecified address', settings: { EVENTS_WEBHOOK_URL: 'https://0.0.0.0/x', EVENTS_WEBHOOK_SECRET: secret() }, says: /0\.0\.0\.0 is an unspecified address/ },
    { name: 'a NAT64 address', settings: { EVENTS_WEBHOOK_URL: 'https://[64:ff9b::a00:1]/x', EVENTS_WEBHOOK_SECRET: secret() }, says: /is a NAT64 \(RFC 6052\) address/ },
    { name: 'a host and port without a scheme', settings: { EVENTS_WEBHOOK_URL: 'localhost:3001/hook', EVENTS_WEBHOOK_SECRET: secret() }, says: /entry 1: the URL does not start with https:\/\/ \(it reads as one of the scheme `localhost:`\)\.$/ },
    { name: 'a host and port without a scheme, in local mode', settings: { EVENTS_WEBHOOK_URL: 'localhost:3001/hook', EVENTS_WEBHOOK_SECRET: secret() }, says: /the scheme `localhost:`\); in local mode http:\/\/ works too\.$/, mode: LOCAL },
    { name: 'another scheme in local mode', settings: { EVENTS_WEBHOOK_URL: 'ftp://a.example/x', EVENTS_WEBHOOK_SECRET: secret() }, says: /entry 1: the URL does not start with https:\/\/; in local mode http:\/\/ works too\.$/, mode: LOCAL },
    { name: 'credentials without a scheme (never echoed)', settings: { EVENTS_WEBHOOK_URL: 'alice:pw@hooks.example/x', EVENTS_WEBHOOK_SECRET: secret() }, says: /^EVENTS_WEBHOOK_URL, entry 1: the URL does not start with https:\/\/\.$/ },
    { name: 'a secret without whsec_', settings: { EVENTS_WEBHOOK_URL: 'https://a.example', EVENTS_WEBHOOK_SECRET: randomBytes(32).toString('base64') }, says: /EVENTS_WEBHOOK_SECRET: secret 1 is not `whsec_`/ },
    { name: 'a secret that is not base64', settings: { EVENTS_WEBHOOK_URL: 'https://a.example', EVENTS_WEBHOOK_SECRET: `${secret()},whsec_${'*'.repeat(44)}` }, says: /secret 2 is not `whsec_`/ },
    { name: 'a secret of 16 bytes', settings: { EVENTS_WEBHOOK_URL: 'https://a.example', EVENTS_WEBHOOK_SECRET: `whsec_${randomBytes(16).toString('base64')}` }, says: /at least 24 bytes/ },
    { name: 'the same URL twice', settings: { EVENTS_WEBHOOK_URL: 'https://a.example/x,https://a.example/x', EVENTS_WEBHOOK_SECRET: secret() }, says: /entry 2: the same URL as EVENTS_WEBHOOK_URL, entry 1/ },
  ];
  for (const { name, settings, says, mode } of cases) {
    it(`refuses ${name}, naming the setting and never the secret`, () => {
      const message = refusal(settings, mode);
      expect(message).toMatch(says);
      for (const value of (settings.EVENTS_WEBHOOK_SECRET ?? '').split(',').filter(Boolean)) expect(message).not.toContain(value.slice(6));
    });
  }

  it('allows http and addresses of this machine in local mode', () => {
    const endpoints = parseEventEndpoints({ EVENTS_WEBHOOK_URL: 'http://127.0.0.1:4000/hooks,http://localhost:4001', EVENTS_WEBHOOK_SECRET: secret() }, LOCAL);
    expect(endpoints.map((endpoint) => endpoint.url.host)).toEqual(['127.0.0.1:4000', 'localhost:4001']);
  });

  it('names the host of a refused URL but not its path or query (they may hold a token)', () => {
    const message = refusal({ EVENTS_WEBHOOK_URL: 'https://192.168.0.9/hooks/tok_secret_path?key=tok_query', EVENTS_WEBHOOK_SECRET: secret() });
    expect(message).toContain('192.168.0.9');
    expect(message).not.toMatch(/tok_secret_path|tok_query/);
  });
});

describe('parseEventEndpoints, EVENTS_WEBHOOK_ENDPOINTS', () => {
  it('reads each receiver with its own secrets and event types', () => {
    const [a, b, c] = [secret(), secret(), secret()];
    const endpoints = parseEventEndpoints({
      EVENTS_WEBHOOK_ENDPOINTS: JSON.stringify([
        { url: 'https://billing.example/hooks', secret: a, types: ['entitlement.revoked', 'wallet.*'] },
        { url: 'https://crm.example/hooks', secret: [b, c] },
      ]),
    }, DEPLOYED);
    expect(endpoints.map(({ url, secrets, types, setting }) => ({ url: url.href, secrets, types, setting }))).toEqual([
      { url: 'https://billing.example/hooks', secrets: [a], types: ['entitlement.revoked', 'wallet.*'], setting: 'EVENTS_WEBHOOK_ENDPOINTS, entry 1' },
      { url: 'https://crm.example/hooks', secrets: [b, c], types: null, setting: 'EVENTS_WEBHOOK_ENDPOINTS, entry 2' },
    ]);
  });

  const cases: { name: string; value: string | unknown[]; extra?: EventEndpointSettings; says: RegExp }[] = [
    { name: 'beside the simple form', value: [{ url: 'https://a.example', secret: secret() }], extra: { EVENTS_WEBHOOK_URL: 'https://b.example' }, says: /EVENTS_WEBHOOK_ENDPOINTS is set beside EVENTS_WEBHOOK_URL/ },
    { name: 'text that is not JSON', value: '[{url: x}]', says: /EVENTS_WEBHOOK_ENDPOINTS is not JSON/ },
    { name: 'an empty array', value: [], says: /at least one receiver/ },
    { name: 'a receiver without a secret', value: [{ url: 'https://a.example' }], says: /EVENTS_WEBHOOK_ENDPOINTS: entry 1, secret: / },
    { name: 'an unknown key (a typo)', value: [{ url: 'https://a.example', secret: secret(), type: ['wallet.*'] }], says: /entry 1: Unrecognized key/ },
    { name: 'an unknown event type', value: [{ url: 'https://a.example', secret: secret(), types: ['entitlement.renewed'] }], says: /entry 1: "entitlement.renewed" is not an event type; use entitlement.granted/ },
    { name: 'an unknown family', value: [{ url: 'https://a.example', secret: secret(), types: ['league.*'] }], says: /"league.\*" is not an event type/ },
    { name: 'an empty type list', value: [{ url: 'https://a.example', secret: secret(), types: [] }], says: /list at least one event type/ },
    { name: 'a weak secret in a list', value: [{ url: 'https://a.example', secret: [secret(), 'whsec_c2hvcnQ='] }], says: /entry 1: secret 2 is not `whsec_`/ },
    { name: 'a private receiver', value: [{ url: 'https://a.example', secret: secret() }, { url: 'https://[fd12::1]/x', secret: secret() }], says: /entry 2: \[fd12::1\] is a unique local address/ },
  ];
  for (const { name, value, extra, says } of cases) {
    it(`refuses ${name}`, () => {
      expect(refusal({ ...extra, EVENTS_WEBHOOK_ENDPOINTS: typeof value === 'string' ? value : JSON.stringify(value) })).toMatch(says);
    });
  }
});

describe('endpointWants', () => {
  it('matches types exactly or by family, and everything without a filter', () => {
    const filtered = { types: ['entitlement.revoked', 'wallet.*'] };
    expect(endpointWants(filtered, 'entitlement.revoked')).toBe(true);
    expect(endpointWants(filtered, 'entitlement.granted')).toBe(false);
    expect(endpointWants(filtered, 'wallet.linked')).toBe(true);
    expect(endpointWants(filtered, 'wallet.unlinked')).toBe(true);
    expect(endpointWants(filtered, 'walletx.linked')).toBe(false);
    expect(endpointWants(filtered, 'customer.deleted')).toBe(false);
    expect(endpointWants({ types: null }, 'customer.deleted')).toBe(true);
  });
});

describe('checkEndpointAddresses', () => {
  const endpoints = parseEventEndpoints({ EVENTS_WEBHOOK_URL: 'https://public.example/h,https://inside.example/h?token=t0k', EVENTS_WEBHOOK_SECRET: secret() }, DEPLOYED);
  const dns: Record<string, string[]> = { 'public.example': ['93.184.216.34', '2606:4700::6810:84e5'], 'inside.example': ['93.184.216.34', '::ffff:10.0.0.7'] };
  const lookup = async (host: string) => {
    if (!dns[host]) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
    return dns[host];
  };

  it('refuses a name with any non-public address among its answers, naming the setting, host and range', async () => {
    const { refused, unresolved } = await checkEndpointAddresses(endpoints, { local: false, lookup });
    expect(refused).toContain('EVENTS_WEBHOOK_URL, entry 2: inside.example resolves to ::ffff:10.0.0.7 (private)');
    expect(refused).not.toContain('entry 1');
    expect(refused).not.toContain('t0k');
    expect(unresolved).toBeUndefined();
  });

  it('passes public receivers, and names one that does not resolve apart', async () => {
    await expect(checkEndpointAddresses(endpoints.slice(0, 1), { local: false, lookup })).resolves.toEqual({});
    const missing = parseEventEndpoints({ EVENTS_WEBHOOK_URL: 'https://nowhere.example/h', EVENTS_WEBHOOK_SECRET: secret() }, DEPLOYED);
    await expect(checkEndpointAddresses(missing, { local: false, lookup })).resolves.toEqual({ unresolved: 'EVENTS_WEBHOOK_URL, entry 1: nowhere.example does not resolve (ENOTFOUND).' });
  });

  it('checks nothing in local mode', async () => {
    await expect(checkEndpointAddresses(endpoints, { local: true, lookup: () => Promise.reject(new Error('not asked')) })).resolves.toEqual({});
  });

  it('uses the system resolver by default: localhost resolves to loopback', async () => {
    const local = parseEventEndpoints({ EVENTS_WEBHOOK_URL: 'https://localhost:8443/h', EVENTS_WEBHOOK_SECRET: secret() }, LOCAL);
    expect((await checkEndpointAddresses(local, { local: false })).refused).toMatch(/localhost resolves to .*loopback/);
  });
});

describe('checkReceiverAddresses', () => {
  const DEPLOYED_ENV = {
    SUPABASE_URL: 'https://abc.supabase.co', SUPABASE_SECRET_KEY: 'sb_secret_x', SUPABASE_PUBLISHABLE_KEY: 'sb_publishable_x',
    SUBSCRIPTION_WEBHOOK_SECRET: 's'.repeat(32), LEAGUES_WEBHOOK_SECRET: 'l'.repeat(32), APP_ORIGIN: 'https://app.example.com',
  };

  it('refuses the settings while a receiver resolves to a non-public address, as a literal one is, and lifts it once it resolves to public ones', async () => {
    const config = loadConfig({ ...DEPLOYED_ENV, EVENTS_WEBHOOK_URL: 'https://hooks.example/h?token=t0k', EVENTS_WEBHOOK_SECRET: secret() });
    expect(config.local).toBe(false);
    let answer = ['10.0.0.7'];
    const lookup = async () => answer;
    expect(getEventEndpoints(config)).toHaveLength(1); // before any look-up: the settings alone decide

    expect((await checkReceiverAddresses(config, lookup)).refused).toContain('hooks.example resolves to 10.0.0.7 (private)');
    expect(() => getEventEndpoints(config)).toThrow(/EVENTS_WEBHOOK_URL, entry 1: hooks\.example resolves to 10\.0\.0\.7 \(private\), not on the public internet/);
    expect(endpointSettings(config)).toEqual({ refused: expect.stringContaining('hooks.example resolves to 10.0.0.7') });
    expect(JSON.stringify(endpointSettings(config))).not.toContain('t0k');

    // A look-up that fails (DNS down for a moment) says nothing new: still refused.
    const failing = () => Promise.reject(Object.assign(new Error('getaddrinfo EAI_AGAIN hooks.example'), { code: 'EAI_AGAIN' }));
    await checkReceiverAddresses(config, failing);
    expect(() => getEventEndpoints(config)).toThrow(ConfigError);
    // The same settings read again (another copy of the configuration, as another bundle of the module has): still refused.
    expect(() => getEventEndpoints(loadConfig({ ...DEPLOYED_ENV, EVENTS_WEBHOOK_URL: 'https://hooks.example/h?token=t0k', EVENTS_WEBHOOK_SECRET: config.eventEndpointSettings.EVENTS_WEBHOOK_SECRET }))).toThrow(ConfigError);

    answer = ['93.184.216.34'];
    await checkReceiverAddresses(config, lookup);
    expect(getEventEndpoints(config)).toHaveLength(1);
  });

  it('refuses nothing for a receiver that does not resolve (DNS not ready): each attempt looks it up again', async () => {
    const config = loadConfig({ ...DEPLOYED_ENV, EVENTS_WEBHOOK_URL: 'https://later.example/h', EVENTS_WEBHOOK_SECRET: secret() });
    const lookup = () => Promise.reject(Object.assign(new Error('getaddrinfo EAI_AGAIN later.example'), { code: 'EAI_AGAIN' }));
    expect(await checkReceiverAddresses(config, lookup)).toEqual({ unresolved: 'EVENTS_WEBHOOK_URL, entry 1: later.example does not resolve (EAI_AGAIN).' });
    expect(getEventEndpoints(config)).toHaveLength(1);
  });
});

describe('getEventEndpoints', () => {
  it("parses the configuration's settings, in its mode", () => {
    const value = secret();
    const config = loadConfig({ EVENTS_WEBHOOK_URL: 'http://127.0.0.1:9/h', EVENTS_WEBHOOK_SECRET: value });
    expect(config.local).toBe(true);
    expect(getEventEndpoints(config).map((endpoint) => endpoint.url.href)).toEqual(['http://127.0.0.1:9/h']);
    expect(() => getEventEndpoints(loadConfig({ EVENTS_WEBHOOK_URL: 'https://a.example/h' }))).toThrow(ConfigError);
  });
});
