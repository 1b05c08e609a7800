import { answerAsRevenueCat, standInServed } from '#lib/billing/revenuecat-stand-in.ts';
import { ApiError } from '#lib/http/problem.ts';
import { defineRoute, json } from '#lib/http/route.ts';

// GET /api/dev/revenuecat/v1/subscribers/{appUserId} - local mode's stand-in for RevenueCat's REST API v1
// (REVENUECAT_STAND_IN=1): the customer as the local webhooks left it, in v1's wire format. Anywhere
// else it is not there: the 404 of any unknown path.
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  GET: async (request, { params }) => {
    if (!standInServed()) throw new ApiError('not_found', { detail: `There is no ${new URL(request.url).pathname} here; see /docs for the API.` });
    const { status, body } = await answerAsRevenueCat(params.appUserId ?? '', request.headers.get('authorization'));
    return json(body, { status });
  },
});
