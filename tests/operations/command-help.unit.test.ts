import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

/**
 * Every `npm run` command that reads options (scripts/command-args.ts) as a newcomer tries it:
 * `--help` says what it does, how to call it and where it is explained, and exits 0; an option it
 * does not know is a usage error (exit 2) with the usage. Neither touches anything: the database
 * the settings name here does not exist, so a command that tried to reach it would fail otherwise.
 */
const scripts = JSON.parse(readFileSync('package.json', 'utf8')).scripts as Record<string, string>;
const nodeScripts = Object.entries(scripts)
  .map(([name, line]) => ({ name, file: /^node (scripts\/[\w-]+\.ts)$/.exec(line)?.[1] }))
  .filter((command): command is { name: string; file: string } => command.file !== undefined);
/** The commands whose options commandArgs reads (and refuses). */
const commands = nodeScripts.filter(({ file }) => readFileSync(file, 'utf8').includes('commandArgs('));
/** The maintainers' tools that read their arguments themselves (the bench, a migration's name): --help only. */
const tools = nodeScripts.filter(({ file }) => !commands.some((command) => command.file === file) && readFileSync(file, 'utf8').includes('helpIfAsked('));

const env = { ...process.env, DATABASE_URL: 'postgres://nobody:nothing@127.0.0.1:1/none', LOG_LEVEL: 'silent', BASE_URL: 'http://127.0.0.1:1' };
const run = (file: string, args: string[]) => promisify(execFile)(process.execPath, [file, ...args], { env, timeout: 30_000 })
  .then(({ stdout, stderr }) => ({ code: 0, stdout, stderr }))
  .catch((error: { code: number; stdout: string; stderr: string }) => ({ code: error.code, stdout: error.stdout, stderr: error.stderr }));

describe('the npm run commands', () => {
  it('are the operator and development commands', () => {
    expect(commands.map((command) => command.name)).toEqual(expect.arrayContaining([
      'token', 'migrate', 'db:maintain', 'status', 'link-wallet', 'sample-event', 'billing:sync', 'billing:rebuild',
      'billing:explain', 'user:export', 'events:status', 'events:dead-letters', 'events:replay', 'events:deliver', 'events:listen',
    ]));
  });

  async function expectHelp(name: string, file: string) {
    const help = await run(file, ['--help']);
    expect(help).toMatchObject({ code: 0, stderr: '' });
    const [about, , usage, , more] = help.stdout.trimEnd().split('\n');
    expect(about!.length).toBeGreaterThan(20);
    expect(usage).toMatch(new RegExp(`^Usage: npm run ${name.replace(':', '\\:')}\\b`));
    const docs = /^More in (docs\/[\w/-]+\.md)\.$/.exec(more ?? '')?.[1];
    expect(docs && existsSync(docs)).toBe(true);
    expect(readFileSync(docs!, 'utf8')).toContain(`npm run ${name}`);
    return usage!;
  }

  it('and the maintainers\' tools answer --help too', () => {
    expect(tools.map((tool) => tool.name)).toEqual(expect.arrayContaining(['bench', 'test:postgres-majors', 'client:generate', 'db:diff', 'lint:openapi']));
  });

  it.each(tools)('npm run $name -- --help says what it does and how to call it, and does nothing else', async ({ name, file }) => {
    await expectHelp(name, file);
  }, 60_000);

  it.each(commands)('npm run $name -- --help says what it does and how to call it; an unknown option is a usage error', async ({ name, file }) => {
    const usage = await expectHelp(name, file);

    const wrong = await run(file, ['--no-such-option']);
    expect(wrong).toMatchObject({ code: 2, stdout: '' });
    expect(wrong.stderr).toContain("Unknown option '--no-such-option'");
    expect(wrong.stderr).toContain(usage);
  }, 60_000);

  it('refuse a malformed value before doing anything: a chain id, a budget, a token lifetime', async () => {
    for (const [file, args, message] of [
      ['scripts/link-wallet.ts', ['--chain-id', 'abc'], '--chain-id abc: an EVM chain id, a positive whole number (1 is Ethereum)'],
      ['scripts/db-maintain.ts', ['--budget-ms', 'soon'], '--budget-ms soon: a whole number of milliseconds'],
      ['scripts/token.ts', ['--expires', 'never'], '--expires must be a number of seconds'],
    ] as const) {
      const wrong = await run(file, [...args]);
      expect(wrong).toMatchObject({ code: 2, stdout: '' });
      expect(wrong.stderr).toContain(message);
      expect(wrong.stderr).toContain('Usage: npm run ');
    }
  }, 60_000);
});
