import { z } from 'zod';
import { ACCOUNT_CHANGE_KINDS } from '../account-changes.ts';
import { ENTITLEMENT_STATUSES } from '../billing/event-effects.ts';
import { LEAGUE_STATUSES, MEMBER_ROLES } from '../leagues/sync-schema.ts';
import { EVM_LINK_SCOPES, WALLET_PROOF_KINDS } from '../wallets/links.ts';

/**
 * The response bodies, as zod schemas: the OpenAPI document is generated from them, and the
 * conformance test (tests/openapi) checks every route's real answers against them, so the
 * document cannot drift from what the service sends.
 */
const isoTime = z.iso.datetime({ offset: true });

export const problemSchema = z
  .object({
    type: z.string().meta({ description: 'URI reference identifying the problem type' }),
    title: z.string(),
    status: z.int(),
    detail: z.string().meta({ description: 'What went wrong and how to fix it: the text to show a person' }),
    code: z.string().meta({ description: 'Stable snake_case error code: switch on this, not on detail' }),
    requestId: z.string(),
    errors: z.array(z.object({ path: z.string(), message: z.string() })).optional().meta({ description: 'Every failing field, for validation errors' }),
    retryAfter: z.int().optional().meta({ description: 'Seconds to wait, for 429 rate_limited (also in Retry-After)' }),
  })
  .meta({ id: 'Problem', description: 'application/problem+json (RFC 9457)' });

export const healthResponseSchema = z
  .object({ status: z.enum(['ok', 'degraded']), database: z.enum(['ok', 'schema_behind', 'unavailable']).meta({ description: 'schema_behind: the database answers but lacks migrations of this code (run `npm run migrate`, or `supabase db push`)' }), mode: z.enum(['embedded', 'postgres', 'supabase']) })
  .meta({ id: 'Health' });

export const liveResponseSchema = z.object({ status: z.literal('ok') }).meta({ id: 'Live' });

export const walletLinkSchema = z
  .discriminatedUnion('chain', [
    z.object({
      id: z.uuid(),
      chain: z.literal('evm'),
      address: z.string().meta({ description: 'EIP-55 checksummed' }),
      chainId: z.int().meta({ description: 'The chain the proof was made on (a smart-contract wallet was checked there)' }),
      kind: z.enum(WALLET_PROOF_KINDS).meta({
        description: 'What proved the wallet when it was linked: `eoa` its own key (checked offline), `erc1271` a deployed smart-contract wallet, `erc6492` a smart-contract wallet not deployed yet',
      }),
      scope: z.enum(EVM_LINK_SCOPES).meta({
        description: 'Where the link holds the address. `evm` (kind `eoa`): on every EVM chain, since a key is the same wallet on all of them. `chain` (kind `erc1271`, `erc6492`): on chain `chainId` only, since the same address on another chain is another contract (or none); another account may link it there. One account holds a wallet where scopes overlap.',
      }),
      accountId: z.string().regex(/^eip155:[0-9]{1,32}:0x[0-9a-fA-F]{40}$/).meta({
        description: 'CAIP-10 account id of the wallet on the chain the proof was made on, `eip155:<chainId>:<address>`; for scope `chain`, what the link holds',
      }),
      createdAt: isoTime,
    }),
    z.object({
      id: z.uuid(),
      chain: z.literal('solana'),
      address: z.string().meta({ description: 'base58 public key' }),
      cluster: z.string(),
      kind: z.literal('eoa').meta({ description: 'A Solana wallet proves itself with its own key' }),
      createdAt: isoTime,
    }),
  ])
  .meta({ id: 'WalletLink' });

const effectiveStatus = z.enum(ENTITLEMENT_STATUSES).meta({
  description: 'The state at the time of the request: a period that lapsed (even without its EXPIRATION event) reads `expired`',
});

