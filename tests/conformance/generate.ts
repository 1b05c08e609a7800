import fc from 'fast-check';

/**
 * Request bodies from the document's JSON Schemas, as fast-check arbitraries: `valueOf(schema)`
 * draws values the schema should accept (the suite still asks Ajv, the judge, for every one), and
 * `mutationOf(schema, value)` draws what a careless or hostile client sends instead: a required
 * field missing, a value of the wrong type, an extra field, a value just past a boundary (maxLength,
 * maxItems, minimum, an enum), a character no body may hold. Covers the JSON Schema the document
 * uses (object, array, string with pattern/format/enum/const, integer, number, boolean, null,
 * anyOf/oneOf/allOf, $ref into components).
 */

type Schema = Record<string, unknown>;
type Resolve = (ref: string) => unknown;

const MAX_GENERATED_ITEMS = 3;
const NOW_MS = Date.now();

export function valueOf(schema: Schema, resolve: Resolve, depth = 0): fc.Arbitrary<unknown> {
  if (typeof schema.$ref === 'string') {
    if (schema.$ref.endsWith('/JsonValue')) return fc.jsonValue({ maxDepth: 2 }).filter((value) => !JSON.stringify(value).includes('__proto__'));
    return valueOf(resolve(schema.$ref) as Schema, resolve, depth + 1);
  }
  if ('const' in schema) return fc.constant(schema.const);
  if (Array.isArray(schema.enum)) return fc.constantFrom(...(schema.enum as unknown[]));
  const alternatives = (schema.oneOf ?? schema.anyOf) as Schema[] | undefined;
  if (alternatives) return fc.oneof(...alternatives.map((alternative) => valueOf({ ...withoutKeys(schema, ['oneOf', 'anyOf']), ...alternative }, resolve, depth + 1)));
  if (Array.isArray(schema.type)) return fc.oneof(...(schema.type as string[]).map((type) => valueOf({ ...schema, type }, resolve, depth + 1)));

  switch (schema.type) {
    case 'object':
      return objectOf(schema, resolve, depth);
    case 'array': {
      const maxLength = Math.min(Number(schema.maxItems ?? MAX_GENERATED_ITEMS), MAX_GENERATED_ITEMS);
      return fc.array(valueOf((schema.items ?? {}) as Schema, resolve, depth + 1), { minLength: Number(schema.minItems ?? 0), maxLength });
    }
    case 'string':
      return stringOf(schema);
    case 'integer':
      return fc.integer({ min: lowerBound(schema, -1000), max: Number(schema.maximum ?? 1_000_000) });
    case 'number':
      return fc.double({ noNaN: true, noDefaultInfinity: true, min: -1e9, max: 1e9 });
    case 'boolean':
      return fc.boolean();
    case 'null':
      return fc.constant(null);
    default:
      return fc.jsonValue({ maxDepth: 1 });
  }
}

function lowerBound(schema: Schema, fallback: number): number {
  if (typeof schema.exclusiveMinimum === 'number') return schema.exclusiveMinimum + 1;
  if (typeof schema.minimum === 'number') return schema.minimum;
  return fallback;
}

function objectOf(schema: Schema, resolve: Resolve, depth: number): fc.Arbitrary<unknown> {
  const properties = (schema.properties ?? {}) as Record<string, Schema>;
  const required = new Set((schema.required ?? []) as string[]);
  const record = fc.record(
    Object.fromEntries(Object.entries(properties).map(([key, value]) => [key, valueOf(value, resolve, depth + 1)])),
    { requiredKeys: [...required] },
  );
  // Where the schema allows more members, sometimes send some (RevenueCat adds fields without notice).
  if (schema.additionalProperties === false || depth > 3) return record;
  const extraKey = fc.string({ minLength: 1, maxLength: 12 }).filter((key) => !(key in properties) && key !== '__proto__');
  return fc.tuple(record, fc.option(fc.dictionary(extraKey, fc.jsonValue({ maxDepth: 1 }), { maxKeys: 2 }), { nil: undefined }))
    .map(([value, extra]) => ({ ...extra, ...(value as object) }));
}

