import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { BOOTSTRAP_SQL } from '../../lib/db/bootstrap.ts';
import type { SqlSession } from '../../lib/db/migrate.ts';

export const SCHEMAS_DIR = path.join('supabase', 'schemas');

/** The files of supabase/schemas in the order they are applied: by name, as Supabase's CLI does. */
export function declaredSchemaFiles(dir = SCHEMAS_DIR): string[] {
  return readdirSync(dir).filter((name) => name.endsWith('.sql')).sort().map((name) => path.join(dir, name));
}

/**
 * Build the declared schema on an empty database: what Supabase provides first (the API roles and
 * `auth`, made where missing), then every file of supabase/schemas in name order, in one
 * transaction. Function bodies are checked when they run, not when they are made (as pg_dump's
 * output does it), so a function may name one declared in a later file.
 */
export async function applyDeclaredSchema(session: SqlSession, dir = SCHEMAS_DIR): Promise<void> {
  await session.exec(BOOTSTRAP_SQL);
  await session.exec('begin');
  try {
    await session.exec('set local check_function_bodies = off');
    for (const file of declaredSchemaFiles(dir)) {
      try {
        await session.exec(readFileSync(file, 'utf8'));
      } catch (error) {
        throw new Error(`${file}: ${(error as Error).message}`, { cause: error });
      }
    }
    await session.exec('commit');
  } catch (error) {
    await session.exec('rollback');
    throw error;
  }
}
