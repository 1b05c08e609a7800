// npm run user:export -- --user <user id> [--out <file>] [--base-url <url>] - everything stored about
// one user, as JSON (what GET /api/me/export answers them; GET /api/admin/users/{id}/export for an
// operator): to stdout, or to --out. Reads only. Reads .env.local like the server, but needs only
// the database settings `npm run migrate` uses; in local mode on the embedded database, while the
// running service holds the folder, it asks that service's route instead (at --base-url, default as
// defaultBaseUrl in operator.ts says).
import './load-env.ts';
import { writeFileSync } from 'node:fs';
import { exportAccount, type AccountExport } from '../lib/account-export.ts';
import { closeDatabase } from '../lib/db/index.ts';
import { DomainError } from '../lib/errors.ts';
import { commandArgs, usageError } from './command-args.ts';
import { databaseOrService } from './operator.ts';

const HELP = {
  about: 'Everything stored about one user, as JSON (what GET /api/me/export answers them): to stdout, or to --out. Reads only.',
  usage: 'Usage: npm run user:export -- --user <user id> [--out <file>] [--base-url <url>]',
  docs: 'docs/operations.md',
};
const values = commandArgs(HELP, { user: { type: 'string' }, out: { type: 'string' }, 'base-url': { type: 'string' } });
const user = values.user || usageError(HELP, 'Missing --user <user id>.');

try {
  const account = await databaseOrService<AccountExport>({
    baseUrl: values['base-url'],
    direct: () => exportAccount(user),
    route: { method: 'GET', path: `/api/admin/users/${encodeURIComponent(user)}/export` },
  });
  const text = `${JSON.stringify(account, null, 2)}\n`;
  if (values.out) {
    writeFileSync(values.out, text, { mode: 0o600 });
    console.error(`Wrote ${values.out}: ${account.billing.events.length} billing events, ${account.wallets.links.length} wallet links, ${account.leagues.length} league memberships.`);
  } else {
    process.stdout.write(text);
  }
} catch (error) {
  console.error(error instanceof DomainError ? `${error.code}: ${error.detail}` : `Export failed: ${(error as Error).message}`);
  process.exitCode = 1;
} finally {
  await closeDatabase();
}
