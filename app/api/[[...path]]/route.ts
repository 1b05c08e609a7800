import { ApiError } from '#lib/http/problem.ts';
import { defineRoute, type RouteHandler } from '#lib/http/route.ts';

// Any /api path no route matches: a problem+json 404 (Next's own would be an HTML page).
const notFound: RouteHandler = (request) => {
  throw new ApiError('not_found', { detail: `There is no ${new URL(request.url).pathname} here; see /docs for the API.` });
};

const handlers = defineRoute({ GET: notFound, POST: notFound, PUT: notFound, PATCH: notFound, DELETE: notFound });
export const { GET, POST, PUT, PATCH, DELETE } = handlers;
export const OPTIONS = handlers.GET;
