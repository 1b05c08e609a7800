// npm run db:diff -- <name> - write the next migration from an edit in supabase/schemas.
//
// Builds two scratch databases on a local Postgres server, both shaped like Supabase's (its roles,
// `auth`, `realtime`, its default privileges): one from supabase/migrations, one from
// supabase/schemas. @pgkit/migra (a TypeScript port of migra, the diff engine `supabase db diff`
// has used) writes the statements that take the first to the second, into
// supabase/migrations/<timestamp>_<name>.sql. Then the migration is applied to the first database
// and both are compared object by object (scripts/support/schema-catalog.ts): whatever the diff
// missed (migra does not see every kind of object) is printed, to add by hand. Review what it
// wrote, as Supabase's guide says: a rename comes out as a drop and an add, and a data change (a
// backfill) is never in a diff.
// https://supabase.com/docs/guides/local-development/declarative-database-schemas
import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { run as migra } from '@pgkit/migra';
import pg from 'pg';
import { runMigrations, type SqlSession } from '../lib/db/migrate.ts';
import { clientSession } from '../lib/db/postgres.ts';
import { applyDeclaredSchema } from './support/declared-schema.ts';
import { createDatabase, startPostgresServer } from './support/postgres-server.ts';
import { compareCatalogs, readCatalog } from './support/schema-catalog.ts';
import { REALTIME_SQL, SUPABASE_DEFAULT_PRIVILEGES_SQL } from './support/supabase-realtime.ts';
import { helpIfAsked } from './command-args.ts';

const MIGRATIONS_DIR = path.join('supabase', 'migrations');

/** The migration's file name: the time now (UTC, as `supabase migration new` names them) and the name. */
export function migrationFileName(name: string, now = new Date()): string {
  const stamp = now.toISOString().replace(/[-:T]/g, '').slice(0, 14);
  return `${stamp}_${name}.sql`;
}

export const MIGRATION_NAME = /^[a-z0-9_]{1,80}$/;

async function withSession<T>(url: string, work: (session: SqlSession) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await work(clientSession(client));
  } finally {
    await client.end();
  }
}

export interface SchemaDiff {
  /** The statements that take a migrated database to the declared schema ('' when there are none). */
  sql: string;
  /** What still differs after those statements ran: objects the diff does not cover, to add by hand. */
  remaining: string[];
}

/** Diff supabase/migrations (plus `extraSql`, a migration not yet written) against supabase/schemas. */
export async function diffDeclaredSchema(): Promise<SchemaDiff> {
  const server = await startPostgresServer();
  try {
    const stamp = Date.now();
    const migrated = server.url(`diff_migrated_${stamp}`.toLowerCase());
    const declared = server.url(`diff_declared_${stamp}`.toLowerCase());
    for (const url of [migrated, declared]) {
      await createDatabase(server.url(), new URL(url).pathname.slice(1));
      await withSession(url, async (session) => {
        await session.exec(REALTIME_SQL);
        await session.exec(SUPABASE_DEFAULT_PRIVILEGES_SQL);
      });
    }
    await withSession(migrated, (session) => runMigrations(session));
    await withSession(declared, (session) => applyDeclaredSchema(session));

    const migration = await migra(migrated, declared, { unsafe: true, schema: 'public', withPrivileges: true });
    // Only for this migration's transaction: a session-wide setting would outlive it on the
    // connection that ran it (the embedded database's, in local mode).
    const diff = migration.sql.trim().replaceAll('set check_function_bodies = off;', 'set local check_function_bodies = off;');
    const sql = [...returnTypeDrops(await functionResults(migrated), await functionResults(declared)), diff].filter(Boolean).join('\n\n');
    if (sql) await withSession(migrated, (session) => session.exec(sql));
    const remaining = compareCatalogs(
      await withSession(migrated, readCatalog),
      await withSession(declared, readCatalog),
      { expected: 'migrations + this diff', actual: 'supabase/schemas' },
    );
    return { sql, remaining };
  } finally {
    await server.stop();
  }
}

/** Each function of `public` (its signature) with what it returns. */
async function functionResults(url: string): Promise<Map<string, string>> {
  const { rows } = await withSession(url, (session) => session.query(`
    select format('%I.%I(%s)', n.nspname, p.proname, pg_get_function_identity_arguments(p.oid)) as signature, pg_get_function_result(p.oid) as result
    from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = 'public'`));
  return new Map(rows.map((row) => [String(row.signature), String(row.result)]));
}

/**
 * A function whose return type changed: migra writes CREATE OR REPLACE, which Postgres refuses for
 * another return type, so it is dropped first (its grants go with it: the check after lists them,
 * to write by hand).
 */
export function returnTypeDrops(migrated: ReadonlyMap<string, string>, declared: ReadonlyMap<string, string>): string[] {
  return [...migrated].filter(([signature, result]) => declared.has(signature) && declared.get(signature) !== result)
    .map(([signature, result]) => `-- Returns ${declared.get(signature)} where it returned ${result}: Postgres changes that only by a drop.\ndrop function ${signature};`);
}

if (import.meta.main) {
  helpIfAsked({
    about: 'Write the next migration from an edit in supabase/schemas (a diff against what supabase/migrations build), then list what the diff missed.',
    usage: 'Usage: npm run db:diff -- <name>   (lower-case letters, digits and _; e.g. billing_purchase_sources)',
    docs: 'docs/architecture.md',
  });
  const name = process.argv[2] ?? '';
  if (!MIGRATION_NAME.test(name)) {
    console.error('usage: npm run db:diff -- <name>   (lower-case letters, digits and _; e.g. billing_purchase_sources)');
    process.exit(2);
  }
  const { sql, remaining } = await diffDeclaredSchema();
  if (!sql && remaining.length === 0) {
    console.log('No schema changes: supabase/schemas and supabase/migrations build the same schema.');
    process.exit(0);
  }
  const file = path.join(MIGRATIONS_DIR, migrationFileName(name));
  if (existsSync(file) || readdirSync(MIGRATIONS_DIR).some((existing) => existing.endsWith(`_${name}.sql`))) {
    console.error(`A migration named ${name} exists already: pick another name.`);
    process.exit(2);
  }
  const header = [
    `-- ${name}: generated by \`npm run db:diff -- ${name}\` from supabase/schemas, then reviewed.`,
    '-- The reasoning lives beside each object in supabase/schemas; this file only takes a deployed',
    '-- database there.',
  ].join('\n');
  writeFileSync(file, `${header}\n\n${sql}\n${remaining.length ? `\n-- TODO: not covered by the diff, write by hand:\n${remaining.map((line) => `--   ${line.split('\n')[0]}`).join('\n')}\n` : ''}`);
  console.log(`wrote ${file}`);
  if (remaining.length > 0) {
    console.error(`\nThe diff does not cover ${remaining.length} difference(s); add them to the migration by hand, then run this check again (npx vitest run tests/db/schemas.test.ts):\n`);
    console.error(remaining.join('\n\n'));
    process.exit(1);
  }
  console.log('Review it: a rename shows as a drop and an add, and data changes (backfills) are never in a diff.');
}
