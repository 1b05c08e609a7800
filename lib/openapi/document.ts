import { z } from 'zod';
import { ACCOUNT_EVENTS_TIMING, MAX_ACCOUNT_STREAMS_PER_USER } from '../account-changes.ts';
import { adminSyncBodySchema } from '../billing/sync.ts';
import { billingWebhookBodySchema } from '../billing/webhook-body.ts';
import { deadLettersQuerySchema, eventsQuerySchema, replayBodySchema } from '../events/operate.ts';
import type { Config } from '../config.ts';
import { DEFAULT_MAX_BODY_BYTES, MAX_JSON_DEPTH } from '../http/body.ts';
import { PROBLEM_CATALOG, type ProblemCode } from '../http/problem.ts';
import { ALLOW_ORDER } from '../http/route.ts';
import { LEAGUES_SYNC_LIMITS, leaguesSyncBodySchema } from '../leagues/sync-schema.ts';
import { CONTRACT_CHECK_GAS } from '../wallets/contract-signatures.ts';
import { WALLET_BODY_MAX_BYTES, walletBodySchemas } from '../wallets/schemas.ts';
import { SESSION_COOKIE } from '../web/session-cookie.ts';
import * as responses from './responses.ts';
import { eventWebhooks } from './webhooks.ts';

void responses; // registers the response schemas (their .meta ids) before the document is built

/**
 * The API's OpenAPI 3.1 document, generated from the zod schemas the routes validate with (request
 * bodies) and the response schemas in ./responses.ts, with what the configuration decides (the
 * accepted networks) filled in. GET /api/openapi.json serves it; /docs renders it; `npm run lint`
 * lints it with Redocly's recommended rules; tests/conformance sends requests built from it to the
 * production server and checks every answer against it.
 */

type Security = 'session' | 'pageSession' | 'billingSecret' | 'leaguesSecret' | 'cronSecret' | 'adminSecret' | 'none';

/** A documented answer other than a problem: a status, and a JSON body schema (none: no body). */
export interface Answer {
  status: number;
  description: string;
  schema?: z.ZodType;
  /** Headers this answer always carries (besides the ones every answer carries). */
  headers?: Record<string, { description: string; schema: Record<string, unknown> }>;
  /**
   * A `text/event-stream` answer instead of JSON: the `data` schema of each event it sends, by
   * event name (as `x-events` of the media type: OpenAPI 3.1 has no words for a stream's items),
   * and an example of the stream.
   */
  eventStream?: { events: Record<string, z.ZodType>; example: string };
}

/** What the configuration contributes to the document (the networks a wallet may be on). */
export type DocumentConfig = Pick<Config, 'wallet'>;

export interface Operation {
  method: 'get' | 'post' | 'delete';
  path: string;
  summary: string;
  description?: string;
  /** The credential; several: any one of them. */
  security: Security | Security[];
  request?: { schema: (config: DocumentConfig) => z.ZodType; maxBytes: number; example: unknown };
  answers: Answer[];
  errors: ProblemCode[];
  tags: string[];
  /** The query parameters, as the schema the route reads them with (lib/http/query.ts). */
  query?: z.ZodObject;
  /** Path parameters that are not UUIDs (the default). */
  pathParameters?: Record<string, { description: string; schema: Record<string, unknown> }>;
}

const EXPORT_DISPOSITION = { description: '`attachment; filename="account-export-<user id>-<date>.json"`', schema: { type: 'string' } };

const BODY_ERRORS: ProblemCode[] = ['invalid_json', 'invalid_request', 'payload_too_large', 'unsupported_media_type'];
const SESSION_ERRORS: ProblemCode[] = ['missing_token', 'invalid_token', 'token_expired', 'anonymous_user_not_allowed', 'forbidden_role', 'auth_unavailable'];
const WRITE_SESSION_ERRORS: ProblemCode[] = [...SESSION_ERRORS, 'session_revoked'];
const ALWAYS: ProblemCode[] = ['database_unavailable', 'service_misconfigured', 'internal_error'];

const RETRY_AFTER = { description: 'Seconds to wait before retrying', schema: { type: 'string', pattern: '^[0-9]+$' } };

const EXAMPLE_USER_ID = '6f1c2b9e-3d4a-4b5c-8d7e-9f0a1b2c3d4e';
const EXAMPLE_EVM_ADDRESS = '0x52908400098527886E0F7030069857D2E4169EE7';

