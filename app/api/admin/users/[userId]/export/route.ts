import { exportAccount, exportHeaders } from '#lib/account-export.ts';
import { authenticateOperator } from '#lib/auth/operator-secret.ts';
import { defineRoute, json } from '#lib/http/route.ts';

// GET /api/admin/users/{userId}/export - everything stored about any user, for an operator (ADMIN_API_SECRET)
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  GET: async (request, { params, annotate }) => {
    authenticateOperator(request, 'admin');
    const userId = params.userId ?? '';
    annotate({ userId });
    const account = await exportAccount(userId);
    return json(account, { headers: exportHeaders(account) });
  },
});
