import { lookup } from 'node:dns/promises';
import ipaddr from 'ipaddr.js';

/**
 * Whether an event receiver's address is on the public internet. Events are POSTed to URLs an
 * operator typed, from inside the deployment's network: a URL that is, or resolves to, a private,
 * loopback, link-local (cloud metadata at 169.254.169.254), CGNAT, unique-local or unspecified
 * address would make the service send signed requests into its own network. Outside local mode
 * such a receiver is refused, at startup and again before every attempt (DNS answers change).
 *
 * The ranges are ipaddr.js's (RFC 6890's special-purpose registries): only what it calls `unicast`
 * counts as public, so every special range is refused, the ones named above and also multicast,
 * documentation, benchmarking, NAT64, 6to4 and Teredo (those two embed an IPv4 address that may be
 * private). An IPv4-mapped IPv6 address (::ffff:10.0.0.1) is judged as the IPv4 address it is.
 */

export interface AddressVerdict {
  address: string;
  /** null: public; else the range it is in (`private`, `loopback`, `linkLocal`, ...). */
  refused: string | null;
}

/** The range of a literal IP address that makes it not public, or null when it is public. Throws on a string that is not an IP address. */
export function nonPublicRange(address: string): string | null {
  const parsed = ipaddr.process(address.replace(/^\[|\]$/g, ''));
  const range = parsed.range();
  if (range !== 'unicast') return range;
  // IPv4-compatible addresses (::a.b.c.d, deprecated by RFC 4291) are "unicast" to ipaddr.js, but
  // carry an IPv4 address in their low bits: never a receiver's.
  if (parsed.kind() === 'ipv6' && (parsed as ipaddr.IPv6).parts.slice(0, 6).every((part) => part === 0)) return 'ipv4Compatible';
  return null;
}

// ipaddr.js's names of its ranges, as an operator reads them in a refusal.
const RANGE_WORDS: Record<string, string> = {
  private: 'private', loopback: 'loopback', linkLocal: 'link-local', carrierGradeNat: 'carrier-grade NAT', uniqueLocal: 'unique local',
  unspecified: 'unspecified', multicast: 'multicast', broadcast: 'broadcast', reserved: 'reserved', benchmarking: 'benchmarking',
  rfc6052: 'NAT64 (RFC 6052)', rfc6145: 'IPv4-translated (RFC 6145)', '6to4': '6to4', teredo: 'Teredo', ipv4Mapped: 'IPv4-mapped',
  ipv4Compatible: 'IPv4-compatible', deprecatedSiteLocal: 'site-local (deprecated)', deprecatedOrchid: 'ORCHID (deprecated)',
  orchid2: 'ORCHIDv2', amt: 'AMT', as112: 'AS112', as112v6: 'AS112', discard: 'discard-only',
  droneRemoteIdProtocolEntityTags: 'drone remote ID (DRIP)', segmentRouting: 'segment routing (SRv6)',
};

/** "private", "carrier-grade NAT", "link-local": a refused range in words. */
export function rangeName(range: string): string {
  return RANGE_WORDS[range] ?? range;
}

/** "a private address", "an unspecified address", "a carrier-grade NAT address". */
export function rangeInWords(range: string): string {
  const words = rangeName(range);
  return `${/^([aeio]|un(?!i))/i.test(words) ? 'an' : 'a'} ${words} address`; // (a unique local, an unspecified)
}

/** Whether `host` (a URL's hostname; IPv6 in brackets or not) is a literal IP address rather than a name. */
export function isIpLiteral(host: string): boolean {
  return ipaddr.isValid(host.replace(/^\[|\]$/g, ''));
}

export type Lookup = (host: string) => Promise<string[]>;

/** Every address the system resolver gives for `host` (A and AAAA), as fetch would connect to one of them. */
export const systemLookup: Lookup = async (host) => (await lookup(host, { all: true, verbatim: true })).map((entry) => entry.address);

/**
 * The addresses `host` is or resolves to, each with its verdict. A literal IP address is not looked
 * up. Rejects when the name does not resolve (the caller says what that means where it asks).
 */
export async function resolveAndClassify(host: string, resolve: Lookup = systemLookup): Promise<AddressVerdict[]> {
  const addresses = isIpLiteral(host) ? [host.replace(/^\[|\]$/g, '')] : await resolve(host);
  return addresses.map((address) => ({ address, refused: nonPublicRange(address) }));
}
