import { createHash, timingSafeEqual } from 'node:crypto';
import { z } from 'zod';

// POST /api/bench-floor - the bench's floor for a webhook: the least an authenticated JSON POST costs
// on this server (Bearer check with timingSafeEqual, request.json(), a zod envelope, Response.json),
// with no project code. It is a route only in the bench's own build (`BENCH_FLOOR=1` adds the
// `.bench.ts` page extension in next.config.mjs); every other build leaves this file out, so no
// deployment can reach it (the path falls to the catch-all 404).

const envelopeSchema = z.looseObject({ event: z.looseObject({ id: z.string().min(1).max(256), type: z.string() }) });
const digest = (value: string) => createHash('sha256').update(value, 'utf8').digest();
const expected = digest(`Bearer ${process.env.SUBSCRIPTION_WEBHOOK_SECRET ?? ''}`);

export async function POST(request: Request): Promise<Response> {
  if (!process.env.SUBSCRIPTION_WEBHOOK_SECRET || !timingSafeEqual(digest(request.headers.get('authorization') ?? ''), expected)) {
    return Response.json({ error: 'unauthorized' }, { status: 401 });
  }
  let body: unknown;
  try {
    body = await request.json();
  } catch {
    return Response.json({ error: 'invalid_json' }, { status: 400 });
  }
  if (!envelopeSchema.safeParse(body).success) return Response.json({ error: 'invalid_body' }, { status: 400 });
  return Response.json({ received: true });
}
