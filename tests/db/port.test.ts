import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { DbError } from '../../lib/db/errors.ts';
import { closeDatabase, getDatabase, registerEventEndpointsAsTheDatabaseOpens } from '../../lib/db/index.ts';
import { openPglite } from '../../lib/db/pglite.ts';
import { announcedServer, announceServedPort } from '../../lib/db/served-port.ts';
import { openPostgres } from '../../lib/db/postgres.ts';
import { openSupabase } from '../../lib/db/supabase.ts';
import { buildFunctionCall, withLiteralValues } from '../../lib/db/sql-call.ts';
import { defaultBaseUrl } from '../../scripts/operator.ts';
import { freePort } from '../../scripts/support/postgres-server.ts';
import { describeOn, migratedEmbeddedDbDir } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';

describe('building the SQL call', () => {
  it('uses named arguments and placeholders, objects as JSON text', () => {
    expect(buildFunctionCall('apply_event', { p_event: { id: 'e1' }, p_now: new Date('2026-01-01T00:00:00Z'), p_flag: true, p_skip: undefined })).toEqual({
      text: 'select public.apply_event(p_event => $1, p_now => $2, p_flag => $3) as result',
      values: ['{"id":"e1"}', '2026-01-01T00:00:00.000Z', true],
    });
  });

  it("sets lock_timeout for the call's own transaction in the same statement when asked (the Postgres adapter)", () => {
    expect(buildFunctionCall('apply_event', { p_id: 'e1' }, { lockTimeoutMs: 5000 })).toEqual({
      text: "select public.apply_event(p_id => $1) as result from set_config('lock_timeout', $2, true) as call_settings",
      values: ['e1', '5000'],
    });
    expect(() => buildFunctionCall('fn', {}, { lockTimeoutMs: 0 })).toThrow(/lock timeout/);
  });

  it.each(['drop table x; --', 'Public.fn', 'fn()', ''])('refuses the unsafe identifier %j', (name) => {
    expect(() => buildFunctionCall(name, {})).toThrow(/identifier/);
    expect(() => buildFunctionCall('fn', { [name]: 1 })).toThrow(/identifier/);
  });
});

