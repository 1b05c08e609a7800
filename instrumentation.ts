// Runs once when a Next.js server starts: one log line saying which database and which auth this
// process uses (never a secret), or why the configuration cannot run; and the Node server answers
// the methods Next does not route itself, as problem+json (lib/http/unrouted-methods.ts).
export async function register() {
  if (process.env.NEXT_RUNTIME !== 'nodejs') return;
  const { logStartup } = await import('./lib/startup.ts');
  const { answerUnroutedMethodsBeforeNext } = await import('./lib/http/unrouted-methods.ts');
  answerUnroutedMethodsBeforeNext();
  logStartup();
}
