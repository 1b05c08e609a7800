import type { z } from 'zod';
import { parseWithSchema } from '../errors.ts';
import { findUnstorableJson, MAX_JSON_DEPTH, nestsDeeperThan, readBoundedBytes } from '../json-limits.ts';
import { ApiError } from './problem.ts';

export const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;
export { MAX_JSON_DEPTH };

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
  assertNotEncoded(request.headers.get('content-encoding'));
  assertPlainTransfer(request.headers.get('transfer-encoding'));
  const bytes = await readBodyBytes(request, maxBytes);
  return parseJsonText(decodeUtf8(bytes));
}

function assertJsonContentType(contentType: string | null): void {
  const [type, ...parameters] = contentType?.split(';') ?? [];
  const mediaType = type?.trim().toLowerCase();
  const shown = contentType ? `"${contentType.slice(0, 100)}"` : 'none';
  if (mediaType !== 'application/json' && !(mediaType && /^application\/[a-z0-9.+-]+\+json$/.test(mediaType))) {
    throw new ApiError('unsupported_media_type', { detail: `Send the body as JSON with "Content-Type: application/json" (got ${shown}).` });
  }
  // JSON is UTF-8 (RFC 8259, section 8.1). A body that says it is another charset would be read as
  // something it is not, so it is refused rather than decoded as UTF-8 regardless; US-ASCII is read
  // the same either way (its bytes are UTF-8's first 128). (Every charset it names: one that names
  // two is read as neither.)
  const charsets = parameters.map((parameter) => /^\s*charset\s*=\s*"?([^";\s]*)"?\s*$/i.exec(parameter)?.[1]).filter((value) => value !== undefined);
  if (charsets.some((charset) => !/^(utf-?8|us-ascii)$/i.test(charset))) {
    throw new ApiError('unsupported_media_type', { detail: `JSON is sent in UTF-8; send "Content-Type: application/json" or "application/json; charset=utf-8" (got ${shown}).` });
  }
}

/**
 * A compressed body (Content-Encoding: gzip, br, ...) is not read as if it were plain: it would be
 * refused as invalid UTF-8, or taken as JSON when it was not compressed after all. 415 is HTTP's
 * answer to a content coding the server does not take (RFC 9110, section 15.5.16).
 */
function assertNotEncoded(contentEncoding: string | null): void {
  if (codingsBesides(contentEncoding, ['identity']).length > 0) {
    throw new ApiError('unsupported_media_type', { detail: `Send the body uncompressed: this service takes no Content-Encoding (got "${contentEncoding!.slice(0, 100)}").` });
  }
}

/**
 * A body sent with a transfer coding other than chunked (Transfer-Encoding: gzip, chunked) reaches
 * the route still compressed: Node's parser takes the chunks apart and nothing more. Refused like
 * a content coding. (RFC 9112, section 6.1 suggests 501 for a transfer coding a server does not
 * understand; a 4xx tells the sender that it is theirs to change, and that sending it again as it
 * is will not help.)
 */
function assertPlainTransfer(transferEncoding: string | null): void {
  if (codingsBesides(transferEncoding, ['chunked', 'identity']).length > 0) {
    throw new ApiError('unsupported_media_type', { detail: `Send the body without compression: this service takes no transfer coding but chunked (got "${transferEncoding!.slice(0, 100)}").` });
  }
}

/** The codings a Content-Encoding or Transfer-Encoding list names (any case), but those in `allowed`. */
function codingsBesides(list: string | null, allowed: string[]): string[] {
  return list?.split(',').map((coding) => coding.trim().toLowerCase()).filter((coding) => coding !== '' && !allowed.includes(coding)) ?? [];
}

async function readBodyBytes(request: Request, maxBytes: number): Promise<Uint8Array> {
  const tooLarge = () => new ApiError('payload_too_large', { detail: `The body must be at most ${maxBytes} bytes.` });
  const declared = request.headers.get('content-length');
  if (declared !== null && /^\d+$/.test(declared) && Number(declared) > maxBytes) throw tooLarge();
  // Over the cap: stop reading but do not cancel, so Node drains the rest and the client sees the
  // 413 instead of a reset connection.
  // (A body read twice is this code's mistake, not the client's: thrown as it is.)
  if (request.bodyUsed) throw new Error('The request body was read already.');
  let bytes: Uint8Array | undefined;
  try {
    bytes = await readBoundedBytes(request.body, maxBytes, 'release');
  } catch {
    // The client closed the connection mid-body, or sent a broken chunked encoding: its request,
    // not a fault of ours (no 500, no error in the log).
    throw new ApiError('invalid_request', { detail: 'The body could not be read to its end: the connection closed, or its chunked encoding is broken. Nothing was changed.' });
  }
  if (!bytes) throw tooLarge();
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
  if (nestsDeeperThan(text, MAX_JSON_DEPTH)) throw new ApiError('invalid_json', { detail: `The JSON is nested deeper than ${MAX_JSON_DEPTH} levels.` });
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new ApiError('invalid_json', { detail: `The body is not valid JSON: ${(error as Error).message}` });
  }
  const unstorable = findUnstorableJson(value);
  if (unstorable) throw new ApiError('invalid_json', { detail: unstorable.detail, errors: [{ path: unstorable.path, message: unstorable.message }] });
  return value;
}

/** Read a JSON body and validate it in one step (400 `invalid_request` listing every failing path). */
export async function readJsonWith<S extends z.ZodType>(request: Request, schema: S, options?: ReadJsonOptions): Promise<z.output<S>> {
  return parseWithSchema(schema, await readJsonBody(request, options));
}