export const OPERATIONS: Operation[] = [
  {
    method: 'get', path: '/api/health', tags: ['Service'], security: 'none',
    summary: 'Liveness and database reachability',
    answers: [
      { status: 200, description: 'The service and its database answer', schema: responses.healthResponseSchema },
      { status: 503, description: 'The database does not answer (`status: degraded`)', schema: responses.healthResponseSchema, headers: { 'Retry-After': RETRY_AFTER } },
    ],
    errors: ['service_misconfigured'],
  },
  {
    method: 'get', path: '/api/health/live', tags: ['Service'], security: 'none',
    summary: 'The process answers (no database call)',
    answers: [{ status: 200, description: 'Alive', schema: responses.liveResponseSchema }],
    errors: [],
  },
  {
    method: 'get', path: '/api/openapi.json', tags: ['Service'], security: 'none',
    summary: 'This document',
    answers: [{ status: 200, description: 'The OpenAPI 3.1 document of this API', schema: responses.openApiDocumentSchema }],
    errors: [],
  },
  {
    method: 'get', path: '/api/me', tags: ['Account'], security: 'session',
    summary: "The caller's account: identity, wallets, entitlements and leagues",
    description: 'Entitlement `active` and `status` are computed at request time: an entitlement lapses on time even if no EXPIRATION event arrives.',
    answers: [{ status: 200, description: 'The account', schema: responses.accountResponseSchema }],
    errors: [...SESSION_ERRORS, ...ALWAYS],
  },
  {
    method: 'get', path: '/api/me/export', tags: ['Account'], security: 'session',
    summary: 'Everything stored about the caller, as a JSON download',
    description: 'The rows as stored, every column: wallet links, challenges and contract checks; the billing ids filed under the caller, their subscriber and entitlement rows, sync marks, and every billing event and snapshot with its whole stored body (subscriber attributes included), oldest first; league memberships with their league. ' +
      'One database call. Answered as an attachment (`Content-Disposition`).',
    answers: [{ status: 200, description: 'The export', schema: responses.accountExportSchema, headers: { 'Content-Disposition': EXPORT_DISPOSITION } }],
    errors: [...SESSION_ERRORS, ...ALWAYS],
  },
  {
    method: 'get', path: '/api/me/events', tags: ['Account'], security: ['session', 'pageSession'],
    summary: "Server-sent events: the caller's account changed (local mode)",
    description: 'A `text/event-stream` of `account_changed` events, one after each change to the caller\'s account: a billing event or a sync that changed entitlements, a wallet linked or unlinked, a league delivery naming the caller. ' +
      'An event says what changed and when, not what it now is: read GET /api/me on each, and on every (re)connection, since what changed while no stream was open is not replayed. ' +
      `A comment line every ${ACCOUNT_EVENTS_TIMING.keepAliveMs / 1000} s keeps the connection open; the server ends it after ${ACCOUNT_EVENTS_TIMING.maxLifetimeMs / 60_000} minutes and EventSource reconnects after the stream's \`retry\` (${ACCOUNT_EVENTS_TIMING.retryMs} ms). ` +
      'Served in local mode only (one process sees every change): a deployment answers 404 `live_updates_not_served` and sends the same payload from the database through Supabase Realtime, private channel `user:<user id>`, event `account_changed`. ' +
      'Authenticated like GET /api/me; a page of this site may instead rely on the account page\'s session cookie, since EventSource cannot send headers. ' +
      `At most ${MAX_ACCOUNT_STREAMS_PER_USER} streams per account are open at once: another gets 429 \`rate_limited\` with Retry-After.`,
    answers: [{
      status: 200,
      description: 'The stream (`retry:`, then events and keep-alive comments)',
      eventStream: {
        events: { account_changed: responses.accountChangeSchema },
        example: `retry: ${ACCOUNT_EVENTS_TIMING.retryMs}\n\nevent: account_changed\ndata: {"what":"entitlements","at":"2026-01-01T00:00:00.000Z"}\n\n: keep-alive\n\n`,
      },
    }],
    errors: [...SESSION_ERRORS, 'live_updates_not_served', 'rate_limited', 'service_misconfigured', 'internal_error'],
  },
  {
    method: 'post', path: '/api/wallet-link/challenge', tags: ['Wallet links'], security: 'session',
    summary: 'Issue the exact message a wallet signs to prove it is the caller’s',
    description: 'At most 10 challenges a minute per user (429 with Retry-After); at most 5 open at once (a 6th retires the oldest). A challenge expires after 10 minutes and can be used once.',
    request: { schema: ({ wallet }) => walletBodySchemas(wallet).challenge, maxBytes: WALLET_BODY_MAX_BYTES, example: { chain: 'evm', address: EXAMPLE_EVM_ADDRESS, chainId: 1 } },
    answers: [{ status: 201, description: 'The challenge', schema: responses.challengeResponseSchema }],
    errors: [...BODY_ERRORS, 'invalid_address', 'unsupported_chain', ...WRITE_SESSION_ERRORS, 'rate_limited', ...ALWAYS],
  },
  {
    method: 'post', path: '/api/wallet-link', tags: ['Wallet links'], security: 'session',
    summary: 'Link the wallet that signed the caller’s challenge',
    description: 'A wallet is linked to at most one user. ' +
      'An ordinary wallet\'s 65-byte signature is checked offline (`kind: "eoa"`); its link holds the address on every EVM chain (`scope: "evm"`). Any other EVM signature (longer, ERC-6492 wrapped, or 65 bytes that do not recover the address) is a smart-contract wallet\'s, checked on the chain of the message\'s Chain ID through that chain\'s RPC: ' +
      'ERC-6492 for an account not deployed yet (`kind: "erc6492"`), ERC-1271 for a deployed one (`kind: "erc1271"`); its link holds the address on that chain only (`scope: "chain"`, `accountId` `eip155:<chainId>:<address>`). A chain where this service does not check contract wallets answers 422 `unsupported_signature_type` (or `invalid_signature` for 65 bytes). ' +
      `A contract check is bounded (${CONTRACT_CHECK_GAS.toLocaleString('en-US')} gas, a 1 MB answer, a time limit); a challenge allows 5 of them and an account 20 in 10 minutes (then 429 \`rate_limited\` with Retry-After). ` +
      'An RPC that fails or does not answer in time gives 503 `chain_unavailable` with Retry-After: nothing is linked, so retry with the same signature (the check counts toward the 5 unless the RPC provider itself failed).',
    request: {
      schema: ({ wallet }) => walletBodySchemas(wallet).link,
      maxBytes: WALLET_BODY_MAX_BYTES,
      example: {
        payload: {
          chain: 'evm', address: EXAMPLE_EVM_ADDRESS, chainId: 1,
          message: 'localhost:3000 wants you to sign in with your Ethereum account:\n0x52908400098527886E0F7030069857D2E4169EE7\n\nLink this wallet to your account.\n\nURI: http://localhost:3000\nVersion: 1\nChain ID: 1\nNonce: 32891756a1b2c3d4\nIssued At: 2026-01-01T00:00:00.000Z\nExpiration Time: 2026-01-01T00:10:00.000Z',
          signature: `0x${'ab'.repeat(64)}1b`,
        },
      },
    },
    answers: [
      { status: 201, description: 'Linked: a new link (`alreadyLinked: false`)', schema: responses.linkResponseSchema },
      { status: 200, description: 'This wallet was already linked to the caller (`alreadyLinked: true`); nothing changed', schema: responses.linkResponseSchema },
    ],
    errors: [...BODY_ERRORS, 'invalid_address', 'unsupported_chain', ...WRITE_SESSION_ERRORS, 'challenge_not_found', 'challenge_expired', 'challenge_already_used',
      'invalid_message', 'address_mismatch', 'invalid_signature', 'unsupported_signature_type', 'chain_unavailable', 'wallet_already_linked', 'too_many_wallets', 'rate_limited', ...ALWAYS],
  },
  {
    method: 'get', path: '/api/wallet-link', tags: ['Wallet links'], security: 'session',
    summary: "List the caller's wallet links",
    answers: [{ status: 200, description: 'The links, oldest first', schema: responses.walletListResponseSchema }],
    errors: [...SESSION_ERRORS, ...ALWAYS],
  },
  {
    method: 'delete', path: '/api/wallet-link/{linkId}', tags: ['Wallet links'], security: 'session',
    summary: "Unlink one of the caller's wallets",
    answers: [{ status: 204, description: 'Unlinked' }],
    errors: [...WRITE_SESSION_ERRORS, 'link_not_found', ...ALWAYS],
  },
  {
    method: 'post', path: '/api/webhooks/subscription-billing', tags: ['Webhooks'], security: 'billingSecret',
    summary: 'Receive a RevenueCat webhook event',
    description: 'Every authenticated, well-formed delivery gets exactly 200 `{ "received": true }`: new, duplicate, TEST, unknown type, no app_user_id. The event is stored with its effect in one transaction, deduplicated by `event.id` (an event sent without one, as the published contract shows it, is identified by a digest of its content); order of arrival does not matter. A 503 means nothing was stored: RevenueCat retries.',
    request: {
      schema: () => billingWebhookBodySchema,
      maxBytes: DEFAULT_MAX_BODY_BYTES,
      example: {
        api_version: '1.0',
        event: {
          id: 'CD489E0E-5D18-4F7B-8B4C-0C2D5F7E9A11', type: 'INITIAL_PURCHASE', app_user_id: EXAMPLE_USER_ID, original_app_user_id: EXAMPLE_USER_ID, aliases: [EXAMPLE_USER_ID],
          product_id: 'premium_monthly', entitlement_ids: ['premium'], period_type: 'NORMAL', environment: 'PRODUCTION', store: 'APP_STORE',
          purchased_at_ms: 1767225600000, expiration_at_ms: 1769904000000, event_timestamp_ms: 1767225600000, transaction_id: '2000000123', original_transaction_id: '2000000123',
        },
      },
    },
    answers: [{ status: 200, description: 'Received', schema: responses.billingAckSchema }],
    errors: [...BODY_ERRORS, 'invalid_webhook_secret', 'webhook_not_configured', ...ALWAYS],
  },
  {
    method: 'post', path: '/api/me/billing/sync', tags: ['Account'], security: 'session',
    summary: "Refresh the caller's purchases from RevenueCat",
    description: "Fetches the caller's customer record from RevenueCat's REST API (app user id = the caller's user id) and stores it like an event; answers the fresh entitlements. At most one refresh per 5 s, and a number a day per user that the server sets (20 unless changed): 429 with Retry-After. 503 `sync_not_configured` when the server has no RevenueCat key; 503 `upstream_unavailable` (with Retry-After) when RevenueCat is down, slow or rate limiting, or users' refreshes have used their share of the budget (at most half) for now; 502 when it refuses the key or answers something else (over 1 MiB, not a subscriber, not storable). A failed refresh changes nothing. No request body.",
    answers: [{ status: 200, description: 'Refreshed', schema: responses.billingSyncResponseSchema }],
    errors: [...WRITE_SESSION_ERRORS, 'rate_limited', 'sync_not_configured', 'upstream_unavailable', 'upstream_rejected', 'upstream_invalid', ...ALWAYS],
  },
  // Vercel Cron sends GET; a scheduler that POSTs (Supabase Cron's net.http_post) is answered the same.
  ...(['get', 'post'] as const).flatMap((method): Operation[] => [
    {
      method, path: '/api/cron/billing-sync', tags: ['Operations'], security: 'cronSecret',
      summary: `Sweep: sync marked and due subscribers from RevenueCat (Vercel Cron${method === 'post' ? ', or a scheduler that POSTs' : ''})`,
      description: 'Works through the subscribers webhooks marked, and known subscribers whose access ends soon or that were not synced for 30 days, within RevenueCat\'s rate budget and about 20 s; safe to run twice at once. '
        + 'GET (Vercel Cron) and POST (a scheduler that posts, such as Supabase Cron\'s `net.http_post`) do the same; a request body is ignored. '
        + 'On a server without a RevenueCat REST key there is nothing to do: 200 with zero counts and `nothingToDo` saying why.',
      answers: [{ status: 200, description: 'Counts of the run', schema: responses.billingSweepResponseSchema }],
      errors: ['invalid_cron_secret', 'rate_limited', 'cron_not_configured', ...ALWAYS],
    },
    {
      method, path: '/api/cron/maintenance', tags: ['Operations'], security: 'cronSecret',
      summary: `Apply every retention rule (Vercel Cron, daily${method === 'post' ? '; or a scheduler that POSTs' : ''})`,
      description: 'Deletes what the retention rules say is no longer needed (expired wallet challenges, old league sync deliveries, old refresh limiter rows, outbound events past their 30 days) and runs billing\'s own maintenance, in bounded batches for about 20 s. Idempotent; two runs at once share the work; `done: false` means the next run goes on. `npm run db:maintain` runs the same. '
        + 'GET (Vercel Cron) and POST (a scheduler that posts) do the same; a request body is ignored.',
      answers: [{ status: 200, description: 'Counts of the run', schema: responses.maintenanceResponseSchema }],
      errors: ['invalid_cron_secret', 'rate_limited', 'cron_not_configured', ...ALWAYS],
    },
    {
      method, path: '/api/cron/events', tags: ['Operations'], security: 'cronSecret',
      summary: `Move the outbound events: tell lapses, send what is due (a scheduler${method === 'post' ? ' that POSTs, such as Supabase Cron' : ', such as Vercel Cron'})`,
      description: 'Tells access that ended by time (`entitlement.revoked`, reason `expired`, and the live update), then sends each event endpoint its due events, in order per user, for about 20 s. '
        + 'The requests that write and the daily crons do it too; a schedule of every minute tells a lapse within a minute (docs/events.md). Idempotent; two runs at once share the work; a request body is ignored.',
      answers: [{ status: 200, description: 'Counts of the run', schema: responses.eventsRunResponseSchema }],
      errors: ['invalid_cron_secret', 'rate_limited', 'cron_not_configured', ...ALWAYS],
    },
  ]),
  {
    method: 'post', path: '/api/admin/billing/sync', tags: ['Operations'], security: 'adminSecret',
    summary: 'Sync one subscriber from RevenueCat (operator)',
    description: 'Only for app user ids RevenueCat has sent events about (404 `subscriber_unknown` otherwise: v1 would create the customer).',
    request: { schema: () => adminSyncBodySchema, maxBytes: DEFAULT_MAX_BODY_BYTES, example: { app_user_id: EXAMPLE_USER_ID } },
    answers: [{ status: 200, description: 'Synced', schema: responses.adminBillingSyncResponseSchema }],
    errors: [...BODY_ERRORS, 'invalid_admin_secret', 'rate_limited', 'admin_not_configured', 'subscriber_unknown', 'sync_not_configured', 'upstream_unavailable', 'upstream_rejected', 'upstream_invalid', ...ALWAYS],
  },
  {
    method: 'get', path: '/api/admin/status', tags: ['Operations'], security: 'adminSecret',
    summary: 'The service at a glance (operator)',
    description: 'Per webhook, the last event stored (when, type, outcome) and the counts of the last 24 hours by outcome (after RevenueCat\'s "Send test event", a `TEST` with outcome `ignored`); ' +
      'the sync queue (depth, due, the oldest due) and the last sweep; the last maintenance run and what the event log\'s retention is behind; the database\'s migrations against this code\'s ' +
      '(a database behind its code answers here too, with what is pending); and which optional parts are on, by name. One database call. `npm run status` shows the same.',
    answers: [{ status: 200, description: 'The status', schema: responses.serviceStatusSchema }],
    errors: ['invalid_admin_secret', 'rate_limited', 'admin_not_configured', ...ALWAYS],
  },
  {
    method: 'get', path: '/api/admin/billing/subscribers/{appUserId}', tags: ['Operations'], security: 'adminSecret',
    summary: 'Why a subscriber has (or lacks) each entitlement (operator)',
    description: 'From the stored log, in words: the customer\'s ids (aliases, transfers), every event and snapshot in event order with what it did to which row (its outcome, its owner; for an event that came late, that the history was folded again with it in its place), ' +
      'and per entitlement why it grants or not now. The history is replayed as the fold does inside a transaction that is rolled back: nothing changes. An id no event or sync named: 404 `subscriber_unknown`. `npm run billing:explain` shows the same.',
    pathParameters: { appUserId: { description: 'The RevenueCat app user id (any id an event named, an alias or an anonymous id included), percent-encoded', schema: { type: 'string', minLength: 1, maxLength: 256 } } },
    answers: [{ status: 200, description: 'The explanation', schema: responses.subscriberExplanationSchema }],
    errors: ['invalid_request', 'invalid_admin_secret', 'rate_limited', 'admin_not_configured', 'subscriber_unknown', ...ALWAYS],
  },
  {
    method: 'get', path: '/api/admin/users/{userId}/export', tags: ['Operations'], security: 'adminSecret',
    summary: 'Everything stored about a user (operator)',
    description: 'What GET /api/me/export answers the user, for any user id (a user who has none of these rows: empty lists). `npm run user:export` shows the same.',
    answers: [{ status: 200, description: 'The export', schema: responses.accountExportSchema, headers: { 'Content-Disposition': EXPORT_DISPOSITION } }],
    errors: ['invalid_request', 'invalid_admin_secret', 'rate_limited', 'admin_not_configured', ...ALWAYS],
  },
  {
    method: 'get', path: '/api/admin/events/endpoints', tags: ['Operations'], security: 'adminSecret',
    summary: 'Each event endpoint with its backlog and failures (operator)',
    description: 'Per endpoint the settings name (and each one the database still has that they no longer name: `retired`): its URL as origin and path only (never its query or credentials), the event types it takes, how many deliveries are pending and since when, how many were dead-lettered, the last delivery and the last failure; '
      + 'and the events stored and the lapses due. `npm run events:status` shows the same.',
    answers: [{ status: 200, description: 'The endpoints', schema: responses.eventOutboxSchema }],
    errors: ['invalid_admin_secret', 'rate_limited', 'admin_not_configured', ...ALWAYS],
  },
  {
    method: 'get', path: '/api/admin/events/dead-letters', tags: ['Operations'], security: 'adminSecret',
    summary: 'Deliveries whose retries ran out, newest first (operator)',
    description: 'A dead letter stays with its event (30 days): send it again with POST /api/admin/events/replay once the receiver is fixed. An endpoint id the database does not know: 404 `endpoint_not_found`. `npm run events:dead-letters` shows the same.',
    query: deadLettersQuerySchema,
    answers: [{ status: 200, description: 'The dead letters', schema: responses.deadLettersResponseSchema }],
    errors: ['invalid_request', 'invalid_admin_secret', 'rate_limited', 'admin_not_configured', 'endpoint_not_found', ...ALWAYS],
  },
  {
    method: 'post', path: '/api/admin/events/replay', tags: ['Operations'], security: 'adminSecret',
    summary: 'Send events again (operator)',
    description: 'One event (`eventId`: its id, or `evt_<id>` as in `webhook-id`), or every event written in [`from`, `to`), to each active endpoint that takes its type, or to `endpoint` only: whatever happened to them before (delivered, dead-lettered, never sent there), they are pending again with no attempt counted, '
      + 'and go out after this answer and with every later run, in order per user, under the same `webhook-id` (a receiver that has one already sees a duplicate). '
      + 'An event id that sends nothing again (no such event stored, no active endpoint takes its type, or its user was erased since): 404 `event_not_found`; an endpoint that is not active: 404 `endpoint_not_found`. `npm run events:replay` does the same.',
    request: { schema: () => replayBodySchema, maxBytes: DEFAULT_MAX_BODY_BYTES, example: { eventId: `evt_${EXAMPLE_USER_ID}` } },
    answers: [{ status: 200, description: 'How many deliveries are pending again', schema: responses.replayResponseSchema }],
    errors: [...BODY_ERRORS, 'invalid_admin_secret', 'rate_limited', 'admin_not_configured', 'event_not_found', 'endpoint_not_found', ...ALWAYS],
  },
  {
    method: 'post', path: '/api/admin/events/deliver', tags: ['Operations'], security: 'adminSecret',
    summary: 'Move the outbound events now (operator)',
    description: 'What GET /api/cron/events does, with the admin secret: tells access that ended by time, then sends each event endpoint of the server\'s settings its due events (retries that came due, replays), for about 20 s; `done: false` means the next run goes on. '
      + 'Idempotent; two runs at once share the work; a request body is ignored. `npm run events:deliver` asks it while the local service holds the embedded database, or with `--url`.',
    answers: [{ status: 200, description: 'Counts of the run', schema: responses.eventsRunResponseSchema }],
    errors: ['invalid_admin_secret', 'rate_limited', 'admin_not_configured', ...ALWAYS],
  },
  {
    method: 'get', path: '/api/admin/events', tags: ['Operations'], security: 'adminSecret',
    summary: 'The events written since a time, with their bodies (operator)',
    description: 'Oldest first, each with the exact body a receiver gets (the JSON that is signed) and its `webhook-id`. `since` is compared with the time each event\'s transaction started, so an event can appear after a later one: a follower re-reads a short overlap and skips the ids it has. `npm run events:listen` follows them.',
    query: eventsQuerySchema,
    answers: [{ status: 200, description: 'The events', schema: responses.writtenEventsResponseSchema }],
    errors: ['invalid_request', 'invalid_admin_secret', 'rate_limited', 'admin_not_configured', ...ALWAYS],
  },
  {
    method: 'post', path: '/api/webhooks/leagues-sync', tags: ['Webhooks'], security: 'leaguesSecret',
    summary: 'Apply a batch of league snapshots',
    description: 'All or nothing, idempotent by delivery `id`. Newest `updatedAt` wins; deletions are tombstones. Unknown fields are rejected.',
    request: {
      schema: () => leaguesSyncBodySchema,
      maxBytes: LEAGUES_SYNC_LIMITS.maxBodyBytes,
      example: {
        id: 'delivery-2026-01-01T00:00:00Z-1', source: 'fantasy-pro', sentAt: '2026-01-01T00:00:00Z',
        leagues: [{
          externalId: 'L-1001', name: 'Sunday Legends', sport: 'football', season: '2026', status: 'in_season', updatedAt: '2026-01-01T00:00:00Z',
          settings: { teams: 12, scoring: 'ppr' },
          members: [{ externalUserId: 'U-1', displayName: 'Ana', role: 'commissioner', appUserId: EXAMPLE_USER_ID }, { externalUserId: 'U-2', displayName: 'Bo', role: 'member' }],
        }],
        deleted: [{ externalId: 'L-0999', deletedAt: '2026-01-01T00:00:00Z' }],
      },
    },
    answers: [{ status: 200, description: 'Applied (or a repeated delivery)', schema: responses.leaguesSyncResultSchema }],
    errors: [...BODY_ERRORS, 'invalid_webhook_secret', 'webhook_not_configured', ...ALWAYS],
  },
];

