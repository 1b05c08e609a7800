/**
 * The character rules EIP-4361 borrows from RFC 3986 (URIs) and RFC 3339 (timestamps), as anchored
 * regular expressions built from the ABNF. The sign-in message parser uses them to check every field
 * exactly; lenient "anything up to the end of the line" parsers are what let malformed messages through.
 */

const UNRESERVED = "A-Za-z0-9\\-._~";
const SUB_DELIMS = "!$&'()*+,;=";
const PCT_ENCODED = '%[0-9A-Fa-f]{2}';
const PCHAR = `(?:[${UNRESERVED}${SUB_DELIMS}:@]|${PCT_ENCODED})`;

const SCHEME = '[A-Za-z][A-Za-z0-9+\\-.]*';
const USERINFO = `(?:[${UNRESERVED}${SUB_DELIMS}:]|${PCT_ENCODED})*`;
// RFC 3986 forbids leading zeros in dec-octet; the SIWE reference vectors accept them inside IPv6
// literals ("[::000.000.010.001]"), and so do we: it cannot change which host a URI names.
const DEC_OCTET = '(?:25[0-5]|2[0-4][0-9]|[01]?[0-9]?[0-9])';
const IPV4_ADDRESS = `${DEC_OCTET}\\.${DEC_OCTET}\\.${DEC_OCTET}\\.${DEC_OCTET}`;
const H16 = '[0-9A-Fa-f]{1,4}';
const LS32 = `(?:${H16}:${H16}|${IPV4_ADDRESS})`;
const IPV6_ADDRESS = `(?:${[
  `(?:${H16}:){6}${LS32}`,
  `::(?:${H16}:){5}${LS32}`,
  `(?:${H16})?::(?:${H16}:){4}${LS32}`,
  `(?:(?:${H16}:){0,1}${H16})?::(?:${H16}:){3}${LS32}`,
  `(?:(?:${H16}:){0,2}${H16})?::(?:${H16}:){2}${LS32}`,
  `(?:(?:${H16}:){0,3}${H16})?::${H16}:${LS32}`,
  `(?:(?:${H16}:){0,4}${H16})?::${LS32}`,
  `(?:(?:${H16}:){0,5}${H16})?::${H16}`,
  `(?:(?:${H16}:){0,6}${H16})?::`,
].join('|')})`;
const IPVFUTURE = `v[0-9A-Fa-f]+\\.[${UNRESERVED}${SUB_DELIMS}:]+`;
const IP_LITERAL = `\\[(?:${IPV6_ADDRESS}|${IPVFUTURE})\\]`;
const REG_NAME = `(?:[${UNRESERVED}${SUB_DELIMS}]|${PCT_ENCODED})*`;
const HOST = `(?:${IP_LITERAL}|${IPV4_ADDRESS}|${REG_NAME})`;
const PORT = '[0-9]*';
const AUTHORITY = `(?:${USERINFO}@)?${HOST}(?::${PORT})?`;
const SEGMENT = `${PCHAR}*`;
const SEGMENT_NZ = `${PCHAR}+`;
const PATH_ABEMPTY = `(?:/${SEGMENT})*`;
const PATH_ABSOLUTE = `/(?:${SEGMENT_NZ}(?:/${SEGMENT})*)?`;
const PATH_ROOTLESS = `${SEGMENT_NZ}(?:/${SEGMENT})*`;
const HIER_PART = `(?://${AUTHORITY}${PATH_ABEMPTY}|${PATH_ABSOLUTE}|${PATH_ROOTLESS}|)`;
const QUERY = `(?:${PCHAR}|[/?])*`;
const URI = `${SCHEME}:${HIER_PART}(?:\\?${QUERY})?(?:#${QUERY})?`;

const anchored = (source: string) => new RegExp(`^${source}$`);

/** Single ABNF rules, exported so the tests can hold them against the reference character vectors. */
export const ABNF_RULES = {
  scheme: anchored(SCHEME),
  userinfo: anchored(USERINFO),
  'reg-name': anchored(REG_NAME),
  IPvFuture: anchored(IPVFUTURE),
  'segment-nz': anchored(SEGMENT_NZ),
  fragment: anchored(QUERY),
  'pct-encoded': anchored(PCT_ENCODED),
  // EIP-4361: statement = *( reserved / unreserved / " " ), one line, no percent-encoding.
  statement: /^[A-Za-z0-9\-._~:/?#[\]@!$&'()*+,;= ]*$/,
  // EIP-4361: request-id = *pchar
  'request-id': anchored(`${PCHAR}*`),
  // EIP-4361: nonce = 8*( ALPHA / DIGIT )
  nonce: /^[A-Za-z0-9]{8,}$/,
  'chain-id': /^[0-9]+$/,
} as const;

export type AbnfRule = keyof typeof ABNF_RULES;

export function matchesRule(rule: AbnfRule, value: string): boolean {
  return ABNF_RULES[rule].test(value);
}

const URI_PATTERN = anchored(URI);

/** An absolute URI per RFC 3986 (scheme required). */
export function isUri(value: string): boolean {
  return URI_PATTERN.test(value);
}

const DOMAIN_PATTERN = new RegExp(`^(?:(${SCHEME})://)?((?:${USERINFO}@)?(${HOST})(?::${PORT})?)$`);

/**
 * The domain part of a sign-in message header: `[ scheme "://" ] authority`, with a host that is
 * not empty (an empty authority is legal in a URI, but names no site to bind the signature to).
 */
export function parseDomain(value: string): { scheme?: string; domain: string } | undefined {
  const match = DOMAIN_PATTERN.exec(value);
  if (!match || match[3] === '') return undefined;
  return { scheme: match[1], domain: match[2]! };
}

const DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?(?:[Zz]|([+-])(\d{2}):(\d{2}))$/;

/**
 * Milliseconds since the epoch for an RFC 3339 date-time, or undefined when the text is not one or
 * names a day that does not exist (2022-02-31). `Date.parse` accepts far more than RFC 3339 and
 * rolls impossible dates over, so it is not used for validation.
 */
export function parseRfc3339(value: string): number | undefined {
  const match = DATE_TIME.exec(value);
  if (!match) return undefined;
  const [year, month, day, hour, minute, second] = match.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) return undefined;
  // RFC 3339 allows a leap second (60); it counts as the first instant of the next minute here.
  if (hour > 23 || minute > 59 || second > 60) return undefined;
  let offsetMinutes = 0;
  if (match[8]) {
    const offsetHours = Number(match[9]);
    const offsetMins = Number(match[10]);
    if (offsetHours > 23 || offsetMins > 59) return undefined;
    offsetMinutes = (match[8] === '-' ? -1 : 1) * (offsetHours * 60 + offsetMins);
  }
  const millis = match[7] ? Math.floor(Number(`0${match[7]}`) * 1000) : 0;
  const utc = new Date(0);
  utc.setUTCFullYear(year, month - 1, day);
  utc.setUTCHours(hour, minute, second, millis);
  return utc.getTime() - offsetMinutes * 60_000;
}

function daysInMonth(year: number, month: number): number {
  if (month === 2) return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0 ? 29 : 28;
  return [4, 6, 9, 11].includes(month) ? 30 : 31;
}