describe('the call with its values as literals (the embedded adapter)', () => {
  it('quotes every value as a string literal (pg escapeLiteral), null as NULL', () => {
    expect(withLiteralValues(buildFunctionCall('apply_event', { p_event: { id: "it's" }, p_n: 3, p_flag: false, p_none: null, p_skip: undefined }))).toBe(
      `select public.apply_event(p_event => '{"id":"it''s"}', p_n => '3', p_flag => 'false', p_none => NULL) as result`);
    expect(withLiteralValues(buildFunctionCall('fn', { p_path: 'C:\\temp' }))).toBe("select public.fn(p_path =>  E'C:\\\\temp') as result");
  });

  it('replaces each placeholder once: a value that reads like one stays as it is', () => {
    expect(withLiteralValues(buildFunctionCall('fn', { p_a: '$2', p_b: 'b' }))).toBe("select public.fn(p_a => '$2', p_b => 'b') as result");
  });

  it('declines a value with a NUL character, which a literal cannot carry (the call then goes with parameters)', () => {
    expect(withLiteralValues(buildFunctionCall('fn', { p_a: 'a\u0000b' }))).toBeNull();
  });

  describe('through the embedded database', () => {
    let root: string;
    let db: Awaited<ReturnType<typeof openPglite>>;
    beforeAll(async () => {
      root = mkdtempSync(path.join(tmpdir(), 'account-link-literal-'));
      db = await openPglite(path.join(root, 'db'), { migrate: false });
      await db.session.exec(`create function public.echo_args(p_text text, p_body jsonb, p_count integer, p_flag boolean, p_at timestamptz, p_none text)
        returns jsonb language sql as $$ select jsonb_build_object('text', p_text, 'body', p_body, 'count', p_count, 'flag', p_flag, 'at', p_at, 'none', p_none) $$`);
    }, 90_000); // creates a fresh PGlite database (seconds on a busy machine)
    afterAll(async () => {
      await db?.close();
      rmSync(root, { recursive: true, force: true });
    });

    it('gives the function exactly the values it was called with', async () => {
      const text = "quote ' backslash \\ dollar $1 $$ newline \n tab \t unicode é 🦀 E'x'";
      const body = { event: { id: "it's \\ \"quoted\"", nested: ['$2', null, 1.5, true] } };
      const at = new Date('2026-11-26T12:34:56.789Z');
      expect(await db.call('echo_args', { p_text: text, p_body: body, p_count: 42, p_flag: true, p_at: at, p_none: null })).toEqual({
        text, body, count: 42, flag: true, at: '2026-11-26T12:34:56.789+00:00', none: null,
      });
    });

    it('gives a lone UTF-16 surrogate as U+FFFD, and the statement arrives whole', async () => {
      expect(withLiteralValues(buildFunctionCall('fn', { p_a: 'é\udc00' }))).toBe("select public.fn(p_a => 'é\ufffd') as result");
      const answer = await db.call('echo_args', { p_text: 'é\udc00 and é\ud800', p_body: {}, p_count: 1, p_flag: false, p_at: new Date(0), p_none: null });
      expect(answer).toMatchObject({ text: 'é\ufffd and é\ufffd', count: 1 });
    });

    it('refuses a NUL character as the database always has: invalid data (the sender\'s 400), nothing run', async () => {
      const error = await db.call('echo_args', { p_text: 'a\u0000b', p_body: {}, p_count: 1, p_flag: false, p_at: new Date(), p_none: null }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(DbError);
      expect((error as DbError).kind).toBe('invalid');
    });
  });
});

describe('the embedded database folder lock', () => {
  let root: string;
  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), 'account-link-lock-'));
  });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it('refuses a folder another live process holds, with a clear message', async () => {
    const dir = path.join(root, 'db');
    // Another process takes the lock the way the service does, and stays alive.
    const holder = spawn(process.execPath, ['-e', `require('fs').writeFileSync(${JSON.stringify(`${dir}.lock`)}, String(process.pid)); setInterval(() => {}, 1000)`]);
    try {
      // Until the holder has written its pid (a slow machine may take a while to start it).
      while (!existsSync(`${dir}.lock`) || readFileSync(`${dir}.lock`, 'utf8') !== String(holder.pid)) await new Promise((resolve) => setTimeout(resolve, 50));
      const error = await openPglite(dir, { migrate: false }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(DbError);
      expect((error as DbError).message).toMatch(/in use by process \d+.*EMBEDDED_DB_DIR/s);
    } finally {
      holder.kill();
    }
  });

  it('a Next server says where it serves, so the commands find a service on another port than 3000', () => {
    const dir = path.join(root, 'db3');
    // The server's process: Next sets NEXT_RUNTIME and PORT (the port it bound) before the app loads.
    const restore = setEnv({ NEXT_RUNTIME: 'nodejs', PORT: '3105', __NEXT_PRIVATE_ORIGIN: undefined });
    try {
      announceServedPort(dir);
    } finally {
      restore();
    }
    expect(readFileSync(`${dir}.port`, 'utf8')).toBe(`${process.pid} 3105`);
    expect(announcedServer(dir)).toBeNull(); // this process itself: nobody else to ask
    // As another process reads it: a live server's port; one whose process is gone, not believed.
    const other = process.ppid;
    writeFileSync(`${dir}.port`, `${other} 3105`);
    expect(announcedServer(dir)).toEqual({ pid: other, port: 3105, origin: 'http://localhost:3105' });
    expect(defaultBaseUrl({ EMBEDDED_DB_DIR: dir })).toBe('http://localhost:3105');
    expect(defaultBaseUrl({ EMBEDDED_DB_DIR: dir, BASE_URL: 'http://127.0.0.1:4000' })).toBe('http://127.0.0.1:4000');
    writeFileSync(`${dir}.port`, `${2 ** 22 + 7} 3105`); // above Linux's highest pid: no such process
    expect(announcedServer(dir)).toBeNull();
    expect(defaultBaseUrl({ EMBEDDED_DB_DIR: dir })).toBe('http://localhost:3000');
    rmSync(`${dir}.port`);
    // Outside a Next server (an operator command), nothing is announced.
    announceServedPort(dir);
    expect(existsSync(`${dir}.port`)).toBe(false);
  });

  it('a server bound to one address (next start -H) is asked at that address, as Next says it serves', () => {
    const dir = path.join(root, 'db4');
    const restore = setEnv({ NEXT_RUNTIME: 'nodejs', PORT: '3106', __NEXT_PRIVATE_ORIGIN: 'http://127.0.0.1:3106' });
    try {
      announceServedPort(dir);
    } finally {
      restore();
    }
    expect(readFileSync(`${dir}.port`, 'utf8')).toBe(`${process.pid} 3106 http://127.0.0.1:3106`);
    const other = process.ppid;
    writeFileSync(`${dir}.port`, `${other} 3106 http://127.0.0.1:3106`);
    expect(defaultBaseUrl({ EMBEDDED_DB_DIR: dir })).toBe('http://127.0.0.1:3106');
    // An origin that is not the bound port's, or not an origin at all, is not believed: localhost.
    for (const origin of ['http://127.0.0.1:9999', 'file:///etc/passwd', 'http://127.0.0.1:3106/path', 'nonsense']) {
      writeFileSync(`${dir}.port`, `${other} 3106 ${origin}`);
      expect(defaultBaseUrl({ EMBEDDED_DB_DIR: dir })).toBe('http://localhost:3106');
    }
    rmSync(`${dir}.port`);
    const restoreOdd = setEnv({ NEXT_RUNTIME: 'nodejs', PORT: '3106', __NEXT_PRIVATE_ORIGIN: 'http://example.com:80' });
    try {
      announceServedPort(dir);
    } finally {
      restoreOdd();
    }
    expect(readFileSync(`${dir}.port`, 'utf8')).toBe(`${process.pid} 3106`);
    rmSync(`${dir}.port`);
  });

  it('a second server on the same folder does not take the announcement from a live one, unless it holds the folder', () => {
    const dir = path.join(root, 'db5');
    const first = `${process.ppid} 3107 http://localhost:3107`; // a live process: the first server
    writeFileSync(`${dir}.port`, first);
    const restore = setEnv({ NEXT_RUNTIME: 'nodejs', PORT: '3108', __NEXT_PRIVATE_ORIGIN: 'http://localhost:3108' });
    try {
      // As it starts (it may never open the folder: the first one holds it), this one writes nothing.
      announceServedPort(dir);
      expect(readFileSync(`${dir}.port`, 'utf8')).toBe(first);
      expect(defaultBaseUrl({ EMBEDDED_DB_DIR: dir })).toBe('http://localhost:3107');
      // Once it opens the database, it holds the folder: it is the one to ask.
      announceServedPort(dir, { holdsFolder: true });
      expect(readFileSync(`${dir}.port`, 'utf8')).toBe(`${process.pid} 3108 http://localhost:3108`);
      // Announcing again changes nothing.
      announceServedPort(dir, { holdsFolder: true });
      expect(readFileSync(`${dir}.port`, 'utf8')).toBe(`${process.pid} 3108 http://localhost:3108`);
      // A file of a process that is gone is no one's: a server starting writes over it.
      writeFileSync(`${dir}.port`, `${2 ** 22 + 7} 3107`);
      announceServedPort(dir);
      expect(readFileSync(`${dir}.port`, 'utf8')).toBe(`${process.pid} 3108 http://localhost:3108`);
    } finally {
      restore();
      rmSync(`${dir}.port`, { force: true });
    }
  });

  describeOn('pglite')('as the service opens it', () => {
    it('the server that opens the folder announces itself there, over another live server\'s word', async () => {
      const dir = migratedEmbeddedDbDir(path.join(root, 'served'));
      writeFileSync(`${dir}.port`, `${process.ppid} 3109`); // a live process said it serves: the first server, say
      const restore = setEnv({
        NEXT_RUNTIME: 'nodejs', PORT: '3110', __NEXT_PRIVATE_ORIGIN: 'http://127.0.0.1:3110', EMBEDDED_DB_DIR: dir,
        LOCAL_DEV: undefined, DATABASE_URL: undefined, SUPABASE_URL: undefined, EVENTS_WEBHOOK_URL: undefined, EVENTS_WEBHOOK_ENDPOINTS: undefined,
      });
      try {
        await closeDatabase();
        registerEventEndpointsAsTheDatabaseOpens(); // as instrumentation.ts marks the server's process
        await getDatabase();
        expect(readFileSync(`${dir}.port`, 'utf8')).toBe(`${process.pid} 3110 http://127.0.0.1:3110`);
      } finally {
        registerEventEndpointsAsTheDatabaseOpens(false);
        await closeDatabase();
        restore();
      }
    }, 90_000);
  });

  it('takes over a lock left by a process that is gone, and releases it on close', async () => {
    const dir = path.join(root, 'db2');
    const gone = spawn(process.execPath, ['-e', `require('fs').writeFileSync(${JSON.stringify(`${dir}.lock`)}, String(process.pid))`]);
    await new Promise((resolve) => gone.on('exit', resolve));
    const db = await openPglite(dir, { migrate: false });
    expect(await db.session.query('select 1 as one')).toMatchObject({ rows: [{ one: 1 }] });
    await db.close();
    const again = await openPglite(dir, { migrate: false });
    await again.close();
  }, 90_000); // creates a fresh PGlite database (seconds on a busy machine)
});