const SECURITY_SCHEMES = {
  session: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'A Supabase session access token (local mode: `npm run token`).' },
  pageSession: { type: 'apiKey', in: 'cookie', name: SESSION_COOKIE, description: "The account page's session, which the page keeps in an httpOnly cookie: taken only by GET /api/me/events (a browser's EventSource sends no headers), and only from this site." },
  billingSecret: { type: 'http', scheme: 'bearer', description: 'SUBSCRIPTION_WEBHOOK_SECRET, as RevenueCat sends it: `Authorization: Bearer <secret>`.' },
  leaguesSecret: { type: 'apiKey', in: 'header', name: 'x-webhook-secret', description: 'LEAGUES_WEBHOOK_SECRET.' },
  cronSecret: { type: 'http', scheme: 'bearer', description: 'CRON_SECRET, as Vercel Cron sends it: `Authorization: Bearer <secret>`. At least 32 characters; after 10 wrong secrets from one address in 15 minutes, that address gets 429 `rate_limited` with Retry-After until the 15 minutes are over.' },
  adminSecret: { type: 'http', scheme: 'bearer', description: 'ADMIN_API_SECRET: `Authorization: Bearer <secret>`. At least 32 characters; wrong secrets are throttled as for CRON_SECRET (the same count, per address).' },
} as const;

