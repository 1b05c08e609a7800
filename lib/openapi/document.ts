import { z } from 'zod';
import { adminSyncBodySchema } from '../billing/sync.ts';
import { billingWebhookBodySchema } from '../billing/webhook-body.ts';
import { PROBLEM_CATALOG, type ProblemCode } from '../http/problem.ts';
import { leaguesSyncBodySchema } from '../leagues/sync-schema.ts';
import { createChallengeBodySchema, createLinkBodySchema } from '../wallets/schemas.ts';
import * as responses from './responses.ts';

void responses; // registers the response schemas (their .meta ids) before the document is built

/**
 * The API's OpenAPI 3.1 document, generated from the zod schemas the routes validate with (request
 * bodies) and the response schemas in ./responses.ts. GET /api/openapi.json serves it; /docs
 * renders it. tests/openapi checks it lists exactly the routes that exist, and that real responses
 * match it.
 */

type Security = 'session' | 'billingSecret' | 'leaguesSecret' | 'cronSecret' | 'adminSecret' | 'none';

export interface Operation {
  method: 'get' | 'post' | 'delete';
  path: string;
  summary: string;
  description?: string;
  security: Security;
  request?: z.ZodType;
  success: { status: number; description: string; schema?: z.ZodType };
  errors: ProblemCode[];
  tags: string[];
}

const BODY_ERRORS: ProblemCode[] = ['invalid_json', 'invalid_request', 'payload_too_large', 'unsupported_media_type'];
const SESSION_ERRORS: ProblemCode[] = ['missing_token', 'invalid_token', 'token_expired', 'anonymous_user_not_allowed', 'forbidden_role', 'auth_unavailable'];
const WRITE_SESSION_ERRORS: ProblemCode[] = [...SESSION_ERRORS, 'session_revoked'];
const ALWAYS: ProblemCode[] = ['database_unavailable', 'service_misconfigured', 'internal_error'];

