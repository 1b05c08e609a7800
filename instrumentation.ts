// Runs once when a Next.js server starts: one log line saying which database and which auth this
// process uses (never a secret), or why the configuration cannot run; and the Node server answers
// itself, as problem+json, the client mistakes Next or Node would answer bare (lib/http/before-next.ts);
// on the embedded database, the port it serves on for the `npm run` commands;
// whether the outbound event receivers are on the public internet (a DNS check, in the background);
// the receivers registered as the database opens; and the outbound events' schedule
// (lib/events/delivery.ts).
export async function register() {
  if (process.env.NEXT_RUNTIME !== 'nodejs') return;
  const { announceLocalService, checkEventReceiverAddresses, logStartup } = await import('./lib/startup.ts');
  const { answerBeforeNext } = await import('./lib/http/before-next.ts');
  answerBeforeNext();
  logStartup();
  announceLocalService();
  // The event receivers of this server's settings are registered as its database opens, so its
  // first change's events have deliveries (lib/events/registration.ts).
  (await import('./lib/db/index.ts')).registerEventEndpointsAsTheDatabaseOpens();
  // Not awaited: a DNS lookup must not hold up the first request (or every cold start on Vercel).
  // A receiver found non-public refuses the settings from then on; each attempt checks again too.
  void checkEventReceiverAddresses();
  // A server that lives between requests moves the outbox on a schedule of its own (on Vercel, the
  // crons and the requests that write do).
  if (!process.env.VERCEL) (await import('./lib/events/delivery.ts')).scheduleOutbox();
}
