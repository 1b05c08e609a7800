// npm run migrate - apply supabase/migrations to the configured database (DATABASE_URL, or the
// embedded folder). Supabase projects use `supabase db push` on the same files instead.
// Reads .env.local like the server.
import './load-env.ts';
import { getConfig } from '../lib/config.ts';
import { runMigrations } from '../lib/db/migrate.ts';
import { openPglite } from '../lib/db/pglite.ts';
import { clientSession, openPostgres } from '../lib/db/postgres.ts';

try {
  const config = getConfig();
  if (config.databaseMode === 'supabase') {
    console.error('Supabase mode: apply the migrations with `supabase db push`.');
    process.exit(1);
  }
  if (config.databaseMode === 'postgres') {
    const db = await openPostgres({ connectionString: config.databaseUrl!, max: 1, migrate: false });
    const client = await db.pool.connect();
    try {
      report(await runMigrations(clientSession(client)));
    } finally {
      client.release();
      await db.close();
    }
  } else {
    const db = await openPglite(config.embeddedDbDir, { migrate: false });
    try {
      report(await runMigrations(db.session));
    } finally {
      await db.close();
    }
  }
} catch (error) {
  console.error(`Migration failed: ${(error as Error).message}`);
  process.exit(1);
}

function report(applied: string[]) {
  console.log(applied.length ? `applied: ${applied.join(', ')}` : 'up to date');
}
