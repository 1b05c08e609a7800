import { describe, expect, it } from 'vitest';
import { DEAD_LETTER_AFTER_MS, MAX_RETRY_DELAY_MS, retryDelayMs, shouldDeadLetter } from '../../lib/events/retry.ts';

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;

describe('retryDelayMs', () => {
  it('retries first within about a minute, then four times later each time, up to 6 h', () => {
    const middle = () => 0.5; // no jitter
    expect([1, 2, 3, 4, 5, 6, 7, 50].map((attempt) => retryDelayMs(attempt, middle))).toEqual([
      30_000, 2 * MINUTE, 8 * MINUTE, 32 * MINUTE, 128 * MINUTE, 6 * HOUR, 6 * HOUR, 6 * HOUR,
    ]);
  });

  it('jitters each delay by at most 20 % either way, and never past the cap', () => {
    expect(retryDelayMs(1, () => 0)).toBe(24_000);
    expect(retryDelayMs(1, () => 0.999_999)).toBe(36_000);
    expect(retryDelayMs(2, () => 0)).not.toBe(retryDelayMs(2, () => 0.9));
    for (const attempt of [6, 20, 1000]) {
      expect(retryDelayMs(attempt, () => 0.999_999)).toBe(MAX_RETRY_DELAY_MS);
      expect(retryDelayMs(attempt, () => 0)).toBe(MAX_RETRY_DELAY_MS * 0.8);
    }
  });

  it('retries a receiver that never answers about 15 to 20 times over the three days', () => {
    for (const random of [() => 0, () => 0.5, () => 0.999_999]) {
      let elapsed = 0;
      let attempts = 1;
      while (elapsed < DEAD_LETTER_AFTER_MS) elapsed += retryDelayMs(attempts++, random);
      expect(attempts).toBeGreaterThanOrEqual(15);
      expect(attempts).toBeLessThanOrEqual(21);
    }
  });

  it('refuses an attempt count that is not a positive integer', () => {
    for (const attempt of [0, -1, 1.5, Number.NaN]) expect(() => retryDelayMs(attempt)).toThrow(RangeError);
  });
});

describe('shouldDeadLetter', () => {
  const first = new Date('2026-01-01T00:00:00Z');
  it('gives up three days after the first attempt, not before', () => {
    expect(shouldDeadLetter(first, new Date(first.getTime() + DEAD_LETTER_AFTER_MS - 1))).toBe(false);
    expect(shouldDeadLetter(first, new Date(first.getTime() + DEAD_LETTER_AFTER_MS))).toBe(true);
    expect(DEAD_LETTER_AFTER_MS).toBe(72 * HOUR);
    expect(shouldDeadLetter(first, first)).toBe(false);
  });
});
