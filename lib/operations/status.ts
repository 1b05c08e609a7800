import { DEV_ADMIN_SECRET, getConfig, usesDevWebhookSecret, type Config, type DatabaseMode } from '../config.ts';
import { callDb, pendingMigrationsIn } from '../db/index.ts';
import { readMigrationFiles } from '../db/migrate.ts';
import { endpointSettings } from '../events/endpoints.ts';
import { describeOutbox, outboxAttention, outboxOverview, type OutboxOverview } from '../events/operate.ts';
import { readOutboxStatus, type OutboxStatus } from '../events/outbox.ts';
import { formatCounts, formatUtc } from '../words.ts';

/**
 * What an operator asks first, in one answer (GET /api/admin/status, `npm run status`): did the
 * webhooks land and what did they do, is the sync queue moving and how did the last sweep go, what
 * did the last maintenance run drop and what is it behind, is the outbox of events moving, does
 * the database have the code's migrations, and which optional parts are on. Read in two database
 * calls (public.operator_status, supabase/schemas/09_operator.sql, and public.outbound_status,
 * 10_events.sql); the rest comes from the configuration and the migration files this code ships.
 * Names of parts only: never a secret or a host; of an event endpoint, its origin and path only.
 */

export interface BillingDelivery {
  receivedAt: string;
  eventId: string;
  type: string;
  /** applied: it changed entitlements; stale: newer events already said more; ignored: recorded, nothing to apply. */
  outcome: string;
  /** Why an ignored event changed nothing (record_only_type for a TEST, sandbox_ignored, ...). */
  reason: string | null;
  environment: string | null;
  appUserId: string | null;
}

export interface LeaguesDelivery {
  receivedAt: string;
  source: string;
  deliveryId: string | null;
  upserted: number;
  unchanged: number;
  stale: number;
  deleted: number;
}

export interface OperatorRun {
  startedAt: string;
  finishedAt: string;
  result: Record<string, unknown>;
}

export interface ServiceStatus {
  checkedAt: string;
  mode: { local: boolean; deployed: boolean; database: DatabaseMode };
  webhooks: {
    /** The last event stored (a redelivery of one already stored is answered, not stored) and the day's counts by outcome. */
    billing: { last: BillingDelivery | null; last24h: Record<string, number> };
    leagues: { last: LeaguesDelivery | null; last24h: Record<string, number> };
  };
  syncQueue: {
    /** Subscribers marked for a sync from RevenueCat. */
    depth: number;
    due: number;
    oldestDueAt: string | null;
    nextDueAt: string | null;
    oldestRequestedAt: string | null;
    /** Marks whose sync failed at least once (waiting out a backoff). */
    failing: number;
    lastFailure: { appUserId: string; reason: string; attempts: number; error: string | null; nextAttemptAt: string } | null;
    lastSweep: OperatorRun | null;
  };
  maintenance: {
    lastRun: OperatorRun | null;
    /** What the event log's retention still has to do: months past it, customers they wait for, events held aside. */
    behind: { cutoff: string; monthsToDrop: string[]; customersWaiting: number; heldEvents: number };
  };
  /** Each event endpoint's backlog, dead letters and last failure, and the lapses due (null: not read, the schema being behind). */
  events: OutboxOverview | null;
  schema: {
    /** The newest migration this code ships, and the newest the database's ledger lists. */
    code: string | null;
    database: string | null;
    /** Files of this code the database lacks (a deployment answers 503 until `npm run migrate`). */
    pending: string[];
    /** Versions the database has that this code does not (a newer deployment migrated it). */
    unknown: string[];
    upToDate: boolean;
  };
  /**
   * Which optional parts are on: the settings of whoever read the status. Null where they cannot be
   * seen: read from an operator's shell outside local mode, which has the database's settings, not
   * the deployment's (ask the deployment: its GET /api/admin/status, `npm run status -- --url`).
   */
  parts: ServiceParts | null;
  /** What deserves a look, in words (empty: nothing). */
  attention: string[];
}