export const OPERATIONS: Operation[] = [
  {
    method: 'get', path: '/api/health', tags: ['Service'], security: 'none',
    summary: 'Liveness and database reachability',
    success: { status: 200, description: 'The service and its database answer', schema: responses.healthResponseSchema },
    errors: ['service_misconfigured'],
  },
  {
    method: 'get', path: '/api/health/live', tags: ['Service'], security: 'none',
    summary: 'The process answers (no database call)',
    success: { status: 200, description: 'Alive', schema: responses.liveResponseSchema },
    errors: [],
  },
  {
    method: 'get', path: '/api/openapi.json', tags: ['Service'], security: 'none',
    summary: 'This document',
    success: { status: 200, description: 'OpenAPI 3.1' },
    errors: [],
  },
  {
    method: 'get', path: '/api/me', tags: ['Account'], security: 'session',
    summary: "The caller's account: identity, wallets, entitlements and leagues",
    description: 'Entitlement `active` and `status` are computed at request time: an entitlement lapses on time even if no EXPIRATION event arrives.',
    success: { status: 200, description: 'The account', schema: responses.accountResponseSchema },
    errors: [...SESSION_ERRORS, ...ALWAYS],
  },
  {
    method: 'post', path: '/api/wallet-link/challenge', tags: ['Wallet links'], security: 'session',
    summary: 'Issue the exact message a wallet signs to prove it is the caller’s',
    description: 'At most 10 challenges a minute per user (429 with Retry-After); at most 5 open at once (a 6th retires the oldest). A challenge expires after 10 minutes and can be used once.',
    request: createChallengeBodySchema,
    success: { status: 201, description: 'The challenge', schema: responses.challengeResponseSchema },
    errors: [...BODY_ERRORS, 'invalid_address', 'unsupported_chain', ...SESSION_ERRORS, 'rate_limited', ...ALWAYS],
  },
  {
    method: 'post', path: '/api/wallet-link', tags: ['Wallet links'], security: 'session',
    summary: 'Link the wallet that signed the caller’s challenge',
    description: '201 for a new link; 200 with `alreadyLinked: true` when this wallet is already linked to the caller. A wallet is linked to at most one user.',
    request: createLinkBodySchema,
    success: { status: 201, description: 'Linked (200 when it already was)', schema: responses.linkResponseSchema },
    errors: [...BODY_ERRORS, 'invalid_address', 'unsupported_chain', ...WRITE_SESSION_ERRORS, 'challenge_not_found', 'challenge_expired', 'challenge_already_used',
      'invalid_message', 'address_mismatch', 'invalid_signature', 'unsupported_signature_type', 'wallet_already_linked', 'too_many_wallets', ...ALWAYS],
  },
  {
    method: 'get', path: '/api/wallet-link', tags: ['Wallet links'], security: 'session',
    summary: "List the caller's wallet links",
    success: { status: 200, description: 'The links, oldest first', schema: responses.walletListResponseSchema },
    errors: [...SESSION_ERRORS, ...ALWAYS],
  },
  {
    method: 'delete', path: '/api/wallet-link/{linkId}', tags: ['Wallet links'], security: 'session',
    summary: "Unlink one of the caller's wallets",
    success: { status: 204, description: 'Unlinked' },
    errors: [...WRITE_SESSION_ERRORS, 'link_not_found', ...ALWAYS],
  },
  {
    method: 'post', path: '/api/webhooks/subscription-billing', tags: ['Webhooks'], security: 'billingSecret',
    summary: 'Receive a RevenueCat webhook event',
    description: 'Every authenticated, well-formed delivery gets exactly 200 `{ "received": true }`: new, duplicate, TEST, unknown type, no app_user_id. The event is stored with its effect in one transaction, deduplicated by `event.id`; order of arrival does not matter. A 503 means nothing was stored: RevenueCat retries.',
    request: billingWebhookBodySchema,
    success: { status: 200, description: 'Received', schema: responses.billingAckSchema },
    errors: [...BODY_ERRORS, 'invalid_webhook_secret', 'webhook_not_configured', ...ALWAYS],
  },
  {
    method: 'post', path: '/api/me/billing/sync', tags: ['Account'], security: 'session',
    summary: "Refresh the caller's purchases from RevenueCat",
    description: "Fetches the caller's customer record from RevenueCat's REST API (app user id = the caller's user id) and stores it like an event; answers the fresh entitlements. At most one refresh per 5 s (429 with Retry-After). 503 `sync_not_configured` without REVENUECAT_SECRET_API_KEY; 503 `upstream_unavailable` (with Retry-After) when RevenueCat is down, slow or rate limiting; 502 when it refuses the key or answers something else. A failed refresh changes nothing.",
    success: { status: 200, description: 'Refreshed', schema: responses.billingSyncResponseSchema },
    errors: [...WRITE_SESSION_ERRORS, 'rate_limited', 'sync_not_configured', 'upstream_unavailable', 'upstream_rejected', 'upstream_invalid', ...ALWAYS],
  },
  {
    method: 'get', path: '/api/cron/billing-sync', tags: ['Operations'], security: 'cronSecret',
    summary: 'Sweep: sync marked and due subscribers from RevenueCat (Vercel Cron)',
    description: 'Works through the subscribers webhooks marked, and known subscribers whose access ends soon or that were not synced for 30 days, within RevenueCat\'s rate budget and about 20 s; safe to run twice at once.',
    success: { status: 200, description: 'Counts of the run', schema: responses.billingSweepResponseSchema },
    errors: ['invalid_cron_secret', 'cron_not_configured', 'sync_not_configured', ...ALWAYS],
  },
  {
    method: 'get', path: '/api/cron/maintenance', tags: ['Operations'], security: 'cronSecret',
    summary: 'Apply every retention rule (Vercel Cron, daily)',
    description: 'Deletes what the retention rules say is no longer needed (expired wallet challenges, old league sync deliveries, old refresh limiter rows) and runs billing\'s own maintenance, in bounded batches for about 20 s. Idempotent; two runs at once share the work; `done: false` means the next run goes on. `npm run db:maintain` runs the same.',
    success: { status: 200, description: 'Counts of the run', schema: responses.maintenanceResponseSchema },
    errors: ['invalid_cron_secret', 'cron_not_configured', ...ALWAYS],
  },
  {
    method: 'post', path: '/api/admin/billing/sync', tags: ['Operations'], security: 'adminSecret',
    summary: 'Sync one subscriber from RevenueCat (operator)',
    description: 'Only for app user ids RevenueCat has sent events about (404 `subscriber_unknown` otherwise: v1 would create the customer).',
    request: adminSyncBodySchema,
    success: { status: 200, description: 'Synced', schema: responses.adminBillingSyncResponseSchema },
    errors: [...BODY_ERRORS, 'invalid_admin_secret', 'admin_not_configured', 'subscriber_unknown', 'sync_not_configured', 'upstream_unavailable', 'upstream_rejected', 'upstream_invalid', ...ALWAYS],
  },
  {
    method: 'post', path: '/api/webhooks/leagues-sync', tags: ['Webhooks'], security: 'leaguesSecret',
    summary: 'Apply a batch of league snapshots',
    description: 'All or nothing, idempotent by delivery `id`. Newest `updatedAt` wins; deletions are tombstones. Unknown fields are rejected.',
    request: leaguesSyncBodySchema,
    success: { status: 200, description: 'Applied (or a repeated delivery)', schema: responses.leaguesSyncResultSchema },
    errors: [...BODY_ERRORS, 'invalid_webhook_secret', 'webhook_not_configured', ...ALWAYS],
  },
];

