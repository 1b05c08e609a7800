import { jwtVerify } from 'jose';
import { DEV_ISSUER, loadDevKey } from '#lib/auth/dev-key.ts';
import { getConfig } from '#lib/config.ts';
import { getDatabase } from '#lib/db/index.ts';

// GET /api/bench-read-floor - the bench's read floor: the least an authenticated read costs on this
// server. It verifies the session token as the service does in the bench's configuration (jose's
// jwtVerify, ES256 against the local dev key, the same issuer, audience, clock tolerance and
// required claims: lib/auth/session.ts), reads one row by primary key through the service's own
// connection (its pg pool; the embedded database's thread in embedded mode) and answers it as JSON.
// A route only in the bench's own build (BENCH_FLOOR=1), like the POST floor; its table exists only
// in the bench's databases, and a user's row is made by their first read.

const SELECT = 'select user_id, email, created_at from public.bench_read_floor where user_id = $1';
const INSERT = 'insert into public.bench_read_floor (user_id, email) values ($1, $2) on conflict do nothing';
const CREATE = 'create table if not exists public.bench_read_floor (user_id uuid primary key, email text, created_at timestamptz not null default now())';

type Query = (text: string, values: unknown[]) => Promise<{ rows: Record<string, unknown>[] }>;
let opening: Promise<Query> | undefined;

/** The connection's query function, once the floor's table exists (made by the first request). */
async function openQuery(): Promise<Query> {
  const db = await getDatabase();
  const query: Query = 'pool' in db
    ? (text, values) => (db as unknown as { pool: { query: Query } }).pool.query(text, values)
    : (text, values) => (db as unknown as { session: { query: Query } }).session.query(text, values);
  await query(CREATE, []);
  return query;
}

const unauthorized = () => Response.json({ error: 'unauthorized' }, { status: 401 });

export async function GET(request: Request): Promise<Response> {
  const header = request.headers.get('authorization') ?? '';
  if (!header.startsWith('Bearer ')) return unauthorized();
  let sub: string;
  let email: string | null;
  try {
    const { publicKey } = await loadDevKey(getConfig());
    const { payload } = await jwtVerify(header.slice(7), publicKey, {
      algorithms: ['ES256'], issuer: DEV_ISSUER, audience: 'authenticated', clockTolerance: 30, requiredClaims: ['exp', 'sub'],
    });
    if (payload.role !== 'authenticated' || typeof payload.sub !== 'string') return unauthorized();
    sub = payload.sub;
    email = typeof payload.email === 'string' ? payload.email : null;
  } catch {
    return unauthorized();
  }
  const query = await (opening ??= openQuery().catch((error: unknown) => {
    opening = undefined;
    throw error;
  }));
  let { rows } = await query(SELECT, [sub]);
  if (rows.length === 0) {
    await query(INSERT, [sub, email]);
    ({ rows } = await query(SELECT, [sub]));
  }
  return Response.json(rows[0]);
}