/** Headers every answer carries (lib/http/route.ts), as components.headers. */
const COMMON_HEADERS = {
  RequestId: {
    description: 'The request id: yours from `x-request-id` when it is sane (1 to 128 of `A-Z a-z 0-9 . _ : -`), else a new one. Also in problem bodies as `requestId`.',
    required: true,
    schema: { type: 'string', pattern: '^[A-Za-z0-9._:-]{1,128}$' },
  },
  ServerTiming: {
    description: 'Database calls and time spent (`db;desc="N calls";dur=…, total;dur=…`)',
    required: true,
    schema: { type: 'string', pattern: '^db;desc="\\d+ calls";dur=\\d+(\\.\\d+)?, total;dur=\\d+(\\.\\d+)?$' },
  },
};
const commonHeaderRefs = { 'x-request-id': { $ref: '#/components/headers/RequestId' }, 'Server-Timing': { $ref: '#/components/headers/ServerTiming' } };

// The rules lib/http/body.ts (readJsonBody) applies to every string and key of every JSON body,
// before any schema: said in the schemas too, so a body the document accepts is one the server reads.
const UNSTORABLE_CHARACTER = '[\\u0000\\uD800-\\uDFFF]'; // NUL, or a surrogate not in a pair (the pattern is Unicode-aware)
// `type` inside `not`: a schema that also allows null must not refuse null for want of a string.
const STORABLE_STRING = { not: { type: 'string', pattern: UNSTORABLE_CHARACTER } };
const STORABLE_KEY = { type: 'string', not: { anyOf: [{ const: '__proto__' }, { pattern: UNSTORABLE_CHARACTER }] } };