export interface ServiceParts {
  billingWebhook: 'on' | 'local dev secret' | 'off';
  leaguesWebhook: 'on' | 'local dev secret' | 'off';
  /** Syncs from RevenueCat's REST API: off, v1, v1 + v2, or the local stand-in. */
  revenuecatSync: 'off' | 'v1' | 'v2' | 'v1 + v2' | 'local stand-in';
  syncAfterWebhooks: 'gaps' | 'all' | 'none';
  cron: 'on' | 'off';
  /** The operator routes: on (ADMIN_API_SECRET), local mode's dev secret (DEV_ADMIN_SECRET), or off. */
  adminApi: 'on' | 'local dev secret' | 'off';
  /** Chains whose smart-contract wallets can be verified (the chain ids with an RPC). */
  contractWalletChains: number[];
  sandboxPurchases: 'grant' | 'recorded only';
}

interface StatusRow {
  billingWebhook: { last: BillingDelivery | null; last24h: Record<string, number> };
  leaguesWebhook: { last: LeaguesDelivery | null; last24h: Record<string, number> };
  syncQueue: Omit<ServiceStatus['syncQueue'], 'lastFailure' | 'lastSweep'>;
  lastSyncFailure: ServiceStatus['syncQueue']['lastFailure'];
  runs: Partial<Record<'billing_sweep' | 'maintenance', OperatorRun>>;
  billingRetention: ServiceStatus['maintenance']['behind'];
  schemaVersions: string[];
  /** public.outbound_status() inside the one call, where operator_status includes it; read on its own otherwise. */
  outbound?: OutboxStatus;
}

/** The sweep runs daily (vercel.json); a mark due for longer than this means it is not running or not keeping up. */
const SWEEP_LATE_MS = 26 * 3600_000;

export interface StatusOptions {
  /**
   * Whether this process has the service's settings, so its parts are the service's: the service
   * itself (the route), and a shell in local mode (it reads the same .env.local as `npm run dev`).
   * An operator's shell beside a deployment has only the database's: its parts are not shown.
   */
  partsVisible?: boolean;
}

export async function readServiceStatus(now = new Date(), options: StatusOptions = {}): Promise<ServiceStatus> {
  const config = getConfig();
  const parts = options.partsVisible === false ? null : partsOf(config);
  const codeVersions = readMigrationFiles();
  let row: StatusRow;
  try {
    row = await callDb<StatusRow>('operator_status', { p_now: now, p_retention_months: config.billingEventsRetentionMonths });
  } catch (error) {
    // A deployment whose database lacks migrations refuses every call: that is the status to give.
    const pending = pendingMigrationsIn(error);
    if (!pending) throw error;
    return schemaBehindStatus(config, now, pending, codeVersions.at(-1)?.version ?? null, parts);
  }
  const events = outboxOverview(row.outbound ?? await readOutboxStatus(), options.partsVisible === false ? null : endpointSettings(config));
  const applied = new Set(row.schemaVersions);
  const known = new Set(codeVersions.map((file) => file.version));
  const schema = {
    code: codeVersions.at(-1)?.version ?? null,
    database: row.schemaVersions.at(-1) ?? null,
    pending: codeVersions.filter((file) => !applied.has(file.version)).map((file) => file.fileName),
    unknown: row.schemaVersions.filter((version) => !known.has(version)),
    upToDate: false,
  };
  schema.upToDate = schema.pending.length === 0;
  const status: ServiceStatus = {
    checkedAt: now.toISOString(),
    mode: modeOf(config),
    webhooks: {
      billing: { last: row.billingWebhook.last && { ...row.billingWebhook.last, receivedAt: iso(row.billingWebhook.last.receivedAt) }, last24h: row.billingWebhook.last24h },
      leagues: { last: row.leaguesWebhook.last && { ...row.leaguesWebhook.last, receivedAt: iso(row.leaguesWebhook.last.receivedAt) }, last24h: row.leaguesWebhook.last24h },
    },
    syncQueue: {
      depth: row.syncQueue.depth,
      due: row.syncQueue.due,
      oldestDueAt: isoOrNull(row.syncQueue.oldestDueAt),
      nextDueAt: isoOrNull(row.syncQueue.nextDueAt),
      oldestRequestedAt: isoOrNull(row.syncQueue.oldestRequestedAt),
      failing: row.syncQueue.failing,
      lastFailure: row.lastSyncFailure && { ...row.lastSyncFailure, nextAttemptAt: iso(row.lastSyncFailure.nextAttemptAt) },
      lastSweep: runOf(row.runs.billing_sweep),
    },
    maintenance: {
      lastRun: runOf(row.runs.maintenance),
      behind: { ...row.billingRetention, cutoff: iso(row.billingRetention.cutoff) },
    },
    events,
    schema,
    parts,
    attention: [],
  };
  status.attention = attentionFor(status, now);
  return status;
}

