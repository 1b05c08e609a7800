import { createHash } from 'node:crypto';
import { z } from 'zod';
import { decodeWebhookSecret } from '#client/webhooks';
import { ConfigError, getConfig, type Config } from '../config.ts';
import { isIpLiteral, nonPublicRange, rangeInWords, rangeName, resolveAndClassify, systemLookup, type Lookup } from './addresses.ts';
import { EVENT_TYPES } from './schemas.ts';
import { processWide } from '../process-wide.ts';

/**
 * Where events are sent: the receivers the operator configured, in one of two forms.
 *
 * Simple: EVENTS_WEBHOOK_URL (one URL, or several separated by commas) and EVENTS_WEBHOOK_SECRET
 * (`whsec_<base64>`; several separated by commas while a secret is rotated: each one signs, so a
 * receiver holding either verifies). Every URL gets every event, signed with every secret.
 *
 * Per receiver: EVENTS_WEBHOOK_ENDPOINTS, a JSON array
 *   [{ "url": "https://a.example/hooks", "secret": "whsec_...", "types": ["entitlement.revoked", "wallet.*"] },
 *    { "url": "https://b.example/hooks", "secret": ["whsec_new", "whsec_old"] }]
 * `types` (optional; omitted: every event) lists event types, or `<family>.*` for a family. Not
 * beside the simple form: one place says where events go.
 *
 * Refused (ConfigError naming the setting and the entry, never a secret, and of a URL only its
 * host, since a receiver's path or query may hold a token): a URL that is not https outside local
 * mode, carries a user name or password, or whose host is a literal non-public address outside local
 * mode (a name that resolves to one is refused by checkReceiverAddresses, which needs DNS); a
 * secret that is not `whsec_` + base64 of at least 24 bytes; an unknown event type in a filter.
 */

export interface EventEndpoint {
  /** Stable while the URL is: the first 16 hex digits of the SHA-256 of the URL (deliveries are keyed by it). */
  id: string;
  url: URL;
  /** Every secret that signs (one `v1,` signature each). */
  secrets: string[];
  /** The event types it wants (`wallet.*` for a family); null: every event. */
  types: string[] | null;
  /** Where it was set, for messages: `EVENTS_WEBHOOK_URL, entry 1` or `EVENTS_WEBHOOK_ENDPOINTS, entry 2`. */
  setting: string;
}

export type EventEndpointSettings = Config['eventEndpointSettings'];

/** The shortest secret key accepted: 24 bytes (192 bits); `openssl rand -base64 32` gives 32. */
export const MIN_SECRET_BYTES = 24;

const SECRET_HINT = 'generate one with `echo "whsec_$(openssl rand -base64 32)"`';
const EVENT_FAMILIES = [...new Set(EVENT_TYPES.map((type) => type.split('.')[0]!))];

const endpointsJsonSchema = z
  .array(z.strictObject({
    url: z.string(),
    secret: z.union([z.string(), z.array(z.string()).min(1)]),
    types: z.array(z.string()).min(1, 'list at least one event type, or leave `types` out for every event').optional(),
  }))
  .min(1, 'list at least one receiver, or leave the setting unset');

const splitList = (value: string) => value.split(',').map((item) => item.trim()).filter(Boolean);

