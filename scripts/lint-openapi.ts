// npm run lint:openapi - lint the generated OpenAPI document with Redocly's recommended rules
// (redocly.yaml says which, and why any is off). Zero errors and zero warnings, or it fails.
// The document is the one GET /api/openapi.json serves with the default configuration; it is
// written to .data/openapi/openapi.json (not committed: it is generated) and linted offline.
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { loadConfig } from '../lib/config.ts';
import { buildOpenApiDocument } from '../lib/openapi/document.ts';
import { helpIfAsked } from './command-args.ts';

helpIfAsked({
  about: "Lint the OpenAPI document GET /api/openapi.json serves with Redocly's recommended rules: zero errors and zero warnings, or it fails.",
  usage: 'Usage: npm run lint:openapi',
  docs: 'docs/http.md',
});
const file = path.join('.data', 'openapi', 'openapi.json');
mkdirSync(path.dirname(file), { recursive: true });
writeFileSync(file, `${JSON.stringify(buildOpenApiDocument(loadConfig({})), null, 2)}\n`);

const result = spawnSync(process.execPath, [path.join('node_modules', '@redocly', 'cli', 'bin', 'cli.js'), 'lint', '--config', 'redocly.yaml', '--max-problems', '200', '--format', 'codeframe'], {
  stdio: 'inherit',
  // Offline and quiet: no usage telemetry, no update check.
  env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' },
});
process.exit(result.status ?? 1);
