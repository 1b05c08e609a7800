import { TOKEN68 } from '../config.ts';

/**
 * The credentials of an `Authorization: Bearer <credentials>` header, by the one grammar every
 * caller of this service is held to (RFC 9110 section 11.6.2, RFC 6750 section 2.1):
 *   credentials = auth-scheme 1*SP token68, the scheme matched case-insensitively,
 *   token68     = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
 * Spaces and tabs around the whole value are not part of it (RFC 9110 section 5.5).
 * Session tokens and the billing webhook's secret are both read with it, so "bearer   x" means the
 * same everywhere and anything else (another scheme, a tab, a comma, quotes) is simply not a Bearer
 * credential: the caller answers 401.
 */
const BEARER = new RegExp(`^bearer +(${TOKEN68})$`, 'i');

/** The token68 of a Bearer header; null when the header is absent, empty or not of that grammar. */
export function bearerCredentials(header: string | null): string | null {
  if (header === null) return null;
  return BEARER.exec(header.replace(/^[ \t]+|[ \t]+$/g, ''))?.[1] ?? null;
}
