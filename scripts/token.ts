// npm run token [-- --user <uuid>] [--email <email>] [--anonymous] [--expires <seconds>]
// Prints a session token that the embedded (dev-key) service accepts: for the dev user
// (ana@example.com) unless told otherwise; an e-mail alone is the user the page's local sign-in
// gives it. Reads .env.local like the server.
import './load-env.ts';
import { z } from 'zod';
import { mintDevToken } from '../lib/auth/dev-key.ts';
import { devIdentity } from '../lib/auth/dev-user.ts';
import { getConfig } from '../lib/config.ts';
import { commandArgs, commandFailed, usageError } from './command-args.ts';

const HELP = {
  about: 'Print a session token that the local (embedded) service accepts: for the dev user (ana@example.com) unless --user or --email names another.',
  usage: 'Usage: npm run token [-- --user <uuid>] [--email <email>] [--anonymous] [--expires <seconds>]',
  docs: 'docs/development.md',
};

const argsSchema = z.object({
  user: z.uuid('--user must be a UUID (the API identifies users by UUID)').optional(),
  email: z.email('--email must be an e-mail address').optional(),
  anonymous: z.boolean(),
  expires: z.coerce.number({ error: '--expires must be a number of seconds' }).int().positive('--expires must be a positive number of seconds').max(30 * 86_400),
});

try {
  const values = commandArgs(HELP, {
    user: { type: 'string' },
    email: { type: 'string' },
    anonymous: { type: 'boolean', default: false },
    expires: { type: 'string', default: '3600' },
  });
  const parsed = argsSchema.safeParse(values);
  if (!parsed.success) usageError(HELP, parsed.error.issues.map((issue) => issue.message).join('\n'));
  const args = parsed.data;

  const config = getConfig();
  if (config.auth.mode !== 'dev-key') {
    commandFailed(`npm run token works only with the local dev key (auth mode is ${config.auth.mode}); sign in through Supabase Auth instead.`);
  }
  const { userId, email } = devIdentity({ user: args.user, email: args.email });
  const token = await mintDevToken(config, {
    userId,
    email,
    isAnonymous: args.anonymous,
    expiresInSeconds: args.expires,
  });
  process.stdout.write(`${token}\n`);
} catch (error) {
  commandFailed((error as Error).message);
}
