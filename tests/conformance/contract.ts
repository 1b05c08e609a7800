import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';

/**
 * The served OpenAPI document as a checker, in the spirit of Schemathesis's checks: every answer's
 * status is documented, its content type is one the document lists, its body is valid against
 * the documented schema (Ajv, JSON Schema 2020-12, which OpenAPI 3.1 uses), the documented headers
 * are there and valid, a problem's `code` is one listed for its status, and nothing is a 5xx.
 * Requests are judged by the same document: `requestVerdict` says whether its schema accepts a body.
 * OPTIONS, HEAD and the 405 of a method a path lacks are documented once for every path, in the
 * document's `x-path-methods`: answers to them are judged by it, their `Allow` by its rule.
 */

// ajv-formats is CommonJS; its default export is the plugin function.
const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ?? addFormatsModule) as (ajv: Ajv2020) => Ajv2020;

export type OpenApiDocument = {
  openapi: string;
  paths: Record<string, PathItem>;
  components: { schemas: Record<string, unknown>; headers?: Record<string, HeaderObject> };
  'x-path-methods'?: PathMethods;
};
/** What every path answers besides its operations (lib/openapi/document.ts methodsOfEveryPath). */
export interface PathMethods {
  description: string;
  allow: { order: string[]; headWithGet: boolean };
  options: { responses: Record<string, ResponseObject> };
  otherMethods: { methods: string[]; responses: Record<string, ResponseObject> };
}
type PathItem = Record<string, unknown> & { parameters?: unknown[] };
export interface HeaderObject {
  required?: boolean;
  schema: Record<string, unknown>;
  $ref?: string;
}
export interface ResponseObject {
  description: string;
  headers?: Record<string, HeaderObject | { $ref: string }>;
  content?: Record<string, { schema: unknown }>;
  'x-problem-codes'?: string[];
}
export interface OperationObject {
  operationId: string;
  security: Record<string, string[]>[];
  requestBody?: { description?: string; content: Record<string, { schema: unknown; example?: unknown }> };
  responses: Record<string, ResponseObject>;
}

export const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch'] as const;

/** One answer as the suite saw it on the wire. */
export interface Observed {
  status: number;
  headers: Headers;
  text: string;
}

export interface Contract {
  document: OpenApiDocument;
  /** Every documented (path, method) pair. */
  operations: { path: string; method: string; operation: OperationObject }[];
  operation(method: string, path: string): OperationObject | undefined;
  /**
   * The violations of the document by this answer to `method path` (empty when it conforms). A 5xx
   * is one, unless `dependencyDown` (the test made a dependency fail) and the document lists it.
   */
  checkResponse(method: string, path: string, observed: Observed, options?: { dependencyDown?: boolean }): string[];
  /** Does the document's request schema accept this body? With Ajv's reasons when not. */
  requestVerdict(method: string, path: string, body: unknown): { valid: boolean; errors: string[] };
  /** The request body schema of an operation, resolved for generating bodies. */
  requestSchema(method: string, path: string): Record<string, unknown> | undefined;
  /** Follow a local `$ref` in the document. */
  resolve(ref: string): unknown;
}

const DOCUMENT_ID = 'urn:conformance:openapi';

/** A `text/event-stream` media type as the document gives it: each event's `data` schema by name. */
interface EventStreamMedia {
  schema: unknown;
  'x-events'?: Record<string, unknown>;
}

export interface EventStreamBlock {
  event?: string;
  data?: string;
  retry?: string;
  comments: string[];
  unknownFields: string[];
}

/**
 * The complete blocks of a server-sent events text (WHATWG HTML, "Interpreting an event stream"):
 * lines `field: value` or `:comment`, a block ended by a blank line; a last block without its
 * blank line is not complete (the reader stopped mid-stream) and is left out.
 */
export function parseEventStream(text: string): EventStreamBlock[] {
  const blocks: EventStreamBlock[] = [];
  let block: EventStreamBlock = { comments: [], unknownFields: [] };
  const lines = text.split(/\r\n|\r|\n/);
  lines.pop(); // the text after the last line break: an unfinished line
  for (const line of lines) {
    if (line === '') {
      if (block.event !== undefined || block.data !== undefined || block.retry !== undefined || block.comments.length > 0 || block.unknownFields.length > 0) blocks.push(block);
      block = { comments: [], unknownFields: [] };
      continue;
    }
    if (line.startsWith(':')) {
      block.comments.push(line.slice(1).trim());
      continue;
    }
    const at = line.indexOf(':');
    const field = at < 0 ? line : line.slice(0, at);
    const value = at < 0 ? '' : line.slice(at + 1).replace(/^ /, '');
    if (field === 'data') block.data = block.data === undefined ? value : `${block.data}\n${value}`;
    else if (field === 'event') block.event = value;
    else if (field === 'retry') block.retry = value;
    else if (field !== 'id') block.unknownFields.push(field);
  }
  return blocks;
}