const SECURITY_SCHEMES = {
  session: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'A Supabase session access token (local mode: `npm run token`).' },
  billingSecret: { type: 'http', scheme: 'bearer', description: 'SUBSCRIPTION_WEBHOOK_SECRET, as RevenueCat sends it: `Authorization: Bearer <secret>`.' },
  leaguesSecret: { type: 'apiKey', in: 'header', name: 'x-webhook-secret', description: 'LEAGUES_WEBHOOK_SECRET.' },
  cronSecret: { type: 'http', scheme: 'bearer', description: 'CRON_SECRET, as Vercel Cron sends it: `Authorization: Bearer <secret>`.' },
  adminSecret: { type: 'http', scheme: 'bearer', description: 'ADMIN_API_SECRET: `Authorization: Bearer <secret>`.' },
} as const;

function jsonSchema(schema: z.ZodType, io: 'input' | 'output') {
  const { $schema: _ignored, ...rest } = z.toJSONSchema(schema, { io, unrepresentable: 'any', reused: 'inline' }) as Record<string, unknown>;
  void _ignored;
  return rest;
}

function errorResponses(codes: ProblemCode[]) {
  const byStatus = new Map<number, ProblemCode[]>();
  for (const code of new Set(codes)) {
    const status = PROBLEM_CATALOG[code][0];
    byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
  }
  return Object.fromEntries(
    [...byStatus.entries()].sort(([a], [b]) => a - b).map(([status, list]) => [
      String(status),
      {
        description: list.map((code) => `\`${code}\`: ${PROBLEM_CATALOG[code][1]}`).join('; '),
        'x-problem-codes': list,
        ...(status === 401 ? { headers: { 'WWW-Authenticate': { schema: { type: 'string' } } } } : {}),
        ...(status === 429 || status === 503 ? { headers: { 'Retry-After': { schema: { type: 'integer' } } } } : {}),
        content: { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } },
      },
    ]),
  );
}

export function buildOpenApiDocument(serverUrl?: string) {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const op of OPERATIONS) {
    const parameters = [...op.path.matchAll(/\{(\w+)\}/g)].map(([, name]) => ({ name, in: 'path', required: true, schema: { type: 'string', format: 'uuid' } }));
    paths[op.path] ??= {};
    paths[op.path]![op.method] = {
      operationId: `${op.method}${op.path.replace(/\/api|[{}]/g, '').split(/[/.-]/).map((part) => part.charAt(0).toUpperCase() + part.slice(1)).join('')}`,
      summary: op.summary,
      ...(op.description ? { description: op.description } : {}),
      tags: op.tags,
      security: op.security === 'none' ? [] : [{ [op.security]: [] }],
      ...(parameters.length ? { parameters } : {}),
      ...(op.request ? { requestBody: { required: true, content: { 'application/json': { schema: jsonSchema(op.request, 'input') } } } } : {}),
      responses: {
        [String(op.success.status)]: {
          description: op.success.description,
          ...(op.success.schema ? { content: { 'application/json': { schema: { $ref: `#/components/schemas/${schemaId(op.success.schema)}` } } } } : {}),
        },
        ...errorResponses(op.errors),
      },
    };
  }

  // Every schema with .meta({ id }) (the response schemas) becomes a component; refs between them
  // point into components.
  const components = z.toJSONSchema(z.globalRegistry, { io: 'output', unrepresentable: 'any', uri: (id: string) => `#/components/schemas/${id}` });
  const schemas = Object.fromEntries(
    Object.entries(components.schemas).map(([id, schema]) => {
      const { $schema: _drop, $id: _id, ...rest } = schema as Record<string, unknown>;
      void _drop;
      void _id;
      return [id, rest];
    }),
  );

  return {
    openapi: '3.1.0',
    info: {
      title: 'Account-link service API',
      version: '1.0.0',
      description: 'Wallet links with proof of ownership, RevenueCat subscription entitlements, and league sync. Errors are application/problem+json with a stable `code`.',
    },
    ...(serverUrl ? { servers: [{ url: serverUrl }] } : {}),
    paths,
    components: { schemas, securitySchemes: SECURITY_SCHEMES },
  };
}

function schemaId(schema: z.ZodType): string {
  const id = z.globalRegistry.get(schema)?.id;
  if (!id) throw new Error('Response schemas need a .meta({ id })');
  return id;
}