/** Parse and check the receivers (no DNS: see checkReceiverAddresses). Throws ConfigError. */
export function parseEventEndpoints(settings: EventEndpointSettings, { local }: { local: boolean }): EventEndpoint[] {
  const { EVENTS_WEBHOOK_URL: urls, EVENTS_WEBHOOK_SECRET: secrets, EVENTS_WEBHOOK_ENDPOINTS: json } = settings;
  if (json !== undefined) {
    if (urls !== undefined || secrets !== undefined) {
      throw new ConfigError('EVENTS_WEBHOOK_ENDPOINTS is set beside EVENTS_WEBHOOK_URL or EVENTS_WEBHOOK_SECRET: use one form, the JSON array or the simple pair.');
    }
    return fromJson(json, local);
  }
  if (urls === undefined && secrets === undefined) return [];
  if (urls === undefined) throw new ConfigError('EVENTS_WEBHOOK_SECRET is set without EVENTS_WEBHOOK_URL: set the URL events are sent to, or remove the secret.');
  if (secrets === undefined) throw new ConfigError(`EVENTS_WEBHOOK_URL is set without EVENTS_WEBHOOK_SECRET: events are always signed; ${SECRET_HINT}.`);
  const secretList = checkSecrets(splitList(secrets), 'EVENTS_WEBHOOK_SECRET');
  return unique(splitList(urls).map((url, index) => {
    const where = `EVENTS_WEBHOOK_URL, entry ${index + 1}`;
    // A later entry that is no http(s) URL is most often the rest of one whose query held a comma.
    if (index > 0 && !/^https?:\/\//i.test(url)) {
      throw new ConfigError(`${where}: not a URL. The setting's URLs are separated by commas: write a comma inside a URL as %2C, or list the receivers in EVENTS_WEBHOOK_ENDPOINTS.`);
    }
    return endpoint(where, url, secretList, null, local);
  }));
}

function fromJson(json: string, local: boolean): EventEndpoint[] {
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch {
    throw new ConfigError('EVENTS_WEBHOOK_ENDPOINTS is not JSON: expected an array such as [{"url": "https://...", "secret": "whsec_...", "types": ["entitlement.*"]}].');
  }
  const parsed = endpointsJsonSchema.safeParse(value);
  if (!parsed.success) {
    // zod's messages name paths and expected types, never the values given.
    const problems = parsed.error.issues.map((issue) => `${placeOf(issue.path)}: ${issue.message}`);
    throw new ConfigError(`EVENTS_WEBHOOK_ENDPOINTS: ${problems.join('; ')}. Expected [{"url": "https://...", "secret": "whsec_..." or ["whsec_...", ...], "types": [...] (optional)}].`);
  }
  return unique(parsed.data.map((entry, index) => {
    const where = `EVENTS_WEBHOOK_ENDPOINTS, entry ${index + 1}`;
    const secrets = checkSecrets(typeof entry.secret === 'string' ? [entry.secret] : entry.secret, where);
    return endpoint(where, entry.url, secrets, entry.types ? checkTypes(entry.types, where) : null, local);
  }));
}

/** [1, 'types', 0] -> "entry 2, types, 0" */
function placeOf(path: PropertyKey[]): string {
  if (path.length === 0) return 'the value';
  return path.map((part, index) => (index === 0 && typeof part === 'number' ? `entry ${part + 1}` : String(part))).join(', ');
}

