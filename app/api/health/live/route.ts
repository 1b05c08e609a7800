import { defineRoute, json } from '#lib/http/route.ts';

// GET /api/health/live - the process answers (no database): for load balancers, and the bench's baseline
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  GET: () => json({ status: 'ok' }),
});