export const entitlementSourceSchema = z
  .object({
    productId: z.string().nullable(),
    store: z.string().nullable(),
    environment: z.string().nullable(),
    status: effectiveStatus,
    active: z.boolean().meta({ description: 'This product grants the entitlement at the time of the request' }),
    expiresAt: isoTime.nullable().meta({ description: 'null = never expires (lifetime)' }),
    graceExpiresAt: isoTime.nullable(),
    willRenew: z.boolean().meta({ description: 'It grants now and will renew' }),
  })
  .meta({ id: 'EntitlementSource', description: 'One product that grants (or granted) the entitlement' });

export const entitlementSchema = z
  .object({
    id: z.string().meta({ description: 'RevenueCat entitlement identifier' }),
    active: z.boolean().meta({ description: 'Grants access at the time of the request' }),
    status: effectiveStatus,
    productId: z.string().nullable().meta({ description: 'The product that grants longest (the fields below are its own)' }),
    expiresAt: isoTime.nullable().meta({ description: 'null = never expires (lifetime)' }),
    willRenew: z.boolean().meta({ description: 'Some product that grants now will renew' }),
    graceExpiresAt: isoTime.nullable(),
    store: z.string().nullable(),
    environment: z.string().nullable(),
    periodType: z.string().nullable(),
    syncedAt: isoTime.nullable().meta({ description: "When a sync with RevenueCat's own record last confirmed it (null: known from webhooks only)" }),
    sources: z.array(entitlementSourceSchema).meta({ description: 'Every product that grants or granted it, the one shown first' }),
  })
  .meta({ id: 'Entitlement' });

export const accountLeagueSchema = z
  .object({
    source: z.string(),
    externalId: z.string(),
    name: z.string(),
    sport: z.string(),
    season: z.string(),
    status: z.enum(LEAGUE_STATUSES),
    role: z.enum(MEMBER_ROLES).meta({ description: "The caller's role" }),
    updatedAt: isoTime,
  })
  .meta({ id: 'AccountLeague' });

export const accountResponseSchema = z
  .object({
    userId: z.uuid(),
    email: z.string().nullable(),
    wallets: z.array(walletLinkSchema),
    entitlements: z.array(entitlementSchema),
    leagues: z.array(accountLeagueSchema),
  })
  .meta({ id: 'Account' });

/** The payload of an `account_changed` event (GET /api/me/events), as the database broadcasts it on Supabase Realtime. */
export const accountChangeSchema = z.object({
  what: z.enum(ACCOUNT_CHANGE_KINDS).meta({ description: 'What changed: read GET /api/me for what it now is' }),
  at: isoTime.meta({ description: 'When the change was made' }),
});

export const challengeResponseSchema = z
  .object({
    challengeId: z.uuid(),
    chain: z.enum(['evm', 'solana']),
    address: z.string().meta({ description: 'Canonical form (EIP-55 or base58)' }),
    chainId: z.int().optional(),
    cluster: z.string().optional(),
    nonce: z.string(),
    message: z.string().meta({ description: 'The exact text to sign (EIP-4361, or Sign-In With Solana)' }),
    issuedAt: isoTime,
    expiresAt: isoTime,
  })
  .meta({ id: 'Challenge' });

export const linkResponseSchema = z
  .object({ userId: z.uuid(), email: z.string().nullable(), link: walletLinkSchema, alreadyLinked: z.boolean() })
  .meta({ id: 'LinkResult' });

export const walletListResponseSchema = z.object({ links: z.array(walletLinkSchema) }).meta({ id: 'WalletLinks' });

export const billingAckSchema = z.object({ received: z.literal(true) }).meta({ id: 'BillingAck' });

export const leaguesSyncResultSchema = z
  .object({
    received: z.literal(true),
    upserted: z.int(),
    unchanged: z.int(),
    stale: z.int(),
    deleted: z.int(),
    duplicate: z.literal(true).optional().meta({ description: "A repeated delivery id: the first delivery's counts, nothing applied" }),
  })
  .meta({ id: 'LeaguesSyncResult' });

