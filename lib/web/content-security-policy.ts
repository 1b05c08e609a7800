/**
 * The pages' Content-Security-Policy (`/`, `/docs`): scripts only with this response's nonce
 * (Next puts it on its own scripts, 'strict-dynamic' lets them load the page's chunks), no inline
 * style, nothing framed, no plugins, forms and fetches only to this site (and the Supabase project
 * the sign-in form and the account's live updates talk to). Each page response gets a fresh nonce
 * from the proxy.
 */
export interface PolicyOptions {
  nonce: string;
  /** Origins the page's scripts may call besides this site (the Supabase project: Auth and Realtime). */
  connectTo?: string[];
  /** `next dev` evaluates code and injects styles for hot reload and its overlay; a production build never does. */
  development?: boolean;
}

export function contentSecurityPolicy({ nonce, connectTo = [], development = false }: PolicyOptions): string {
  return [
    "default-src 'self'",
    `script-src 'self' 'nonce-${nonce}' 'strict-dynamic'${development ? " 'unsafe-eval'" : ''}`,
    // Next's development overlay and dev tools inject style elements without the nonce (33 refused
    // styles and an unstyled box on the page otherwise); a production build injects none.
    development ? "style-src 'self' 'unsafe-inline'" : `style-src 'self' 'nonce-${nonce}'`,
    // Swagger UI draws its icons as data: SVG images.
    "img-src 'self' data: blob:",
    "font-src 'self'",
    `connect-src ${["'self'", ...connectTo].join(' ')}`,
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
  ].join('; ');
}

/** A nonce: 128 random bits, base64 (CSP nonces should be at least 128 bits, unguessable, used once). */
export function newNonce(): string {
  return Buffer.from(crypto.getRandomValues(new Uint8Array(16))).toString('base64');
}