/** Any JSON value the body reader takes, for the fields a schema leaves free (`{}`). */
const JSON_VALUE_SCHEMA = {
  description: 'Any JSON value, with the rules every body follows: strings and keys without NUL (U+0000) or unpaired surrogates, no key `__proto__`.',
  anyOf: [
    { type: 'string', ...STORABLE_STRING },
    { type: ['number', 'boolean', 'null'] },
    // "No item that is not a JsonValue" rather than `items: JsonValue`: the same rule, but code
    // generators (openapi-typescript) type it `unknown[]`, where `JsonValue[]` inside JsonValue is a
    // type that TypeScript refuses as referring to itself (TS2502). Objects may recurse: TypeScript
    // defers an object type's members.
    { type: 'array', not: { contains: { not: { $ref: '#/components/schemas/JsonValue' } } } },
    { type: 'object', propertyNames: STORABLE_KEY, additionalProperties: { $ref: '#/components/schemas/JsonValue' } },
  ],
};

function bodyRules(maxBytes: number): string {
  return `JSON: \`Content-Type: application/json\` or another \`application/*+json\` type (415 otherwise), at most ${maxBytes} bytes (413 beyond). In every body: no NUL (U+0000) or unpaired surrogate in a string or key, no key \`__proto__\`, nesting at most ${MAX_JSON_DEPTH} levels, numbers within a double's range (400 \`invalid_json\` otherwise).`;
}

