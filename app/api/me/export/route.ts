import { exportAccount, exportHeaders } from '#lib/account-export.ts';
import { authenticate } from '#lib/auth/session.ts';
import { defineRoute, json } from '#lib/http/route.ts';

// GET /api/me/export - everything stored about the signed-in caller, as a JSON download
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  GET: async (request) => {
    const account = await exportAccount((await authenticate(request)).userId);
    return json(account, { headers: exportHeaders(account) });
  },
});
