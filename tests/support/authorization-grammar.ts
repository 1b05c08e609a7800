/**
 * The Authorization header grammar (RFC 9110 section 11.6.2, RFC 6750 section 2.1):
 *   credentials = auth-scheme 1*SP token68, the scheme case-insensitive ("Bearer", "bearer", "BEARER"),
 *   token68     = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
 * Leading and trailing spaces are not part of a field value (RFC 9110 section 5.5).
 * Every spelling here is sent with a credential that is otherwise right, so only the grammar decides:
 * `accepted` ones must authenticate, every other one must be a 401 (never a 5xx).
 */
export interface GrammarCase {
  name: string;
  header: string;
  accepted: boolean;
}

export function authorizationGrammarCases(credential: string): GrammarCase[] {
  return [
    { name: 'Bearer, one space', header: `Bearer ${credential}`, accepted: true },
    { name: 'lower-case scheme', header: `bearer ${credential}`, accepted: true },
    { name: 'upper-case scheme', header: `BEARER ${credential}`, accepted: true },
    { name: 'mixed-case scheme', header: `bEaReR ${credential}`, accepted: true },
    { name: 'two spaces after the scheme', header: `Bearer  ${credential}`, accepted: true },
    { name: 'five spaces after the scheme', header: `Bearer     ${credential}`, accepted: true },
    { name: 'spaces around the value', header: `  Bearer ${credential}  `, accepted: true },
    { name: 'no credentials', header: 'Bearer', accepted: false },
    { name: 'no credentials, trailing spaces', header: 'Bearer   ', accepted: false },
    { name: 'no space after the scheme', header: `Bearer${credential}`, accepted: false },
    { name: 'a tab after the scheme', header: `Bearer\t${credential}`, accepted: false },
    { name: 'a comma after the scheme', header: `Bearer,${credential}`, accepted: false },
    { name: 'a second word', header: `Bearer ${credential} extra`, accepted: false },
    { name: 'a trailing comma', header: `Bearer ${credential},`, accepted: false },
    { name: 'the credentials twice (a joined repeated header)', header: `Bearer ${credential}, Bearer ${credential}`, accepted: false },
    { name: 'quoted credentials', header: `Bearer "${credential}"`, accepted: false },
    { name: 'an auth-param instead of a token68', header: `Bearer token="${credential}"`, accepted: false },
    { name: 'another scheme', header: `Basic ${credential}`, accepted: false },
    { name: 'a scheme that only starts with Bearer', header: `Bearerx ${credential}`, accepted: false },
    { name: 'no scheme', header: credential, accepted: false },
    { name: 'a character outside token68 inside', header: `Bearer ${credential.slice(0, 4)}!${credential.slice(4)}`, accepted: false },
    { name: 'padding only', header: 'Bearer ===', accepted: false },
    { name: 'a character after the padding', header: `Bearer ${credential}=x`, accepted: false },
    { name: 'a Latin-1 byte', header: `Bearer ${credential}\u00e9`, accepted: false },
    { name: '8 KiB of token68', header: `Bearer ${'A'.repeat(8 * 1024)}`, accepted: false },
  ];
}

/** Token-shaped values that parse as Bearer credentials but are not tokens anyone issued. */
export const MALFORMED_JWTS: { name: string; token: string }[] = (() => {
  const part = (value: unknown) => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url');
  const claims = part({ sub: '6f1c2b9e-3d4a-4b5c-8d7e-9f0a1b2c3d4e', role: 'authenticated', aud: 'authenticated', exp: 4_000_000_000 });
  return [
    { name: 'empty header and claims', token: `${part({})}.${part({})}.${part('x')}` },
    { name: 'header not JSON', token: `${part('not json')}.${claims}.${part('x')}` },
    { name: 'header a JSON array', token: `${part([1, 2])}.${claims}.${part('x')}` },
    { name: 'alg a number', token: `${part({ alg: 256 })}.${claims}.${part('x')}` },
    { name: 'kid an object', token: `${part({ alg: 'ES256', kid: {} })}.${claims}.${part('x')}` },
    { name: 'kid an array', token: `${part({ alg: 'RS256', kid: ['a'] })}.${claims}.${part('x')}` },
    { name: 'unencoded payload (b64: false, crit)', token: `${part({ alg: 'ES256', b64: false, crit: ['b64'] })}.${claims}.${part('x')}` },
    { name: 'unknown crit', token: `${part({ alg: 'ES256', crit: ['exp'] })}.${claims}.${part('x')}` },
    { name: 'jwk embedded in the header', token: `${part({ alg: 'ES256', jwk: { kty: 'EC', crv: 'P-256', x: 'AA', y: 'AA' } })}.${claims}.${part('x')}` },
    { name: 'HS256 without a shared secret configured', token: `${part({ alg: 'HS256', typ: 'JWT' })}.${claims}.${part('x')}` },
    { name: 'alg none', token: `${part({ alg: 'none' })}.${claims}.` },
    { name: 'JWE-shaped (five parts)', token: `${part({ alg: 'dir', enc: 'A256GCM' })}..${part('iv')}.${part('ct')}.${part('tag')}` },
    { name: 'payload not JSON', token: `${part({ alg: 'ES256' })}.${part('{{')}.${part('x')}` },
    { name: 'signature of the wrong length', token: `${part({ alg: 'ES256' })}.${claims}.${part('x'.repeat(7))}` },
    { name: 'two dots only', token: '..' },
  ];
})();
