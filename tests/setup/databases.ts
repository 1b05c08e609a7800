import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { runMigrations } from '../../lib/db/migrate.ts';
import { openPglite } from '../../lib/db/pglite.ts';
import { clientSession, openPostgres } from '../../lib/db/postgres.ts';
import { createDatabase, startPostgresServer, type PostgresServer } from '../../scripts/support/postgres-server.ts';
import { REALTIME_SQL } from '../../scripts/support/supabase-realtime.ts';
import { selectedEngines } from './engines.ts';

declare module 'vitest' {
  interface ProvidedContext {
    /** A PGlite folder with every migration applied; each test copies it (0.3 s instead of 3 s). Unset when PGlite is off. */
    pgliteTemplateDir: string;
    /** The same with Supabase Realtime's schema made before the migrations ran (as on Supabase). */
    pgliteRealtimeTemplateDir: string;
    /** The real Postgres server's admin URL; each test database is created from `app_template` (or `app_template_realtime`). Unset when Postgres is off. */
    postgresServerUrl: string;
  }
}

const POSTGRES_TEMPLATE = 'app_template';
const POSTGRES_REALTIME_TEMPLATE = 'app_template_realtime';

interface Prepared {
  provided: { pgliteTemplateDir?: string; pgliteRealtimeTemplateDir?: string; postgresServerUrl?: string };
  stop(): Promise<void>;
}

/**
 * Global setup of the tiers that use databases (tests/setup/tiers.ts): the engines TEST_ENGINES
 * names, each prepared once a run: a real Postgres server with the migrated templates, and the
 * migrated PGlite template folders. Several tiers in one run (`npm test`) share them: the first
 * prepares, the last one's teardown stops.
 */
export default async function setup(project: TestProject) {
  const shared = globalThis as { accountLinkTestDatabases?: { ready: Promise<Prepared>; users: number } };
  const state = (shared.accountLinkTestDatabases ??= { ready: prepare(), users: 0 });
  state.users++;
  const prepared = await state.ready;
  for (const [key, value] of Object.entries(prepared.provided)) project.provide(key as keyof typeof prepared.provided, value);
  return async () => {
    if (--state.users > 0) return;
    shared.accountLinkTestDatabases = undefined;
    await prepared.stop();
  };
}

async function prepare(): Promise<Prepared> {
  const engines = selectedEngines();
  const root = mkdtempSync(path.join(tmpdir(), 'account-link-tests-'));
  const provided: Prepared['provided'] = {};
  let server: PostgresServer | undefined;
  const work: Promise<void>[] = [];
  if (engines.includes('postgres')) {
    work.push((async () => {
      server = await startPostgresServer();
      await createDatabase(server.url(), POSTGRES_TEMPLATE);
      const template = await openPostgres({ connectionString: server.url(POSTGRES_TEMPLATE), max: 1 });
      await template.close();
      await createDatabase(server.url(), POSTGRES_REALTIME_TEMPLATE);
      const realtime = await openPostgres({ connectionString: server.url(POSTGRES_REALTIME_TEMPLATE), max: 1, migrate: false });
      const client = await realtime.pool.connect();
      try {
        await client.query(REALTIME_SQL);
        await runMigrations(clientSession(client));
      } finally {
        client.release();
        await realtime.close();
      }
      provided.postgresServerUrl = server.url();
    })());
  }
  if (engines.includes('pglite')) {
    const pgliteTemplateDir = path.join(root, 'pglite-template');
    const pgliteRealtimeTemplateDir = path.join(root, 'pglite-realtime-template');
    work.push(openPglite(pgliteTemplateDir).then((db) => db.close()));
    work.push((async () => {
      const db = await openPglite(pgliteRealtimeTemplateDir, { migrate: false });
      try {
        await db.session.exec(REALTIME_SQL);
        await runMigrations(db.session);
      } finally {
        await db.close();
      }
    })());
    Object.assign(provided, { pgliteTemplateDir, pgliteRealtimeTemplateDir });
  }
  const stop = async () => {
    await server?.stop();
    rmSync(root, { recursive: true, force: true });
  };
  try {
    await Promise.all(work);
  } catch (error) {
    await Promise.allSettled(work);
    await stop();
    throw error;
  }
  process.stdout.write(`database suites on ${engines.join(' and ')}${provided.pgliteTemplateDir ? ` (PGlite template ${provided.pgliteTemplateDir})` : ''}${server ? ` (Postgres server on 127.0.0.1:${server.port})` : ''}\n`);
  return { provided, stop };
}