/** JSON pointer escape of one segment. */
const escape = (segment: string) => segment.replace(/~/g, '~0').replace(/\//g, '~1');

export function buildContract(document: OpenApiDocument): Contract {
  const ajv = new Ajv2020({ allErrors: true, strict: true, strictTypes: false, validateFormats: true });
  addFormats(ajv);
  // The document is one resource: its `$ref`s (`#/components/...`) resolve against it. These are
  // its non-schema members (OpenAPI, not JSON Schema): known to Ajv so strict mode accepts them.
  for (const keyword of ['openapi', 'info', 'servers', 'tags', 'paths', 'webhooks', 'components', 'x-path-methods']) ajv.addKeyword({ keyword });
  ajv.addSchema({ ...document, $id: DOCUMENT_ID });

  const compiled = new Map<string, ValidateFunction>();
  const validatorAt = (pointer: string[]): ValidateFunction => {
    const ref = `${DOCUMENT_ID}#/${pointer.map(escape).join('/')}`;
    let validate = compiled.get(ref);
    if (!validate) {
      validate = ajv.compile({ $ref: ref });
      compiled.set(ref, validate);
    }
    return validate;
  };

  const resolve = (ref: string): unknown =>
    ref.replace(/^#\//, '').split('/').reduce<unknown>((node, key) => (node as Record<string, unknown> | undefined)?.[key.replace(/~1/g, '/').replace(/~0/g, '~')], document);

  const operations = Object.entries(document.paths).flatMap(([path, item]) =>
    HTTP_METHODS.filter((method) => item[method]).map((method) => ({ path, method, operation: item[method] as OperationObject })),
  );
  const documented = (method: string, path: string) => document.paths[path]?.[method.toLowerCase()] as OperationObject | undefined;
  const pathMethods = document['x-path-methods'];

  /** The `Allow` a path must send, by the document's rule: its operations, HEAD with GET, OPTIONS, in the stated order. */
  const allowOf = (path: string): string | undefined => {
    if (!pathMethods || !document.paths[path]) return undefined;
    const has = (method: string) => documented(method, path) !== undefined;
    return pathMethods.allow.order.filter((method) => has(method) || (method === 'HEAD' && pathMethods.allow.headWithGet && has('get')) || method === 'OPTIONS').join(', ');
  };

  /**
   * Where the document says what `method path` answers: the path's own operation; HEAD as its GET;
   * OPTIONS, and a method of `otherMethods` the path lacks, from `x-path-methods`.
   */
  const answersOf = (method: string, path: string): { op: OperationObject; pointer: string[]; allow?: string } | undefined => {
    const lower = method.toLowerCase();
    const own = documented(lower, path);
    if (own) return { op: own, pointer: ['paths', path, lower] };
    if (!document.paths[path] || !pathMethods) return undefined;
    if (lower === 'head' && pathMethods.allow.headWithGet && documented('get', path)) return { op: documented('get', path)!, pointer: ['paths', path, 'get'] };
    const synthesized = (responses: Record<string, ResponseObject>) => ({ operationId: `${lower} (every path)`, security: [], responses });
    if (lower === 'options') return { op: synthesized(pathMethods.options.responses), pointer: ['x-path-methods', 'options'], allow: allowOf(path) };
    if (pathMethods.otherMethods.methods.includes(method.toUpperCase())) return { op: synthesized(pathMethods.otherMethods.responses), pointer: ['x-path-methods', 'otherMethods'], allow: allowOf(path) };
    return undefined;
  };
  const operation = (method: string, path: string) => answersOf(method, path)?.op;

  function checkResponse(method: string, path: string, observed: Observed, options: { dependencyDown?: boolean } = {}): string[] {
    const where = `${method.toUpperCase()} ${path} -> ${observed.status}`;
    const answers = answersOf(method, path);
    if (!answers) return [`${where}: ${method.toUpperCase()} is not documented for ${path}`];
    const { op, pointer: base } = answers;
    const problems: string[] = [];
    if (observed.status >= 500 && !options.dependencyDown) problems.push(`${where}: a 5xx (${observed.text.slice(0, 200)})`);
    const response = op.responses[String(observed.status)];
    if (!response) return [...problems, `${where}: status not documented (documented: ${Object.keys(op.responses).join(', ')}); body ${observed.text.slice(0, 200)}`];

    for (const [name, declared] of Object.entries(response.headers ?? {})) {
      const header = ('$ref' in declared && declared.$ref ? resolve(declared.$ref) : declared) as HeaderObject;
      const value = observed.headers.get(name);
      if (value === null) {
        if (header.required) problems.push(`${where}: required header ${name} missing`);
        continue;
      }
      const pointer = '$ref' in declared && declared.$ref
        ? [...declared.$ref.replace(/^#\//, '').split('/'), 'schema']
        : [...base, 'responses', String(observed.status), 'headers', name, 'schema'];
      const validate = validatorAt(pointer);
      // A header is text; a schema of type integer or number describes the number it spells (style: simple).
      const numeric = /^-?\d+(\.\d+)?$/.test(value) && ['integer', 'number'].includes(String(header.schema?.type));
      if (!validate(numeric ? Number(value) : value)) problems.push(`${where}: header ${name}: ${JSON.stringify(value)} ${ajv.errorsText(validate.errors)}`);
      if (name.toLowerCase() === 'allow' && answers.allow !== undefined && value !== answers.allow) problems.push(`${where}: header Allow: ${JSON.stringify(value)}, the document's rule says ${JSON.stringify(answers.allow)}`);
    }

    const contentType = observed.headers.get('content-type');
    const mediaType = contentType?.split(';')[0]!.trim().toLowerCase();
    const content = response.content ?? {};
    const hasBody = method.toLowerCase() !== 'head' && observed.text.length > 0;
    if (Object.keys(content).length === 0) {
      if (hasBody) problems.push(`${where}: a body where the document has none (${contentType}): ${observed.text.slice(0, 200)}`);
      return problems;
    }
    if (method.toLowerCase() === 'head') return problems;
    if (!mediaType || !content[mediaType]) return [...problems, `${where}: content type ${contentType} not documented (documented: ${Object.keys(content).join(', ')})`];
    if (mediaType === 'text/event-stream') return [...problems, ...checkEventStream(where, [...base, 'responses', String(observed.status), 'content', mediaType], content[mediaType] as EventStreamMedia, observed.text)];
    let body: unknown;
    try {
      body = JSON.parse(observed.text);
    } catch {
      return [...problems, `${where}: ${mediaType} body is not JSON: ${observed.text.slice(0, 200)}`];
    }
    const validate = validatorAt([...base, 'responses', String(observed.status), 'content', mediaType, 'schema']);
    if (!validate(body)) problems.push(`${where}: body does not match the ${mediaType} schema: ${ajv.errorsText(validate.errors)}; body ${observed.text.slice(0, 300)}`);
    if (mediaType === 'application/problem+json') {
      const problem = body as { code?: string; status?: number };
      if (!response['x-problem-codes']?.includes(problem.code ?? '')) problems.push(`${where}: problem code ${problem.code} not listed for this status (listed: ${response['x-problem-codes']?.join(', ')})`);
      if (problem.status !== observed.status) problems.push(`${where}: problem status ${problem.status} is not the HTTP status`);
    }
    return problems;
  }

  /**
   * A server-sent events stream (as much of it as was read): every complete block's fields are ones
   * the format has, and each event's name is one the document lists in `x-events`, its `data`
   * JSON valid against that schema.
   */
  function checkEventStream(where: string, pointer: string[], media: EventStreamMedia, text: string): string[] {
    const problems: string[] = [];
    for (const block of parseEventStream(text)) {
      if (block.unknownFields.length > 0) problems.push(`${where}: event stream lines the format does not have: ${block.unknownFields.join(', ')}`);
      if (block.data === undefined) continue;
      const name = block.event ?? 'message';
      if (!media['x-events']?.[name]) {
        problems.push(`${where}: event "${name}" not documented (documented: ${Object.keys(media['x-events'] ?? {}).join(', ')})`);
        continue;
      }
      let data: unknown;
      try {
        data = JSON.parse(block.data);
      } catch {
        problems.push(`${where}: event "${name}" data is not JSON: ${block.data.slice(0, 200)}`);
        continue;
      }
      const validate = validatorAt([...pointer, 'x-events', name]);
      if (!validate(data)) problems.push(`${where}: event "${name}" data does not match its schema: ${ajv.errorsText(validate.errors)}; data ${block.data.slice(0, 300)}`);
    }
    return problems;
  }

  function requestVerdict(method: string, path: string, body: unknown) {
    const op = documented(method, path);
    if (!op?.requestBody) return { valid: body === undefined, errors: body === undefined ? [] : ['no request body is documented'] };
    const validate = validatorAt(['paths', path, method.toLowerCase(), 'requestBody', 'content', 'application/json', 'schema']);
    const valid = validate(body) as boolean;
    return { valid, errors: valid ? [] : (validate.errors ?? []).map((error) => `${error.instancePath || '(body)'} ${error.message}`) };
  }

  return {
    document,
    operations,
    operation,
    checkResponse,
    requestVerdict,
    requestSchema: (method, path) => documented(method, path)?.requestBody?.content['application/json']?.schema as Record<string, unknown> | undefined,
    resolve,
  };
}
