// Runs once when a Next.js server starts: one log line saying which database and which auth this
// process uses (never a secret), or why the configuration cannot run; and the Node server answers
// itself, as problem+json, the client mistakes Next or Node would answer bare (lib/http/before-next.ts);
// and the outbound events' schedule (lib/events/delivery.ts).
export async function register() {
  if (process.env.NEXT_RUNTIME !== 'nodejs') return;
  const { logStartup } = await import('./lib/startup.ts');
  const { answerBeforeNext } = await import('./lib/http/before-next.ts');
  answerBeforeNext();
  logStartup();
  // A server that lives between requests moves the outbox on a schedule of its own (on Vercel, the
  // crons and the requests that write do).
  if (!process.env.VERCEL) (await import('./lib/events/delivery.ts')).scheduleOutbox();
}