function stringOf(schema: Schema): fc.Arbitrary<string> {
  const minLength = Number(schema.minLength ?? 0);
  const maxLength = Number(schema.maxLength ?? 64);
  const fits = (value: string) => value.length >= minLength && value.length <= maxLength;
  if (schema.format === 'date-time') return timestamp();
  if (schema.format === 'uuid') return fc.uuid();
  if (typeof schema.pattern === 'string') {
    const pattern = new RegExp(schema.pattern, 'u');
    // An unanchored pattern (`\S`) says what a string must contain, not what it is: keep it short.
    const anchored = schema.pattern.startsWith('^') && schema.pattern.endsWith('$');
    const matching = anchored ? fc.stringMatching(pattern) : fc.tuple(fc.string({ maxLength: 8 }), fc.stringMatching(new RegExp(`^${schema.pattern}$`, 'u')), fc.string({ maxLength: 8 })).map((parts) => parts.join(''));
    return matching.filter(fits);
  }
  return fc.string({ minLength, maxLength: Math.min(maxLength, 48) });
}

/** RFC 3339 times from 1970 to now, in the shapes senders use: Z or an offset, 0 to 6 fraction digits. */
function timestamp(): fc.Arbitrary<string> {
  return fc.tuple(fc.integer({ min: 86_400_000, max: NOW_MS - 86_400_000 }), fc.integer({ min: 0, max: 6 }), fc.constantFrom('Z', '+00:00', '+05:30', '-08:00'))
    .map(([ms, digits, zone]) => {
      const offsetMinutes = zone === 'Z' ? 0 : (zone.startsWith('-') ? -1 : 1) * (Number(zone.slice(1, 3)) * 60 + Number(zone.slice(4)));
      const local = new Date(ms + offsetMinutes * 60_000).toISOString().slice(0, 19);
      const fraction = digits ? `.${String(ms % 1000).padStart(3, '0').padEnd(digits, '0').slice(0, digits)}` : '';
      return `${local}${fraction}${zone}`;
    });
}

function withoutKeys(schema: Schema, keys: string[]): Schema {
  return Object.fromEntries(Object.entries(schema).filter(([key]) => !keys.includes(key)));
}

// ---------------------------------------------------------------------------------------------
// Mutations

/** A place in a value where the schema says something: the path to it and the schema there. */
interface Site {
  path: (string | number)[];
  schema: Schema;
  value: unknown;
}

/** Every site in `value` with the (resolved) schema that governs it. */
function sitesOf(schema: Schema, value: unknown, resolve: Resolve, path: (string | number)[] = []): Site[] {
  if (typeof schema.$ref === 'string') {
    if (schema.$ref.endsWith('/JsonValue')) return [{ path, schema, value }];
    return sitesOf(resolve(schema.$ref) as Schema, value, resolve, path);
  }
  const alternatives = (schema.oneOf ?? schema.anyOf) as Schema[] | undefined;
  if (alternatives) {
    // The alternative this value was drawn from: the one whose consts it matches.
    const chosen = alternatives.find((alternative) => matchesConsts(alternative, value)) ?? alternatives[0]!;
    return sitesOf({ ...withoutKeys(schema, ['oneOf', 'anyOf']), ...chosen }, value, resolve, path);
  }
  const here: Site = { path, schema, value };
  if (schema.type === 'object' && isRecord(value)) {
    const properties = (schema.properties ?? {}) as Record<string, Schema>;
    return [here, ...Object.entries(value).flatMap(([key, item]) => (properties[key] ? sitesOf(properties[key], item, resolve, [...path, key]) : []))];
  }
  if (schema.type === 'array' && Array.isArray(value)) {
    return [here, ...value.flatMap((item, index) => sitesOf((schema.items ?? {}) as Schema, item, resolve, [...path, index]))];
  }
  return [here];
}

function matchesConsts(schema: Schema, value: unknown): boolean {
  if (!isRecord(value)) return false;
  const properties = (schema.properties ?? {}) as Record<string, Schema>;
  return Object.entries(properties).every(([key, property]) => !('const' in property) || value[key] === property.const);
}

const isRecord = (value: unknown): value is Record<string, unknown> => value !== null && typeof value === 'object' && !Array.isArray(value);

function setAt(root: unknown, path: (string | number)[], replace: (current: unknown) => unknown): unknown {
  if (path.length === 0) return replace(root);
  const [head, ...rest] = path;
  if (Array.isArray(root)) return root.map((item, index) => (index === head ? setAt(item, rest, replace) : item));
  const record = root as Record<string, unknown>;
  return { ...record, [head!]: setAt(record[head!], rest, replace) };
}

const REMOVE = Symbol('remove');
function dropUndefined(value: unknown): unknown {
  if (Array.isArray(value)) return value.filter((item) => item !== REMOVE).map(dropUndefined);
  if (isRecord(value)) return Object.fromEntries(Object.entries(value).filter(([, item]) => item !== REMOVE).map(([key, item]) => [key, dropUndefined(item)]));
  return value;
}

