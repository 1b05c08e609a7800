import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';

/**
 * lib/faults.ts is a kill switch in production code, so prove it is inert unless asked on a server
 * that is not deployed: each case runs the hook in a child Node process and looks at how it ended.
 * (The normal suites also run the billing route with the hook in place, and never crash.)
 */
const HOOK = pathToFileURL(path.resolve('lib/faults.ts')).href;

const cases: { name: string; env: Record<string, string>; eventId: string; killed: boolean }[] = [
  { name: 'no FAULT_CRASH_AFTER_COMMIT', env: {}, eventId: 'evt-1', killed: false },
  { name: 'an empty FAULT_CRASH_AFTER_COMMIT', env: { FAULT_CRASH_AFTER_COMMIT: '' }, eventId: 'evt-1', killed: false },
  { name: 'another event id', env: { FAULT_CRASH_AFTER_COMMIT: 'evt-2' }, eventId: 'evt-1', killed: false },
  { name: 'a prefix of the event id', env: { FAULT_CRASH_AFTER_COMMIT: 'evt' }, eventId: 'evt-1', killed: false },
  { name: 'the event id but deployed (VERCEL=1)', env: { FAULT_CRASH_AFTER_COMMIT: 'evt-1', VERCEL: '1' }, eventId: 'evt-1', killed: false },
  { name: 'the event id but deployed (VERCEL=true: any value is)', env: { FAULT_CRASH_AFTER_COMMIT: 'evt-1', VERCEL: 'true' }, eventId: 'evt-1', killed: false },
  { name: 'the event id, not deployed', env: { FAULT_CRASH_AFTER_COMMIT: 'evt-1', VERCEL: '' }, eventId: 'evt-1', killed: true },
  { name: 'the event id, not deployed (VERCEL blank)', env: { FAULT_CRASH_AFTER_COMMIT: 'evt-1', VERCEL: ' ' }, eventId: 'evt-1', killed: true },
];

describe('the fault-injection hook (lib/faults.ts)', () => {
  it.each(cases)('$name -> killed: $killed', ({ env, eventId, killed }) => {
    const script = `import { crashAfterCommitIfAsked } from ${JSON.stringify(HOOK)}; crashAfterCommitIfAsked(process.argv[1]); console.log('alive');`;
    const { FAULT_CRASH_AFTER_COMMIT: _fault, VERCEL: _vercel, ...inherited } = process.env;
    void _fault;
    void _vercel;
    const child = spawnSync(process.execPath, ['--input-type=module', '-e', script, eventId], { env: { ...inherited, ...env }, encoding: 'utf8' });
    expect({ signal: child.signal, status: child.status, stdout: child.stdout.trim(), stderr: child.stderr.trim() })
      .toEqual(killed ? { signal: 'SIGKILL', status: null, stdout: '', stderr: '' } : { signal: null, status: 0, stdout: 'alive', stderr: '' });
  });
});