/** Add the body reader's rules to a request schema: every string and key storable, every free value a JsonValue. */
function withBodyRules(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(withBodyRules);
  if (node === null || typeof node !== 'object') return node;
  const schema = Object.fromEntries(Object.entries(node).map(([key, value]) => [key, key === 'enum' || key === 'const' ? value : withBodyRules(value)]));
  const isFree = (value: unknown) => value !== null && typeof value === 'object' && !Array.isArray(value) && Object.keys(value).length === 0;
  for (const key of ['additionalProperties', 'items']) {
    if (isFree(schema[key])) schema[key] = { $ref: '#/components/schemas/JsonValue' };
  }
  const allowsString = schema.type === 'string' || (Array.isArray(schema.type) && schema.type.includes('string'));
  if (allowsString && !('enum' in schema) && !('const' in schema)) Object.assign(schema, STORABLE_STRING);
  if (schema.type === 'object' && schema.additionalProperties !== false) {
    schema.additionalProperties ??= { $ref: '#/components/schemas/JsonValue' }; // members the schema ignores are still read
    schema.propertyNames = STORABLE_KEY;
  }
  return schema;
}

function jsonSchema(schema: z.ZodType, io: 'input' | 'output') {
  const { $schema: _ignored, ...rest } = z.toJSONSchema(schema, { io, unrepresentable: 'any', reused: 'inline' }) as Record<string, unknown>;
  void _ignored;
  return rest;
}

