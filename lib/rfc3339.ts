import { z } from 'zod';

/**
 * An RFC 3339 date-time with `Z` or an offset: zod's own pattern (`z.iso.datetime`: real days, leap
 * years), with the `T` and `Z` that RFC 3339 §5.6 lets a sender write in lower case. Schemas upper-
 * case the value before any check (`z.string().toUpperCase()`), so what they pass on has the usual
 * form; the pattern accepts both so that the published document states what the service accepts.
 */
export const RFC3339_DATE_TIME = new RegExp(
  z.regexes.datetime({ offset: true, local: false, precision: null }).source.replace('T', '[Tt]').replace('(?:Z|', '(?:[Zz]|'),
);
