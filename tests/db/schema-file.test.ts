import { cpSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import { openPglite } from '../../lib/db/pglite.ts';
import { dumpSchema, SCHEMA_FILE } from '../../scripts/db-schema.ts';
import { describeOn } from '../support/databases.ts';

/**
 * supabase/schema.sql is the schema as the migrations leave it, in one file. It is generated; this
 * fails when a migration changed the schema and the file was not made again.
 */
describeOn('pglite')('supabase/schema.sql', () => {
  it('is what the migrations make today (else: npm run db:schema)', async () => {
    const dir = path.join(mkdtempSync(path.join(tmpdir(), 'schema-file-')), 'db');
    cpSync(inject('pgliteTemplateDir'), dir, { recursive: true });
    const db = await openPglite(dir);
    try {
      const fresh = await dumpSchema(db.session);
      const committed = readFileSync(SCHEMA_FILE, 'utf8');
      // One message instead of a 2,000-line diff: the first line that differs.
      const at = fresh.split('\n').findIndex((line, i) => line !== committed.split('\n')[i]);
      expect(at === -1 && fresh.length === committed.length ? 'current' : `stale from line ${at + 1}: run npm run db:schema`).toBe('current');
    } finally {
      await db.close();
      rmSync(path.dirname(dir), { recursive: true, force: true });
    }
  });

  it('holds the latest definition of a function that later migrations redefined', () => {
    const schema = readFileSync(SCHEMA_FILE, 'utf8');
    const redefined = readdirSync('supabase/migrations').sort().filter((file) => /create or replace function public\.billing_apply_event\(/.test(readFileSync(path.join('supabase/migrations', file), 'utf8')));
    expect(redefined.length).toBeGreaterThan(1);
    expect(schema.match(/CREATE OR REPLACE FUNCTION public\.billing_apply_event\(/g)).toHaveLength(1);
  });
});

describe('supabase/ as a Supabase CLI project', () => {
  const config = readFileSync('supabase/config.toml', 'utf8');

  it('names the Postgres major version Supabase runs, and a project id', () => {
    expect(config).toMatch(/^\[db\][^[]*\nmajor_version = 17\n/m);
    expect(config).toMatch(/^project_id = "[a-z0-9-]+"$/m);
  });

  it('has migration files the CLI accepts: <digits>_<name>.sql, each version once', () => {
    const files = readdirSync('supabase/migrations');
    for (const file of files) expect(file).toMatch(/^\d{14}_[a-z0-9_]+\.sql$/);
    const versions = files.map((file) => file.split('_')[0]);
    expect(new Set(versions).size).toBe(versions.length);
  });

  it('turns on the access token hook with the function the migrations make', () => {
    expect(config).toMatch(/^\[auth\.hook\.custom_access_token\]\nenabled = true\nuri = "pg-functions:\/\/postgres\/public\/custom_access_token_hook"$/m);
    expect(readFileSync('supabase/schema.sql', 'utf8')).toContain('CREATE OR REPLACE FUNCTION public.custom_access_token_hook(event jsonb)');
  });

  it('seeds only from files that exist (db reset would fail on a missing one)', () => {
    const seeds = /^\[db\.seed\][^[]*?sql_paths = \[(.*)\]/m.exec(config)?.[1] ?? '';
    for (const [, seed] of seeds.matchAll(/"([^"]+)"/g)) expect(readdirSync(path.join('supabase', path.dirname(seed!)))).toContain(path.basename(seed!));
  });
});