function schemaBehindStatus(config: Config, now: Date, pending: string[], code: string | null, parts: ServiceParts | null): ServiceStatus {
  const status: ServiceStatus = {
    checkedAt: now.toISOString(),
    mode: modeOf(config),
    webhooks: { billing: { last: null, last24h: {} }, leagues: { last: null, last24h: {} } },
    syncQueue: { depth: 0, due: 0, oldestDueAt: null, nextDueAt: null, oldestRequestedAt: null, failing: 0, lastFailure: null, lastSweep: null },
    maintenance: { lastRun: null, behind: { cutoff: now.toISOString(), monthsToDrop: [], customersWaiting: 0, heldEvents: 0 } },
    events: null,
    schema: { code, database: null, pending, unknown: [], upToDate: false },
    parts,
    attention: [],
  };
  status.attention = [`The database schema is behind this code: ${pending.length} migration(s) pending (${pending.join(', ')}). Run \`npm run migrate\` (or \`supabase db push\` on Supabase): until then every request that needs the database answers 503, and nothing else of the status could be read.`];
  return status;
}

function modeOf(config: Config): ServiceStatus['mode'] {
  return { local: config.local, deployed: config.deployed, database: config.databaseMode };
}

/** Which optional parts are on, by name: never a secret, a URL or a host. */
export function partsOf(config: Config): ServiceParts {
  const webhook = (which: 'subscription' | 'leagues'): ServiceParts['billingWebhook'] => {
    const secrets = config.webhookSecrets[which];
    return secrets.length === 0 ? 'off' : usesDevWebhookSecret(config, which) ? 'local dev secret' : 'on';
  };
  return {
    billingWebhook: webhook('subscription'),
    leaguesWebhook: webhook('leagues'),
    revenuecatSync: !config.revenuecat ? 'off' : config.revenuecat.standIn ? 'local stand-in' : config.revenuecat.v2 ? (config.revenuecat.apiKey ? 'v1 + v2' : 'v2') : 'v1',
    syncAfterWebhooks: config.revenuecat ? config.billingSyncAfter : 'none',
    cron: config.cronSecret ? 'on' : 'off',
    adminApi: !config.adminSecret ? 'off' : config.adminSecret === DEV_ADMIN_SECRET ? 'local dev secret' : 'on',
    contractWalletChains: [...config.wallet.evmRpcUrls.keys()].sort((a, b) => a - b),
    sandboxPurchases: config.billingIgnoreSandbox ? 'recorded only' : 'grant',
  };
}

