/**
 * Repeated wrong secrets from one client address: after `maxFailures` in a window of `windowMs`
 * (the window starts at the first failure), the address is refused until the window ends, whatever
 * it sends, the right secret included (otherwise the answer would still tell a guesser when it is
 * right). A pure structure over an injected clock (`now`, epoch ms); lib/auth/operator-secret.ts
 * holds one per instance.
 *
 * Counted in memory, per instance, on purpose: a failure never reaches the database, so an
 * unauthenticated caller cannot turn guesses into writes on the pool every request shares; and the
 * secrets it protects are at least 32 characters (lib/config.ts), which no rate of guessing comes
 * near. Across N instances an address gets at most N x maxFailures tries a window, still nothing
 * against such a secret; the throttle stops a flood early and keeps it out of the secret
 * comparison. At most `maxClients` addresses are remembered (the oldest window is forgotten first),
 * so a flood of addresses costs bounded memory.
 */
export interface FailureThrottleOptions {
  maxFailures: number;
  windowMs: number;
  maxClients: number;
}

interface FailureWindow {
  startedAt: number;
  failures: number;
}

export class FailureThrottle {
  // Insertion order is the order windows started (a new window re-inserts its key): oldest first.
  private readonly windows = new Map<string, FailureWindow>();

  private readonly options: FailureThrottleOptions;

  constructor(options: FailureThrottleOptions) {
    this.options = options;
  }

  /** How long (ms) this client must wait before it may try again; 0 when it may now. */
  blockedForMs(client: string, now: number): number {
    const window = this.current(client, now);
    return window && window.failures >= this.options.maxFailures ? window.startedAt + this.options.windowMs - now : 0;
  }

  recordFailure(client: string, now: number): void {
    let window = this.current(client, now);
    if (!window) {
      this.forgetExpired(now);
      if (this.windows.size >= this.options.maxClients) this.windows.delete(this.windows.keys().next().value!);
      window = { startedAt: now, failures: 0 };
      this.windows.set(client, window);
    }
    window.failures++;
  }

  private current(client: string, now: number): FailureWindow | undefined {
    const window = this.windows.get(client);
    if (window && now - window.startedAt >= this.options.windowMs) {
      this.windows.delete(client);
      return undefined;
    }
    return window;
  }

  private forgetExpired(now: number): void {
    for (const [client, window] of this.windows) {
      if (now - window.startedAt < this.options.windowMs) break;
      this.windows.delete(client);
    }
  }
}

/**
 * The address a request came from, as the server in front of the route reports it in
 * X-Forwarded-For: on Vercel, Vercel's edge, which overwrites the header with the client's public
 * address (https://vercel.com/docs/headers/request-headers: "we currently overwrite the
 * X-Forwarded-For header and do not forward external IPs ... to prevent IP spoofing"); under `next
 * start`, the Node server itself, which replaces whatever the client sent with the address it
 * trusts before Next sees the request (trustedClientAddress, lib/http/before-next.ts). The last
 * entry, then X-Real-IP (Vercel sets it too); 'unknown' when absent.
 */
export function clientAddress(request: Request): string {
  const forwarded = request.headers.get('x-forwarded-for')?.split(',').map((entry) => entry.trim()).filter(Boolean).at(-1);
  return (forwarded ?? request.headers.get('x-real-ip')?.trim() ?? 'unknown').slice(0, 64) || 'unknown';
}

/**
 * The client's address as a server reached over `socketAddress` should trust it: the connection's
 * own address, unless `trustedHops` proxies of the operator's stand in front, each appending the
 * address it saw to X-Forwarded-For; then the entry that many places from the right of the chain
 * (X-Forwarded-For's entries, then the connection), or the chain's first when it is shorter (a
 * request that skipped a proxy). Entries left of that are the client's own words and never read,
 * so a client cannot pick the address its failures are counted under. (The rule of Express's
 * `trust proxy` with a hop count.) An IPv4 address over an IPv6 socket (`::ffff:127.0.0.1`, a
 * server listening on every interface) is written as IPv4, as the same client bound to 127.0.0.1 is.
 */
export function trustedClientAddress(socketAddress: string | undefined, forwardedFor: string | undefined, trustedHops: number): string {
  const forwarded = trustedHops > 0 ? (forwardedFor ?? '').split(',').map((entry) => entry.trim()).filter(Boolean) : [];
  const chain = [...forwarded, socketAddress ?? 'unknown'];
  const address = chain[Math.max(0, chain.length - 1 - trustedHops)]!;
  return address.replace(/^::ffff:(\d{1,3}(\.\d{1,3}){3})$/i, '$1').slice(0, 64) || 'unknown';
}
