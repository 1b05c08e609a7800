import { readdirSync, readFileSync } from 'node:fs';

// CPU time from /proc (Linux): it says where a request's cost goes, whatever else runs on the cores.
const TICKS_PER_SECOND = 100;
export function cpuMsOf(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / TICKS_PER_SECOND;
  } catch {
    return 0;
  }
}
/**
 * CPU time of the bench's own Postgres server: the postmaster, its live backends, and the backends
 * that have ended (counted in the postmaster's cutime/cstime). Other Postgres servers on the
 * machine (a test suite running meanwhile) are not counted.
 */
export function postgresCpuMs(postmasterPid: number | undefined): number {
  if (postmasterPid === undefined) return 0;
  const stat = (pid: number | string) => readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  let total = 0;
  try {
    const fields = stat(postmasterPid);
    total += ((Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14])) * 1000) / TICKS_PER_SECOND;
  } catch {
    return 0;
  }
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const fields = stat(entry);
      if (Number(fields[1]) === postmasterPid) total += ((Number(fields[11]) + Number(fields[12])) * 1000) / TICKS_PER_SECOND;
    } catch {
      // the process ended meanwhile
    }
  }
  return total;
}
