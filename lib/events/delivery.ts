import { publishAccountChange } from '../account-changes.ts';
import { log } from '../log.ts';
import { withinTime } from '../within-time.ts';
import { attemptDelivery, DELIVERY_TIMEOUT_MS } from './attempt.ts';
import { getEventEndpoints, recheckRefusedAddresses, type EventEndpoint } from './endpoints.ts';
import { eventMessage } from './messages.ts';
import { claimDeliveries, setEndpoints, settleDeliveries, tellLapses, type ClaimedDelivery, type DeliveryOutcome } from './outbox.ts';
import { retryDelayMs, shouldDeadLetter } from './retry.ts';

/**
 * Moving the outbox: lapses told, then each endpoint's due deliveries sent and settled, every
 * endpoint on its own (a slow or failing one holds up only its own queue). Runs after requests that
 * write (lib/events/after-writes.ts), from the crons, and from `npm run events:deliver`. Two runs
 * at once share the work: a delivery is leased to one attempt at a time.
 */

/**
 * How many attempts one endpoint has under way at once (each the head of a different user's queue),
 * and how many of them may be retries. An attempt that hangs takes its place until its timeout: the
 * retries of users whose events hang never take more than half, so the other users' new events go
 * out while they hang; and a claim takes the retries due first, so a stream of new events (a bulk
 * replay's) never keeps them waiting.
 */
export const IN_FLIGHT_LIMITS = { attempts: 100, retries: 50 };
/** Users whose lapse is told per database call. */
const LAPSE_BATCH = 200;

export interface OutboundRunReport {
  lapsesTold: number;
  endpoints: Array<{ id: string; delivered: number; retried: number; dead: number }>;
  /** Everything due was done; false: the budget ended first. */
  done: boolean;
}

export interface OutboundRunOptions {
  /**
   * The run ends within this many milliseconds: an attempt started near its end gets the time left
   * as its timeout (at least LEAST_ATTEMPT_MS; no attempt starts with less left).
   */
  budgetMs: number;
  endpoints?: readonly EventEndpoint[];
  timeoutMs?: number;
  /** Look for lapses too (default true). */
  lapses?: boolean;
}

/**
 * An attempt started near the end of its run gets the time left as its timeout, never less than
 * this (a receiver that answers within it is never cut short; a slower one is tried again later,
 * with the whole timeout from the start of a run). So a run asked over HTTP answers within its
 * function's time, and an attempt is never cut off by the function ending: its outcome would be
 * lost, and the event sent again once its lease ran out.
 */
export const LEAST_ATTEMPT_MS = 5_000;

export async function runOutboundEvents(options: OutboundRunOptions): Promise<OutboundRunReport> {
  const deadline = performance.now() + options.budgetMs;
  const lapses = options.lapses === false ? { told: 0, done: true } : await tellDueLapses(deadline);
  const endpoints = options.endpoints ?? getEventEndpoints();
  await registerEndpoints(endpoints, { evenIfUnchanged: true });
  const window = { startBy: deadline, endBy: deadline };
  const reports = await Promise.all(endpoints.map((endpoint) => deliverToEndpoint(endpoint, window, options.timeoutMs ?? DELIVERY_TIMEOUT_MS)));
  return { lapsesTold: lapses.told, endpoints: reports.map(({ id, delivered, retried, dead }) => ({ id, delivered, retried, dead })), done: lapses.done && reports.every((r) => r.done) };
}

/** What one run asked over HTTP may take, its attempts included (the cron's and the operator's): the function may run 30 s. */
const ROUTE_RUN_BUDGET_MS = 20_000;

/** One run asked over HTTP (GET /api/cron/events, POST /api/admin/events/deliver), on the server's own settings. */
export async function moveOutboxNow(): Promise<OutboundRunReport> {
  await recheckRefusedAddresses(); // a receiver refused for its address: its DNS record may be fixed
  return runOutboundEvents({ budgetMs: ROUTE_RUN_BUDGET_MS });
}

/** Access that ended by time, told (events, broadcasts) and streamed to the users' open pages. */
async function tellDueLapses(deadline: number): Promise<{ told: number; done: boolean }> {
  let told = 0;
  for (;;) {
    const { users, more } = await tellLapses(LAPSE_BATCH);
    told += users.length;
    if (users.length > 0) publishAccountChange(users, 'entitlements');
    if (!more) return { told, done: true };
    if (performance.now() >= deadline) return { told, done: false };
  }
}

// The endpoints this process last registered (their ids and filters), and when.
let registered: { key: string; at: number } | undefined;
/** A run after a write names its receivers again once this long has passed (they are retired after 3 days unnamed). */
const NAME_AGAIN_AFTER_MS = 3600_000;