function problemAnswers(codes: ProblemCode[]) {
  const byStatus = new Map<number, ProblemCode[]>();
  for (const code of new Set(codes)) {
    const status = PROBLEM_CATALOG[code][0];
    byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
  }
  return new Map([...byStatus.entries()].map(([status, list]) => [status, {
    description: list.map((code) => `\`${code}\`: ${PROBLEM_CATALOG[code][1]}`).join('; '),
    'x-problem-codes': list,
    headers: {
      ...(status === 401 ? { 'WWW-Authenticate': { description: 'The credential this route wants (RFC 9110, RFC 6750)', required: true, schema: { type: 'string', minLength: 1 } } } : {}),
      ...(status === 429 || status === 503 ? { 'Retry-After': { ...RETRY_AFTER, required: true } } : {}),
    },
    content: { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } },
  }]));
}

function responsesOf(op: Operation): Record<string, unknown> {
  const problems = problemAnswers(op.errors);
  const statuses = [...new Set([...op.answers.map((answer) => answer.status), ...problems.keys()])].sort((a, b) => a - b);
  return Object.fromEntries(statuses.map((status) => {
    const answer = op.answers.find((candidate) => candidate.status === status);
    const problem = problems.get(status);
    const content = {
      ...(answer?.schema ? { 'application/json': { schema: { $ref: `#/components/schemas/${schemaId(answer.schema)}` } } } : {}),
      ...(answer?.eventStream ? { 'text/event-stream': eventStreamContent(answer.eventStream) } : {}),
      ...problem?.content,
    };
    return [String(status), {
      description: [answer?.description, problem && (answer ? `or a problem: ${problem.description}` : problem.description)].filter(Boolean).join('; '),
      ...(problem ? { 'x-problem-codes': problem['x-problem-codes'] } : {}),
      headers: { ...commonHeaderRefs, ...answer?.headers, ...problem?.headers },
      ...(Object.keys(content).length ? { content } : {}),
    }];
  }));
}

/** A `text/event-stream` media type: the stream as text, each event's `data` schema in `x-events`. */
function eventStreamContent({ events, example }: NonNullable<Answer['eventStream']>) {
  return {
    schema: { type: 'string', description: 'Server-sent events (WHATWG HTML): blocks of `event:` and `data:` lines (the data is one line of JSON), comments (`:`), and `retry:`, each block ended by a blank line' },
    'x-events': Object.fromEntries(Object.entries(events).map(([name, schema]) => [name, jsonSchema(schema, 'output')])),
    example,
  };
}

/** "/api/wallet-link/{linkId}" + "delete" -> "deleteWalletLinkLinkId" */
function operationId(method: string, path: string): string {
  return `${method}${path.replace(/\/api|[{}]/g, '').split(/[/.-]/).map((part) => part.charAt(0).toUpperCase() + part.slice(1)).join('')}`;
}

const METHODS_OF_EVERY_PATH = 'Every path below also answers OPTIONS (204, no body, `Allow` listing its methods) and, where it has GET, HEAD (as GET without a body). ' +
  'Any other of GET, POST, PUT, PATCH and DELETE answers 405 `method_not_allowed` (problem+json) with the same `Allow`. ' +
  'A method outside that set that Node\'s HTTP parser knows (TRACE, PROPFIND, QUERY, ...) answers 405 `method_not_allowed` (problem+json) on every path, with `Allow` naming every method above; one it does not know (or a lower-case one) gets a 400 `invalid_request` (problem+json). ' +
  `\`Allow\` lists the path's operations, then HEAD where there is GET, then OPTIONS, in the order ${ALLOW_ORDER.join(', ')}.`;

