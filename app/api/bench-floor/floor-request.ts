import { createHash, timingSafeEqual } from 'node:crypto';
import { z } from 'zod';

// What the bench's floors do before anything else (app/api/bench-floor/route.bench.ts and
// app/api/bench-store-floor/route.bench.ts): the least an authenticated JSON webhook costs (a Bearer
// check with timingSafeEqual, request.json(), a zod envelope), with no project code. Imported only
// by those two routes, which exist only in the bench's own build (BENCH_FLOOR=1).

const envelopeSchema = z.looseObject({ event: z.looseObject({ id: z.string().min(1).max(256), type: z.string() }) });
const digest = (value: string) => createHash('sha256').update(value, 'utf8').digest();
const expected = digest(`Bearer ${process.env.SUBSCRIPTION_WEBHOOK_SECRET ?? ''}`);

export type FloorEnvelope = z.infer<typeof envelopeSchema>;

/** The request's envelope, or the answer that refuses it. */
export async function readFloorRequest(request: Request): Promise<{ body: FloorEnvelope } | { refusal: Response }> {
  if (!process.env.SUBSCRIPTION_WEBHOOK_SECRET || !timingSafeEqual(digest(request.headers.get('authorization') ?? ''), expected)) {
    return { refusal: Response.json({ error: 'unauthorized' }, { status: 401 }) };
  }
  let body: unknown;
  try {
    body = await request.json();
  } catch {
    return { refusal: Response.json({ error: 'invalid_json' }, { status: 400 }) };
  }
  const parsed = envelopeSchema.safeParse(body);
  if (!parsed.success) return { refusal: Response.json({ error: 'invalid_body' }, { status: 400 }) };
  return { body: parsed.data };
}
