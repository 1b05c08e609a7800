/**
 * What `work` gives within `ms`, or what `late()` gives once `ms` have passed, whichever comes
 * first. The work itself goes on unheeded (a DNS lookup, an RPC call or a run shared with others
 * cannot be stopped from here); the timer is cleared either way.
 */
export function withinTime<T, L>(work: Promise<T>, ms: number, late: () => L): Promise<T | L> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<L>((resolve) => {
    timer = setTimeout(() => resolve(late()), Math.max(0, ms));
  });
  return Promise.race([work, timedOut]).finally(() => clearTimeout(timer));
}