function endpoint(where: string, value: string, secrets: string[], types: string[] | null, local: boolean): EventEndpoint {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new ConfigError(`${where}: not a URL (expected https://...).`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') {
    // `localhost:3001/hook` parses, as a URL of the scheme `localhost:`: say what is missing. The
    // scheme is shown only when what precedes it reads as a host and a port (`alice:pw@...` would
    // show a user name).
    const hostAndPort = /^[a-z0-9.-]+:\d+(\/|$)/i.test(value);
    throw new ConfigError(`${where}: the URL does not start with https://${hostAndPort ? ` (it reads as one of the scheme \`${url.protocol}\`)` : ''}${local ? '; in local mode http:// works too' : ''}.`);
  }
  if (url.protocol !== 'https:' && !local) {
    throw new ConfigError(`${where}: the URL must be https:// (plain http:// only in local mode): events carry users' entitlements and wallets.`);
  }
  if (url.username || url.password) throw new ConfigError(`${where}: the URL carries a user name or password; put a receiver's token in its query (the status shows a URL's path, never its query), or rely on the signature.`);
  // (Port 0 parses, and no connection can be made to it: every attempt would fail for three days.)
  if (url.port === '0') throw new ConfigError(`${where}: port 0 is no port a receiver can listen on; give the receiver's port, or none for the scheme's own.`);
  if (!local && isIpLiteral(url.hostname)) {
    const range = nonPublicRange(url.hostname);
    if (range) throw new ConfigError(`${where}: ${url.hostname} is ${rangeInWords(range)}, not on the public internet: events go to public receivers only outside local mode.`);
  }
  const name = url.hostname.replace(/\.$/, '');
  if (!local && (name === 'localhost' || name.endsWith('.localhost'))) {
    throw new ConfigError(`${where}: ${url.hostname} is this machine: events go to public receivers only outside local mode.`);
  }
  url.hash = '';
  return { id: createHash('sha256').update(url.href).digest('hex').slice(0, 16), url, secrets, types, setting: where };
}

function checkSecrets(secrets: string[], where: string): string[] {
  if (secrets.length === 0) throw new ConfigError(`${where}: no secret; ${SECRET_HINT}.`);
  secrets.forEach((secret, index) => {
    let bytes = 0;
    try {
      bytes = secret.startsWith('whsec_') ? decodeWebhookSecret(secret).length : 0;
    } catch {
      bytes = 0;
    }
    if (bytes < MIN_SECRET_BYTES) {
      throw new ConfigError(`${where}: secret ${index + 1} is not \`whsec_\` followed by the base64 of at least ${MIN_SECRET_BYTES} bytes; ${SECRET_HINT}.`);
    }
  });
  return secrets;
}

function checkTypes(types: string[], where: string): string[] {
  for (const type of types) {
    const family = type.endsWith('.*') ? type.slice(0, -2) : undefined;
    const known = family !== undefined ? EVENT_FAMILIES.includes(family) : (EVENT_TYPES as readonly string[]).includes(type);
    // A misspelt type would silently drop the receiver's events: refused, listing what exists.
    if (!known) throw new ConfigError(`${where}: "${type}" is not an event type; use ${EVENT_TYPES.join(', ')}, or ${EVENT_FAMILIES.map((name) => `${name}.*`).join(', ')}.`);
  }
  return types;
}

function unique(endpoints: EventEndpoint[]): EventEndpoint[] {
  const seen = new Map<string, string>();
  for (const endpoint of endpoints) {
    const first = seen.get(endpoint.id);
    if (first) throw new ConfigError(`${endpoint.setting}: the same URL as ${first}; list a receiver once.`);
    seen.set(endpoint.id, endpoint.setting);
  }
  return endpoints;
}

/** Whether `endpoint` is sent events of `type` (its filter lists it, or its family as `family.*`, or it has none). */
export function endpointWants(endpoint: Pick<EventEndpoint, 'types'>, type: string): boolean {
  if (endpoint.types === null) return true;
  const family = type.split('.')[0];
  return endpoint.types.some((wanted) => wanted === type || (wanted.endsWith('.*') && wanted.slice(0, -2) === family));
}

/** What a look-up of the receivers' hosts found (each a message naming the settings' entries and hosts; undefined: nothing). */
export interface AddressCheck {
  /** A host that resolves to a non-public address: the settings are refused, as for a literal one. */
  refused?: string;
  /** A host that does not resolve (a typo, or DNS not ready yet): its attempts fail until it does. */
  unresolved?: string;
}

/**
 * Outside local mode, whether every receiver's host resolves, and only to public addresses (see
 * ./addresses.ts); in local mode nothing is looked up.
 */
export async function checkEndpointAddresses(endpoints: readonly EventEndpoint[], { local, lookup = systemLookup }: { local: boolean; lookup?: Lookup }): Promise<AddressCheck> {
  if (local) return {};
  const refused: string[] = [];
  const unresolved: string[] = [];
  await Promise.all(endpoints.map(async (endpoint) => {
    const host = endpoint.url.hostname;
    try {
      const nonPublic = (await resolveAndClassify(host, lookup)).filter((verdict) => verdict.refused);
      if (nonPublic.length > 0) refused.push(`${endpoint.setting}: ${host} resolves to ${nonPublic.map((verdict) => `${verdict.address} (${rangeName(verdict.refused!)})`).join(', ')}, not on the public internet`);
    } catch (error) {
      unresolved.push(`${endpoint.setting}: ${host} does not resolve (${(error as NodeJS.ErrnoException).code ?? 'lookup failed'})`);
    }
  }));
  return {
    ...(refused.length > 0 ? { refused: `${refused.sort().join('; ')}. Events go to public receivers only outside local mode.` } : {}),
    ...(unresolved.length > 0 ? { unresolved: `${unresolved.sort().join('; ')}.` } : {}),
  };
}

// Settings refused by the last look-up of their receivers' hosts (checkReceiverAddresses), by the
// settings themselves: getEventEndpoints refuses them as it refuses a literal private address. One
// per process (processWide): instrumentation looks up at startup and runs the schedule, each route
// sends and answers the cron, and each bundle of this module reads the same refusals.
const refusedByAddress = processWide('receivers-refused-by-address', () => new Map<string, string>());
const refusalKey = (config: Config) => JSON.stringify([config.local, config.eventEndpointSettings]);

/**
 * Look up the hosts of `config`'s receivers (startup, and again by the runs while they are refused:
 * recheckRefusedAddresses). One that resolves to a non-public address refuses the settings until a
 * later look-up finds every host public: nothing is sent, the status and the drain (503) name it.
 * One that does not resolve refuses nothing: DNS not ready as an instance starts must not stop the events,
 * and each attempt looks the host up again (lib/events/attempt.ts). Throws ConfigError for settings
 * refused otherwise.
 */
export async function checkReceiverAddresses(config: Config, lookup: Lookup = systemLookup): Promise<AddressCheck> {
  const found = await checkEndpointAddresses(parsedEndpoints(config), { local: config.local, lookup });
  // Lifted only by a look-up that found every host public: one that failed (DNS down for a moment)
  // says nothing new about a host refused before.
  if (found.refused) refusedByAddress.set(refusalKey(config), found.refused);
  else if (!found.unresolved) refusedByAddress.delete(refusalKey(config));
  return found;
}

/** Settings refused by their receivers' addresses are looked up again (a run: the DNS record may be fixed). */
export async function recheckRefusedAddresses(config: Config = getConfig()): Promise<void> {
  if (refusedByAddress.has(refusalKey(config))) await checkReceiverAddresses(config);
}

/** Settings whose receivers the service refuses, and why (a ConfigError's words: the setting and entry, never a secret). */
export interface SettingsRefused {
  refused: string;
}

/** The receivers `config`'s settings name, or why they are refused (what getEventEndpoints would throw). */
export function endpointSettings(config: Config): readonly EventEndpoint[] | SettingsRefused {
  try {
    return getEventEndpoints(config);
  } catch (error) {
    if (error instanceof ConfigError) return { refused: error.message };
    throw error;
  }
}

const parsedByConfig = new WeakMap<Config, EventEndpoint[]>();

/**
 * The receivers of the service's configuration. Throws ConfigError as parseEventEndpoints does, or
 * for a host the last look-up found non-public (checkReceiverAddresses).
 */
export function getEventEndpoints(config: Config = getConfig()): EventEndpoint[] {
  const endpoints = parsedEndpoints(config);
  const refused = refusedByAddress.size > 0 ? refusedByAddress.get(refusalKey(config)) : undefined; // (read by every write)
  if (refused) throw new ConfigError(refused);
  return endpoints;
}

/** The settings' receivers, parsed once per configuration (no DNS). */
function parsedEndpoints(config: Config): EventEndpoint[] {
  let endpoints = parsedByConfig.get(config);
  if (!endpoints) {
    endpoints = parseEventEndpoints(config.eventEndpointSettings, { local: config.local });
    parsedByConfig.set(config, endpoints);
  }
  return endpoints;
}
