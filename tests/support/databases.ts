import { randomBytes } from 'node:crypto';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, inject } from 'vitest';
import type { DatabaseAdapter } from '../../lib/db/adapter.ts';
import { closeDatabase, replaceDatabase } from '../../lib/db/index.ts';
import { openPglite } from '../../lib/db/pglite.ts';
import { runMigrations, type SqlSession } from '../../lib/db/migrate.ts';
import { clientSession, openPostgres } from '../../lib/db/postgres.ts';
import { createDatabase } from '../../scripts/support/postgres-server.ts';
import { selectedEngines, type DatabaseKind } from '../setup/engines.ts';

export type { DatabaseKind };
/**
 * The engines this run tests on (TEST_ENGINES, tests/setup/engines.ts; both by default): database
 * suites run once on each (`describe.each(DATABASE_KINDS)`).
 */
export const DATABASE_KINDS: DatabaseKind[] = selectedEngines();

/** Whether this run tests on the engine (TEST_ENGINES): its global setup prepared it. */
export const engineOn = (kind: DatabaseKind): boolean => DATABASE_KINDS.includes(kind);

/**
 * A describe block about one engine (what only a Postgres server does: pooling, concurrency, its
 * planner; or what only PGlite is: the embedded mode), skipped when TEST_ENGINES leaves it out.
 * Blocks that open their database with suiteDatabase(kind) skip themselves.
 */
export const describeOn = (kind: DatabaseKind) => describe.skipIf(!engineOn(kind));

function engineOff(kind: DatabaseKind): Error {
  return new Error(`The ${kind} engine is off in this run (TEST_ENGINES=${process.env.TEST_ENGINES ?? ''}): wrap the block in describeOn('${kind}'), or open it with suiteDatabase('${kind}'), which skips itself`);
}

