import { authenticate } from '#lib/auth/session.ts';
import { defineRoute, jsonText } from '#lib/http/route.ts';
import { getAccountJson } from '#lib/account.ts';

// GET /api/me - the signed-in caller's account
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  GET: async (request) => jsonText(await getAccountJson(await authenticate(request))),
});