const WRONG_TYPES: unknown[] = [null, true, 0, -1, 1.5, 'text', '', [], {}, [1, 'two'], { nested: { deep: [null] } }];

/** One mutation of a valid value: the mutated value and what was done (for the failure message). */
export function mutationOf(schema: Schema, value: unknown, resolve: Resolve): fc.Arbitrary<{ value: unknown; mutation: string }> {
  const sites = sitesOf(schema, value, resolve);
  return fc.constantFrom(...sites).chain((site) => {
    const at = site.path.join('.') || '(body)';
    const options: fc.Arbitrary<{ value: unknown; mutation: string }>[] = [
      fc.constantFrom(...WRONG_TYPES).map((wrong) => ({ value: setAt(value, site.path, () => wrong), mutation: `${at} := ${JSON.stringify(wrong)}` })),
    ];
    const { schema: s } = site;
    if (s.type === 'object' && isRecord(site.value)) {
      for (const key of (s.required ?? []) as string[]) {
        options.push(fc.constant({ value: dropUndefined(setAt(value, [...site.path, key], () => REMOVE)), mutation: `${at}: required ${key} removed` }));
      }
      const extraValues = fc.constantFrom<unknown>('extra', 7, null, ['a', { b: true }], 'nul \u0000', ['lone \uD800'], { 'key \u0000': 1 });
      options.push(fc.tuple(fc.string({ minLength: 1, maxLength: 10 }).filter((key) => !(key in ((s.properties ?? {}) as object)) && key !== '__proto__'), extraValues)
        .map(([key, extra]) => ({ value: setAt(value, site.path, (current) => ({ ...(current as object), [key]: extra })), mutation: `${at}: extra member ${JSON.stringify(key)}: ${JSON.stringify(extra)}` })));
      options.push(fc.constant({ value: setAt(value, site.path, (current) => JSON.parse(`{"__proto__": 1, ${JSON.stringify(current).slice(1)}`.replace(', }', '}'))), mutation: `${at}: key __proto__` }));
    }
    if (s.type === 'array' && Array.isArray(site.value)) {
      if (typeof s.maxItems === 'number' && site.value.length > 0) {
        const max = s.maxItems;
        options.push(fc.constantFrom(max, max + 1).map((count) => ({
          value: setAt(value, site.path, (current) => Array.from({ length: count }, (_, i) => (current as unknown[])[i % (current as unknown[]).length])),
          mutation: `${at}: ${count} items (maxItems ${max})`,
        })));
      }
    }
    if (typeof site.value === 'string') {
      options.push(fc.constantFrom('\u0000', '\uD800', 'a\uDC00b', '\u0000x').map((bad) => ({ value: setAt(value, site.path, (current) => `${current as string}${bad}`), mutation: `${at}: + ${JSON.stringify(bad)}` })));
      if (typeof s.maxLength === 'number') {
        const max = s.maxLength;
        options.push(fc.constantFrom(max, max + 1).map((length) => ({
          value: setAt(value, site.path, (current) => (current as string).padEnd(length, (current as string).slice(-1) || 'a').slice(0, length)),
          mutation: `${at}: ${length} characters (maxLength ${max})`,
        })));
      }
      if (typeof s.minLength === 'number' && s.minLength > 0) options.push(fc.constant({ value: setAt(value, site.path, () => ''), mutation: `${at}: empty (minLength ${s.minLength})` }));
      if (typeof s.pattern === 'string') options.push(fc.string({ maxLength: 20 }).map((text) => ({ value: setAt(value, site.path, () => text), mutation: `${at}: ${JSON.stringify(text)} (pattern ${s.pattern})` })));
    }
    if (Array.isArray(s.enum)) {
      const allowed = s.enum as unknown[];
      const outside: fc.Arbitrary<unknown> = typeof allowed[0] === 'number' ? fc.integer({ min: 0, max: 100_000 }) : fc.string({ minLength: 1, maxLength: 12 });
      options.push(outside.filter((candidate) => !allowed.includes(candidate)).map((candidate) => ({ value: setAt(value, site.path, () => candidate), mutation: `${at}: ${JSON.stringify(candidate)} (not in enum)` })));
    }
    if (s.type === 'integer') {
      options.push(fc.constantFrom(0, -1, 2 ** 53, 1e300, 0.5).map((n) => ({ value: setAt(value, site.path, () => n), mutation: `${at}: ${n}` })));
    }
    return fc.oneof(...options);
  });
}
