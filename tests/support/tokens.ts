import { randomUUID } from 'node:crypto';
import { getConfig } from '../../lib/config.ts';
import { mintDevToken, type DevTokenOptions } from '../../lib/auth/dev-key.ts';

/** A signed-in test user with a real dev-key token (embedded/dev-key auth mode). */
export async function testUser(options: Partial<DevTokenOptions> = {}) {
  const userId = options.userId ?? randomUUID();
  const email = options.email ?? `user-${userId.slice(0, 8)}@example.test`;
  const token = await mintDevToken(getConfig(), { ...options, userId, email });
  return { userId, email, token, authorization: `Bearer ${token}` };
}