export const billingSyncResponseSchema = z
  .object({ userId: z.uuid(), entitlements: z.array(entitlementSchema) })
  .meta({ id: 'BillingSync', description: "The caller's entitlements after the refresh (as in GET /api/me)" });

export const adminBillingSyncResponseSchema = z
  .object({
    appUserId: z.string(),
    outcome: z.enum(['applied', 'stale', 'ignored']).meta({ description: 'What the snapshot did: applied (it changed the entitlements), stale (newer events already said more) or ignored (nothing to apply)' }),
    entitlements: z.array(entitlementSchema),
  })
  .meta({ id: 'AdminBillingSync', description: "The subscriber's entitlements after the sync" });

export const billingSweepResponseSchema = z
  .object({
    claimed: z.int().meta({ description: 'Subscribers taken from the queue this run' }),
    synced: z.int(),
    failed: z.int().meta({ description: 'Left marked, due again after a backoff' }),
    due: z.int().meta({ description: 'Still due when the run ended (the next run takes them)' }),
    nothingToDo: z.string().optional().meta({ description: 'Present when the run had nothing to do, saying why (the server has no RevenueCat REST key: webhooks alone keep entitlements)' }),
  })
  .meta({ id: 'BillingSweep' });

export const openApiDocumentSchema = z
  .looseObject({
    openapi: z.string().regex(/^3\.1\.\d+$/),
    info: z.looseObject({ title: z.string(), version: z.string() }),
    paths: z.record(z.string(), z.unknown()),
  })
  .meta({ id: 'OpenApiDocument', description: 'An OpenAPI 3.1 document (this one)' });

const deletedSchema = (field: string, what: string) => z.object({ [field]: z.int().meta({ description: what }), done: z.boolean() });

export const maintenanceResponseSchema = z
  .object({
    wallets: deletedSchema('challengesDeleted', 'Wallet challenges deleted (a day after they expired)').extend({
      contractChecksDeleted: z.int().meta({ description: 'Smart-contract wallet checks forgotten (10 minutes after they were made, when the per-account limit no longer counts them)' }),
    }),
    leagues: deletedSchema('deliveriesDeleted', 'League sync deliveries deleted (7 days after they arrived)'),
    billingSync: deletedSchema('refreshRequestsDeleted', 'Per-user refresh limiter rows deleted (10 minutes after the refresh)'),
    events: deletedSchema('eventsDeleted', 'Outbound events deleted (30 days after they were written, once no endpoint waits for them; an erased user\'s customer.deleted once every endpoint has it)'),
    billing: z.looseObject({
      done: z.boolean(),
      partitionsMade: z.int(),
      checkpoints: z.int(),
      partitionsDropped: z.array(z.string()),
      dedupeKeysPruned: z.int(),
      calls: z.int(),
    }).meta({ description: "What billing's own step did to its event log: months made ahead, customers checkpointed, months dropped with their dedupe keys (BILLING_EVENTS_RETENTION_MONTHS)" }),
    done: z.boolean().meta({ description: 'Everything due was done; false: the next run goes on' }),
    ms: z.int().meta({ description: 'Time spent in the database' }),
    calls: z.int().meta({ description: 'Database calls (each one bounded transaction)' }),
  })
  .meta({ id: 'Maintenance' });

export const eventsRunResponseSchema = z
  .object({
    lapsesTold: z.int().meta({ description: 'Users whose access had ended by time and was told now (entitlement.revoked, reason expired, and a live update)' }),
    endpoints: z.array(z.object({
      id: z.string().meta({ description: "The endpoint's id (a digest of its URL)" }),
      delivered: z.int(),
      retried: z.int().meta({ description: 'Attempts that failed and wait for their retry' }),
      dead: z.int().meta({ description: 'Deliveries dead-lettered in this run (their retries ran out)' }),
    })),
    done: z.boolean().meta({ description: 'Everything due was done; false: the next run goes on' }),
  })
  .meta({ id: 'EventsRun' });

