import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

/**
 * The Supabase CLI itself (the pinned `supabase` npm package, which ships the binary), run the way an
 * operator runs it: on a project folder (`--workdir`: its supabase/config.toml and
 * supabase/migrations; default this repository), against a database by its connection string
 * (`--db-url`, no Docker needed). Answers in its JSON output format. The test server serves no TLS,
 * so the URL gets `sslmode=disable` (the CLI would otherwise ask for it).
 */
export async function supabaseCli<T>(args: string[], dbUrl: string, options: { workdir?: string } = {}): Promise<T> {
  const url = new URL(dbUrl);
  url.searchParams.set('sslmode', 'disable');
  try {
    const { stdout } = await run('node_modules/.bin/node', [
      'node_modules/supabase/dist/supabase.js', ...args, '--db-url', url.toString(), '--workdir', options.workdir ?? process.cwd(),
      '--output-format', 'json', '--yes',
    ], { encoding: 'utf8', timeout: 120_000, maxBuffer: 16 * 1024 * 1024 });
    return JSON.parse(stdout) as T;
  } catch (error) {
    const { stdout, stderr } = error as { stdout?: string; stderr?: string };
    throw new Error(`supabase ${args.join(' ')} failed: ${(error as Error).message}\n${stderr ?? ''}${stdout ?? ''}`, { cause: error });
  }
}

/** One row of `supabase migration list`: a version in the folder (local), in the ledger (remote), or both. */
export interface MigrationListRow {
  local: string;
  remote: string;
  time: string;
}

/** `supabase migration list --db-url`: the folder's versions beside the database ledger's. */
export async function migrationList(dbUrl: string): Promise<MigrationListRow[]> {
  return (await supabaseCli<{ migrations: MigrationListRow[] }>(['migration', 'list'], dbUrl)).migrations;
}

/** What `supabase db push --db-url` answers: the files it applied (or would, with --dry-run). */
export interface DbPushResult {
  upToDate: boolean;
  dryRun: boolean;
  migrations: string[];
}

/** `supabase db push --db-url`: applies the folder's migrations the ledger lacks, recording each there. */
export function dbPush(dbUrl: string, options: { dryRun?: boolean; workdir?: string } = {}): Promise<DbPushResult> {
  return supabaseCli<DbPushResult>(['db', 'push', ...(options.dryRun ? ['--dry-run'] : [])], dbUrl, options);
}
