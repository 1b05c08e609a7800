/**
 * What any JSON this service takes in must hold before it goes near zod, a driver or Postgres,
 * whoever sent it: a request body (lib/http/body.ts: 4xx to the sender) or an answer of an outside
 * service (lib/revenuecat/client.ts: 502, never the caller's fault). Pure functions over bytes and
 * values; each caller says what a breach means to it.
 */

/** Deeper than any real payload; keeps recursive code downstream (zod, JSON.stringify, drivers) safe. */
export const MAX_JSON_DEPTH = 64;

/**
 * Read a stream to its end, but never more than `maxBytes`: undefined once it goes over. `onOverflow`
 * says what happens to the rest: `release` leaves it to the server to drain (a request body, so the
 * client sees the answer rather than a reset connection), `cancel` closes it (an outside service's
 * answer we no longer want).
 */
export async function readBoundedBytes(
  stream: ReadableStream<Uint8Array> | null,
  maxBytes: number,
  onOverflow: 'release' | 'cancel',
): Promise<Uint8Array | undefined> {
  if (!stream) return new Uint8Array(0);
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > maxBytes) {
      if (onOverflow === 'cancel') await reader.cancel();
      else reader.releaseLock();
      return undefined;
    }
    chunks.push(value);
  }
  const bytes = new Uint8Array(total);
  let offset = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return bytes;
}

/** Whether JSON text nests deeper than `max`: brackets counted outside strings, before any parser recurses. */
export function nestsDeeperThan(text: string, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c /* \ */) i++;
      else if (c === 0x22 /* " */) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (++depth > max) return true;
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) depth--;
  }
  return false;
}

export interface UnstorableJson {
  /** Dotted path of the value or key (`(body)` for the root). */
  path: string;
  /** What is wrong there, for a field error. */
  message: string;
  /** The rule it breaks, as one sentence. */
  detail: string;
}

/**
 * The first thing in a parsed JSON value that cannot be stored or handled safely: a string or key
 * Postgres cannot hold (NUL, an unpaired surrogate: jsonb refuses both), a number JSON cannot
 * round-trip (1e400 parses to Infinity), or a key that could reach an object's prototype
 * (`__proto__`). Undefined when there is none.
 */
export function findUnstorableJson(root: unknown): UnstorableJson | undefined {
  const stack: { value: unknown; path: string }[] = [{ value: root, path: '' }];
  while (stack.length > 0) {
    const { value, path } = stack.pop()!;
    if (typeof value === 'string') {
      const problem = unstorableString(value, path || '(body)');
      if (problem) return problem;
    } else if (typeof value === 'number' && !Number.isFinite(value)) {
      return { path: path || '(body)', message: 'too large a number', detail: 'A number is too large to represent.' };
    } else if (Array.isArray(value)) {
      value.forEach((item, index) => stack.push({ value: item, path: joinPath(path, String(index)) }));
    } else if (value !== null && typeof value === 'object') {
      for (const [key, item] of Object.entries(value)) {
        if (key === '__proto__') return { path: joinPath(path, key), message: 'forbidden key', detail: 'The key "__proto__" is not allowed.' };
        const problem = unstorableString(key, joinPath(path, key));
        if (problem) return problem;
        stack.push({ value: item, path: joinPath(path, key) });
      }
    }
  }
  return undefined;
}

function unstorableString(value: string, path: string): UnstorableJson | undefined {
  if (value.includes('\u0000')) return { path, message: 'contains \\u0000', detail: 'Strings may not contain the NUL character (\\u0000).' };
  if (!value.isWellFormed()) return { path, message: 'contains a lone surrogate', detail: 'Strings may not contain unpaired UTF-16 surrogates.' };
  return undefined;
}

const joinPath = (path: string, key: string) => (path ? `${path}.${key}` : key);