const nullableTime = isoTime.nullable();
const countsByOutcome = z.record(z.string(), z.int()).meta({ description: 'Counts of the last 24 hours by outcome (outcomes with none are left out)' });
const operatorRunSchema = z
  .object({ startedAt: isoTime, finishedAt: isoTime, result: z.record(z.string(), z.unknown()).meta({ description: 'What the run answered (the sweep: claimed, synced, failed, due; maintenance: its report)' }) })
  .nullable();

const eventEndpointSchema = z.object({
  id: z.string().meta({ description: 'The endpoint\'s id: a digest of its URL (deliveries are kept by it)' }),
  url: z.string().nullable().meta({ description: 'Origin and path of the URL in the settings (never its query or credentials); null where the settings do not name it or were not visible' }),
  setting: z.string().nullable().meta({ description: 'Which setting names it (`EVENTS_WEBHOOK_URL, entry 1`)' }),
  types: z.array(z.string()).nullable().meta({ description: 'The event types it takes (`wallet.*`: a family); null: every type' }),
  state: z.enum(['active', 'pending registration', 'not named here', 'retired']).meta({ description: 'pending registration: named, and no delivery run has registered it yet; not named here: registered, and this server\'s settings do not name it (another server sharing the database may: each new event still gets a delivery for it) until `retiresAt`; retired: no server\'s settings named it for 3 days (no new deliveries; its pending ones wait in case it comes back)' }),
  registeredAt: nullableTime,
  retiredAt: nullableTime,
  retiresAt: nullableTime.meta({ description: 'When it is retired unless a server\'s settings name it again (3 days after one last did); null: retired, or not registered' }),
  pending: z.int().meta({ description: 'Deliveries not yet made (due, or waiting out a retry)' }),
  oldestPendingAt: nullableTime.meta({ description: 'When the oldest pending event was written' }),
  nextAttemptAt: nullableTime.meta({ description: 'When the next attempt is due: the soonest of the users\' queue heads not under way (an event behind its user\'s head waits for it); null when nothing is pending, or every head is under way' }),
  dead: z.int().meta({ description: 'Deliveries whose retries ran out (replay them)' }),
  lastDeliveredAt: nullableTime,
  lastFailure: z.object({ eventId: z.string(), at: isoTime, error: z.string(), attempts: z.int() }).nullable(),
}).meta({ id: 'EventEndpoint' });

export const eventOutboxSchema = z
  .object({
    endpoints: z.array(eventEndpointSchema),
    settingsRefused: z.string().nullable().meta({ description: 'Why the service refuses its event settings (the setting and entry to fix, never a secret): nothing is sent until they are fixed. Null: they are accepted' }),
    events: z.int().meta({ description: 'Events stored (kept 30 days)' }),
    lastEventAt: nullableTime,
    lapsesDue: z.int().meta({ description: 'Told access that time may have changed (one of its purchases ended) and that no scan has looked at since: a lapse, or a change such as willRenew turning false' }),
  })
  .meta({ id: 'EventOutbox' });

export const deadLettersResponseSchema = z
  .object({
    deadLetters: z.array(z.object({
      endpointId: z.string(), eventId: z.uuid(), webhookId: z.string().meta({ description: 'The `webhook-id` it was sent with: `evt_<eventId>`' }),
      type: z.string(), userId: z.string(), sequence: z.int(), createdAt: isoTime, attempts: z.int(),
      firstAttemptAt: nullableTime, lastAttemptAt: nullableTime, lastError: z.string().nullable(),
    })),
  })
  .meta({ id: 'EventDeadLetters' });

export const replayResponseSchema = z
  .object({ replayed: z.int().meta({ description: 'Deliveries made pending again (one per event and endpoint)' }) })
  .meta({ id: 'EventReplay' });

