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
 * The address a request came from, as the platform in front reports it: the last entry of
 * X-Forwarded-For, the one the nearest proxy wrote (Vercel overwrites the header with the client's
 * address; a proxy like nginx appends the address it saw; `next start` alone fills it from the
 * socket when a client sent none). A client reaching `next start` directly can write its own
 * header, so such a deployment should sit behind a proxy that sets it. 'unknown' when absent.
 */
export function clientAddress(request: Request): string {
  const forwarded = request.headers.get('x-forwarded-for')?.split(',').map((entry) => entry.trim()).filter(Boolean).at(-1);
  return (forwarded ?? request.headers.get('x-real-ip')?.trim() ?? 'unknown').slice(0, 64) || 'unknown';
}
