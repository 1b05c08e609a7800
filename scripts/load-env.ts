// Load .env, .env.local (and .env.development...) exactly as `next dev` / `next start` do, so a
// script sees the same configuration as the server it talks to. Import it first.
import nextEnv from '@next/env';

nextEnv.loadEnvConfig(process.cwd(), process.env.NODE_ENV !== 'production', { info: () => undefined, error: console.error });
