import pino from 'pino';
import { vi } from 'vitest';
import { log } from '../../lib/log.ts';

export interface LogCapture {
  /** Every line pino wrote since the capture began, parsed (child loggers' lines too). */
  lines: Record<string, unknown>[];
  stop(): void;
}

/**
 * Capture what the service's logger writes, at its destination (the JSON lines a deployment's log
 * shows, from the logger and its children), at `level` or above for as long as the capture runs.
 * The suites run with LOG_LEVEL=silent; this opens the logger for the test and closes it again.
 */
export function captureLogs(level: pino.LevelWithSilent = 'info'): LogCapture {
  const stream = (log as unknown as Record<symbol, { write(line: string): boolean }>)[pino.symbols.streamSym]!;
  const before = log.level;
  const lines: Record<string, unknown>[] = [];
  log.level = level;
  const spy = vi.spyOn(stream, 'write').mockImplementation((line: string) => {
    lines.push(JSON.parse(line) as Record<string, unknown>);
    return true;
  });
  return {
    lines,
    stop: () => {
      spy.mockRestore();
      log.level = before;
    },
  };
}
