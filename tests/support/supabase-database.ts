import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { inject } from 'vitest';
import { BOOTSTRAP_SQL } from '../../lib/db/bootstrap.ts';
import { createDatabase } from '../../scripts/support/postgres-server.ts';
import { REALTIME_SQL } from '../../scripts/support/supabase-realtime.ts';

export interface SupabaseDatabaseOptions {
  /**
   * Realtime's schema too (scripts/support/supabase-realtime.ts: `realtime.messages`, `send()`),
   * owned by its own admin role, so the migrating role may not add policies to its table (as on a
   * self-hosted Supabase).
   */
  realtime?: boolean;
}

/**
 * A new database on the real Postgres server, shaped like a Supabase project before any migration
 * ran, and the connection string of its migrating role (Supabase's `postgres`, which is no
 * superuser). Made by the server's superuser, standing for Supabase's own admin:
 * - the API roles and Supabase Auth's role (`anon`, `authenticated`, `service_role`,
 *   `supabase_auth_admin`: https://supabase.com/docs/guides/database/postgres/roles), and the `auth`
 *   schema with `auth.users` and `auth.uid()`, all owned by the admin (lib/db/bootstrap.ts makes
 *   them, the same pieces the service's bootstrap makes where they are missing);
 * - a migrating role that owns the database and may use the API roles, with no CREATE on `auth`,
 *   only USAGE and SELECT/TRIGGER/REFERENCES on `auth.users` (what the migrations need);
 * - Supabase's default privileges, which hand every new table, function and sequence of that role
 *   in public to anon, authenticated and service_role: a grant test on the bootstrap alone would
 *   pass a new table or function that forgets its revoke.
 */
export async function supabaseShapedDatabase(options: SupabaseDatabaseOptions = {}): Promise<string> {
  const serverUrl = inject('postgresServerUrl');
  const name = `supabase_like_${randomBytes(4).toString('hex')}`;
  await createDatabase(serverUrl, name);
  const adminUrl = serverUrl.replace(/\/postgres$/, `/${name}`);
  const role = `migrator_${randomBytes(4).toString('hex')}`;

  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query(options.realtime ? REALTIME_SQL : BOOTSTRAP_SQL);
    await admin.query(`
      create role ${role} login password 'pw' createrole;
      grant anon, authenticated, service_role to ${role};
      grant create, usage on schema public to ${role};
      grant usage on schema public to anon, authenticated, service_role;
      grant usage on schema auth to ${role};
      grant select, trigger, references on auth.users to ${role};
      alter default privileges for role ${role} in schema public grant all on tables to anon, authenticated, service_role;
      alter default privileges for role ${role} in schema public grant all on functions to anon, authenticated, service_role;
      alter default privileges for role ${role} in schema public grant all on sequences to anon, authenticated, service_role;
      alter database ${name} owner to ${role};
    `);
    if (options.realtime) {
      await admin.query(`grant usage on schema realtime to ${role}; grant execute on all functions in schema realtime to ${role}`);
    }
  } finally {
    await admin.end();
  }
  return adminUrl.replace(/\/\/[^@]+@/, `//${role}:pw@`);
}
