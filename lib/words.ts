/** Times and counts as an operator reads them in the status and in a subscriber's explanation. */

/** "2026-11-27 10:00:05 UTC" (seconds only when they are not zero); "never" for null. */
export function formatUtc(value: string | Date | null | undefined): string {
  if (value === null || value === undefined) return 'never';
  const date = typeof value === 'string' ? new Date(value) : value;
  if (!Number.isFinite(date.getTime())) return String(value);
  const text = date.toISOString().replace('T', ' ').replace(/\.\d{3}Z$/, '');
  return `${text.endsWith(':00') ? text.slice(0, -3) : text} UTC`;
}

/** "3 applied, 1 ignored" from counts by outcome; "none" when there are none. */
export function formatCounts(counts: Record<string, number>): string {
  const parts = Object.entries(counts).filter(([, n]) => n > 0).sort(([a], [b]) => a.localeCompare(b)).map(([outcome, n]) => `${n} ${outcome}`);
  return parts.length === 0 ? 'none' : parts.join(', ');
}
