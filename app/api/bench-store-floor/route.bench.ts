import { getDatabase } from '#lib/db/index.ts';
import { readFloorRequest } from '../bench-floor/floor-request.ts';

// POST /api/bench-store-floor - the bench's store floor: the POST floor (app/api/bench-floor) plus
// one INSERT of the event (id, body) into a table, `on conflict do nothing`, through the service's
// own database connection (its pg pool; the embedded database's thread in embedded mode). The
// least any webhook that keeps what it received pays. A route only in the bench's own build
// (BENCH_FLOOR=1), like the POST floor; its table exists only in the bench's databases.

const INSERT = 'insert into public.bench_store_floor (event_id, body) values ($1, $2) on conflict do nothing';
const CREATE = 'create table if not exists public.bench_store_floor (event_id text primary key, body jsonb not null)';

type Insert = (text: string, values: unknown[]) => Promise<unknown>;
let opening: Promise<Insert> | undefined;

/** The connection's query function, once the floor's table exists (made by the first request). */
async function openInsert(): Promise<Insert> {
  const db = await getDatabase();
  const insert: Insert = 'pool' in db
    ? (text, values) => (db as unknown as { pool: { query(text: string, values: unknown[]): Promise<unknown> } }).pool.query(text, values)
    : (text, values) => (db as unknown as { session: { query(text: string, values: unknown[]): Promise<unknown> } }).session.query(text, values);
  await insert(CREATE, []);
  return insert;
}

export async function POST(request: Request): Promise<Response> {
  const read = await readFloorRequest(request);
  if ('refusal' in read) return read.refusal;
  const insert = await (opening ??= openInsert().catch((error: unknown) => {
    opening = undefined;
    throw error;
  }));
  await insert(INSERT, [read.body.event.id, JSON.stringify(read.body)]);
  return Response.json({ received: true });
}
