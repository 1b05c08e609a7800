import { readFloorRequest } from './floor-request.ts';

// POST /api/bench-floor - the bench's floor for a webhook: the least an authenticated JSON POST costs
// on this server (Bearer check with timingSafeEqual, request.json(), a zod envelope, Response.json),
// with no project code. It is a route only in the bench's own build (`BENCH_FLOOR=1` adds the
// `.bench.ts` page extension in next.config.mjs); every other build leaves this file out, so no
// deployment can reach it (the path falls to the catch-all 404).

export async function POST(request: Request): Promise<Response> {
  const read = await readFloorRequest(request);
  if ('refusal' in read) return read.refusal;
  return Response.json({ received: true });
}
