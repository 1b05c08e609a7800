import { envSchema } from '../../lib/config.ts';

/**
 * What a public answer must never carry (the operator's business, which goes to the log): the name
 * of a setting (every key of the configuration's schema), or the database's own words (a
 * constraint, a key, a SQLSTATE, a schema object, the engine's name). Route tests check every
 * problem answer they provoke with it (tests/support/http.ts).
 */
export const SETTING_NAMES: readonly string[] = Object.keys(envSchema.shape);

const SETTING = new RegExp(`\\b(?:${SETTING_NAMES.join('|')})\\b`);

const DATABASE_TEXT: readonly RegExp[] = [
  /violates (?:unique|foreign key|check|not-null|exclusion) constraint/i,
  /duplicate key value/i,
  /invalid input (?:syntax|value)/i,
  /\bout of range\b/i,
  /value too long for type/i,
  /unsupported Unicode escape sequence|invalid byte sequence|character with byte sequence/i,
  /\b(?:relation|column|function|type|schema|constraint) "[^"]+" (?:does not exist|already exists)/i,
  /permission denied for/i,
  /syntax error at or near/i,
  /null value in column/i,
  /could not serialize access|deadlock detected|canceling statement due to/i,
  /\bKey \([^)]*\)=\(/,
  /\bSQLSTATE\b|\bPT\d{3}\b/,
  /\bpublic\.[a-z_]+/,
  /\bpg_[a-z_]+|\bPGlite\b|\bPostgres(?:QL)?\b|\bplpgsql\b/i,
];

/** What in a public answer's text is for the operator only: each leak, described. Empty when none. */
export function operatorDetailIn(text: string): string[] {
  const leaks: string[] = [];
  const setting = SETTING.exec(text);
  if (setting) leaks.push(`names the setting ${setting[0]}`);
  for (const pattern of DATABASE_TEXT) {
    const match = pattern.exec(text);
    if (match) leaks.push(`carries database text "${match[0]}"`);
  }
  return leaks;
}