/**
 * Register the settings' receivers (noting them as named) and retire those no server has named for
 * 3 days (public.outbound_set_endpoints). A run after a write skips it while the settings are the
 * ones this process last registered within the hour (else every write pays a call); a run of the
 * schedule or one asked over HTTP always makes it.
 */
async function registerEndpoints(endpoints: readonly EventEndpoint[], options: { evenIfUnchanged?: boolean } = {}): Promise<void> {
  const rows = endpoints.map((endpoint) => ({ id: endpoint.id, types: endpoint.types }));
  const key = JSON.stringify(rows);
  if (!options.evenIfUnchanged && registered?.key === key && performance.now() - registered.at < NAME_AGAIN_AFTER_MS) return;
  await setEndpoints(rows);
  registered = { key, at: performance.now() };
}

/**
 * A run's doorbell: a write during the run rings it, and the run claims again without waiting for
 * an attempt under way to end (which may hang until its timeout).
 */
class Doorbell {
  private ring: (() => void) | undefined;
  private rung: Promise<void> | undefined;
  /** Rung while the run was not waiting (claiming, settling): its next wait ends at once. */
  private missed = false;

  /** Resolves at the next ring (at once for one the run missed). */
  next(): Promise<void> {
    if (this.missed) {
      this.missed = false;
      return Promise.resolve();
    }
    return (this.rung ??= new Promise<void>((resolve) => (this.ring = resolve)));
  }

  press(): void {
    if (!this.ring) {
      this.missed = true;
      return;
    }
    this.ring();
    this.ring = undefined;
    this.rung = undefined;
  }
}

/** When a run starts attempts until (performance.now()), and when every attempt it starts ends by. */
interface AttemptWindow {
  startBy: number;
  endBy: number;
}

/**
 * One endpoint's due deliveries: up to IN_FLIGHT_LIMITS attempts in flight, each settled as it ends
 * (with the others that end in the same turn of the event loop, in one call), and the queue claimed
 * again as soon as any ends, or a write rings `doorbell`. So a user's next event goes out as soon as
 * their last one is settled, and an attempt that hangs holds back only its own user's queue: not the
 * others claimed with it, nor the events written while it hangs. Attempts start until
 * `window.startBy` (and while at least LEAST_ATTEMPT_MS is left), and all end by `window.endBy`.
 */