export const writtenEventsResponseSchema = z
  .object({
    events: z.array(z.object({
      id: z.uuid(), webhookId: z.string(), type: z.string(), userId: z.string(), sequence: z.int(), createdAt: isoTime,
      body: z.string().meta({ description: 'The exact JSON a receiver gets and that is signed' }),
    })),
  })
  .meta({ id: 'WrittenEvents' });

export const serviceStatusSchema = z
  .object({
    checkedAt: isoTime,
    mode: z.object({ local: z.boolean(), deployed: z.boolean(), database: z.enum(['embedded', 'postgres', 'supabase']) }),
    webhooks: z.object({
      billing: z.object({
        last: z.object({
          receivedAt: isoTime, eventId: z.string(), type: z.string(),
          outcome: z.string().meta({ description: 'applied, stale or ignored' }),
          reason: z.string().nullable().meta({ description: 'Why an ignored event changed nothing (`record_only_type` for a TEST)' }),
          environment: z.string().nullable(), appUserId: z.string().nullable(),
        }).nullable().meta({ description: 'The last event stored (a redelivery of a stored one is answered, not stored)' }),
        last24h: countsByOutcome,
      }),
      leagues: z.object({
        last: z.object({
          receivedAt: isoTime, source: z.string(), deliveryId: z.string().nullable(), upserted: z.int(), unchanged: z.int(), stale: z.int(), deleted: z.int(),
        }).nullable(),
        last24h: countsByOutcome,
      }),
    }),
    syncQueue: z.object({
      depth: z.int().meta({ description: 'Subscribers marked for a sync from RevenueCat' }),
      due: z.int(),
      oldestDueAt: nullableTime,
      nextDueAt: nullableTime,
      oldestRequestedAt: nullableTime,
      failing: z.int().meta({ description: 'Marks whose sync failed at least once' }),
      lastFailure: z.object({ appUserId: z.string(), reason: z.string(), attempts: z.int(), error: z.string().nullable(), nextAttemptAt: isoTime }).nullable(),
      lastSweep: operatorRunSchema,
    }),
    maintenance: z.object({
      lastRun: operatorRunSchema,
      behind: z.object({
        cutoff: isoTime.meta({ description: 'Billing events received before this leave the log' }),
        monthsToDrop: z.array(z.string()).meta({ description: 'Months (YYYY_MM) past the retention still stored' }),
        customersWaiting: z.int().meta({ description: 'Customers those months wait for (a checkpoint each)' }),
        heldEvents: z.int().meta({ description: 'Events of customers whose checkpoint failed, kept aside' }),
      }),
    }),
    events: eventOutboxSchema.nullable().meta({ description: 'Each event endpoint with its backlog, dead letters and last failure, and the lapses due; null when the schema is behind' }),
    schema: z.object({
      code: z.string().nullable().meta({ description: "The newest migration of this deployment's code" }),
      database: z.string().nullable().meta({ description: "The newest migration in the database's ledger" }),
      pending: z.array(z.string()).meta({ description: 'Migration files the database lacks' }),
      unknown: z.array(z.string()).meta({ description: 'Versions the database has that this code does not know' }),
      upToDate: z.boolean(),
    }),
    parts: z.object({
      billingWebhook: z.enum(['on', 'local dev secret', 'off']),
      leaguesWebhook: z.enum(['on', 'local dev secret', 'off']),
      revenuecatSync: z.enum(['off', 'v1', 'v2', 'v1 + v2', 'local stand-in']),
      syncAfterWebhooks: z.enum(['gaps', 'all', 'none']),
      cron: z.enum(['on', 'off']),
      adminApi: z.enum(['on', 'local dev secret', 'off']),
      contractWalletChains: z.array(z.int()).meta({ description: 'Chains whose smart-contract wallets can be verified' }),
      sandboxPurchases: z.enum(['grant', 'recorded only']),
    }).nullable().meta({ description: "Which optional parts are on, by name (never a secret, URL or host). The route always has them; null only where the status was read from an operator's shell beside a deployment (`npm run status` without --url), which cannot see the deployment's settings" }),
    attention: z.array(z.string()).meta({ description: 'What deserves a look, in words (empty: nothing)' }),
  })
  .meta({ id: 'ServiceStatus' });