/** What deserves a look: each a sentence an operator acts on. */
export function attentionFor(status: ServiceStatus, now: Date): string[] {
  const notes: string[] = [];
  const { schema, syncQueue, maintenance, parts } = status;
  if (schema.pending.length > 0) notes.push(`The database schema is behind this code: ${schema.pending.length} migration(s) pending (${schema.pending.join(', ')}). Run \`npm run migrate\`.`);
  if (schema.unknown.length > 0) notes.push(`The database has migration(s) this code does not know (${schema.unknown.join(', ')}): a newer version migrated it.`);
  if (syncQueue.oldestDueAt && now.getTime() - Date.parse(syncQueue.oldestDueAt) > SWEEP_LATE_MS) {
    notes.push(`${syncQueue.due} subscriber(s) have waited more than a day for a sync from RevenueCat: ${parts?.cron === 'off' ? 'the sweep is off (no cron secret)' : 'check the sweep'}${parts?.revenuecatSync === 'off' ? ' and the RevenueCat key' : ''}.`);
  }
  if (syncQueue.lastSweep && Number(syncQueue.lastSweep.result.failed ?? 0) > 0) {
    notes.push(`The last sweep failed ${syncQueue.lastSweep.result.failed} sync(s)${syncQueue.lastFailure?.error ? `; the latest error: ${syncQueue.lastFailure.error}` : ''}.`);
  }
  const { behind } = maintenance;
  if (behind.monthsToDrop.length > 0) notes.push(`Billing events of ${behind.monthsToDrop.join(', ')} are past the retention and not dropped yet (${behind.customersWaiting} customer(s) wait for a checkpoint): run \`npm run db:maintain\`.`);
  if (behind.heldEvents > 0) notes.push(`${behind.heldEvents} billing event(s) are held aside until their customers' checkpoints succeed (the next maintenance run tries again).`);
  if (maintenance.lastRun && maintenance.lastRun.result.done === false) notes.push('The last maintenance run did not finish everything due: the next run goes on.');
  if (!maintenance.lastRun && parts?.cron === 'on' && !status.mode.local) notes.push('No maintenance run recorded yet: the daily cron job (GET /api/cron/maintenance) has not run here.');
  // The startup log says it once; the status says it while it lasts.
  if (parts?.cron === 'off' && !status.mode.local) notes.push('CRON_SECRET is unset: the daily jobs (the billing sweep, the retention) answer 503 and never run, so the billing event log grows without bound. Set it (docs/configuration.md).');
  if (status.events) notes.push(...outboxAttention(status.events, now));
  return notes;
}

function runOf(run: OperatorRun | undefined): OperatorRun | null {
  return run ? { ...run, startedAt: iso(run.startedAt), finishedAt: iso(run.finishedAt) } : null;
}

const iso = (value: string) => new Date(value).toISOString();
const isoOrNull = (value: string | null) => (value === null ? null : iso(value));

/** The optional parts, as the status names them. */
const PART_NAMES = ['billing webhook', 'leagues webhook', 'RevenueCat sync', 'cron', 'admin API', 'contract wallets', 'sandbox purchases'];

