import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterEach, describe, expect, inject, it } from 'vitest';
import * as webhookRoute from '../../app/api/webhooks/subscription-billing/route.ts';
import { BOOTSTRAP_SQL } from '../../lib/db/bootstrap.ts';
import { closeDatabase } from '../../lib/db/index.ts';
import { migrationTarget, readMigrationFiles, runMigrations, type SqlSession } from '../../lib/db/migrate.ts';
import { openPglite } from '../../lib/db/pglite.ts';
import { clientSession } from '../../lib/db/postgres.ts';
import { DATABASE_KINDS, describeOn, type DatabaseKind } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { callRoute } from '../support/http.ts';
import { dbPush, migrationList } from '../support/supabase-cli.ts';
import { captureLogs } from '../support/log-capture.ts';
import { createDatabase } from '../../scripts/support/postgres-server.ts';

const files = readMigrationFiles();

/** An empty database (no migrations) and a session on it. */
async function emptyDatabase(kind: DatabaseKind): Promise<{ session: SqlSession; url?: string; close(): Promise<void> }> {
  if (kind === 'pglite') {
    const dir = mkdtempSync(path.join(tmpdir(), 'ledger-'));
    const db = await openPglite(path.join(dir, 'db'), { migrate: false });
    return { session: db.session, close: async () => { await db.close(); rmSync(dir, { recursive: true, force: true }); } };
  }
  const name = `ledger_${randomBytes(4).toString('hex')}`;
  await createDatabase(inject('postgresServerUrl'), name);
  const url = inject('postgresServerUrl').replace(/\/postgres$/, `/${name}`);
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  return { session: clientSession(client), url, close: () => client.end() };
}

describe.each(DATABASE_KINDS)('one migration ledger, the Supabase CLI\'s (%s)', (kind) => {
  it('moves an older version\'s own ledger into the CLI\'s: nothing applied again, the old table gone, `migration list` complete', { timeout: 120_000 }, async () => {
    const db = await emptyDatabase(kind);
    try {
      // What an earlier version of this service left: the first files applied and listed by file
      // name in public.schema_migrations, nothing in the CLI's ledger.
      const old = files.slice(0, 5);
      await db.session.exec(BOOTSTRAP_SQL);
      await db.session.exec('create table public.schema_migrations (name text primary key, applied_at timestamptz not null default now())');
      for (const file of old) {
        const { readFileSync } = await import('node:fs');
        await db.session.exec(readFileSync(path.join('supabase/migrations', file.fileName), 'utf8'));
        await db.session.query('insert into public.schema_migrations (name) values ($1)', [file.fileName]);
      }

      const applied = await runMigrations(db.session);
      expect(applied).toEqual(files.slice(5).map((file) => file.fileName));
      const { rows } = await db.session.query('select version, name from supabase_migrations.schema_migrations order by version');
      expect(rows).toEqual(files.map((file) => ({ version: file.version, name: file.name })));
      expect((await db.session.query(`select to_regclass('public.schema_migrations') as legacy`)).rows).toEqual([{ legacy: null }]);
      expect(await runMigrations(db.session)).toEqual([]);
      if (db.url) {
        // The Supabase CLI itself agrees: every file on both sides, nothing to push.
        expect((await migrationList(db.url)).map(({ local, remote }) => ({ local, remote })))
          .toEqual(files.map((file) => ({ local: file.version, remote: file.version })));
        expect(await dbPush(db.url, { dryRun: true })).toMatchObject({ upToDate: true, migrations: [] });
      }
    } finally {
      await db.close();
    }
  });
});

describeOn('postgres')('a deployed instance on a database behind its code', () => {
  let restore: (() => void) | undefined;
  afterEach(async () => {
    restore?.();
    restore = undefined;
    await closeDatabase();
  });

  const delivery = () => ({ event: { id: `evt-${randomBytes(4).toString('hex')}`, type: 'TEST', app_user_id: 'someone' } });

  it('answers 503 with a generic body, migrates nothing, logs what to run; after `npm run migrate` it serves', async () => {
    const db = await emptyDatabase('postgres');
    try {
      restore = setEnv({
        VERCEL: '1', DATABASE_URL: db.url, SUPABASE_JWT_SECRET: 'x'.repeat(40), SUBSCRIPTION_WEBHOOK_SECRET: 'deployed-secret-0123456789abcdef0123',
        LEAGUES_WEBHOOK_SECRET: 'leagues-secret-0123456789abcdef01234', APP_ORIGIN: 'https://app.example.com', LOCAL_DEV: undefined,
      });
      await closeDatabase();

      const capture = captureLogs('error');
      let refused;
      try {
        refused = await callRoute(webhookRoute, { method: 'POST', headers: { authorization: 'Bearer deployed-secret-0123456789abcdef0123' }, body: delivery() });
      } finally {
        capture.stop();
      }
      const errors = capture.lines;
      expect({ status: refused.status, code: refused.body?.code, retryAfter: refused.headers.get('retry-after') })
        .toEqual({ status: 503, code: 'database_unavailable', retryAfter: expect.stringMatching(/^\d+$/) });
      expect(refused.text).not.toMatch(/migrat|schema|supabase/i);
      const { rows } = await db.session.query(`select count(*)::int as n from pg_tables where schemaname in ('public', 'supabase_migrations')`);
      expect(rows).toEqual([{ n: 0 }]);
      expect(JSON.stringify(errors)).toContain('npm run migrate');
      expect(JSON.stringify(errors)).toContain(files.at(-1)!.fileName);

      // The operator runs the documented command from a shell, with the deployment's settings.
      const migrate = spawnSync('node_modules/.bin/node', ['scripts/migrate.ts'], {
        encoding: 'utf8', timeout: 120_000, env: { ...process.env, DATABASE_URL: db.url, VERCEL: undefined },
      });
      expect({ status: migrate.status, stderr: migrate.stderr }).toMatchObject({ status: 0 });
      expect(migrate.stderr).toContain(`applying 1/${files.length}: ${files[0]!.fileName}`);
      expect(migrate.stdout).toContain(`applied ${files.length}`);

      await closeDatabase();
      const served = await callRoute(webhookRoute, { method: 'POST', headers: { authorization: 'Bearer deployed-secret-0123456789abcdef0123' }, body: delivery() });
      expect({ status: served.status, body: served.body }).toEqual({ status: 200, body: { received: true } });
    } finally {
      await db.close();
    }
  });
});

describe('npm run migrate: where it migrates', () => {
  it('prefers the direct connection, then DATABASE_URL, then the pooled URL; the Data API alone cannot; nothing: the embedded folder', () => {
    const all = { POSTGRES_URL_NON_POOLING: 'postgres://direct', DATABASE_URL: 'postgres://service', POSTGRES_URL: 'postgres://pooled' };
    expect(migrationTarget(all, '/e')).toEqual({ kind: 'postgres', url: 'postgres://direct', from: 'POSTGRES_URL_NON_POOLING' });
    expect(migrationTarget({ ...all, POSTGRES_URL_NON_POOLING: ' ' }, '/e')).toEqual({ kind: 'postgres', url: 'postgres://service', from: 'DATABASE_URL' });
    expect(migrationTarget({ POSTGRES_URL: 'postgres://pooled' }, '/e')).toEqual({ kind: 'postgres', url: 'postgres://pooled', from: 'POSTGRES_URL' });
    expect(migrationTarget({ SUPABASE_URL: 'https://x.supabase.co' }, '/e')).toEqual({ kind: 'data-api-only' });
    expect(migrationTarget({}, '/e')).toEqual({ kind: 'embedded', dir: '/e' });
  });
});