describe('the Postgres adapter when the server is not there', () => {
  it('reports unavailable (so the webhooks answer 503), not a crash', async () => {
    const port = await freePort();
    const error = await openPostgres({ connectionString: `postgres://u:p@127.0.0.1:${port}/db` }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DbError);
    expect((error as DbError).kind).toBe('unavailable');
  });
});

describe('the Supabase adapter speaks the PostgREST RPC wire format', () => {
  let server: Server;
  let url: string;
  const seen: { method?: string; path?: string; headers: IncomingMessage['headers']; body: unknown }[] = [];
  // What PostgREST answers: 200 with the function's JSON, or an error object with the SQLSTATE as code.
  const answers: Record<string, { status: number; body: unknown }> = {
    ok_fn: { status: 200, body: { linked: true } },
    raises_fn: { status: 409, body: { code: 'PT409', message: 'wallet_already_linked', details: 'The wallet is linked to another account.', hint: null } },
    unique_fn: { status: 409, body: { code: '23505', message: 'duplicate key value violates unique constraint', details: null, hint: null } },
    down_fn: { status: 503, body: { code: 'PGRST001', message: 'Database client error. Retrying the connection.', details: null, hint: null } },
    missing_fn: { status: 404, body: { code: 'PGRST202', message: 'Could not find the function public.missing_fn', details: null, hint: null } },
  };

  beforeAll(async () => {
    server = createServer((req, res) => {
      let raw = '';
      req.on('data', (chunk) => (raw += chunk));
      req.on('end', () => {
        seen.push({ method: req.method, path: req.url, headers: req.headers, body: raw ? JSON.parse(raw) : undefined });
        const fn = /^\/rest\/v1\/rpc\/(\w+)$/.exec(req.url ?? '')?.[1] ?? '';
        const answer = answers[fn] ?? { status: 404, body: { code: 'PGRST202', message: 'not found' } };
        res.writeHead(answer.status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(answer.body));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it('POSTs /rest/v1/rpc/<fn> with apikey, Authorization and the named arguments as the JSON body', async () => {
    const db = openSupabase({ url, secretKey: 'sb_secret_test' });
    expect(await db.call('ok_fn', { p_user_id: 'u1', p_event: { id: 'e1' } })).toEqual({ linked: true });
    const request = seen.at(-1)!;
    expect(request.method).toBe('POST');
    expect(request.path).toBe('/rest/v1/rpc/ok_fn');
    expect(request.headers.apikey).toBe('sb_secret_test');
    expect(request.headers.authorization).toBe('Bearer sb_secret_test');
    expect(request.headers['content-type']).toMatch(/application\/json/);
    expect(request.body).toEqual({ p_user_id: 'u1', p_event: { id: 'e1' } });
  });

  const errorCases: { fn: string; kind: string; reason?: string }[] = [
    { fn: 'raises_fn', kind: 'conflict', reason: 'wallet_already_linked' },
    { fn: 'unique_fn', kind: 'conflict' },
    { fn: 'down_fn', kind: 'unavailable' },
  ];
  it.each(errorCases)('maps the PostgREST error of $fn to a $kind DbError', async ({ fn, kind, reason }) => {
    const error = await openSupabase({ url, secretKey: 'k' }).call(fn, {}).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DbError);
    expect((error as DbError).kind).toBe(kind);
    if (reason) expect((error as DbError).reason).toBe(reason);
  });

  it('treats a missing function as a bug (an Error, not a DbError)', async () => {
    const error = await openSupabase({ url, secretKey: 'k' }).call('missing_fn', {}).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Error);
    expect(error).not.toBeInstanceOf(DbError);
  });

  it('reports unavailable when nothing listens', async () => {
    const port = await freePort();
    const error = await openSupabase({ url: `http://127.0.0.1:${port}`, secretKey: 'k' }).call('ok_fn', {}).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DbError);
    expect((error as DbError).kind).toBe('unavailable');
  });
});
