import { authenticate } from '#lib/auth/session.ts';
import { defineRoute, json } from '#lib/http/route.ts';
import { getAccount } from '#lib/account.ts';

// GET /api/me - the signed-in caller's account
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  GET: async (request) => json(await getAccount(await authenticate(request))),
});
