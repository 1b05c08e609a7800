// npm run token -- --user <uuid> --email <email> [--anonymous] [--expires <seconds>]
// Prints a session token that the embedded (dev-key) service accepts.
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import { getConfig } from '../lib/config.ts';
import { mintDevToken } from '../lib/auth/dev-key.ts';

const { values } = parseArgs({
  options: {
    user: { type: 'string' },
    email: { type: 'string' },
    anonymous: { type: 'boolean', default: false },
    expires: { type: 'string', default: '3600' },
  },
});

const config = getConfig();
if (config.auth.mode !== 'dev-key') {
  console.error(`npm run token works only with the local dev key (auth mode is ${config.auth.mode}); sign in through Supabase Auth instead.`);
  process.exit(1);
}
const userId = values.user ?? randomUUID();
const token = await mintDevToken(config, {
  userId,
  email: values.email ?? `${userId.slice(0, 8)}@example.test`,
  isAnonymous: values.anonymous,
  expiresInSeconds: Number(values.expires),
});
process.stdout.write(`${token}\n`);