async function deliverToEndpoint(endpoint: EventEndpoint, window: AttemptWindow, timeoutMs: number, doorbell?: Doorbell) {
  // The time an attempt needs left to start (a timeout shorter than LEAST_ATTEMPT_MS asks for less).
  const least = Math.min(LEAST_ATTEMPT_MS, timeoutMs);
  const report = { id: endpoint.id, delivered: 0, retried: 0, dead: 0, done: false };
  const leaseSeconds = Math.ceil(timeoutMs / 1000) + 30;
  const inFlight = new Set<Promise<void>>();
  let retriesInFlight = 0;
  const ended: DeliveryOutcome[] = [];
  let failure: { error: unknown } | undefined;
  const settleEnded = async () => {
    const outcomes = ended.splice(0);
    if (outcomes.length === 0) return;
    await settleDeliveries(endpoint.id, outcomes);
    for (const outcome of outcomes) {
      if (outcome.outcome === 'delivered') report.delivered++;
      else if (outcome.outcome === 'dead') report.dead++;
      else report.retried++;
    }
  };
  try {
    for (;;) {
      // What ended is settled before the queue is claimed again: a user's next event is claimable
      // only once their last one is settled.
      await settleEnded();
      const now = performance.now();
      const open = failure === undefined && now < window.startBy && window.endBy - now >= least;
      const claimed = open && inFlight.size < IN_FLIGHT_LIMITS.attempts
        ? await claimDeliveries(endpoint.id, { limit: IN_FLIGHT_LIMITS.attempts - inFlight.size, retries: Math.max(0, IN_FLIGHT_LIMITS.retries - retriesInFlight) }, leaseSeconds) : [];
      for (const delivery of claimed) {
        const retry = delivery.attempts > 1; // (counted with this one)
        if (retry) retriesInFlight++;
        const running: Promise<void> = attempt(endpoint, delivery, Math.max(1, Math.min(timeoutMs, Math.floor(window.endBy - performance.now()))))
          .then((outcome) => void ended.push(outcome), (error: unknown) => void (failure ??= { error }))
          .finally(() => {
            inFlight.delete(running);
            if (retry) retriesInFlight--;
          });
        inFlight.add(running);
      }
      if (inFlight.size === 0) {
        if (ended.length > 0) continue; // ended while the claim was under way: settled, then looked for again
        report.done = open && claimed.length === 0;
        break;
      }
      await Promise.race(doorbell ? [...inFlight, doorbell.next()] : inFlight);
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  } finally {
    await Promise.allSettled(inFlight);
  }
  await settleEnded();
  if (failure) throw failure.error;
  return report;
}

async function attempt(endpoint: EventEndpoint, delivery: ClaimedDelivery, timeoutMs: number): Promise<DeliveryOutcome> {
  const message = eventMessage(delivery);
  const result = await attemptDelivery(endpoint, message, { timeoutMs });
  if (result.ok) return { event_id: delivery.event_id, outcome: 'delivered' };
  const now = new Date();
  log.warn({ endpoint: endpoint.id, eventId: delivery.event_id, type: delivery.type, attempt: delivery.attempts, error: result.error }, 'event delivery failed');
  if (shouldDeadLetter(new Date(delivery.first_attempt_at), now)) {
    log.error({ endpoint: endpoint.id, eventId: delivery.event_id, type: delivery.type, attempts: delivery.attempts }, 'event dead-lettered: retries ran out');
    return { event_id: delivery.event_id, outcome: 'dead', error: result.error };
  }
  return { event_id: delivery.event_id, outcome: 'retry', retry_at: new Date(now.getTime() + retryDelayMs(delivery.attempts)).toISOString(), error: result.error };
}

/** Forget what this process registered (tests that change the settings between runs). */
export function forgetRegisteredEndpoints(): void {
  registered = undefined;
}


/** Lapses are looked for after a write at most this often per process (the crons and the scheduled run look too). */
export const LAPSE_SCAN_EVERY_MS = 30_000;
/**
 * How long one run after a response starts attempts (Vercel keeps the function alive for it, within
 * maxDuration). An attempt it starts still gets its whole timeout, within AFTER_WRITE_RUN_LIMIT_MS:
 * a receiver that answers within 15 s is delivered by the server's own runs, not only by the cron's.
 */
export const AFTER_WRITE_BUDGET_MS = 10_000;
/**
 * The time from a request's start by which the work after its response ends (its lapse scan, its
 * runs and the runs they repeat for writes made meanwhile): within the 30 s a function may run
 * (vercel.json), which began with the request. What is left goes with the next write's run, the
 * schedule or the cron.
 */
const AFTER_WRITE_RUN_LIMIT_MS = 25_000;

// The after-write run of each endpoint in this process, whether a write asked for one more, and
// until when it starts attempts (each write that joins it moves that on, within the run's limit).
const endpointRuns = new Map<string, { running: Promise<void>; again: boolean; doorbell: Doorbell; window: AttemptWindow }>();

/** A run after a write starts attempts until AFTER_WRITE_BUDGET_MS after the last write that asked it, within its limit. */
function startAttemptsFor(window: AttemptWindow): void {
  window.startBy = Math.max(window.startBy, Math.min(performance.now() + AFTER_WRITE_BUDGET_MS, window.endBy));
}
let lapseRun: Promise<void> | undefined;
let lastLapseScan = -Infinity;

/** Whether a write has anything for moveOutboxAfterWrite to do: an endpoint to send its events to, or a lapse scan due. */
export function outboxWorkAfterWrite(usersNoted: boolean): boolean {
  return (usersNoted && safeEndpoints().length > 0) || lapseScanDue();
}

function lapseScanDue(): boolean {
  return !lapseRun && performance.now() - lastLapseScan >= LAPSE_SCAN_EVERY_MS;
}

/**
 * Move the outbox after a write, without delaying its response: each endpoint on its own run, one
 * at a time per endpoint and process (a slow or hanging endpoint holds up only its own deliveries);
 * a write during a run asks that run for one more, so bursts of writes make few runs. A write that
 * noted no Supabase user (`usersNoted: false`: it wrote no event) starts no run: what is due from
 * before waits for the next write that did, the server's schedule or the cron. Lapses are looked for
 * beside them, at most every LAPSE_SCAN_EVERY_MS. Never throws: what it could not send is due for
 * the next run (the cron's at the latest).
 */
export function moveOutboxAfterWrite({ usersNoted = true, startedAt }: { usersNoted?: boolean; startedAt?: number } = {}): Promise<void> {
  // Everything this write starts (the lapse scan, the runs and what they repeat) ends by then,
  // counted from its request's start (`startedAt`, performance.now(); without one, from now).
  const endBy = (startedAt ?? performance.now()) + AFTER_WRITE_RUN_LIMIT_MS;
  const endpoints = usersNoted ? safeEndpoints() : [];
  const runs = endpoints.map((endpoint) => moveEndpointAfterWrite(endpoints, endpoint, endBy));
  if (lapseScanDue()) {
    lastLapseScan = performance.now();
    lapseRun = tellDueLapses(Math.min(performance.now() + AFTER_WRITE_BUDGET_MS, endBy))
      .then(async ({ told }) => {
        // What the scan wrote goes out now (a run under way claims again), not with the next run.
        if (told === 0) return;
        const all = safeEndpoints();
        await Promise.all(all.map((endpoint) => moveEndpointAfterWrite(all, endpoint, endBy)));
      }, (error: unknown) => {
        log.warn({ err: { message: (error as Error).message } }, 'telling lapses after a write failed; the next run retries');
      })
      .finally(() => {
        lapseRun = undefined;
      });
  }
  return Promise.all([...runs, lapseRun]).then(() => undefined);
}

function moveEndpointAfterWrite(endpoints: readonly EventEndpoint[], endpoint: EventEndpoint, endBy: number): Promise<void> {
  const current = endpointRuns.get(endpoint.id);
  if (current) {
    current.again = true;
    startAttemptsFor(current.window); // the event this write made is sent by the run under way, within its limit
    current.doorbell.press();
    // A run another write began may go on past this write's limit: this write waits for it only
    // until then (the run goes on, within the limit of the write that began it).
    return withinTime(current.running, endBy - performance.now(), () => undefined);
  }
  const run = { again: false, running: Promise.resolve(), doorbell: new Doorbell(), window: { startBy: -Infinity, endBy } };
  run.running = (async () => {
    try {
      do {
        run.again = false;
        await registerEndpoints(endpoints);
        startAttemptsFor(run.window);
        await deliverToEndpoint(endpoint, run.window, DELIVERY_TIMEOUT_MS, run.doorbell);
      } while (run.again && endBy - performance.now() >= LEAST_ATTEMPT_MS);
    } catch (error) {
      log.warn({ endpoint: endpoint.id, err: { message: (error as Error).message } }, 'moving the outbox after a write failed; the next run retries');
    } finally {
      endpointRuns.delete(endpoint.id);
    }
  })();
  endpointRuns.set(endpoint.id, run);
  return run.running;
}

function safeEndpoints(): readonly EventEndpoint[] {
  try {
    return getEventEndpoints();
  } catch {
    return []; // a setting startup refuses (lib/startup.ts says why); nothing is sent meanwhile
  }
}

/** How often a long-running server (`next start`, a container) moves the outbox on its own. */
export const OUTBOX_SCHEDULE_MS = 60_000;

/**
 * A schedule of the server's own: a lapse is told, and a retry that came due is sent, within a
 * minute even when no request writes. Started once per process (instrumentation.ts) where the
 * process lives on between requests; on Vercel the crons and after() do it (docs/events.md).
 */
export function scheduleOutbox(): void {
  const holder = globalThis as { [SCHEDULE]?: NodeJS.Timeout };
  if (holder[SCHEDULE]) return;
  holder[SCHEDULE] = setInterval(() => void moveOutboxOnSchedule(), OUTBOX_SCHEDULE_MS);
  holder[SCHEDULE].unref();
}
const SCHEDULE = Symbol.for('account-link-service.outbox-schedule');

/** One turn of the schedule: what a run after a write does, with a lapse scan, and the settings' receivers named (the long unnamed retired), their addresses looked up again while they are refused for them. */
export async function moveOutboxOnSchedule(): Promise<void> {
  lastLapseScan = -Infinity;
  await recheckRefusedAddresses().catch(() => undefined); // (settings refused otherwise: the startup log says why)
  await registerSettingsEndpoints();
  await moveOutboxAfterWrite();
}

/**
 * The schedule names the settings' receivers, as the events cron's run does: a receiver is retired
 * only when no server sharing the database has named it for 3 days (a preview or rollout may name
 * others, and retiring theirs at once would leave the events written meanwhile undelivered to
 * them), so a server that runs for days names its own again. Settings that are refused name
 * nothing and retire nothing (they may name receivers once fixed).
 */
async function registerSettingsEndpoints(): Promise<void> {
  let endpoints: readonly EventEndpoint[];
  try {
    endpoints = getEventEndpoints();
  } catch {
    return;
  }
  await registerEndpoints(endpoints, { evenIfUnchanged: true }).catch((error: unknown) => {
    log.warn({ err: { message: (error as Error).message } }, 'registering the event receivers of the settings failed; the next run retries');
  });
}
