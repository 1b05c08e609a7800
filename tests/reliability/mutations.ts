import fc from 'fast-check';

/**
 * fast-check arbitraries that turn a valid request body into a hostile one: structural mutations
 * (delete, replace, insert, wrap, stringify a node anywhere in the JSON tree), text mutations of the
 * serialised body (truncate, insert, delete, repeat a slice), or random JSON instead of the body.
 */

/** Values that have broken parsers, validators and SQL before. */
const nasty = fc.constantFrom<unknown>(
  '', ' ', 'x'.repeat(300), 'x'.repeat(20_000), '\u0000', 'a\u0000b', '\ud800', '\udfff', '\u202e', '\ufeff', '💥', "'; drop table x; --", '\\', '"',
  -1, 0, -0, 1.5, 1e308, -1e308, 2 ** 53 + 1, 2 ** 63, Number.MAX_SAFE_INTEGER, true, false, null, [], {}, [[[[[]]]]],
  '2026-11-21T17:59:00Z', '9999-12-31T23:59:59Z', '1969-12-31T23:59:59Z', '2026-02-30T00:00:00Z', 'now', '0x', '0x00', 'NaN', 'Infinity',
  'INITIAL_PURCHASE', 'EXPIRATION', 'TRANSFER', 'evm', 'solana', 'mainnet', '$RCAnonymousID:x', 'commissioner',
  '00000000-0000-0000-0000-000000000000', 'constructor', 'toString',
);

export const anyValue: fc.Arbitrary<unknown> = fc.oneof(
  { arbitrary: nasty, weight: 4 },
  { arbitrary: fc.jsonValue({ maxDepth: 3 }), weight: 3 },
  { arbitrary: fc.string({ unit: 'binary', maxLength: 40 }), weight: 2 },
  { arbitrary: fc.integer(), weight: 1 },
  { arbitrary: fc.double(), weight: 1 },
);

const anyKey = fc.oneof(fc.string({ maxLength: 12 }), fc.constantFrom('__proto__', 'constructor', 'prototype', 'id', 'type', 'event', 'payload', 'leagues', 'deleted', 'source', 'members'));

type StructuralMutation = { kind: 'structural'; at: number; op: 'delete' | 'replace' | 'insert' | 'wrap' | 'stringify'; key: string; value: unknown };
type TextMutation = { kind: 'text'; at: number; op: 'truncate' | 'insert' | 'delete' | 'repeat'; chunk: string; length: number };

const structural: fc.Arbitrary<StructuralMutation> = fc.record({
  kind: fc.constant('structural' as const),
  at: fc.nat(),
  op: fc.constantFrom('delete', 'replace', 'insert', 'wrap', 'stringify'),
  key: anyKey,
  value: anyValue,
});

const text: fc.Arbitrary<TextMutation> = fc.record({
  kind: fc.constant('text' as const),
  at: fc.nat(),
  op: fc.constantFrom('truncate', 'insert', 'delete', 'repeat'),
  chunk: fc.oneof(fc.string({ unit: 'binary', maxLength: 4 }), fc.constantFrom('{', '}', '[', ']', '"', ',', ':', '\\', '\\u0000', '\\ud800', '1e400', 'null')),
  length: fc.integer({ min: 1, max: 50 }),
});

export type BodyCase = { name: string; body: string };

/**
 * Bodies for one endpoint: the valid body mutated (mostly), random JSON, or the valid body as is.
 * `valid` builds a fresh valid body from a seed (so fresh ids come from fast-check, replayably).
 */
export function hostileBodies(valid: fc.Arbitrary<unknown>): fc.Arbitrary<BodyCase> {
  return fc.limitShrink(fc.oneof(
    { weight: 6, arbitrary: fc.tuple(valid, fc.array(structural, { minLength: 1, maxLength: 4 })).map(([body, mutations]) => ({ name: `mutated ${JSON.stringify(mutations).slice(0, 300)}`, body: JSON.stringify(mutations.reduce(applyStructural, body)) ?? '' })) },
    { weight: 2, arbitrary: fc.tuple(valid, fc.array(text, { minLength: 1, maxLength: 3 })).map(([body, mutations]) => ({ name: `text-mutated ${JSON.stringify(mutations)}`, body: mutations.reduce(applyText, JSON.stringify(body)) })) },
    { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 4 }).map((value) => ({ name: 'random JSON', body: JSON.stringify(value) })) },
    { weight: 1, arbitrary: valid.map((body) => ({ name: 'the valid body', body: JSON.stringify(body) })) },
  ), 40);
}

type Path = (string | number)[];

function pathsOf(value: unknown, prefix: Path = [], out: Path[] = []): Path[] {
  out.push(prefix);
  if (Array.isArray(value)) value.forEach((item, i) => pathsOf(item, [...prefix, i], out));
  else if (isObject(value)) for (const key of Object.keys(value)) pathsOf(value[key], [...prefix, key], out);
  return out;
}

function applyStructural(root: unknown, mutation: StructuralMutation): unknown {
  const paths = pathsOf(root);
  const path = paths[mutation.at % paths.length]!;
  const node = get(root, path);
  const replaced = (() => {
    switch (mutation.op) {
      case 'delete':
        return REMOVE;
      case 'replace':
        return mutation.value;
      case 'insert':
        if (Array.isArray(node)) return [...node, mutation.value];
        if (isObject(node)) return withOwnKey({ ...node }, mutation.key, mutation.value);
        return mutation.value;
      case 'wrap':
        return mutation.key.length % 2 === 0 ? [node] : withOwnKey({}, mutation.key, node);
      case 'stringify':
        return JSON.stringify(node) ?? null;
    }
  })();
  return set(root, path, replaced);
}

function applyText(body: string, mutation: TextMutation): string {
  const at = body.length === 0 ? 0 : mutation.at % body.length;
  switch (mutation.op) {
    case 'truncate':
      return body.slice(0, at);
    case 'insert':
      return body.slice(0, at) + mutation.chunk + body.slice(at);
    case 'delete':
      return body.slice(0, at) + body.slice(at + mutation.length);
    case 'repeat':
      return body.slice(0, at + mutation.length) + body.slice(at);
  }
}

const REMOVE = Symbol('remove');

function get(root: unknown, path: Path): unknown {
  return path.reduce<unknown>((node, key) => (node as Record<string | number, unknown>)[key], root);
}

/** A copy of root with the node at path replaced (or removed), leaving the input untouched. */
function set(root: unknown, path: Path, value: unknown): unknown {
  if (path.length === 0) return value === REMOVE ? undefined : value;
  const [key, ...rest] = path;
  if (Array.isArray(root)) {
    const copy = [...root];
    if (rest.length === 0 && value === REMOVE) copy.splice(key as number, 1);
    else copy[key as number] = set(copy[key as number], rest, value);
    return copy;
  }
  const copy = withOwnKeys(root as Record<string, unknown>);
  if (rest.length === 0 && value === REMOVE) {
    delete copy[key as string];
    return copy;
  }
  return withOwnKey(copy, key as string, set(copy[key as string], rest, value));
}

/** Own data properties only, so a "__proto__" key is a JSON key and never a prototype. */
function withOwnKey(target: Record<string, unknown>, key: string, value: unknown): Record<string, unknown> {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
  return target;
}

function withOwnKeys(source: Record<string, unknown>): Record<string, unknown> {
  const copy: Record<string, unknown> = {};
  for (const key of Object.keys(source)) withOwnKey(copy, key, source[key]);
  return copy;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