/** The status in lines a person reads (`npm run status`). */
export function describeStatus(status: ServiceStatus): string[] {
  const { webhooks, syncQueue, maintenance, schema, parts, mode } = status;
  const billing = webhooks.billing.last;
  const leagues = webhooks.leagues.last;
  const sweep = syncQueue.lastSweep;
  const run = maintenance.lastRun;
  const runBilling = (run?.result.billing ?? {}) as { partitionsDropped?: string[]; checkpoints?: number; heldEvents?: number };
  const deleted = (part: string, key: string) => Number(((run?.result[part] ?? {}) as Record<string, unknown>)[key] ?? 0);
  const { behind } = maintenance;
  const header = `Status at ${formatUtc(status.checkedAt)} (${mode.local ? 'local mode' : mode.deployed ? 'deployed' : 'not local'}, ${mode.database} database)`;
  const schemaLine = schema.upToDate
    ? `Schema: database at ${schema.database ?? 'unknown'}, code at ${schema.code ?? 'none'}: up to date${schema.unknown.length ? `; ${schema.unknown.length} unknown to this code` : ''}`
    : `Schema: behind this code (the code is at ${schema.code ?? 'none'}): ${schema.pending.length} migration(s) pending; run \`npm run migrate\`${schema.unknown.length ? `; ${schema.unknown.length} unknown to this code` : ''}`;
  const partsLine = parts
    ? `Parts: billing webhook ${parts.billingWebhook}; leagues webhook ${parts.leaguesWebhook}; RevenueCat sync ${parts.revenuecatSync}${parts.revenuecatSync === 'off' ? '' : ` (after webhooks: ${parts.syncAfterWebhooks})`}; `
      + `cron ${parts.cron}; admin API ${parts.adminApi}; contract wallets ${parts.contractWalletChains.length ? `on chain(s) ${parts.contractWalletChains.join(', ')}` : 'off'}; sandbox purchases ${parts.sandboxPurchases}`
    : `Parts: not visible from this shell, which has the database's settings, not the deployment's: ${PART_NAMES.join(', ')}. `
      + 'Ask the deployment: `npm run status -- --url https://<your deployment>` (with its ADMIN_API_SECRET).';
  const attention = status.attention.length ? ['Needs attention:', ...status.attention.map((note) => `  - ${note}`)] : ['Nothing needs attention.'];
  // A database behind its code was not read: no counts, which would read as "nothing happened".
  if (!schema.upToDate && schema.database === null) return [header, schemaLine, partsLine, ...attention];
  const lines = [
    header,
    `Billing webhook: ${billing
      ? `last ${billing.type || '(no type)'} ${billing.eventId} at ${formatUtc(billing.receivedAt)}: ${billing.outcome}${billing.reason ? ` (${billing.reason})` : ''}`
      : 'no event received yet'}; last 24 h: ${formatCounts(webhooks.billing.last24h)}`,
    `Leagues webhook: ${leagues
      ? `last delivery ${leagues.deliveryId ?? '(no id)'} from ${leagues.source} at ${formatUtc(leagues.receivedAt)}: ${leagues.upserted} upserted, ${leagues.unchanged} unchanged, ${leagues.stale} stale, ${leagues.deleted} deleted`
      : 'no delivery yet'}; last 24 h: ${formatCounts(webhooks.leagues.last24h)}`,
    `Sync queue: ${syncQueue.depth} waiting, ${syncQueue.due} due${syncQueue.oldestDueAt ? ` (the oldest since ${formatUtc(syncQueue.oldestDueAt)})` : ''}${syncQueue.failing ? `, ${syncQueue.failing} after a failure` : ''}`
      + `; last sweep: ${sweep ? `${formatUtc(sweep.finishedAt)}: ${sweep.result.claimed} claimed, ${sweep.result.synced} synced, ${sweep.result.failed} failed, ${sweep.result.due} still due` : 'none recorded'}`,
    `Maintenance: last run: ${run
      ? `${formatUtc(run.finishedAt)}${run.result.done === false ? ' (not finished)' : ''}: dropped ${runBilling.partitionsDropped?.length ? `billing months ${runBilling.partitionsDropped.join(', ')}` : 'no billing month'}, `
        + `${runBilling.checkpoints ?? 0} checkpoint(s), deleted ${deleted('wallets', 'challengesDeleted')} wallet challenge(s), ${deleted('leagues', 'deliveriesDeleted')} league delivery record(s), ${deleted('billingSync', 'refreshRequestsDeleted')} refresh request(s)`
      : 'none recorded'}`
      + `; behind: ${behind.monthsToDrop.length === 0 && behind.heldEvents === 0 ? 'nothing' : `billing months ${behind.monthsToDrop.join(', ') || 'none'} past the retention, ${behind.customersWaiting} customer(s) to checkpoint, ${behind.heldEvents} event(s) held aside`}`,
    ...(status.events ? describeOutbox(status.events) : []),
    schemaLine,
    partsLine,
  ];
  return [...lines, ...attention];
}
