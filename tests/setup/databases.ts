import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { openPglite } from '../../lib/db/pglite.ts';
import { openPostgres } from '../../lib/db/postgres.ts';
import { createDatabase, startPostgresServer } from '../support/postgres-server.ts';

declare module 'vitest' {
  interface ProvidedContext {
    /** A PGlite folder with every migration applied; each test copies it (0.3 s instead of 3 s). */
    pgliteTemplateDir: string;
    /** The real Postgres server's admin URL; each test database is created from `app_template`. */
    postgresServerUrl: string;
  }
}

export const POSTGRES_TEMPLATE = 'app_template';

export default async function setup(project: TestProject) {
  const root = mkdtempSync(path.join(tmpdir(), 'account-link-tests-'));
  const pgliteTemplateDir = path.join(root, 'pglite-template');
  const [server] = await Promise.all([
    startPostgresServer(),
    openPglite(pgliteTemplateDir).then((db) => db.close()),
  ]);
  await createDatabase(server.url(), POSTGRES_TEMPLATE);
  const template = await openPostgres({ connectionString: server.url(POSTGRES_TEMPLATE), max: 1 });
  await template.close();
  process.stdout.write(`database suites: PGlite (template ${pgliteTemplateDir}) and real Postgres server on 127.0.0.1:${server.port}\n`);

  project.provide('pgliteTemplateDir', pgliteTemplateDir);
  project.provide('postgresServerUrl', server.url());
  return async () => {
    await server.stop();
    rmSync(root, { recursive: true, force: true });
  };
}