const rowStateSchema = z.object({ status: z.string(), expiresAt: nullableTime, graceExpiresAt: nullableTime, willRenew: z.boolean() }).nullable();

export const subscriberExplanationSchema = z
  .object({
    appUserId: z.string(),
    checkedAt: isoTime,
    ids: z.array(z.object({ appUserId: z.string(), role: z.string().meta({ description: 'Its part, in words: an alias, a side of a transfer, ...' }) })),
    entitlements: z.array(z.object({
      id: z.string(),
      grantsNow: z.boolean(),
      why: z.array(z.string()).meta({ description: 'The verdict, then one sentence per product row: its state now, the event that began its period and each change since' }),
    })).meta({ description: 'What GET /api/me shows for this id, and why' }),
    elsewhere: z.array(z.string()).meta({ description: 'The rows of the other ids of this history (the other side of a transfer, aliases), one sentence each' }),
    history: z.array(z.object({
      eventId: z.string(),
      type: z.string(),
      eventAt: isoTime,
      receivedAt: isoTime,
      outcome: z.string().meta({ description: 'What was stored when it arrived: applied, stale or ignored' }),
      ownerId: z.string().nullable(),
      title: z.string(),
      did: z.string().meta({ description: 'What it did, in words (a refold, a checkpoint, why it changed nothing)' }),
      changes: z.array(z.object({
        appUserId: z.string(), entitlementId: z.string(), productId: z.string().nullable(), before: rowStateSchema, after: rowStateSchema, words: z.string(),
      })),
    })).meta({ description: 'Every event and snapshot of the stored log, in event order, with what the fold did to which row' }),
    sync: z.array(z.string()).meta({ description: 'Marks for a sync from RevenueCat, in words' }),
    consistent: z.boolean().meta({ description: 'The stored rows are the fold of the stored log' }),
    notes: z.array(z.string()),
  })
  .meta({ id: 'SubscriberExplanation' });

const storedRows = z.array(z.record(z.string(), z.unknown()));

/** GET /api/me/export and the operator's export (lib/account-export.ts): the rows as stored, every column. */
export const accountExportSchema = z.object({
  userId: z.uuid(),
  exportedAt: z.string().describe('When the export was read (database time)'),
  wallets: z.object({
    links: storedRows.describe('wallet_links rows'),
    challenges: storedRows.describe('wallet_challenges rows (open, used and retired)'),
    contractChecks: storedRows.describe('wallet_contract_checks rows (kept 10 minutes)'),
  }),
  billing: z.object({
    ids: z.array(z.string()).describe('The RevenueCat ids billing files under the user: their own, and the customer RevenueCat merged them into'),
    subscribers: storedRows.describe('billing_subscribers rows of those ids (without checkpoint copies)'),
    entitlements: storedRows.describe('entitlements rows of those ids'),
    syncQueue: storedRows,
    syncRequests: storedRows,
    events: z.array(z.object({
      eventId: z.string(), type: z.string(), appUserId: z.string().nullable(), ownerId: z.string().nullable(),
      eventAt: z.string(), receivedAt: z.string(), outcome: z.string(), environment: z.string().nullable(),
      body: z.record(z.string(), z.unknown()).describe('The stored body: the webhook body as received, or RevenueCat\'s record for a sync (without attributes)'),
    })).describe('Every billing event and snapshot filed under those ids, oldest first'),
  }),
  leagues: z.array(z.object({ league: z.record(z.string(), z.unknown()), member: z.record(z.string(), z.unknown()) }))
    .describe('Each league membership linked to the user, with its league'),
}).meta({ id: 'AccountExport' });
