/**
 * One value per process, whichever bundle of a module asks: Next loads a module once per route and
 * once for instrumentation, so a module-level value could exist several times (a webhook's route
 * publishing where no stream listens, a refusal the routes never see). Kept on globalThis under
 * `Symbol.for('account-link-service.<name>')`; `make` runs for the first asker only.
 */
export function processWide<T>(name: string, make: () => T): T {
  const holder = globalThis as Record<symbol, unknown>;
  const key = Symbol.for(`account-link-service.${name}`);
  if (!(key in holder)) holder[key] = make();
  return holder[key] as T;
}
