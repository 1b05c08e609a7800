import { getConfig } from '#lib/config.ts';
import { defineRoute, json } from '#lib/http/route.ts';
import { buildOpenApiDocument } from '#lib/openapi/document.ts';

// GET /api/openapi.json - the API's OpenAPI 3.1 document, generated from the routes' zod schemas
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  // `servers` is `/`: clients resolve paths against wherever they fetched the document from.
  GET: () => json(buildOpenApiDocument(getConfig()), { headers: { 'cache-control': 'public, max-age=300' } }),
});
