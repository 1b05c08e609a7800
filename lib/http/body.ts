import type { z } from 'zod';
import { parseWithSchema } from '../errors.ts';
import { ApiError } from './problem.ts';

export const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;
/** Deeper than any real payload; keeps recursive code downstream (zod, JSON.stringify, drivers) safe. */
export const MAX_JSON_DEPTH = 64;

export interface ReadJsonOptions {
  maxBytes?: number;
}

/**
 * Read a JSON request body defensively. Every way a body can be wrong is a 4xx, never a 5xx:
 * 415 not JSON, 413 over the cap (from Content-Length before reading, or while streaming a chunked
 * body), 400 for bytes that are not UTF-8, text that is not JSON, nesting deeper than
 * MAX_JSON_DEPTH, numbers JSON cannot round-trip (1e400), and strings Postgres cannot store
 * (NUL, lone surrogates) or keys that could reach an object's prototype (`__proto__`).
 */
export async function readJsonBody(request: Request, options: ReadJsonOptions = {}): Promise<unknown> {
  const maxBytes = options.maxBytes ?? DEFAULT_MAX_BODY_BYTES;
  assertJsonContentType(request.headers.get('content-type'));
  const bytes = await readBodyBytes(request, maxBytes);
  return parseJsonText(decodeUtf8(bytes));
}

function assertJsonContentType(contentType: string | null): void {
  const mediaType = contentType?.split(';')[0]?.trim().toLowerCase();
  if (mediaType === 'application/json' || (mediaType && /^application\/[a-z0-9.+-]+\+json$/.test(mediaType))) return;
  throw new ApiError('unsupported_media_type', {
    detail: `Send the body as JSON with "Content-Type: application/json" (got ${contentType ? `"${contentType.slice(0, 100)}"` : 'none'}).`,
  });
}

async function readBodyBytes(request: Request, maxBytes: number): Promise<Uint8Array> {
  const tooLarge = () => new ApiError('payload_too_large', { detail: `The body must be at most ${maxBytes} bytes.` });
  const declared = request.headers.get('content-length');
  if (declared !== null && /^\d+$/.test(declared) && Number(declared) > maxBytes) throw tooLarge();
  if (!request.body) return new Uint8Array(0);

  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > maxBytes) {
      // Stop reading but do not cancel: Node drains the rest and the client sees the 413
      // instead of a reset connection.
      reader.releaseLock();
      throw tooLarge();
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

const utf8 = new TextDecoder('utf-8', { fatal: true });

function decodeUtf8(bytes: Uint8Array): string {
  try {
    // A leading BOM is dropped by the decoder (RFC 8259 lets a parser ignore it).
    return utf8.decode(bytes);
  } catch {
    throw new ApiError('invalid_json', { detail: 'The body is not valid UTF-8.' });
  }
}

/** Parse JSON text with the limits above. Exported for the tests and for non-HTTP callers. */
export function parseJsonText(text: string): unknown {
  if (text.trim() === '') throw new ApiError('invalid_json', { detail: 'The body is empty; send a JSON object.' });
  assertNestingDepth(text);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new ApiError('invalid_json', { detail: `The body is not valid JSON: ${(error as Error).message}` });
  }
  assertStorableJson(value);
  return value;
}

/** Scan brackets outside strings; cheaper and safer than letting a parser or validator recurse. */
function assertNestingDepth(text: string): void {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c /* \ */) i++;
      else if (c === 0x22 /* " */) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (++depth > MAX_JSON_DEPTH) {
        throw new ApiError('invalid_json', { detail: `The JSON is nested deeper than ${MAX_JSON_DEPTH} levels.` });
      }
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) depth--;
  }
}

function assertStorableJson(root: unknown): void {
  const stack: { value: unknown; path: string }[] = [{ value: root, path: '' }];
  while (stack.length > 0) {
    const { value, path } = stack.pop()!;
    if (typeof value === 'string') assertStorableString(value, path || '(body)');
    else if (typeof value === 'number' && !Number.isFinite(value)) {
      throw new ApiError('invalid_json', {
        detail: 'A number is too large to represent.',
        errors: [{ path: path || '(body)', message: 'number out of range' }],
      });
    } else if (Array.isArray(value)) {
      value.forEach((item, index) => stack.push({ value: item, path: joinPath(path, String(index)) }));
    } else if (value !== null && typeof value === 'object') {
      for (const [key, item] of Object.entries(value)) {
        if (key === '__proto__') {
          throw new ApiError('invalid_json', {
            detail: 'The key "__proto__" is not allowed.',
            errors: [{ path: joinPath(path, key), message: 'forbidden key' }],
          });
        }
        assertStorableString(key, joinPath(path, key));
        stack.push({ value: item, path: joinPath(path, key) });
      }
    }
  }
}

function assertStorableString(value: string, path: string): void {
  if (value.includes('\u0000')) {
    throw new ApiError('invalid_json', {
      detail: 'Strings may not contain the NUL character (\\u0000).',
      errors: [{ path, message: 'contains \\u0000' }],
    });
  }
  if (!value.isWellFormed()) {
    throw new ApiError('invalid_json', {
      detail: 'Strings may not contain unpaired UTF-16 surrogates.',
      errors: [{ path, message: 'contains a lone surrogate' }],
    });
  }
}

const joinPath = (path: string, key: string) => (path ? `${path}.${key}` : key);

/** Read a JSON body and validate it in one step (400 `invalid_request` listing every failing path). */
export async function readJsonWith<S extends z.ZodType>(request: Request, schema: S, options?: ReadJsonOptions): Promise<z.output<S>> {
  return parseWithSchema(schema, await readJsonBody(request, options));
}