/**
 * OPTIONS and 405 are the same on every path (lib/http/route.ts), so the document says them once,
 * here, instead of as an operation of each path: a client generator sees only the operations a
 * client calls. tests/conformance checks every OPTIONS and 405 answer against this.
 */
function methodsOfEveryPath() {
  const allow = { description: 'The methods of the path (see `allow` for the rule)', required: true, schema: { type: 'string', pattern: '^[A-Z]+(, [A-Z]+)*$' } };
  return {
    description: METHODS_OF_EVERY_PATH,
    allow: { order: ALLOW_ORDER, headWithGet: true },
    options: {
      responses: {
        '204': { description: 'No body; `Allow` lists the methods of the path', headers: { Allow: allow, ...commonHeaderRefs } },
      },
    },
    otherMethods: {
      methods: ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'],
      responses: {
        '405': {
          description: `\`method_not_allowed\`: ${PROBLEM_CATALOG.method_not_allowed[1]}`,
          'x-problem-codes': ['method_not_allowed'],
          headers: { Allow: allow, ...commonHeaderRefs },
          content: { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } },
        },
      },
    },
    unknownMethods: 'A method outside GET, HEAD, POST, PUT, PATCH, DELETE and OPTIONS that Node\'s HTTP parser knows gets a 405 problem+json on every path; one it does not know a 400 problem+json; CONNECT is not answered.',
  };
}

/**
 * @param config the configuration whose accepted networks the wallet bodies list
 * @param serverUrl where the API is; default `/`, the origin the document was fetched from
 */
export function buildOpenApiDocument(config: DocumentConfig, serverUrl = '/') {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const path of new Set(OPERATIONS.map((op) => op.path))) {
    const ops = OPERATIONS.filter((op) => op.path === path);
    const parameters = [...path.matchAll(/\{(\w+)\}/g)].map(([, name]) => ({
      name, in: 'path', required: true,
      ...(ops.find((op) => op.pathParameters?.[name!])?.pathParameters![name!] ?? { description: 'Any other value answers 404', schema: { type: 'string', format: 'uuid' } }),
    }));
    const item: Record<string, unknown> = parameters.length ? { parameters } : {};
    for (const op of ops) {
      const requestSchema = op.request && withBodyRules(jsonSchema(op.request.schema(config), 'input'));
      item[op.method] = {
        operationId: operationId(op.method, op.path),
        summary: op.summary,
        ...(op.description ? { description: op.description } : {}),
        tags: op.tags,
        ...(op.query ? { parameters: queryParameters(op.query) } : {}),
        security: [op.security].flat().filter((scheme) => scheme !== 'none').map((scheme) => ({ [scheme]: [] })),
        ...(op.request ? {
          requestBody: {
            required: true,
            description: bodyRules(op.request.maxBytes),
            content: { 'application/json': { schema: requestSchema, example: op.request.example } },
          },
        } : {}),
        responses: responsesOf(op),
      };
    }
    paths[path] = item;
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
      version: '1.1.0',
      license: { name: 'MIT', identifier: 'MIT' },
      description: 'Wallet links with proof of ownership, RevenueCat subscription entitlements, and league sync. Errors are application/problem+json with a stable `code` (listed at /docs); every answer carries `x-request-id` and `Server-Timing`. ' + METHODS_OF_EVERY_PATH,
    },
    servers: [{ url: serverUrl, description: serverUrl === '/' ? 'This deployment: the origin this document was fetched from' : 'This deployment' }],
    tags: [
      { name: 'Service', description: 'Health and this document' },
      { name: 'Account', description: "The signed-in caller's account" },
      { name: 'Wallet links', description: 'Link a wallet by signing a one-time challenge' },
      { name: 'Webhooks', description: 'Deliveries from RevenueCat and the league sync worker' },
      { name: 'Operations', description: 'Vercel Cron and operator routes' },
      { name: 'Events', description: 'Signed events this service sends to your backend when access or wallets change (Standard Webhooks)' },
    ],
    paths,
    webhooks: eventWebhooks(schemaId),
    'x-path-methods': methodsOfEveryPath(),
    components: { schemas: { ...schemas, JsonValue: JSON_VALUE_SCHEMA }, headers: COMMON_HEADERS, securitySchemes: SECURITY_SCHEMES },
  };
}

/** Each member of a query schema as a query parameter (its description beside the schema, as OpenAPI puts it). */
function queryParameters(schema: z.ZodObject) {
  const { properties = {}, required = [] } = jsonSchema(schema, 'input') as { properties?: Record<string, Record<string, unknown>>; required?: string[] };
  return Object.entries(properties).map(([name, { description, ...rest }]) => ({
    name, in: 'query', required: required.includes(name), ...(description ? { description } : {}), schema: rest,
  }));
}

function schemaId(schema: z.ZodType): string {
  const id = z.globalRegistry.get(schema)?.id;
  if (!id) throw new Error('Response schemas need a .meta({ id })');
  return id;
}
