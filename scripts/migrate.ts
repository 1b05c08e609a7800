// npm run migrate - apply supabase/migrations to the database, recording each in the Supabase CLI's
// ledger (so `supabase db push` and `supabase migration list` agree with it). Run it from a shell or
// CI before a deployment whose code brings new migrations: a deployed instance never migrates.
// Where: POSTGRES_URL_NON_POOLING, else DATABASE_URL, else POSTGRES_URL, else the embedded folder
// (see migrationTarget). Reads .env / .env.local like the server.
import './load-env.ts';
import path from 'node:path';
import pg from 'pg';
import { migrationTarget, runMigrations, type MigrateOptions } from '../lib/db/migrate.ts';
import { openPglite } from '../lib/db/pglite.ts';
import { clientSession, withLibpqSslModes } from '../lib/db/postgres.ts';
import { commandArgs } from './command-args.ts';

commandArgs({
  about: 'Apply supabase/migrations to the database the settings name (or the embedded folder), recording each in the Supabase CLI\'s ledger.',
  usage: 'Usage: npm run migrate',
  docs: 'docs/deploy.md',
}, {});

const target = migrationTarget(process.env, path.resolve(process.env.EMBEDDED_DB_DIR?.trim() || path.join('.data', 'pglite')));
const progress: MigrateOptions = {
  onApply: (file, index, total) => console.error(`applying ${index + 1}/${total}: ${file.fileName}`),
};

try {
  if (target.kind === 'data-api-only') {
    console.error('Only the Supabase Data API is configured, which cannot run DDL: run `supabase db push`, or set POSTGRES_URL_NON_POOLING (Supabase dashboard > Connect > "Direct connection", or "Session pooler" from a network without IPv6) and run this again.');
    process.exit(1);
  }
  if (target.kind === 'postgres') {
    console.error(`migrating the database of ${target.from} (${new URL(target.url).host})`);
    const client = new pg.Client({ connectionString: withLibpqSslModes(target.url), application_name: 'account-link-service migrate' });
    await client.connect();
    try {
      report(await runMigrations(clientSession(client), progress));
    } finally {
      await client.end();
    }
  } else {
    console.error(`migrating the embedded database in ${target.dir}`);
    const db = await openPglite(target.dir, { migrate: false });
    try {
      report(await runMigrations(db.session, progress));
    } finally {
      await db.close();
    }
  }
} catch (error) {
  console.error(`Migration failed: ${(error as Error).message}`);
  process.exit(1);
}

function report(applied: string[]) {
  console.log(applied.length ? `applied ${applied.length}: ${applied.join(', ')}` : 'up to date');
}