export interface TestDatabase {
  kind: DatabaseKind;
  adapter: DatabaseAdapter;
  /** Run raw SQL for assertions and fixtures (never used by the code under test). */
  sql<T = Record<string, unknown>>(text: string, values?: unknown[]): Promise<T[]>;
  /** A connection string for a second, independent client (postgres only). */
  url?: string;
  /**
   * Run `work` on one connection of its own (PGlite: its only one), for a transaction: `begin`, `set
   * local role`, reads, `rollback`. Nothing else may use the database meanwhile on PGlite.
   */
  connection<T>(work: (sql: TestDatabase['sql']) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

export interface TestDatabaseOptions {
  /** Supabase Realtime's schema too (scripts/support/supabase-realtime.ts), made before the migrations. */
  realtime?: boolean;
}

/**
 * A fresh, migrated database of the given kind, copied from the template the global setup built.
 * PGlite: a copy of the template folder. Postgres: `create database ... template app_template`.
 */
export async function openTestDatabase(kind: DatabaseKind, options: TestDatabaseOptions = {}): Promise<TestDatabase> {
  if (!engineOn(kind)) throw engineOff(kind);
  if (!inject(kind === 'pglite' ? 'pgliteTemplateDir' : 'postgresServerUrl')) {
    throw new Error('This file opens a test database, but its tier prepares none: a database test is named x.test.ts, not x.unit.test.ts (CONTRIBUTING.md, "Test tiers")');
  }
  if (kind === 'pglite') {
    const dir = path.join(mkdtempSync(path.join(tmpdir(), 'account-link-pglite-')), 'db');
    cpSync(inject(options.realtime ? 'pgliteRealtimeTemplateDir' : 'pgliteTemplateDir'), dir, { recursive: true });
    const db = await openPglite(dir);
    const sql: TestDatabase['sql'] = async (text, values) => (await db.session.query(text, values)).rows as never;
    return {
      kind,
      adapter: db,
      sql,
      connection: (work) => work(sql),
      close: async () => {
        await db.close();
        rmSync(path.dirname(dir), { recursive: true, force: true });
      },
    };
  }
  const name = `test_${randomBytes(6).toString('hex')}`;
  const serverUrl = inject('postgresServerUrl');
  await createDatabase(serverUrl, name, options.realtime ? 'app_template_realtime' : 'app_template');
  const url = serverUrl.replace(/\/postgres$/, `/${name}`);
  const db = await openPostgres({ connectionString: url, max: 20 });
  return {
    kind,
    adapter: db,
    url,
    sql: async (text, values) => (await db.pool.query(text, values)).rows,
    connection: async (work) => {
      const client = await db.pool.connect();
      try {
        return await work(async (text, values) => (await client.query(text, values)).rows);
      } finally {
        client.release();
      }
    },
    close: () => db.close(),
  };
}

/** Open a fresh database and make it the one the service's port uses (for route tests). */
export async function useTestDatabase(kind: DatabaseKind, options: TestDatabaseOptions = {}): Promise<TestDatabase> {
  await closeDatabase();
  const db = await openTestDatabase(kind, options);
  replaceDatabase(db.adapter);
  return db;
}

/**
 * For a describe block: a fresh database of this kind, made the service's database before its
 * tests and closed after them. The returned object stands for it (`db.sql(...)`, `db.url`). When
 * TEST_ENGINES leaves the engine out, the block's tests are skipped, saying why.
 */
export function suiteDatabase(kind: DatabaseKind, options: TestDatabaseOptions = {}): TestDatabase {
  let current: TestDatabase | undefined;
  if (!engineOn(kind)) beforeEach((context) => context.skip(`the ${kind} engine is off (TEST_ENGINES)`));
  else beforeAll(async () => {
    current = await useTestDatabase(kind, options);
  });
  afterAll(async () => {
    await closeDatabase();
    await current?.close();
  });
  const opened = () => {
    if (!current) throw new Error('suiteDatabase is used before its beforeAll ran');
    return current;
  };
  return {
    kind,
    get adapter() {
      return opened().adapter;
    },
    get url() {
      return opened().url;
    },
    sql: (text, values) => opened().sql(text, values),
    connection: (work) => opened().connection(work),
    close: () => opened().close(),
  };
}

/**
 * Until a session of this database waits for a lock (a row or a transaction another session holds
 * open): the moment a race test commits its writer. Other test files share the server, so only this
 * database's sessions count. `orUntil`: stop waiting once it holds too (a session that did not wait,
 * under a change the test must catch, has ended).
 */
export async function untilASessionWaitsForALock(db: TestDatabase, orUntil: () => boolean = () => false): Promise<void> {
  for (;;) {
    if (orUntil()) return;
    const [{ waiting }] = await db.sql<{ waiting: string }>(
      `select count(*) as waiting from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`);
    if (Number(waiting) > 0) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** `runMigrations` on a Postgres database, with every statement it sent (what a deployed instance asks before it serves). */
export async function migrateCounting(url: string): Promise<{ applied: string[]; statements: string[] }> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const session = clientSession(client);
    const statements: string[] = [];
    const counting: SqlSession = {
      query: (text, values) => (statements.push(text), session.query(text, values)),
      exec: (sql) => (statements.push(sql), session.exec(sql)),
    };
    return { applied: await runMigrations(counting), statements };
  } finally {
    await client.end();
  }
}

/**
 * The embedded database folder for a server or script a test starts, already migrated: a copy of
 * the run's PGlite template in `<dataDir>/pglite`. Applying every migration on PGlite costs several
 * seconds of CPU at the server's first request; the newcomer's first start, which does, has tests of
 * its own (the README tour, `next dev`, the startup log). Without the PGlite engine this run
 * (TEST_ENGINES), the folder is left to the server to make.
 */
export function migratedEmbeddedDbDir(dataDir: string): string {
  const dir = path.join(dataDir, 'pglite');
  if (engineOn('pglite')) cpSync(inject('pgliteTemplateDir'), dir, { recursive: true });
  return dir;
}

/**
 * A second connection to a suite's Postgres database for each test of the block it is called in
 * (opened before each test, closed after): a transaction held open there runs beside the test's
 * own calls, as two requests at once would.
 */
export function sessionBeside(db: TestDatabase): { query: pg.Client['query'] } {
  let client: pg.Client | undefined;
  beforeEach(async () => {
    client = new pg.Client({ connectionString: db.url });
    await client.connect();
  });
  afterEach(async () => {
    await client?.end();
    client = undefined;
  });
  return { query: ((...args: unknown[]) => (client!.query as (...a: unknown[]) => unknown)(...args)) as pg.Client['query'] };
}
